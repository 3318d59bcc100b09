//! Fault models: the real failures the simulator injects, one file each, listed once in
//! [`built_in`].
//!
//! A fault model draws its settings from its own configuration stream (so a seed's settings can
//! be read and edited in its seed file), decides from its own decision stream, and intervenes only
//! through the hooks of [`FaultModel`]: when the workload is drawn (extra events, fan-out, late or
//! reordered delivery), at a scheduling point (crash, pause, `SQLITE_BUSY`, clock jump), on a
//! message (lost request, lost answer, lost reply, duplicate copies), at the provider (failure,
//! slowness, locks, cached errors, lenient mismatch, key expiry), or on a timer it asked for.
//! Swarm testing: each seed turns each fault model on or off independently and draws its rates
//! across orders of magnitude, so that rare combinations show up in a sweep. A fault model must
//! not reach into the world beyond its hooks, and after [`FaultModel::heal`] it must stop
//! injecting (except where its file says why not).

mod provider_actions;

use std::collections::BTreeMap;

pub use commitgap::provider::ProviderRequest;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use attacker::Attack;
pub use provider_actions::{ProviderAnswer, ProviderFaults, ProviderPart, provider_faults};

use std::rc::Rc;

use crate::limits::{DURATION_MS_MAX, check, check_windows};
use crate::rng::{Ratio, SimRng};
use crate::sql::{Statement, Verb};
use crate::workload::EventSpec;

/// What a fault model does to the process whose task is about to run, at its scheduling point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointAction {
    /// Crash the process here and restart it after the delay.
    Crash {
        /// How long the process stays down before it restarts, in milliseconds.
        restart_after_ms: i64,
    },
    /// Stop the task here for a while, without running its next operation (a GC pause, a
    /// stopped VM, a slow handler).
    Pause {
        /// How long the task stays stopped, in milliseconds.
        duration_ms: i64,
    },
    /// Fail the statement about to run with `failure`, without running it. An open transaction
    /// stays open unless `rolled_back`: SQLite may or may not roll a transaction back when a
    /// statement (a `COMMIT` included) fails for a full disk or an I/O error, and does not for a
    /// busy one.
    FailStatement {
        /// The error the statement fails with.
        failure: StatementFailure,
        /// Whether the failure also rolled back the open transaction.
        rolled_back: bool,
    },
    /// Set the process's clock this far from true time (an NTP step).
    ClockJump {
        /// The clock's new offset from true time, in milliseconds (negative is behind).
        offset_ms: i64,
    },
}

/// How a fault makes a statement fail: one of the errors a real SQLite returns for reasons
/// outside the statement itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StatementFailure {
    /// `SQLITE_BUSY`: another connection holds a conflicting lock.
    Busy,
    /// `SQLITE_FULL`: the disk (or the file system's quota) is full.
    Full,
    /// `SQLITE_IOERR`: the operating system reported an I/O error.
    Io,
}

impl StatementFailure {
    /// Every kind of statement failure.
    pub const ALL: [StatementFailure; 3] = [
        StatementFailure::Busy,
        StatementFailure::Full,
        StatementFailure::Io,
    ];

    /// The failure's short name, as written in fault logs and seed files.
    pub fn name(self) -> &'static str {
        match self {
            StatementFailure::Busy => "busy",
            StatementFailure::Full => "full",
            StatementFailure::Io => "io",
        }
    }

    /// The error the statement returns.
    pub fn error(self) -> commitgap::env::DbError {
        match self {
            StatementFailure::Busy => commitgap::env::DbError::Busy,
            StatementFailure::Full => commitgap::env::DbError::Full,
            StatementFailure::Io => commitgap::env::DbError::Io("disk I/O error".to_owned()),
        }
    }
}

