//! Fault models: the real failures the simulator injects, one file each, listed once in
//! [`registry`].
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

mod attacker;
mod clock_jump;
mod crash;
mod disk_full;
mod duplicate_delivery;
mod fan_out;
mod hung_worker;
mod key_expiry;
mod late_delivery;
mod lost_ack;
mod payload_mismatch;
mod provider_conflict;
pub mod provider_double_execute;
mod provider_failure;
mod provider_refusal;
mod provider_slow;
mod receipt_purge;
mod reorder;
mod request_lost;
mod sender_clock_skew;
mod slow_handler;
mod spontaneous_duplicate;
mod sqlite_busy;
mod sticky_error;
mod twin_events;
mod worker_pause;

use commitgap::provider::ProviderRequest;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use attacker::Attack;

use std::rc::Rc;

use crate::limits::{DURATION_MS_MAX, check};
use crate::rng::{Ratio, SimRng};
use crate::sql::{Statement, Verb};
use crate::workload::EventSpec;

/// What a fault model does to the process whose task is about to run, at its scheduling point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointAction {
    /// Crash the process here and restart it after the delay.
    Crash { restart_after_ms: i64 },
    /// Stop the task here for a while, without running its next operation (a GC pause, a
    /// stopped VM, a slow handler).
    Pause { duration_ms: i64 },
    /// Fail the statement about to run with `failure`, without running it. An open transaction
    /// stays open unless `rolled_back`: SQLite may or may not roll a transaction back when a
    /// statement (a `COMMIT` included) fails for a full disk or an I/O error, and does not for a
    /// busy one.
    FailStatement {
        failure: StatementFailure,
        rolled_back: bool,
    },
    /// Set the process's clock this far from true time (an NTP step).
    ClockJump { offset_ms: i64 },
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
    pub const ALL: [StatementFailure; 3] = [
        StatementFailure::Busy,
        StatementFailure::Full,
        StatementFailure::Io,
    ];

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
    WakeAt { at_ms: i64 },
    /// Run the purge job now, deleting receipts received before `older_than_ms`.
    PurgeReceipts { older_than_ms: i64 },
    /// Send one hostile request, copied from one of the deliveries made so far (`target` picks
    /// which, modulo their number).
    Attack { attack: Attack, target: u64 },
    /// Set the sender's clock this far from true time.
    SenderClock { offset_ms: i64 },
}

/// The kinds of simulated process, as a fault model sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProcessRole {
    Receiver,
    RelayWorker,
    Purger,
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
    pub role: ProcessRole,
    pub op: &'a PendingOp,
}

/// How the provider treats one request, merged over every fault model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderFaults {
    /// See [`crate::provider::Conditions`].
    pub conditions: crate::provider::Conditions,
    /// Process the request this long before acting, past the caller's timeout.
    pub act_after_ms: Option<i64>,
}

impl ProviderFaults {
    /// Writes the conditions as a schedule value: comma-separated `fail`, `sticky`, `replay`,
    /// `double`, `refuse`, `lock=MS`, `slow=MS`.
    pub fn encode(&self) -> String {
        let conditions = self.conditions;
        let mut flags = Vec::new();
        if conditions.fail_before_acting {
            flags.push("fail".to_owned());
        }
        if conditions.sticky_errors {
            flags.push("sticky".to_owned());
        }
        if conditions.replay_on_mismatch {
            flags.push("replay".to_owned());
        }
        if conditions.double_execute {
            flags.push("double".to_owned());
        }
        if conditions.refuse {
            flags.push("refuse".to_owned());
        }
        if conditions.lock_after_ms > 0 {
            flags.push(format!("lock={}", conditions.lock_after_ms));
        }
        if let Some(act_after_ms) = self.act_after_ms {
            flags.push(format!("slow={act_after_ms}"));
        }
        flags.join(",")
    }