impl PointAction {
    /// Writes the action, with the fault model that took it, as a schedule value:
    /// `crash crash 1200`, `worker-pause pause 90000`, `sqlite-busy fail busy`,
    /// `disk-full fail full rollback`, `clock-jump clock -5000`.
    pub fn encode(&self, fault: &str) -> String {
        match self {
            PointAction::Crash { restart_after_ms } => format!("{fault} crash {restart_after_ms}"),
            PointAction::Pause { duration_ms } => format!("{fault} pause {duration_ms}"),
            PointAction::FailStatement { failure, rolled_back } => format!(
                "{fault} fail {}{}",
                failure.name(),
                if *rolled_back { " rollback" } else { "" }
            ),
            PointAction::ClockJump { offset_ms } => format!("{fault} clock {offset_ms}"),
        }
    }

    /// Reads a value written by [`PointAction::encode`]: the fault model's name and the action.
    /// `busy` alone, as files of format version 2 wrote it, is `fail busy`.
    pub fn decode(value: &str) -> Result<(String, PointAction), String> {
        let words: Vec<&str> = value.split_whitespace().collect();
        let number = |word: &str| {
            word.parse::<i64>()
                .map_err(|_| format!("{word:?} is not a whole number of milliseconds"))
        };
        let action = match words[..] {
            [_, "crash", restart] => PointAction::Crash {
                restart_after_ms: number(restart)?,
            },
            [_, "pause", duration] => PointAction::Pause {
                duration_ms: number(duration)?,
            },
            [_, "clock", offset] => PointAction::ClockJump {
                offset_ms: number(offset)?,
            },
            [_, "busy"] => PointAction::FailStatement {
                failure: StatementFailure::Busy,
                rolled_back: false,
            },
            [_, "fail", failure, ref rest @ ..] => PointAction::FailStatement {
                failure: StatementFailure::ALL
                    .into_iter()
                    .find(|known| known.name() == failure)
                    .ok_or_else(|| format!("{failure:?} is not busy, full or io"))?,
                rolled_back: match rest {
                    [] => false,
                    ["rollback"] => true,
                    _ => {
                        return Err(format!(
                            "{:?} after the failure is not `rollback`",
                            rest.join(" ")
                        ));
                    }
                },
            },
            _ => {
                return Err(
                    "not `MODEL crash MS`, `MODEL pause MS`, `MODEL clock MS` or `MODEL fail busy|full|io [rollback]`"
                        .to_owned(),
                );
            }
        };
        Ok((words[0].to_owned(), action))
    }
}

/// What a fault model asks for outside any process's scheduling point: when it starts, on a
/// timer it set, or at heal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerAction {
    /// Call [`FaultModel::on_timer`] again at `at_ms`.
    WakeAt {
        /// The virtual time to wake at, in milliseconds.
        at_ms: i64,
    },
    /// Run the purge job now, deleting receipts received before `older_than_ms`.
    PurgeReceipts {
        /// Receipts received before this virtual time, in milliseconds, are deleted.
        older_than_ms: i64,
    },
    /// Send one hostile request, copied from one of the deliveries made so far (`target` picks
    /// which, modulo their number).
    Attack {
        /// What is wrong with the hostile request.
        attack: Attack,
        /// Picks the delivery to copy, modulo the number made so far.
        target: u64,
    },
    /// Set the sender's clock this far from true time.
    SenderClock {
        /// The sender clock's offset from true time, in milliseconds (negative is behind).
        offset_ms: i64,
    },
    /// Another writer (a backup, a migration) takes SQLite's write lock now, on a connection of
    /// its own on the operator's process, and commits after `hold_ms`.
    HoldWriteLock {
        /// How long the lock is held, in milliseconds.
        hold_ms: i64,
    },
}

/// How long after heal the operator starts its pass (requeue, or redelivery by hand), in ms.
pub const OPERATOR_DELAY_MS: i64 = 60_000;

/// The kinds of simulated process, as a fault model sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProcessRole {
    /// A process that receives webhook deliveries.
    Receiver,
    /// A worker that relays outbox work to the provider.
    RelayWorker,
    /// The job that purges old receipts.
    Purger,
    /// The process that carries out operator actions.
    Operator,
}

/// What a task is about to do at its scheduling point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingOp {
    /// Run a SQL statement.
    Sql(Rc<Statement>),
    /// Send a request to the provider.
    ProviderCall,
    /// Receive the provider's reply (or the timeout).
    ProviderReply,
    /// Wake from a sleep.
    Wake,
    /// Write a webhook answer to the socket.
    Answer,
}

impl PendingOp {
    /// The statement about to run, if the task is about to run one.
    pub fn statement(&self) -> Option<&Statement> {
        match self {
            PendingOp::Sql(statement) => Some(statement),
            _ => None,
        }
    }
}

/// Where a fault model may act: a process about to do something, at a moment of virtual time.
#[derive(Debug, Clone, Copy)]
pub struct SchedulingPoint<'a> {
    /// True virtual time (not the process's own clock).
    pub now_ms: i64,
    /// The kind of process about to act.
    pub role: ProcessRole,
    /// What the process is about to do.
    pub op: &'a PendingOp,
}

/// A fault model that is on in a run, with its name (the model's own code never needs it).
pub struct ActiveFault {
    name: &'static str,
    removes_receipts: bool,
    model: Box<dyn FaultModel>,
}

impl std::fmt::Debug for ActiveFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveFault")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ActiveFault {
    /// The model built from `kind`'s settings.
    pub fn new(kind: &FaultKind, model: Box<dyn FaultModel>) -> ActiveFault {
        ActiveFault {
            name: kind.name,
            removes_receipts: kind.removes_receipts,
            model,
        }
    }

    /// The model's name, as its kind registered it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// See [`FaultKind::removes_receipts`].
    pub fn removes_receipts(&self) -> bool {
        self.removes_receipts
    }
}

impl std::ops::Deref for ActiveFault {
    type Target = dyn FaultModel;

    fn deref(&self) -> &Self::Target {
        &*self.model
    }
}

impl std::ops::DerefMut for ActiveFault {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.model
    }
}

/// Asks every fault model whether it acts (every one, so one model's answer never changes how
/// many draws another makes) and returns the name of the first that does, which is credited.
pub fn first_to_act(
    faults: &mut [ActiveFault],
    mut acts: impl FnMut(&mut ActiveFault) -> bool,
) -> Option<String> {
    let mut first = None;
    for fault in faults.iter_mut() {
        if acts(fault) && first.is_none() {
            first = Some(fault.name().to_owned());
        }
    }
    first
}

/// One fault model with its settings and decision stream. Every hook has a do-nothing default,
/// so a model overrides only the hooks where it acts, and [`FaultModel::heal`], where it stops.
pub trait FaultModel {
    /// Called once before the run, to add events or change how they are delivered. A model that
    /// makes up business data (a second event for one fact) asks `domain` how its business
    /// would make it, never invents it.
    fn shape_workload(
        &mut self,
        _events: &mut Vec<EventSpec>,
        _context: &FaultContext,
        _domain: &dyn crate::domain::Domain,
    ) {
    }

    /// Called once when the run starts.
    fn start(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }

    /// Called before a process runs its next step: the model may crash the process, pause the
    /// task, fail the statement it is about to run, or move its clock. When several models act at
    /// one point, the first in [`built_in`] order (then a registry's own models) wins; every model is still asked, so that one
    /// model's decision never changes how many draws another one makes.
    fn at_scheduling_point(&mut self, _point: &SchedulingPoint<'_>) -> Option<PointAction> {
        None
    }

    /// Whether a delivery is lost on its way to the receiver (the sender will time out).
    fn drops_request(&mut self, _now_ms: i64) -> bool {
        false
    }

    /// How the provider treats this request: conditions of its contract it keeps, a delay past
    /// the caller's timeout, or an answer of the model's own ([`ProviderAnswer`]: any status a
    /// real provider answers, with a `Retry-After`, after acting or not). Whatever the model
    /// decides is credited to it, in coverage and in the schedule.
    fn provider_faults(&mut self, _now_ms: i64, _request: &ProviderRequest) -> ProviderFaults {
        ProviderFaults::default()
    }

    /// Called at a time this model asked for with [`TimerAction::WakeAt`].
    fn on_timer(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }

    /// Whether the receiver's answer to a delivery is lost on its way to the sender.
    fn drops_webhook_answer(&mut self, _now_ms: i64) -> bool {
        false
    }