    /// Reads a value written by [`ProviderFaults::encode`]. The error names the flag it could
    /// not read.
    pub fn decode(value: &str) -> Result<ProviderFaults, String> {
        let mut faults = ProviderFaults::default();
        let milliseconds = |flag: &str, ms: &str| {
            ms.parse::<i64>()
                .map_err(|_| format!("{flag:?}: {ms:?} is not a whole number of milliseconds"))
        };
        for flag in value.split(',').map(str::trim).filter(|flag| !flag.is_empty()) {
            match flag.split_once('=') {
                Some(("lock", ms)) => faults.conditions.lock_after_ms = milliseconds(flag, ms)?,
                Some(("slow", ms)) => faults.act_after_ms = Some(milliseconds(flag, ms)?),
                _ => match flag {
                    "fail" => faults.conditions.fail_before_acting = true,
                    "sticky" => faults.conditions.sticky_errors = true,
                    "replay" => faults.conditions.replay_on_mismatch = true,
                    "double" => faults.conditions.double_execute = true,
                    "refuse" => faults.conditions.refuse = true,
                    _ => {
                        return Err(format!(
                            "{flag:?} is not one of fail, sticky, replay, double, refuse, lock=MS, slow=MS"
                        ));
                    }
                },
            }
        }
        Ok(faults)
    }

    fn merge(self, other: ProviderFaults) -> ProviderFaults {
        let (left, right) = (self.conditions, other.conditions);
        ProviderFaults {
            conditions: crate::provider::Conditions {
                fail_before_acting: left.fail_before_acting || right.fail_before_acting,
                sticky_errors: left.sticky_errors || right.sticky_errors,
                replay_on_mismatch: left.replay_on_mismatch || right.replay_on_mismatch,
                lock_after_ms: left.lock_after_ms.max(right.lock_after_ms),
                double_execute: left.double_execute || right.double_execute,
                refuse: left.refuse || right.refuse,
            },
            act_after_ms: self.act_after_ms.max(other.act_after_ms),
        }
    }
}

/// Asks every fault model how the provider treats `request` (every model is asked, so one
/// model's answer never changes how many draws another makes).
pub fn provider_faults(
    faults: &mut [Box<dyn FaultModel>],
    now_ms: i64,
    request: &ProviderRequest,
) -> ProviderFaults {
    faults
        .iter_mut()
        .map(|fault| fault.provider_faults(now_ms, request))
        .fold(ProviderFaults::default(), ProviderFaults::merge)
}

/// One fault model with its settings and decision stream. Every hook has a do-nothing default,
/// so a model overrides only the hooks where it acts, and [`FaultModel::heal`], where it stops.
pub trait FaultModel {
    fn name(&self) -> &'static str;

    /// The settings this model runs with, as written to seed files.
    fn settings(&self) -> serde_json::Value;

    /// Called once before the run, to add events or change how they are delivered.
    fn shape_workload(
        &mut self,
        _events: &mut Vec<EventSpec>,
        _context: &FaultContext,
        _owes_work: &dyn Fn(&EventSpec) -> bool,
    ) {
    }

    /// Called once when the run starts.
    fn start(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }

    /// Called before a process runs its next step: the model may crash the process, pause the
    /// task, fail the statement it is about to run, or move its clock. When several models act at
    /// one point, the first in [`registry`] order wins; every model is still asked, so that one
    /// model's decision never changes how many draws another one makes.
    fn at_scheduling_point(&mut self, _point: &SchedulingPoint<'_>) -> Option<PointAction> {
        None
    }

    /// Whether a delivery is lost on its way to the receiver (the sender will time out).
    fn drops_request(&mut self, _now_ms: i64) -> bool {
        false
    }

    /// How the provider treats this request.
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
    pub fault_phase_ms: i64,
    /// Events are created within this window, so most work happens in it.
    pub emit_window_ms: i64,
    pub key_lifetime_ms: i64,
    pub sender_timeout_ms: i64,
    pub call_timeout_ms: i64,
    pub lease_ms: i64,
    /// Clocks never drift further from true time than this.
    pub clock_skew_ms_max: i64,
    /// Workers never stall longer than this (the bound the relay is configured to tolerate).
    pub stall_ms_max: i64,
}

/// Builds a fault model from its settings and its decision stream, checking the settings against
/// the limits and against the configuration's contracts in `context` (a clock jump may not exceed
/// the skew the relay is configured to tolerate).
pub type BuildFault = fn(&serde_json::Value, SimRng, &FaultContext) -> Result<Box<dyn FaultModel>, String>;