    /// Whether the provider's reply is lost on its way to the relay (the provider did act).
    fn drops_provider_reply(&mut self, _now_ms: i64) -> bool {
        false
    }

    /// How many extra copies of a delivery attempt the sender sends at the same time.
    fn extra_deliveries(&mut self, _now_ms: i64) -> u32 {
        0
    }

    /// When the provider may forget a key first stored at `stored_at_ms`, if ever.
    fn key_forget_at(&mut self, _stored_at_ms: i64, _key_lifetime_ms: i64) -> Option<i64> {
        None
    }

    /// Stop injecting: the run moves to its liveness phase. A model may ask for last actions
    /// (as a disk that fills up is given back its space); after heal it must not act again,
    /// except where its file says why not.
    fn heal(&mut self, now_ms: i64) -> Vec<TimerAction>;
}

/// What a fault model's settings may depend on.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct FaultContext {
    /// How long the fault phase lasts, in virtual milliseconds.
    pub fault_phase_ms: i64,
    /// Events are created within this window, so most work happens in it.
    pub emit_window_ms: i64,
    /// How long an idempotency key stays valid, in milliseconds.
    pub key_lifetime_ms: i64,
    /// How long the sender waits for an answer before giving up, in milliseconds.
    pub sender_timeout_ms: i64,
    /// How long a provider call waits for a reply before timing out, in milliseconds.
    pub call_timeout_ms: i64,
    /// How long a worker's lease on a job lasts, in milliseconds.
    pub lease_ms: i64,
    /// Clocks never drift further from true time than this.
    pub clock_skew_ms_max: i64,
    /// Workers never stall longer than this (the bound the relay is configured to tolerate).
    pub stall_ms_max: i64,
    /// The longest a provider takes to act on a request, as the relay is told
    /// (`relay.provider_act_ms_max`).
    #[serde(default)]
    pub provider_act_ms_max: i64,
}

/// A fault model as its file declares it: its name, what it models, its typed settings, how a
/// seed draws them and how the model is built from them, and the rules it keeps with the other
/// models. [`FaultKind::of`] makes it a registry entry.
///
/// Whether the model is on is not part of its settings: every model's settings carry an
/// `enabled` field that the simulator owns (swarm testing, `--faults`, `--without-faults`, a
/// hand-edited seed file), missing means on, and a model that is off is never built, so its code
/// never checks.
///
/// ```
/// use commitgap_sim::faults::{Fault, FaultContext, FaultModel, TimerAction};
/// use commitgap_sim::rng::SimRng;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Settings {
///     one_in: u32,
/// }
///
/// struct Quiet;
///
/// impl Fault for Quiet {
///     const NAME: &'static str = "quiet";
///     const DESCRIPTION: &'static str = "does nothing, at a drawn rate";
///     type Settings = Settings;
///
///     fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
///         Settings { one_in: *rng.pick(&[3, 30]) }
///     }
///
///     fn build(settings: Settings, _rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
///         if settings.one_in == 0 {
///             return Err("one_in: must be at least 1".to_owned());
///         }
///         Ok(Box::new(Quiet))
///     }
/// }
///
/// impl FaultModel for Quiet {
///     fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
///         Vec::new()
///     }
/// }
///
/// let kind = commitgap_sim::faults::FaultKind::of::<Quiet>();
/// assert_eq!(kind.name, "quiet");
/// ```
pub trait Fault: 'static {
    /// The name: a `--faults` value, the key of its settings in seed files, the label of its
    /// decisions in schedules. No spaces or commas.
    const NAME: &'static str;
    /// Which real failure it models, in one line.
    const DESCRIPTION: &'static str;
    /// How it does so, as the reference's table of fault models shows it: ranges, rates, when it
    /// acts and what it leaves alone. Empty when the description says it all.
    const DETAILS: &'static str = "";
    /// True when the model acts only on something a correct system never does (see
    /// [`FaultKind::acts_only_on_faulty_systems`]).
    const ACTS_ONLY_ON_FAULTY_SYSTEMS: bool = false;
    /// True when the model stalls relay workers (see [`FaultKind::stalls_workers`]).
    const STALLS_WORKERS: bool = false;
    /// True when the model deletes receipts the system committed (see
    /// [`FaultKind::removes_receipts`]).
    const REMOVES_RECEIPTS: bool = false;

    /// The model's settings, as seed files write them (without `enabled`).
    type Settings: Serialize + DeserializeOwned;

    /// Draws whether the model is on in one seed: about three seeds in four (swarm testing).
    fn draw_enabled(rng: &mut SimRng) -> bool {
        swarm_enabled(rng)
    }

    /// Draws the settings for one seed, from the model's own configuration stream.
    fn draw(rng: &mut SimRng, context: &FaultContext) -> Self::Settings;

    /// Draws whether the model is on and its settings: [`Fault::draw_enabled`], then
    /// [`Fault::draw`]. A model that drew in another order overrides this to keep its seeds.
    fn draw_switched(rng: &mut SimRng, context: &FaultContext) -> (bool, Self::Settings) {
        let enabled = Self::draw_enabled(rng);
        (enabled, Self::draw(rng, context))
    }

    /// Builds the model from settings (drawn, or read from a seed file) and its decision stream,
    /// checking the settings against the limits and the configuration's contracts in `context`.
    /// The error names the setting (`rate.denominator: ...`).
    fn build(
        settings: Self::Settings,
        rng: SimRng,
        context: &FaultContext,
    ) -> Result<Box<dyn FaultModel>, String>;

    /// After every model drew its settings for one seed, with this one on: turns off models it
    /// is never on with, or turns on one it needs (see [`Switches`]).
    fn after_draw(_switches: &mut Switches<'_>) {}

    /// After every model was turned on (`--all-faults`), with this one on: the same rules as
    /// [`Fault::after_draw`], where the others win.
    fn after_all_on(_switches: &mut Switches<'_>) {}

    /// Refuses a configuration (a hand-edited seed file) with this model on that breaks a rule
    /// it keeps with the others or with the configuration.
    fn check_with_others(_faults: &FaultSettings, _context: &FaultContext) -> Result<(), String> {
        Ok(())
    }

    /// Applies the workload shape's choices that concern this model (a receipt retention).
    fn apply_shape(_settings: &mut Self::Settings, _shape: &crate::shape::WorkloadShape) {}
}

/// Every fault model's settings in one configuration, by name.
pub type FaultSettings = BTreeMap<String, serde_json::Value>;

/// The models' switches in one configuration, as [`Fault::after_draw`] sees them: which are on,
/// and which the workload shape lets it turn on.
pub struct Switches<'a> {
    faults: &'a mut FaultSettings,
    allowed: &'a dyn Fn(&str) -> bool,
}

impl std::fmt::Debug for Switches<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switches")
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl<'a> Switches<'a> {
    /// The switches of `faults`; `allowed` says which models may be turned on.
    pub fn new(faults: &'a mut FaultSettings, allowed: &'a dyn Fn(&str) -> bool) -> Switches<'a> {
        Switches { faults, allowed }
    }

    /// Whether the model called `name` is on.
    pub fn is_on(&self, name: &str) -> bool {
        self.faults
            .get(name)
            .is_some_and(|settings| !turned_off(settings))
    }

    /// Turns the model called `name` off, if it is in the configuration.
    pub fn turn_off(&mut self, name: &str) {
        if let Some(serde_json::Value::Object(settings)) = self.faults.get_mut(name) {
            settings.insert("enabled".to_owned(), serde_json::Value::Bool(false));
        }
    }

    /// Turns the model called `name` on, if the shape allows it and it is in the configuration,
    /// and returns its settings to adjust.
    pub fn turn_on(&mut self, name: &str) -> Option<&mut serde_json::Value> {
        if !(self.allowed)(name) {
            return None;
        }
        let settings = self.faults.get_mut(name)?;
        if let serde_json::Value::Object(object) = settings {
            object.insert("enabled".to_owned(), serde_json::Value::Bool(true));
        }
        Some(settings)
    }
}