/// A registered fault model.
#[derive(Clone, Copy)]
pub struct FaultKind {
    pub name: &'static str,
    /// Which real failure it models, in one line.
    pub description: &'static str,
    /// Draws settings for one seed.
    pub draw: fn(&mut SimRng, &FaultContext) -> serde_json::Value,
    /// Builds the model from settings (drawn, or read from a seed file) and its decision stream.
    pub build: BuildFault,
    /// True when the model acts only on something a correct system never does (`payload-mismatch`
    /// acts when a relay reuses a key with a new payload). A sweep in which it never fired notes
    /// that rather than warning: against a correct system it cannot fire.
    pub acts_only_on_faulty_systems: bool,
}

/// Every fault model, in a fixed order. Adding one is one file and one line here.
///
/// The order is also precedence: at a scheduling point every model is asked, in this order, and
/// the first one that acts wins (a crash before a pause, a pause before a failed statement).
/// Each model draws from its own streams, so where a new line goes changes no other model's
/// draws, only which action wins when two act at one point.
pub fn registry() -> Vec<FaultKind> {
    let mut kinds = built_in();
    kinds.extend(added().iter().copied());
    kinds
}

/// Fault models added from outside this crate (a team's own, through `App::fault` or
/// `harness::Check::fault`), after the built-in ones and in the order they were added.
static ADDED: std::sync::RwLock<Vec<FaultKind>> = std::sync::RwLock::new(Vec::new());

fn added() -> std::sync::RwLockReadGuard<'static, Vec<FaultKind>> {
    // A panic while the list was held cannot leave it half-changed (a push is one step), so a
    // poisoned lock still holds a whole list.
    ADDED.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Adds a fault model to [`registry`] for the rest of the process, after every built-in model and
/// every model added before it, so it takes precedence over none of them. It draws from its own
/// streams, named after it, so adding it changes no other model's settings or decisions. Adding a
/// model of a name already registered is refused, unless it is the same model added again (a test
/// harness may be set up by several tests of one process).
pub fn register(kind: FaultKind) -> Result<(), String> {
    if let Some(existing) = registry().into_iter().find(|existing| existing.name == kind.name) {
        return if std::ptr::fn_addr_eq(existing.build, kind.build) {
            Ok(())
        } else {
            Err(format!(
                "a fault model named {:?} is already registered; give the new one another name",
                kind.name
            ))
        };
    }
    if kind.name.is_empty() || kind.name.contains(|c: char| c == ',' || c.is_whitespace()) {
        return Err(format!(
            "fault model name {:?} must be non-empty, without spaces or commas (it is a --faults value)",
            kind.name
        ));
    }
    ADDED
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(kind);
    Ok(())
}

/// The fault models this crate ships, in precedence order.
fn built_in() -> Vec<FaultKind> {
    vec![
        crash::KIND,
        lost_ack::KIND,
        duplicate_delivery::KIND,
        receipt_purge::KIND,
        key_expiry::KIND,
        request_lost::KIND,
        slow_handler::KIND,
        spontaneous_duplicate::KIND,
        reorder::KIND,
        late_delivery::KIND,
        twin_events::KIND,
        fan_out::KIND,
        sqlite_busy::KIND,
        disk_full::KIND,
        worker_pause::KIND,
        hung_worker::KIND,
        provider_failure::KIND,
        provider_slow::KIND,
        provider_conflict::KIND,
        sticky_error::KIND,
        payload_mismatch::KIND,
        clock_jump::KIND,
        attacker::KIND,
        sender_clock_skew::KIND,
        provider_double_execute::KIND,
        provider_refusal::KIND,
    ]
}

/// Finds a registered fault model by name.
pub fn kind(name: &str) -> Option<FaultKind> {
    registry().into_iter().find(|kind| kind.name == name)
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
    enabled: bool,
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

/// Checks a list of `(start_ms, duration_ms)` windows: a few, each starting within a year and
/// lasting from a millisecond to a year.
fn check_windows(field: &str, windows: &[(i64, i64)]) -> Result<(), String> {
    check(
        &format!("{field} (the number of windows)"),
        windows.len(),
        0,
        crate::limits::WINDOWS_MAX,
    )?;
    for (index, (start_ms, duration_ms)) in windows.iter().enumerate() {
        check_duration(&format!("{field}[{index}][0] (start)"), *start_ms, 0)?;
        check_duration(&format!("{field}[{index}][1] (duration)"), *duration_ms, 1)?;
    }
    Ok(())
}