type DrawSettings = fn(&mut SimRng, &FaultContext) -> serde_json::Value;
type BuildModel =
    fn(&serde_json::Value, SimRng, &FaultContext) -> Result<Option<Box<dyn FaultModel>>, String>;
type Adjust = fn(&mut Switches<'_>);
type CheckWithOthers = fn(&FaultSettings, &FaultContext) -> Result<(), String>;
type ApplyShape = fn(&mut serde_json::Value, &crate::shape::WorkloadShape) -> Result<(), String>;

/// A registered fault model: a [`Fault`] made into a value the registry holds.
#[derive(Clone, Copy)]
pub struct FaultKind {
    /// See [`Fault::NAME`].
    pub name: &'static str,
    /// Which real failure it models, in one line.
    pub description: &'static str,
    /// See [`Fault::DETAILS`].
    pub details: &'static str,
    /// True when the model acts only on something a correct system never does (`payload-mismatch`
    /// acts when a relay reuses a key with a new payload). A sweep in which it never fired notes
    /// that rather than warning: against a correct system it cannot fire.
    pub acts_only_on_faulty_systems: bool,
    /// True when the model stalls relay workers: a stalled worker is found out only by the worker
    /// that takes its obligation over, so a seed with it on gets a second worker.
    pub stalls_workers: bool,
    /// True when the model deletes receipts: a request that reuses an event's id with another
    /// body may then meet no receipt, and is not a forgery a receiver must refuse.
    pub removes_receipts: bool,
    draw: DrawSettings,
    build: BuildModel,
    after_draw: Adjust,
    after_all_on: Adjust,
    check_with_others: CheckWithOthers,
    apply_shape: ApplyShape,
    /// Tells two models of one name apart: two registrations of one model are the same model.
    identity: fn() -> std::any::TypeId,
}

impl std::fmt::Debug for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultKind")
            .field("name", &self.name)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

impl FaultKind {
    /// The registry entry of the fault model `F`.
    pub const fn of<F: Fault>() -> FaultKind {
        FaultKind {
            name: F::NAME,
            description: F::DESCRIPTION,
            details: F::DETAILS,
            acts_only_on_faulty_systems: F::ACTS_ONLY_ON_FAULTY_SYSTEMS,
            stalls_workers: F::STALLS_WORKERS,
            removes_receipts: F::REMOVES_RECEIPTS,
            draw: draw_settings::<F>,
            build: build_model::<F>,
            after_draw: F::after_draw,
            after_all_on: F::after_all_on,
            check_with_others: F::check_with_others,
            apply_shape: apply_shape::<F>,
            identity: std::any::TypeId::of::<F>,
        }
    }

    /// Draws the model's settings for one seed, `enabled` among them.
    pub fn draw(&self, rng: &mut SimRng, context: &FaultContext) -> serde_json::Value {
        (self.draw)(rng, context)
    }

    /// Builds the model from its settings, or `None` when they turn it off. Settings are
    /// checked either way; the error names the setting.
    pub fn build(
        &self,
        settings: &serde_json::Value,
        rng: SimRng,
        context: &FaultContext,
    ) -> Result<Option<Box<dyn FaultModel>>, String> {
        (self.build)(settings, rng, context)
    }

    /// Whether `other` is this same model (registered twice), not another of the same name.
    pub fn same_model(&self, other: &FaultKind) -> bool {
        (self.identity)() == (other.identity)()
    }
}

fn draw_settings<F: Fault>(rng: &mut SimRng, context: &FaultContext) -> serde_json::Value {
    let (enabled, settings) = F::draw_switched(rng, context);
    let mut value = to_json(&settings);
    if value.is_null() {
        value = serde_json::Value::Object(serde_json::Map::new());
    }
    match &mut value {
        serde_json::Value::Object(object) => {
            object.insert("enabled".to_owned(), serde_json::Value::Bool(enabled));
        }
        _ => panic!(
            "the settings of fault model {} must serialize as a JSON object",
            F::NAME
        ),
    }
    value
}

/// Splits `enabled` (missing means on) from the model's own settings.
fn switched<F: Fault>(value: &serde_json::Value) -> Result<(bool, F::Settings), String> {
    let mut object = match value {
        serde_json::Value::Object(object) => object.clone(),
        _ => return Err(".: expected an object of settings".to_owned()),
    };
    let enabled = match object.remove("enabled") {
        None => true,
        Some(serde_json::Value::Bool(enabled)) => enabled,
        Some(_) => return Err("enabled: expected true or false".to_owned()),
    };
    let settings = from_json::<F::Settings>(&serde_json::Value::Object(object))?;
    Ok((enabled, settings))
}

fn build_model<F: Fault>(
    value: &serde_json::Value,
    rng: SimRng,
    context: &FaultContext,
) -> Result<Option<Box<dyn FaultModel>>, String> {
    let (enabled, settings) = switched::<F>(value)?;
    let model = F::build(settings, rng, context)?;
    Ok(enabled.then_some(model))
}

fn apply_shape<F: Fault>(
    value: &mut serde_json::Value,
    shape: &crate::shape::WorkloadShape,
) -> Result<(), String> {
    let (enabled, mut settings) = switched::<F>(value)?;
    F::apply_shape(&mut settings, shape);
    let mut shaped = to_json(&settings);
    if let serde_json::Value::Object(object) = &mut shaped {
        object.insert("enabled".to_owned(), serde_json::Value::Bool(enabled));
    }
    *value = shaped;
    Ok(())
}

/// After a seed drew every model's settings: each model that is on applies its rules (in
/// registry order), then the shape's choices are applied to each model's settings.
pub fn after_draw(
    kinds: &[FaultKind],
    faults: &mut FaultSettings,
    shape: &crate::shape::WorkloadShape,
    allowed: &dyn Fn(&str) -> bool,
) {
    for kind in kinds {
        let mut switches = Switches::new(faults, allowed);
        if switches.is_on(kind.name) {
            (kind.after_draw)(&mut switches);
        }
    }
    for kind in kinds {
        if let Some(settings) = faults.get_mut(kind.name) {
            // Drawn settings always read back; a failure here is a model's own bug.
            (kind.apply_shape)(settings, shape).expect("drawn fault settings read back");
        }
    }
}

/// After every model was turned on (`--all-faults`): each model that is on applies its rules.
pub fn after_all_on(kinds: &[FaultKind], faults: &mut FaultSettings) {
    for kind in kinds {
        let mut switches = Switches::new(faults, &|_| true);
        if switches.is_on(kind.name) {
            (kind.after_all_on)(&mut switches);
        }
    }
}

/// Refuses a configuration in which a model that is on breaks a rule it keeps with the others.
pub fn check_with_others(
    kinds: &[FaultKind],
    faults: &FaultSettings,
    context: &FaultContext,
) -> Result<(), String> {
    for kind in kinds {
        if faults
            .get(kind.name)
            .is_some_and(|settings| !turned_off(settings))
        {
            (kind.check_with_others)(faults, context)?;
        }
    }
    Ok(())
}

/// What adding a fault model to a list does (see [`check_addition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addition {
    /// The model joins the list, after every model in it.
    Joins,
    /// The same model is already there (a test harness may be set up by several tests of one
    /// process): nothing changes.
    AlreadyThere,
    /// A built-in model has its name: the new model takes the built-in's place in every run,
    /// so that a built-in added in a later release never stops a team's program from running.
    ReplacesBuiltIn,
}

/// Checks that `kind` may join `kinds`: its name is a `--faults` value and no other added
/// model's. A built-in model of its name gives way to it ([`Addition::ReplacesBuiltIn`]).
pub fn check_addition(kinds: &[FaultKind], kind: &FaultKind) -> Result<Addition, String> {
    if kind.name.is_empty() || kind.name.contains(|c: char| c == ',' || c.is_whitespace()) {
        return Err(format!(
            "fault model name {:?} must be non-empty, without spaces or commas (it is a --faults value)",
            kind.name
        ));
    }
    let Some(existing) = kinds.iter().find(|existing| existing.name == kind.name) else {
        return Ok(Addition::Joins);
    };
    if existing.same_model(kind) {
        return Ok(Addition::AlreadyThere);
    }
    let built_in_here = built_in().iter().any(|built| built.same_model(existing));
    if built_in_here {
        Ok(Addition::ReplacesBuiltIn)
    } else {
        Err(format!(
            "a fault model named {:?} is already registered; give the new one another name",
            kind.name
        ))
    }
}

/// Declares the fault models this crate ships: each name is one file of this directory, and its
/// place in the list is its place in [`built_in`]. Adding a model is its file and one line in
/// the list below; nothing else names it.
macro_rules! built_in_fault_models {
    ($($model:ident),* $(,)?) => {
        $(pub(crate) mod $model;)*

        /// The fault models this crate ships, in a fixed order.
        ///
        /// The order is also precedence: at a scheduling point every model is asked, in this order,
        /// and the first one that acts wins (a crash before a pause, a pause before a failed
        /// statement). Each model draws from its own streams, so where a new line goes changes no
        /// other model's draws, only which action wins when two act at one point. A team's models
        /// come after these, in the order its [`crate::registry::Registry`] added them.
        pub fn built_in() -> Vec<FaultKind> {
            vec![$($model::KIND),*]
        }
    };
}

built_in_fault_models! {
    crash,
    lost_ack,
    duplicate_delivery,
    receipt_purge,
    key_expiry,
    request_lost,
    slow_handler,
    spontaneous_duplicate,
    reorder,
    late_delivery,
    twin_events,
    fan_out,
    sqlite_busy,
    disk_full,
    worker_pause,
    hung_worker,
    provider_failure,
    provider_slow,
    provider_conflict,
    sticky_error,
    payload_mismatch,
    clock_jump,
    attacker,
    sender_clock_skew,
    provider_double_execute,
    provider_refusal,
    maintenance_lock,
    provider_rate_limit,
}

/// The seed stream a fault model's settings are drawn from.
pub fn config_stream_label(name: &str) -> String {
    format!("config/fault/{name}")
}

/// The seed stream a fault model's decisions are drawn from.
pub fn decision_stream_label(name: &str) -> String {
    format!("fault/{name}")
}

/// The most copies a fault model may add to one delivery attempt or one event.
const COPIES_MAX: u32 = 4;

/// Whether `settings` turn their model off (`"enabled": false`, how every built-in model is turned
/// off by swarm testing and by `--without-faults`). Such a model must do nothing at all; a model
/// without an `enabled` setting is never taken as off.
pub fn turned_off(settings: &serde_json::Value) -> bool {
    settings.get("enabled") == Some(&serde_json::Value::Bool(false))
}

/// A slow provider acts within this many call timeouts of receiving a request; drawn
/// configurations tell the relay so (`relay.provider_act_ms_max`).
pub const PROVIDER_ACT_TIMEOUTS_MAX: i64 = 4;

/// Swarm testing: each fault model is on for about three seeds in four.
fn swarm_enabled(rng: &mut SimRng) -> bool {
    rng.chance(Ratio::new(3, 4))
}

/// One of the given ratios, so rates span orders of magnitude across seeds.
fn draw_ratio(rng: &mut SimRng, choices: &[(u32, u32)]) -> Ratio {
    let (numerator, denominator) = *rng.pick(choices);
    Ratio::new(numerator, denominator)
}

fn to_json<T: Serialize>(settings: &T) -> serde_json::Value {
    serde_json::to_value(settings).expect("fault settings are plain data")
}

/// Settings of a model that only needs to be on or off with one rate.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
struct RateSettings {
    rate: Ratio,
}

/// Reads a fault model's settings. An error is one line naming the field within the settings
/// (`rate.denominator: ...`), with any quoted value cut short.
fn from_json<T: DeserializeOwned>(value: &serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        let message = crate::files::clip_quoted(&error.inner().to_string(), 80);
        if path == "." {
            message
        } else {
            format!("{path}: {message}")
        }
    })
}

/// Checks a duration setting: from `low` to a year (see [`crate::limits`]).
fn check_duration(field: &str, value: i64, low: i64) -> Result<(), String> {
    check(field, value, low, DURATION_MS_MAX)
}
