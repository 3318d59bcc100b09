//! The simulated world: processes, tasks, the clock, the scheduler's queues, the database, the
//! sender, the provider and the fault models, plus what the current step did.
//!
//! The world is shared between the executor (`run`) and every task's environment (`sim_env`)
//! through one `RefCell`; nobody holds the borrow while a task is being polled, so the code under
//! test may call into the world at each of its scheduling points. Time is virtual and only moves
//! forward: one millisecond per step, and in jumps to the next timer when nothing is ready. Each
//! process reads true time plus its own clock offset (see the `clock-jump` fault). The world must
//! not consult anything outside the run: every choice comes from a seeded stream.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use commitgap::env::{DbError, Value};
use commitgap::provider::{CallError, ProviderCall, ProviderReply, ProviderRequest};
use commitgap::receiver::Answer;

use crate::config::SimConfig;
use crate::coverage::{Probes, Situation};
use crate::db::{ConnectionId, Database, RowChange, StatementOutput};
use crate::decision::{Decision, DecisionKind, Destination};
use crate::domain::{Domain, Model};
use crate::faults::{
    self, ActiveFault, PendingOp, PointAction, ProcessRole, SchedulingPoint, StatementFailure,
};
use crate::provider::{ProviderModel, Quirk};
pub use crate::record::Origin;
use crate::record::{AnswerRecord, History, ReplyRecord, RequestRecord, StepRecord};
use crate::rng::SimRng;
use crate::schedule::Decider;
use crate::sender::{EventState, Sender};
use crate::trace::{
    Actor, CallOutcome, Happening, Trace, call_error_text, format_duration_ms, format_time_ms,
};
use crate::view::DbView;
use crate::workload::Workload;

mod deliveries;
mod incidents;
mod progress;

pub use deliveries::Arrived;

pub type TaskId = u64;
pub type EventId = u64;

/// Something the scheduler can pick: a task to poll or a world event to handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Item {
    Task(TaskId),
    Event(EventId),
}

/// One simulated OS process.
#[derive(Debug)]
pub struct Process {
    pub name: String,
    pub role: ProcessRole,
    /// Starts at 1 and grows with every restart.
    pub incarnation: u32,
    pub up: bool,
    /// `name#incarnation`, what `Env::process_id` returns; shared, since every step names it.
    pub id: Arc<str>,
    /// Connections a finished task returned, ready for the next task (a connection pool).
    pub idle_connections: Vec<ConnectionId>,
    /// How far this process's clock is from true time.
    pub clock_offset_ms: i64,
}

impl Process {
    pub fn new(name: String, role: ProcessRole) -> Process {
        let id = format!("{name}#1");
        Process {
            name,
            role,
            incarnation: 1,
            up: true,
            id: id.into(),
            idle_connections: Vec::new(),
            clock_offset_ms: 0,
        }
    }
}

/// How a suspended task waits, as it told the world at its scheduling point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Park {
    /// Ready to run its next operation.
    Now,
    /// Sleeping, or waiting for a reply, until this virtual time.
    Until(i64),
}

/// What a task is, for the trace and the quiescence check.
#[derive(Debug, Clone)]
pub enum TaskKind {
    /// `delivery` is `None` for a delivery a scenario made by hand or an attacker sent (no sender
    /// awaits it).
    Handler {
        delivery: Option<DeliveryRef>,
        account: String,
        event_id: String,
        origin: Origin,
    },
    RelayWorker,
    Purge,
    Operator,
}

/// One transaction committed in the current step, before the view decodes it.
#[derive(Debug)]
pub struct StepCommit {
    pub process_id: String,
    /// The attack, when the committing task handles a hostile delivery.
    pub hostile: Option<String>,
    pub changes: Vec<RowChange>,
}

/// Where a delivery goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Lost on the way in: the receiver never sees it.
    Lost,
    /// No receiver is up to take it.
    Refused,
    To(usize),
}

/// How a delivery came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryKind {
    /// An attempt of the sender's retry schedule: its answer drives the schedule.
    Scheduled,
    /// A copy sent together with a scheduled attempt: its answer is not awaited.
    Copy,
    /// A delivery outside the schedule (a spontaneous duplicate or a manual resend): only a
    /// success counts, and it settles a stream that gave up.
    Extra,
}

/// Which attempt of which stream a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryRef {
    /// Index into the sender's streams.
    pub stream: usize,
    pub attempt: u32,
    pub kind: DeliveryKind,
}

/// The provider call a task has in flight.
#[derive(Debug, Clone)]
struct CallInFlight {
    key: String,
    operation: Option<String>,
}

/// The world's record of one task; its future lives with the executor.
#[derive(Debug)]
pub struct TaskState {
    pub process: usize,
    pub process_id: Arc<str>,
    pub kind: TaskKind,
    pub connection: Option<ConnectionId>,
    pub park: Option<Park>,
    /// What the task will do when it next runs.
    pub pending: PendingOp,
    /// What it is about to do, for schedule labels: the statement's verb and table, or the key
    /// of the provider call. Kept only while schedules are written down.
    pub pending_detail: String,
    pub reply: Option<Result<ProviderReply, CallError>>,
    /// The next statement fails this way without running (a fault's decision), and a failed
    /// `COMMIT` rolls back when the flag says so.
    pub inject_failure: Option<(StatementFailure, bool)>,
    /// A pause or clock jump hit the task while its current provider call was in flight.
    pub disturbed: bool,
    /// How long faults have paused the task since it last ran: pauses at one scheduling point
    /// add up to one stall, which a relay worker's is capped by (see [`World::stall_room_ms`]).
    pub stalled_ms: i64,
    call: Option<CallInFlight>,
    timer: Option<(i64, u64)>,
}

/// Something that happens in the world outside any task.
#[derive(Debug, Clone)]
pub enum WorldEvent {
    /// The sender creates event `event`.
    Emit { event: usize },
    /// The sender makes the next scheduled attempt of `stream`.
    Attempt { stream: usize },
    /// The sender stops waiting for attempt `attempt`.
    AttemptTimeout { stream: usize, attempt: u32 },
    /// A delivery outside the schedule.
    Extra { stream: usize, reason: String },
    /// A receiver writes its answer to the socket (a crash before this loses it).
    SendAnswer {
        process: usize,
        incarnation: u32,
        delivery: Option<DeliveryRef>,
        answer: Answer,
    },
    /// The answer reaches the sender.
    AnswerArrives { delivery: DeliveryRef, answer: Answer },
    /// A crashed process starts again.
    Restart { process: usize },
    /// A fault model asked to be woken.
    FaultTimer { fault: usize },
    /// A fault model asked for an action when the run started or at heal.
    FaultActs {
        fault: usize,
        action: crate::faults::TimerAction,
    },
    /// A slow provider finishes processing a request and acts.
    ProviderActs { request: ProviderRequest },
    /// After heal, the operator requeues dead obligations.
    OperatorRequeue,
    /// After heal, the operator redelivers failed webhooks by hand (senders without retries).
    OperatorRedeliver { round: u32 },
}

/// The whole simulated world.
pub struct World {
    now_ms: i64,
    step: u64,
    config: SimConfig,
    workload: Workload,
    /// The system's domain: event bodies, the model, how payloads are read.
    domain: Arc<dyn Domain>,
    /// What the domain says the run must end in, computed once from the workload.
    model: Model,
    /// Invariants not checked against the system, with why.
    invariants_left_out: Vec<(String, String)>,
    /// The claims made after heal, to tell stuck work from slow work.
    stuck_watch: progress::StuckWatch,
    db: Database,
    observed_tables: Vec<&'static str>,
    processes: Vec<Process>,
    tasks: BTreeMap<TaskId, TaskState>,
    events: BTreeMap<EventId, WorldEvent>,
    ready: Vec<Item>,
    /// The schedule label of each ready item, while schedules are followed or written down.
    ready_label_cache: BTreeMap<Item, String>,
    timers: BTreeSet<(i64, u64, Item)>,
    next_task: TaskId,
    next_event: EventId,
    next_timer: u64,
    scheduler_rng: SimRng,
    network_rng: SimRng,
    provider_rng: SimRng,
    provider: ProviderModel,
    sender: Sender,
    faults: Vec<ActiveFault>,
    fault_counts: BTreeMap<String, u64>,
    /// What the faults did, in words, for the seed file; `None` when the run keeps no log (a
    /// sweep's passing seed is never written down, so it formats nothing).
    fault_log: Option<Vec<String>>,
    /// How often each interesting situation was reached; an observer that changes nothing.
    probes: Probes,
    healed: bool,
    view: DbView,
    history: History,
    /// Raw commits of the current step.
    step_commits: Vec<StepCommit>,
    step_record: StepRecord,
    /// What happened in each step, and the run's digest.
    trace: Trace,
    /// Work that keeps the world from being quiet: handler tasks, answers on the wire, scheduled
    /// extra deliveries, slow provider requests and pending operator actions.
    work_in_flight: usize,
    /// What a scripted run (a scenario) records and injects; `None` in seeded runs.
    scripted: Option<Scripted>,
    /// Set when the system did something that makes the run depend on more than its seed; the
    /// run stops with this message.
    determinism_hazard: Option<String>,
    /// Where the run's decisions come from (the seeded streams or a schedule), and the record.
    decider: Decider,
    /// The receivers' configuration ([`commitgap::env::Env::setting`]): the endpoints' secrets.
    settings: BTreeMap<String, String>,
    /// How far the sender's clock is from true time; it stamps `webhook-timestamp` with it.
    sender_clock_offset_ms: i64,
    /// The system's web framework commits what a handler left open (see
    /// `System::commits_after_answer`), so a handler's open transaction is the framework's.
    framework_commits_handlers: bool,
}

/// Controls and records of a scripted run.
#[derive(Debug, Default)]
pub struct Scripted {
    /// The statement each parked task will run next, so a test can stop right before it.
    pub pending_sql: BTreeMap<TaskId, String>,
    /// Every handler's answer, by task.
    pub answers: BTreeMap<TaskId, Answer>,
    /// How many of the next provider replies to lose.
    pub provider_replies_to_drop: u32,
    /// How many of the next sends the provider rejects for good (400), without acting.
    pub provider_sends_to_reject: u32,
}

/// At most this many fault decisions are kept for the seed file.
const FAULT_LOG_MAX: usize = 1_000;

/// What a run leaves behind once it ends, taken out of the world.
pub struct Finished {
    pub digest: String,
    pub trace: Option<Vec<crate::trace::TraceStep>>,
    /// The fixtures, events and decisions, when the run recorded or followed a schedule.
    pub schedule: Option<crate::schedule::Schedule>,
    /// What became of the schedule's lines (see [`Decider::finish`]).
    pub schedule_report: Vec<String>,
    pub sql: Option<Vec<crate::db::SqlOp>>,
}

// Reading the world: the executor, the environments and the scenarios see it through these, and
// change it only through the methods below that keep its records in step.
impl World {
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// The number of the current step (0 before the first).
    pub fn step(&self) -> u64 {
        self.step
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// The system's domain.
    pub fn domain(&self) -> &dyn Domain {
        &*self.domain
    }

    /// What the domain says the run must end in.
    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    pub fn sender(&self) -> &Sender {
        &self.sender
    }

    pub fn provider(&self) -> &ProviderModel {
        &self.provider
    }

    pub fn process(&self, index: usize) -> &Process {
        &self.processes[index]
    }

    pub fn processes(&self) -> &[Process] {
        &self.processes
    }

    pub fn probes(&self) -> &Probes {
        &self.probes
    }

    pub fn view(&self) -> &DbView {
        &self.view
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    /// What the current step changed so far.
    pub fn step_record(&self) -> &StepRecord {
        &self.step_record
    }

    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    pub fn decider(&self) -> &Decider {
        &self.decider
    }

    pub fn fault_counts(&self) -> &BTreeMap<String, u64> {
        &self.fault_counts
    }

    pub fn fault_log(&self) -> &[String] {
        self.fault_log.as_deref().unwrap_or_default()
    }

    /// Stops writing the fault log: what it would hold is then never formatted. Counting what
    /// fired goes on, and nothing a run decides depends on the log.
    pub fn forget_fault_log(&mut self) {
        self.fault_log = None;
    }

    pub fn fault_count(&self) -> usize {
        self.faults.len()
    }

    pub fn healed(&self) -> bool {
        self.healed
    }

    /// The receivers' configuration value `name` ([`commitgap::env::Env::setting`]).
    pub fn setting(&self, name: &str) -> Option<String> {
        self.settings.get(name).cloned()
    }

    pub fn has_task(&self, task: TaskId) -> bool {
        self.tasks.contains_key(&task)
    }

    /// The process `task` runs in.
    pub fn task_process(&self, task: TaskId) -> usize {
        self.tasks[&task].process
    }

    /// What a scripted run records and injects; `None` in seeded runs.
    pub fn scripted(&self) -> Option<&Scripted> {
        self.scripted.as_ref()
    }

    pub fn scripted_mut(&mut self) -> Option<&mut Scripted> {
        self.scripted.as_mut()
    }

    pub fn backend(&self) -> crate::db::Backend {
        self.db.backend()
    }

    /// The database itself, for tests that compare its final contents with a replay's.
    #[cfg(test)]
    pub fn database_mut(&mut self) -> &mut Database {
        &mut self.db
    }

    /// Runs `sql` outside every process (between steps) and returns its rows.
    pub fn read(&self, sql: &str) -> Result<Vec<commitgap::env::Row>, DbError> {
        self.db.read(sql, &[])
    }

    /// From now on, every statement is recorded for `--sql` (after set-up, which a replay
    /// repeats through the system itself).
    pub fn record_sql(&mut self) {
        self.db.record_sql();
    }

    /// The indexes of the processes with `role`, in order.
    pub fn processes_with_role(&self, role: ProcessRole) -> Vec<usize> {
        (0..self.processes.len())
            .filter(|&index| self.processes[index].role == role)
            .collect()
    }
}

// A step's life: it begins with an actor, its commits are applied to the view, and it ends with
// the clock one millisecond on.
impl World {
    /// Applies the set-up's rows to the view and records the run's first line.
    pub fn record_setup(
        &mut self,
        system: &dyn crate::system::System,
        seed: u64,
        changes: Vec<RowChange>,
    ) -> Result<(), String> {
        let diffs = self.view.apply(
            &|table, values| system.decode_row(table, values),
            &self.observed_tables,
            changes,
        )?;
        let setup = Happening::Setup {
            system: system.name().to_owned(),
            seed,
            rows: diffs.len(),
            accounts: self.workload.fixtures.accounts.len(),
            subjects: self.workload.fixtures.subjects.len(),
            events: self.workload.events.len(),
            streams: self.sender.streams().len(),
            receivers: self.config.receivers,
            relay_workers: self.config.relay_workers,
            sender: self.config.sender_preset.name(),
        };
        self.trace.push(0, 0, Actor::World, setup);
        Ok(())
    }

    /// Schedules every event's creation (unless a script makes the deliveries) and lets each
    /// fault model set its first timers.
    pub fn schedule_start(&mut self, emit_events: bool) {
        if emit_events {
            for (index, event) in self.workload.events.clone().iter().enumerate() {
                self.schedule_event(event.created_ms, WorldEvent::Emit { event: index });
            }
        }
        for index in 0..self.faults.len() {
            let actions = self.faults[index].start(0);
            for action in actions {
                self.schedule_fault_action(index, action);
            }
        }
    }

    /// Begins a step for `item`. The actor is named before the step runs: a crash in it renames
    /// the process.
    pub fn begin_step_of(&mut self, item: Item) {
        let actor = self.actor_of(item);
        self.begin_step(actor);
        self.record_forgotten_keys();
    }

    /// Begins a step that `process` takes (a scenario's crash).
    pub fn begin_step_as(&mut self, process: usize) {
        let actor = Actor::Process(self.processes[process].id.clone());
        self.begin_step(actor);
    }

    fn begin_step(&mut self, actor: Actor) {
        self.step += 1;
        self.trace.begin(self.step, self.now_ms, actor);
    }

    /// Applies the step's commits to the view, in order, and remembers what the invariants need
    /// from them. Fails when the system did something that makes the run depend on more than
    /// its seed.
    pub fn apply_step_commits(&mut self, system: &dyn crate::system::System) -> Result<(), String> {
        if let Some(hazard) = self.determinism_hazard.take() {
            return Err(format!(
                "system {} at step {}: {hazard}",
                system.name(),
                self.step
            ));
        }
        for commit in std::mem::take(&mut self.step_commits) {
            let rows = commit.changes.len();
            let diffs = self.view.apply(
                &|table, values| system.decode_row(table, values),
                &self.observed_tables,
                commit.changes,
            )?;
            let observed = crate::trace::Observed::of(&diffs);
            self.trace.record(Happening::Committed { rows, observed });
            remember(&mut self.history, &commit.process_id, &diffs);
            self.stuck_watch.committed(self.now_ms, &diffs);
            self.probes.committed(&commit.process_id, &diffs, &self.view);
            self.step_record.commits.push(crate::record::CommitRecord {
                process_id: commit.process_id,
                hostile: commit.hostile,
                diffs,
            });
        }
        Ok(())
    }

    /// Ends the step: the clock moves one millisecond on. A failed invariant is recorded as the
    /// step's last line.
    pub fn end_step(&mut self, failed: Option<(i64, Happening)>) {
        self.decider.end_step(self.step);
        self.trace.end(self.now_ms);
        self.step_record.clear();
        self.now_ms += 1;
        if let Some((time_ms, failed)) = failed {
            self.trace.push(self.step, time_ms, Actor::Invariant, failed);
        }
    }

    /// Takes the trace, the decisions and the recorded SQL out of the world, once the run ended.
    pub fn finish(&mut self) -> Finished {
        let digest = self.trace.digest();
        let trace = std::mem::replace(&mut self.trace, Trace::new(false)).into_steps();
        let recorded = matches!(
            self.decider,
            Decider::Scheduled { .. } | Decider::Seeded { record: true, .. }
        );
        let (steps, schedule_report) = std::mem::replace(&mut self.decider, Decider::seeded(false)).finish();
        let schedule = recorded.then(|| crate::schedule::Schedule {
            fixtures: self.workload.fixtures.clone(),
            events: self.workload.events.clone(),
            steps,
        });
        Finished {
            digest,
            trace,
            schedule,
            schedule_report,
            sql: self.db.take_sql_log(),
        }
    }
}

/// Remembers who took each lease, which events were ever received, and which moves entities
/// made.
fn remember(history: &mut History, process_id: &str, diffs: &[crate::view::RowDiff]) {
    use crate::system::ObservedRow;
    for diff in diffs {
        match (&diff.before, &diff.after) {
            (before, Some(ObservedRow::Obligation(after))) => {
                let token_before = match before {
                    Some(ObservedRow::Obligation(before)) => Some(before.lease_token),
                    _ => None,
                };
                if token_before != Some(after.lease_token) {
                    history.lease_holders.insert(
                        (after.operation_key.clone(), after.lease_token),
                        process_id.to_owned(),
                    );
                }
            }
            (_, Some(ObservedRow::Receipt(receipt))) => {
                history
                    .ever_received
                    .insert((receipt.account.clone(), receipt.event_id.clone()));
            }
            (Some(ObservedRow::Entity(before)), Some(ObservedRow::Entity(after)))
                if before.state.state != after.state.state =>
            {
                history.moves.insert((
                    after.tenant.clone(),
                    after.subject.clone(),
                    before.state.state.clone(),
                    after.state.state.clone(),
                ));
            }
            _ => {}
        }
    }
}

impl World {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        seed: u64,
        config: SimConfig,
        workload: Workload,
        domain: Arc<dyn Domain>,
        db: Database,
        observed_tables: Vec<&'static str>,
        processes: Vec<Process>,
        faults: Vec<ActiveFault>,
        keep_trace: bool,
        scripted: bool,
        decider: Decider,
    ) -> World {
        // In a scripted run the test makes every delivery; the sender has nothing to send.
        let sender_events = if scripted { &[][..] } else { &workload.events[..] };
        let model = domain.model(&workload).with_refusals(&*domain, &workload);
        let sender = Sender::new(config.sender_preset, sender_events, |event| {
            model.expects_rejection(event)
        });
        let mut settings = crate::signing::receiver_settings(
            workload
                .fixtures
                .accounts
                .iter()
                .map(|(account, _)| account.as_str()),
        );
        if config.edge_values {
            // A body limit the largest genuine event meets exactly: a receiver that refuses a
            // body at its limit, rather than over it, refuses a genuine delivery.
            let largest_body = workload.events.iter().map(|event| domain.body(event).len()).max();
            if let Some(largest_body) = largest_body {
                settings.insert(
                    commitgap::receiver::BODY_BYTES_MAX_SETTING.to_owned(),
                    largest_body.to_string(),
                );
            }
        }
        let reader_domain = Arc::clone(&domain);
        let reader =
            crate::provider::OperationReader::new(move |payload| reader_domain.operation_of(payload));
        let provider = ProviderModel::reading(reader.clone());
        let view = DbView::new(reader);
        World {
            now_ms: 0,
            step: 0,
            config,
            workload,
            domain,
            model,
            invariants_left_out: Vec::new(),
            stuck_watch: progress::StuckWatch::default(),
            db,
            observed_tables,
            processes,
            tasks: BTreeMap::new(),
            events: BTreeMap::new(),
            ready: Vec::new(),
            ready_label_cache: BTreeMap::new(),
            timers: BTreeSet::new(),
            next_task: 1,
            next_event: 1,
            next_timer: 0,
            scheduler_rng: SimRng::stream(seed, "scheduler"),
            network_rng: SimRng::stream(seed, "network"),
            provider_rng: SimRng::stream(seed, "provider"),
            provider,
            sender,
            faults,
            fault_counts: BTreeMap::new(),
            fault_log: Some(Vec::new()),
            probes: Probes::default(),
            healed: false,
            view,
            history: History::default(),
            step_commits: Vec::new(),
            step_record: StepRecord::default(),
            trace: Trace::new(keep_trace),
            work_in_flight: 0,
            scripted: scripted.then(Scripted::default),
            determinism_hazard: None,
            decider,
            settings,
            sender_clock_offset_ms: 0,
            framework_commits_handlers: false,
        }
    }

    // ----- Scheduling -----

    /// Picks the next item to run, jumping the clock to the next timer if nothing is ready.
    pub fn next_item(&mut self) -> Option<Item> {
        self.release_due_timers();
        if self.ready.is_empty() {
            let &(time_ms, _, _) = self.timers.first()?;
            self.now_ms = self.now_ms.max(time_ms);
            self.release_due_timers();
        }
        let index = if self.decider.is_scheduled() {
            let labels = self.ready_labels();
            self.decider.pick_scheduled(&labels, self.step + 1).unwrap_or(0)
        } else {
            self.scheduler_rng.below(self.ready.len() as u64) as usize
        };
        if self.decider.records() {
            let label = self.ready_labels().swap_remove(index);
            self.decider.begin_step(label);
        }
        let item = self.ready.remove(index);
        self.ready_label_cache.remove(&item);
        Some(item)
    }

    /// The labels of the ready items, in ready order. Items that would share a label (two
    /// handlers of one receiver, the answers of a delivery and its copies) are told apart by
    /// their position among their namesakes: `receiver-1#1 sql`, `receiver-1#1 sql (2)`.
    fn ready_labels(&mut self) -> Vec<String> {
        // Each ready item's label is worked out once while it waits (a step with hundreds of
        // ready items would otherwise write every label again on every step). An answer's
        // label names its process's current incarnation, which a restart can change meanwhile,
        // so it is written afresh each time.
        for index in 0..self.ready.len() {
            let item = self.ready[index];
            let fresh = matches!(item, Item::Event(event) if matches!(self.events.get(&event), Some(WorldEvent::SendAnswer { .. })));
            if fresh || !self.ready_label_cache.contains_key(&item) {
                let label = self.item_label(item);
                self.ready_label_cache.insert(item, label);
            }
        }
        let mut labels: Vec<String> = Vec::with_capacity(self.ready.len());
        // How many earlier labels each text starts: a label's part before ` (` is what a later
        // namesake is compared with.
        let mut earlier: BTreeMap<&str, usize> = BTreeMap::new();
        for item in &self.ready {
            let base = self.ready_label_cache[item].as_str();
            let namesakes = earlier.get(base).copied().unwrap_or(0);
            *earlier
                .entry(base.split(" (").next().unwrap_or_default())
                .or_insert(0) += 1;
            labels.push(if namesakes == 0 {
                base.to_owned()
            } else {
                format!("{base} ({})", namesakes + 1)
            });
        }
        labels
    }

    /// Names a ready item for schedules: its actor and what it is about to do (`relay-1#1 sql
    /// UPDATE outbox`, `relay-1#1 call tenant-a/order-1/fulfill/v1`), stable across runs of the
    /// same schedule. Specific enough that a fault stays on the statement or call it was written
    /// for when an edit moves everything around it; general enough that a changed column list
    /// or parameter does not orphan it.
    pub fn item_label(&self, item: Item) -> String {
        match item {
            Item::Task(task) => {
                let state = &self.tasks[&task];
                let op = match state.pending {
                    PendingOp::Sql(_) => "sql",
                    PendingOp::ProviderCall => "call",
                    PendingOp::ProviderReply => "reply",
                    PendingOp::Wake => "wake",
                    PendingOp::Answer => "answer",
                };
                let mut label = format!("{} {op}", state.process_id);
                if !state.pending_detail.is_empty() {
                    label.push(' ');
                    label.push_str(&state.pending_detail);
                }
                // A handler's steps name the event it handles, so that removing an event from a
                // schedule can take the handler's lines with it.
                if let TaskKind::Handler {
                    account, event_id, ..
                } = &state.kind
                {
                    label.push_str(&format!(" @{account}/{event_id}"));
                }
                label
            }
            Item::Event(event) => match &self.events[&event] {
                WorldEvent::Emit { event } => format!("sender emit {}", self.event_name(*event)),
                WorldEvent::Attempt { stream } => format!("sender attempt {}", self.stream_name(*stream)),
                WorldEvent::AttemptTimeout { stream, attempt } => {
                    format!("sender timeout {} #{attempt}", self.stream_name(*stream))
                }
                WorldEvent::Extra { stream, .. } => format!("sender extra {}", self.stream_name(*stream)),
                WorldEvent::SendAnswer {
                    process, delivery, ..
                } => match delivery {
                    Some(delivery) => {
                        format!(
                            "{} answer @{}",
                            self.processes[*process].id,
                            self.stream_name(delivery.stream)
                        )
                    }
                    None => format!("{} answer", self.processes[*process].id),
                },
                WorldEvent::AnswerArrives { delivery, .. } => {
                    format!("sender answer {}", self.stream_name(delivery.stream))
                }
                WorldEvent::Restart { process } => format!("{} restart", self.processes[*process].name),
                WorldEvent::FaultTimer { fault } | WorldEvent::FaultActs { fault, .. } => {
                    format!("fault:{}", self.faults[*fault].name())
                }
                WorldEvent::ProviderActs { request } => {
                    format!("provider acts {}", request.idempotency_key())
                }
                WorldEvent::OperatorRequeue => "operator requeue".to_owned(),
                WorldEvent::OperatorRedeliver { round } => format!("operator redeliver #{round}"),
            },
        }
    }

    /// Who acts when `item` runs: a task's process, or the actor of a world event.
    pub fn actor_of(&self, item: Item) -> Actor {
        match item {
            Item::Task(task) => Actor::Process(self.tasks[&task].process_id.clone()),
            Item::Event(event) => match &self.events[&event] {
                WorldEvent::SendAnswer { process, .. } | WorldEvent::Restart { process } => {
                    Actor::Process(self.processes[*process].id.clone())
                }
                WorldEvent::FaultTimer { fault } | WorldEvent::FaultActs { fault, .. } => {
                    Actor::Fault(self.faults[*fault].name().to_owned())
                }
                WorldEvent::ProviderActs { .. } => Actor::Provider,
                WorldEvent::OperatorRequeue | WorldEvent::OperatorRedeliver { .. } => Actor::Operator,
                WorldEvent::Emit { .. }
                | WorldEvent::Attempt { .. }
                | WorldEvent::AttemptTimeout { .. }
                | WorldEvent::Extra { .. }
                | WorldEvent::AnswerArrives { .. } => Actor::Sender,
            },
        }
    }

    /// `account/event_id` of workload event `event`.
    fn event_name(&self, event: usize) -> String {
        let spec = &self.workload.events[event];
        format!("{}/{}", spec.account, spec.event_id)
    }

    /// The sender stream whose [`World::stream_name`] is `name`, found without writing every
    /// stream's name (an attacker looks one up on every hostile request).
    pub fn stream_named(&self, name: &str) -> Option<usize> {
        (0..self.sender.streams().len()).find(|&stream| {
            let record = self.sender.stream(stream);
            let spec = &self.workload.events[record.event];
            let subscription = name
                .strip_prefix(spec.account.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                .and_then(|rest| rest.strip_prefix(spec.event_id.as_str()))
                .and_then(|rest| rest.strip_prefix('~'));
            // As a number is written: digits only, no leading zero.
            subscription.is_some_and(|digits| {
                digits.bytes().all(|byte| byte.is_ascii_digit())
                    && (digits.len() == 1 || !digits.starts_with('0'))
                    && digits.parse::<u64>().ok() == Some(u64::from(record.subscription))
            })
        })
    }

    /// `account/event_id~subscription` of sender stream `stream`.
    pub fn stream_name(&self, stream: usize) -> String {
        let record = self.sender.stream(stream);
        format!("{}~{}", self.event_name(record.event), record.subscription)
    }

    /// Makes one decision of `kind`: from the current step's schedule line in a scheduled run,
    /// otherwise with `draw`. `None` is the default (no fault, the first receiver, the shortest
    /// latency), which is not written down.
    pub fn choose(
        &mut self,
        kind: DecisionKind,
        draw: impl FnOnce(&mut World) -> Option<Decision>,
    ) -> Option<Decision> {
        let decision = if self.decider.is_scheduled() {
            self.decider.take_scheduled(kind)
        } else {
            draw(self)
        };
        debug_assert!(decision.as_ref().is_none_or(|decision| decision.kind() == kind));
        if let Some(decision) = &decision {
            self.decider.note(decision);
        }
        decision
    }

    fn release_due_timers(&mut self) {
        while let Some(&(time_ms, _, item)) = self.timers.first() {
            if time_ms > self.now_ms {
                break;
            }
            self.timers.pop_first();
            if let Item::Task(task) = item
                && let Some(state) = self.tasks.get_mut(&task)
            {
                state.timer = None;
            }
            self.ready.push(item);
        }
    }

    fn schedule(&mut self, item: Item, at_ms: i64) -> Option<(i64, u64)> {
        if at_ms <= self.now_ms {
            self.ready.push(item);
            return None;
        }
        let key = (at_ms, self.next_timer);
        self.next_timer += 1;
        self.timers.insert((key.0, key.1, item));
        Some(key)
    }

    /// Whether an event keeps the world from being quiet while it is pending.
    fn is_work(event: &WorldEvent) -> bool {
        matches!(
            event,
            WorldEvent::SendAnswer { .. }
                | WorldEvent::AnswerArrives { .. }
                | WorldEvent::Extra { .. }
                | WorldEvent::ProviderActs { .. }
                | WorldEvent::OperatorRequeue
                | WorldEvent::OperatorRedeliver { .. }
        )
    }

    /// Schedules a world event at `at_ms` (now or later).
    pub fn schedule_event(&mut self, at_ms: i64, event: WorldEvent) {
        let id = self.next_event;
        self.next_event += 1;
        if World::is_work(&event) {
            self.work_in_flight += 1;
        }
        self.events.insert(id, event);
        self.schedule(Item::Event(id), at_ms);
    }

    /// Carries out an action a fault model asked for outside a timer it set: a wake-up is a
    /// timer, anything else happens as a step of its own, now.
    pub fn schedule_fault_action(&mut self, fault: usize, action: crate::faults::TimerAction) {
        match action {
            crate::faults::TimerAction::WakeAt { at_ms } => {
                self.schedule_event(at_ms, WorldEvent::FaultTimer { fault });
            }
            crate::faults::TimerAction::PurgeReceipts { .. }
            | crate::faults::TimerAction::Attack { .. }
            | crate::faults::TimerAction::SenderClock { .. } => {
                let now_ms = self.now_ms;
                self.schedule_event(now_ms, WorldEvent::FaultActs { fault, action });
            }
        }
    }

    /// Takes `item` off the ready queue, if it is there (scenarios pick items themselves).
    pub fn take_ready(&mut self, item: Item) -> bool {
        self.release_due_timers();
        match self.ready.iter().position(|candidate| *candidate == item) {
            Some(index) => {
                self.ready.remove(index);
                self.ready_label_cache.remove(&item);
                true
            }
            None => false,
        }
    }

    /// Takes a due event out of the world.
    pub fn take_event(&mut self, id: EventId) -> WorldEvent {
        let event = self
            .events
            .remove(&id)
            .expect("a scheduled event exists until handled");
        if World::is_work(&event) {
            self.work_in_flight -= 1;
        }
        event
    }

    /// Registers a new task of `process`; it runs once the executor polls it.
    pub fn add_task(&mut self, process: usize, kind: TaskKind) -> (TaskId, String) {
        let id = self.next_task;
        self.next_task += 1;
        if matches!(kind, TaskKind::Handler { .. } | TaskKind::Operator) {
            self.work_in_flight += 1;
        }
        let process_id = self.processes[process].id.clone();
        self.tasks.insert(
            id,
            TaskState {
                process,
                process_id: process_id.clone(),
                kind,
                connection: None,
                park: None,
                // Replaced before anything reads it: a new task runs to its first scheduling point
                // at once, within the step that spawned it.
                pending: PendingOp::Wake,
                pending_detail: String::new(),
                reply: None,
                inject_failure: None,
                disturbed: false,
                stalled_ms: 0,
                call: None,
                timer: None,
            },
        );
        (id, process_id.to_string())
    }

    /// Parks `task` until the scheduler picks it at or after `park`, about to do `op`. The
    /// detail (the statement's label, the key) is made only when decisions are written down.
    pub fn park_task(&mut self, task: TaskId, park: Park, op: PendingOp, detail: impl FnOnce() -> String) {
        let labelled = self.decider.records();
        let state = self.tasks.get_mut(&task).expect("a running task is registered");
        state.park = Some(park);
        state.pending = op;
        if labelled {
            state.pending_detail = detail();
        }
    }

    /// The time the clock of `task`'s process reads now.
    pub fn task_now_ms(&self, task: TaskId) -> i64 {
        self.process_now_ms(self.tasks[&task].process)
    }

    /// In a scripted run, remembers the statement `task` will run next (or, with `None`, that
    /// it is about to run it).
    pub fn announce(&mut self, task: TaskId, sql: Option<&str>) {
        if let Some(scripted) = &mut self.scripted {
            match sql {
                Some(sql) => scripted.pending_sql.insert(task, sql.to_owned()),
                None => scripted.pending_sql.remove(&task),
            };
        }
    }

    /// Queues a task that just returned `Pending` according to how it parked itself.
    pub fn schedule_parked(&mut self, task: TaskId) -> Result<(), String> {
        let state = self.tasks.get_mut(&task).expect("a pending task is registered");
        // The task ran, so whatever stalled it before is over (see `stall_room_ms`).
        state.stalled_ms = 0;
        let Some(park) = state.park.take() else {
            return Err(format!(
                "a task of {} suspended without an Env call; only Env calls may suspend simulated code",
                state.process_id
            ));
        };
        let at_ms = match park {
            Park::Now => self.now_ms,
            Park::Until(at_ms) => at_ms,
        };
        let key = self.schedule(Item::Task(task), at_ms);
        self.tasks.get_mut(&task).expect("still registered").timer = key;
        Ok(())
    }

    /// Holds a task that was about to run for `duration_ms` (a pause fault); it will run the same
    /// operation when it wakes.
    pub fn pause_task(&mut self, task: TaskId, duration_ms: i64) {
        let until_ms = self.now_ms + duration_ms;
        let key = self.schedule(Item::Task(task), until_ms);
        let state = self.tasks.get_mut(&task).expect("a paused task is registered");
        state.timer = key;
        state.disturbed = true;
        state.stalled_ms += duration_ms;
    }

    /// How much longer faults may pause `task` before it runs again, or `None` for no limit.
    ///
    /// A relay worker is promised that no stall between two of its steps lasts longer than
    /// `stall_ms_max` (the relay widens its reconciliation margin by exactly that, and a
    /// deployment must keep real stalls below it). Two fault models may pause it at the same
    /// point, and each may pause it again when it wakes, so their pauses are one stall and
    /// together stay within the promise; a stall the system was told cannot happen would only
    /// find a "bug" in a contract the system never made. Other processes make no such promise.
    pub fn stall_room_ms(&self, task: TaskId) -> Option<i64> {
        let state = &self.tasks[&task];
        (self.processes[state.process].role == ProcessRole::RelayWorker)
            .then(|| (self.config.relay.stall_ms_max - state.stalled_ms).max(0))
    }

    /// Notes the invariants not checked against the system, with why, for the run's outcome.
    pub fn note_invariants_left_out(&mut self, left_out: Vec<(String, String)>) {
        self.invariants_left_out = left_out;
    }

    /// The invariants not checked against the system, with why.
    pub fn invariants_left_out(&self) -> &[(String, String)] {
        &self.invariants_left_out
    }

    /// Tells the world that the system's web framework commits whatever a handler left open.
    pub fn set_framework_commits_handlers(&mut self, commits: bool) {
        self.framework_commits_handlers = commits;
    }

    /// Forgets a finished task and returns its connection to the process's pool.
    pub fn finish_task(&mut self, task: TaskId) {
        let state = self.tasks.remove(&task).expect("a finished task is registered");
        if matches!(state.kind, TaskKind::Handler { .. } | TaskKind::Operator) {
            self.work_in_flight -= 1;
        }
        if let Some(connection) = state.connection {
            if self.db.in_transaction(connection) {
                // The pool rolls the transaction back so the run goes on, but a connection that
                // is not reset (one connection per process, as `RealEnv` has) would hand it to
                // the process's next task: `task-closes-its-transaction` judges it.
                self.db.roll_back(connection);
                self.record(Happening::TaskEndedInTransaction);
                let framework_commits =
                    self.framework_commits_handlers && matches!(state.kind, TaskKind::Handler { .. });
                if !framework_commits {
                    self.step_record
                        .transactions_left_open
                        .push(state.process_id.to_string());
                }
            }
            self.processes[state.process].idle_connections.push(connection);
        }
    }

    /// The process and pending operation a fault at this item would hit, if the item belongs to
    /// a process.
    pub fn target_of(&self, item: Item) -> Option<(usize, PendingOp)> {
        match item {
            Item::Task(task) => self
                .tasks
                .get(&task)
                .map(|state| (state.process, state.pending.clone())),
            Item::Event(event) => match self.events.get(&event) {
                Some(WorldEvent::SendAnswer { process, .. }) => Some((*process, PendingOp::Answer)),
                _ => None,
            },
        }
    }

    /// Removes every task of `process` (the executor drops their futures) and closes its
    /// connections. Returns the removed tasks and how many open transactions rolled back.
    pub fn crash_process(&mut self, process: usize) -> (Vec<TaskId>, usize) {
        let tasks: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, state)| state.process == process)
            .map(|(&id, _)| id)
            .collect();
        let mut open_transactions = 0;
        for task in &tasks {
            let state = self.tasks.remove(task).expect("listed above");
            if matches!(state.kind, TaskKind::Handler { .. } | TaskKind::Operator) {
                self.work_in_flight -= 1;
            }
            if let Some(key) = state.timer {
                self.timers.remove(&(key.0, key.1, Item::Task(*task)));
            }
            self.ready.retain(|item| *item != Item::Task(*task));
            self.ready_label_cache.remove(&Item::Task(*task));
            if let Some(connection) = state.connection
                && self.db.close(connection)
            {
                open_transactions += 1;
            }
        }
        let idle = std::mem::take(&mut self.processes[process].idle_connections);
        for connection in idle {
            self.db.close(connection);
        }
        self.processes[process].up = false;
        (tasks, open_transactions)
    }

    /// Brings a crashed process back with a new identity and a correct clock.
    pub fn restart_process(&mut self, process: usize) {
        let state = &mut self.processes[process];
        state.incarnation += 1;
        state.up = true;
        state.clock_offset_ms = 0;
        state.id = format!("{}#{}", state.name, state.incarnation).into();
    }

    /// The time as `process` reads it.
    pub fn process_now_ms(&self, process: usize) -> i64 {
        self.now_ms + self.processes[process].clock_offset_ms
    }

    // ----- Operations of the simulated Env -----

    /// Runs one SQL statement for `task`.
    pub fn statement(
        &mut self,
        task: TaskId,
        sql: &str,
        params: &[Value],
        wants_rows: bool,
    ) -> Result<StatementOutput, DbError> {
        let connection = self.task_connection(task)?;
        let state = self.tasks.get_mut(&task).expect("a running task is registered");
        if let Some((failure, rolled_back)) = state.inject_failure.take() {
            // Not running the statement at all is what a failure before SQLite touched the file
            // looks like: the transaction stays open, as SQLite leaves it for SQLITE_BUSY and may
            // for a full disk or an I/O error; when SQLite rolls it back instead, it goes.
            if rolled_back && self.db.in_transaction(connection) {
                self.db.roll_back(connection);
            }
            let result = Err(failure.error());
            let statement = crate::sql::Statement::remembered(sql);
            self.trace
                .record_sql(&statement.text, params, &result, statement.changes_rows(), true);
            self.observe_statement(task, sql, params, &result);
            return result;
        }
        let (result, committed) = self.db.run(connection, sql, params, wants_rows);
        let statement = crate::sql::Statement::remembered(sql);
        self.trace
            .record_sql(&statement.text, params, &result, statement.changes_rows(), false);
        self.observe_statement(task, sql, params, &result);
        if let Ok(StatementOutput::Rows(rows)) = &result
            && rows.len() > 1
            && !statement.orders_rows
        {
            // Without ORDER BY the row order is whatever the query plan gives, which a SQLite
            // upgrade or a new index can change, and with it every decision taken from the rows.
            self.determinism_hazard.get_or_insert_with(|| {
                format!("a query returned {} rows without ORDER BY: {sql}", rows.len())
            });
        }
        if !committed.is_empty() {
            let state = &self.tasks[&task];
            let hostile = match &state.kind {
                TaskKind::Handler {
                    origin: Origin::Hostile { attack },
                    ..
                } => Some(attack.clone()),
                _ => None,
            };
            let process_id = state.process_id.clone();
            self.step_commits.push(StepCommit {
                process_id: process_id.to_string(),
                hostile,
                changes: committed,
            });
        }
        result
    }

    /// Counts the situations a statement's result shows: a BEGIN refused as busy, and a
    /// lease-guarded update that a stale token made change nothing. Only the rare results are
    /// looked at further, so the common statement costs one match.
    fn observe_statement(
        &mut self,
        task: TaskId,
        sql: &str,
        params: &[Value],
        result: &Result<StatementOutput, DbError>,
    ) {
        match result {
            Err(DbError::Busy) if crate::sql::Statement::remembered(sql).verb == crate::sql::Verb::Begin => {
                self.probes.reach(Situation::BusyOnBegin);
            }
            Ok(StatementOutput::Changed(0)) => {
                let process_id = &self.tasks[&task].process_id;
                self.probes.changed_nothing(process_id, sql, params, &self.view);
            }
            Ok(StatementOutput::Rows(rows)) if rows.is_empty() => {
                let process_id = &self.tasks[&task].process_id;
                self.probes.changed_nothing(process_id, sql, params, &self.view);
            }
            _ => {}
        }
    }

    fn task_connection(&mut self, task: TaskId) -> Result<ConnectionId, DbError> {
        let state = self.tasks.get_mut(&task).expect("a running task is registered");
        if let Some(connection) = state.connection {
            return Ok(connection);
        }
        let connection = match self.processes[state.process].idle_connections.pop() {
            Some(connection) => connection,
            None => self.db.open()?,
        };
        self.tasks.get_mut(&task).expect("registered").connection = Some(connection);
        Ok(connection)
    }

    /// Delivers `call` to the provider; returns when the reply (or the caller's timeout) reaches
    /// the task. The provider acts now, later (when slow), or not at all (when failing or busy).
    pub fn send_provider_call(&mut self, task: TaskId, call: &ProviderCall) -> i64 {
        let now_ms = self.now_ms;
        let key = self.note_provider_call(task, call);
        let request = call.request.clone();
        let provider_faults = match self.choose(DecisionKind::Provider, |world| {
            let drawn = faults::provider_faults(&mut world.faults, now_ms, &request);
            (drawn != faults::ProviderFaults::default()).then_some(Decision::Provider(drawn))
        }) {
            Some(Decision::Provider(faults)) => faults,
            _ => faults::ProviderFaults::default(),
        };
        if let Some(reply_at_ms) = self.scripted_rejection(task, call, &key) {
            return reply_at_ms;
        }
        let send = matches!(&call.request, ProviderRequest::Send { .. });
        let (mut reply_at_ms, mut reply, outcome) = self.provider_reply(call, &key, provider_faults);
        let reply_lost = self.provider_reply_lost(now_ms) && reply.is_ok();
        if reply_lost {
            self.record_fault("lost-ack", &format_args!("provider reply for key {key} lost"));
            reply = Err(CallError::Timeout);
            reply_at_ms = now_ms + call.timeout_ms;
        }
        self.record(Happening::Call {
            send,
            key,
            outcome,
            reply_lost,
        });
        self.tasks
            .get_mut(&task)
            .expect("a calling task is registered")
            .reply = Some(reply);
        reply_at_ms
    }

    /// Records the request for the invariants and marks the task as waiting on it; returns the
    /// request's idempotency key.
    fn note_provider_call(&mut self, task: TaskId, call: &ProviderCall) -> String {
        let key = call.request.idempotency_key().to_owned();
        let (process_id, connection) = {
            let state = &self.tasks[&task];
            (state.process_id.clone(), state.connection)
        };
        let in_transaction = connection.is_some_and(|connection| self.db.in_transaction(connection));
        let payload = match &call.request {
            ProviderRequest::Send { payload, .. } => Some(payload.clone()),
            ProviderRequest::Lookup { .. } => None,
        };
        let operation = payload
            .as_deref()
            .and_then(|payload| self.provider.reader.operation_of(payload).ok());
        self.step_record.requests.push(RequestRecord {
            process_id: process_id.to_string(),
            key: key.clone(),
            payload,
            in_transaction,
        });
        let state = self.tasks.get_mut(&task).expect("a calling task is registered");
        state.call = Some(CallInFlight {
            key: key.clone(),
            operation,
        });
        key
    }

    /// In a scripted run, the provider rejects as many sends as the script asks for, at once;
    /// returns when the rejection reaches the task.
    fn scripted_rejection(&mut self, task: TaskId, call: &ProviderCall, key: &str) -> Option<i64> {
        let scripted = self.scripted.as_mut()?;
        if scripted.provider_sends_to_reject == 0 || !matches!(call.request, ProviderRequest::Send { .. }) {
            return None;
        }
        scripted.provider_sends_to_reject -= 1;
        self.provider.note_refused(&call.request);
        let reason = "account suspended".to_owned();
        let reply = Ok(ProviderReply::Rejected { status: 400, reason });
        self.record(Happening::Call {
            send: true,
            key: key.to_owned(),
            outcome: CallOutcome::Replied(reply.clone().map_err(|error: CallError| call_error_text(&error))),
            reply_lost: false,
        });
        self.tasks
            .get_mut(&task)
            .expect("a calling task is registered")
            .reply = Some(reply);
        Some(self.now_ms + 1)
    }

    /// What the provider does with the call and when its reply (or the caller's timeout) reaches
    /// the caller: it acts now, or, when slow past the caller's timeout, later.
    fn provider_reply(
        &mut self,
        call: &ProviderCall,
        key: &str,
        provider_faults: faults::ProviderFaults,
    ) -> (i64, Result<ProviderReply, CallError>, CallOutcome) {
        let now_ms = self.now_ms;
        match provider_faults.act_after_ms {
            // The provider works on it past the caller's timeout and acts afterwards; a shorter
            // delay is ordinary latency and takes the ordinary path.
            Some(act_after_ms) if act_after_ms >= call.timeout_ms && !self.provider.is_busy(key, now_ms) => {
                self.provider.begin_processing(key);
                self.schedule_event(
                    now_ms + act_after_ms,
                    WorldEvent::ProviderActs {
                        request: call.request.clone(),
                    },
                );
                self.record_fault(
                    "provider-slow",
                    &format_args!(
                        "provider will act on key {key} in {}",
                        format_duration_ms(act_after_ms)
                    ),
                );
                let outcome = CallOutcome::Busy { for_ms: act_after_ms };
                (now_ms + call.timeout_ms, Err(CallError::Timeout), outcome)
            }
            _ => {
                let handled = self.provider_handle(&call.request, now_ms, provider_faults.conditions);
                let outcome = CallOutcome::Replied(handled.clone().map_err(|error| call_error_text(&error)));
                let latency_ms = match self.choose(DecisionKind::ProviderLatency, |world| {
                    let ms = world
                        .provider_rng
                        .between(1, world.config.provider_latency_ms_max);
                    Some(Decision::ProviderLatency { ms })
                }) {
                    Some(Decision::ProviderLatency { ms }) => ms,
                    _ => 1,
                };
                if latency_ms > call.timeout_ms {
                    (now_ms + call.timeout_ms, Err(CallError::Timeout), outcome)
                } else {
                    (now_ms + latency_ms, handled, outcome)
                }
            }
        }
    }

    /// Whether the provider's reply is lost on its way back (a fault model's choice, or the
    /// script's).
    fn provider_reply_lost(&mut self, now_ms: i64) -> bool {
        let mut lost = self
            .choose(DecisionKind::LoseReply, |world| {
                let mut lost = false;
                for fault in world.faults.iter_mut() {
                    lost |= fault.drops_provider_reply(now_ms);
                }
                lost.then_some(Decision::LoseReply)
            })
            .is_some();
        if let Some(scripted) = &mut self.scripted
            && scripted.provider_replies_to_drop > 0
        {
            scripted.provider_replies_to_drop -= 1;
            lost = true;
        }
        lost
    }

    /// Runs one request through the provider model now, recording effects and expiries.
    fn provider_handle(
        &mut self,
        request: &ProviderRequest,
        now_ms: i64,
        conditions: crate::provider::Conditions,
    ) -> Result<ProviderReply, CallError> {
        // The provider decides when it will forget a key only when it stores one; the choice
        // is made (and written down) in this step either way.
        let key_lifetime_ms = self.config.relay.key_lifetime_ms;
        let mut forget_at_ms = None;
        if matches!(request, ProviderRequest::Send { .. })
            && !self.provider.remembers(request.idempotency_key(), now_ms)
        {
            forget_at_ms = match self.choose(DecisionKind::Forget, |world| {
                let mut forget_at = None;
                for fault in world.faults.iter_mut() {
                    forget_at = forget_at.or(fault.key_forget_at(now_ms, key_lifetime_ms));
                }
                forget_at.map(|at_ms| Decision::Forget { at_ms })
            }) {
                Some(Decision::Forget { at_ms }) => Some(at_ms),
                _ => None,
            }
            // The provider keeps a key for at least its documented lifetime; an edited
            // schedule cannot make it break that promise.
            .map(|at_ms| at_ms.max(now_ms.saturating_add(key_lifetime_ms)));
        }
        let handled = self.provider.handle(request, now_ms, conditions, || forget_at_ms);
        let key = request.idempotency_key();
        if let (Some(at_ms), ProviderRequest::Send { payload, .. }) = (forget_at_ms, request)
            && self.provider.forgets_at_ms(key) == Some(at_ms)
        {
            // Keys are stored once per lifetime, so parsing the payload here is rare.
            let operation = self.provider.reader.operation_of(payload).unwrap_or_default();
            self.probes.key_stored(at_ms, key, operation);
        }
        self.provider_handled(key, conditions.fail_before_acting, handled)
    }

    /// Writes down what the provider did with one request under `key`: the fault that decided
    /// it, if one did, and the effect it performed, if any.
    fn provider_handled(
        &mut self,
        key: &str,
        failed_before_acting: bool,
        handled: crate::provider::Handled,
    ) -> Result<ProviderReply, CallError> {
        if handled.key_was_forgotten {
            // The key-expiry fault fired when the key was forgotten (see `record_forgotten_keys`);
            // this is its consequence, kept for the seed file.
            self.log_fault(&format_args!("provider had forgotten key {key}"));
        }
        if let Some(quirk) = handled.quirk {
            let (fault, what) = match quirk {
                Quirk::CachedError => (
                    "sticky-error",
                    format!("provider replayed the 5xx cached under key {key}"),
                ),
                Quirk::Locked => (
                    "provider-conflict",
                    format!("provider answered 409: key {key} is locked after acting"),
                ),
                Quirk::LenientReplay => (
                    "payload-mismatch",
                    format!("provider replayed key {key} for a different payload"),
                ),
                Quirk::Overtook => (
                    "provider-double-execute",
                    format!("provider executed key {key} while a request with it was in progress"),
                ),
                Quirk::ActedAgain => (
                    "provider-double-execute",
                    format!("provider finished an overtaken request for key {key} and acted again"),
                ),
                Quirk::Refused => (
                    "provider-refusal",
                    format!("provider declined the operation of key {key} for good"),
                ),
            };
            self.record_fault(fault, &what);
        }
        if failed_before_acting && handled.result.is_err() {
            self.record_fault(
                "provider-failure",
                &format_args!("provider failed before acting on key {key}"),
            );
        }
        if let Some(index) = handled.new_effect {
            self.step_record.new_effects.push(index);
        }
        handled.result
    }

    /// A slow provider request finishes: the provider acts now (nobody waits for the reply).
    pub fn provider_acts(&mut self, request: &ProviderRequest) {
        let key = request.idempotency_key().to_owned();
        let overtaken = self.provider.end_processing(&key);
        let outcome = if overtaken {
            let handled = self.provider.act_again(request, self.now_ms);
            self.provider_handled(&key, false, handled)
        } else {
            let conditions = crate::provider::Conditions::default();
            self.provider_handle(request, self.now_ms, conditions)
        }
        .map_err(|error| call_error_text(&error));
        self.record(Happening::ProviderFinishes { key, outcome });
    }

    /// The reply a task's provider call got.
    pub fn take_reply(&mut self, task: TaskId) -> Result<ProviderReply, CallError> {
        let state = self
            .tasks
            .get_mut(&task)
            .expect("a task waiting for a reply is registered");
        let reply = state
            .reply
            .take()
            .expect("a reply is stored before the caller wakes");
        if let Some(call) = state.call.take() {
            // The window a disturbance counts in runs from the previous reply to this one, which
            // covers the claim that took the lease this call runs under.
            let record = ReplyRecord {
                process_id: state.process_id.to_string(),
                key: call.key,
                operation: call.operation,
                process_now_ms: self.now_ms + self.processes[state.process].clock_offset_ms,
                disturbed: std::mem::take(&mut state.disturbed),
            };
            self.step_record.replies.push(record);
        }
        match &reply {
            Ok(ProviderReply::Conflict) => self.probes.reach(Situation::ProviderConflict409),
            Ok(ProviderReply::Found { .. }) => self.probes.reach(Situation::ReconciledByLookup),
            _ => {}
        }
        self.record(Happening::Reply(
            reply.clone().map_err(|error| call_error_text(&error)),
        ));
        reply
    }

    /// A 2xx answer to `delivery` will never settle its stream: it was lost, never written, or
    /// reached the sender after the attempt had timed out. If the sender was waiting for it and
    /// the event's receipt had committed, the stream's next delivery is a retry of committed
    /// work, which the probes count when it starts.
    pub fn success_not_settled(&mut self, delivery: DeliveryRef) {
        let stream = self.sender.stream(delivery.stream);
        let awaited = match delivery.kind {
            DeliveryKind::Scheduled => true,
            // Outside the schedule, only a manual redelivery of a stream that gave up is awaited.
            DeliveryKind::Extra => stream.state == EventState::GaveUp,
            DeliveryKind::Copy => false,
        };
        if !awaited || stream.state == EventState::Acknowledged {
            return;
        }
        let event = &self.workload.events[stream.event];
        let committed = self
            .history
            .ever_received
            .contains(&(event.account.clone(), event.event_id.clone()));
        if committed {
            self.probes.success_not_settled(delivery.stream);
        }
    }

    /// A handler is about to start for `(account, event_id)`: counts a duplicate that overlaps
    /// a handler still running for the same event, and the retries and redeliveries it
    /// completes. The scan covers the live tasks, a few dozen at most, once per delivery.
    pub fn handler_starting(&mut self, delivery: Option<DeliveryRef>, account: &str, event_id: &str) {
        let overlapping = self.tasks.values().any(|state| {
            matches!(&state.kind, TaskKind::Handler { account: other_account, event_id: other_event, .. }
                if other_account == account && other_event == event_id)
        });
        if overlapping {
            self.probes.reach(Situation::ConcurrentDuplicateDelivery);
        }
        self.probes
            .delivery_started(delivery.map(|delivery| delivery.stream), account, event_id);
    }

    /// A handler finished: record its answer and put it on the wire.
    pub fn handler_finished(&mut self, task: TaskId, answer: Answer) {
        let state = &self.tasks[&task];
        let TaskKind::Handler {
            delivery,
            account,
            event_id,
            origin,
        } = &state.kind
        else {
            unreachable!("only handler tasks answer deliveries");
        };
        let (delivery, process) = (*delivery, state.process);
        // Verification runs before the handler's first awaited call, so a delivery refused at the
        // door is answered in the very step that read this clock.
        let receiver_now_s = self.process_now_ms(process).div_euclid(1_000);
        self.step_record.answers.push(AnswerRecord {
            process_id: state.process_id.to_string(),
            account: account.clone(),
            event_id: event_id.clone(),
            answer: answer.clone(),
            origin: origin.clone(),
            receiver_now_s,
        });
        self.record(Happening::Answer(answer.clone()));
        if let Some(scripted) = &mut self.scripted {
            scripted.answers.insert(task, answer.clone());
        }
        let incarnation = self.processes[process].incarnation;
        self.schedule_event(
            self.now_ms,
            WorldEvent::SendAnswer {
                process,
                incarnation,
                delivery,
                answer,
            },
        );
    }

    /// Records what happened in the current step.
    /// Notes which obligations are dead as the operator sets out to requeue them.
    pub fn note_dead_at_requeue(&mut self) {
        self.history.dead_at_requeue = self
            .view
            .obligations()
            .filter(|obligation| obligation.status == crate::system::ObligationStatus::Dead)
            .map(|obligation| obligation.operation_key.clone())
            .collect();
    }

    pub fn record(&mut self, happening: Happening) {
        self.trace.record(happening);
    }

    /// Counts a fault firing and keeps it for the seed file.
    pub fn record_fault(&mut self, fault: &str, what: &dyn std::fmt::Display) {
        self.count_fault(fault, 1);
        self.log_fault(what);
    }

    /// Whether a line written now would be kept: the log is on and not full.
    fn keeps_fault_log(&self) -> bool {
        self.fault_log
            .as_ref()
            .is_some_and(|log| log.len() < FAULT_LOG_MAX)
    }

    /// Counts without allocating once a model has fired before, which is nearly every time.
    fn count_fault(&mut self, fault: &str, times: u64) {
        match self.fault_counts.get_mut(fault) {
            Some(count) => *count += times,
            None => {
                self.fault_counts.insert(fault.to_owned(), times);
            }
        }
    }

    /// Counts the keys the provider has forgotten since the previous step: each is the
    /// key-expiry fault firing, at the time it set when the key was stored. The provider's store
    /// forgets lazily, when the key is next sent; this only records the moment, before every
    /// step, whether or not anyone sends the key again, and leaves the store untouched.
    pub fn record_forgotten_keys(&mut self) {
        for key in self.probes.keys_forgotten_by(self.now_ms, &self.view) {
            self.record_fault("key-expiry", &format_args!("provider forgot key {key}"));
            self.record(Happening::KeyForgotten { key });
        }
    }

    /// Keeps a fault decision, or its consequence, for the seed file.
    pub fn log_fault(&mut self, what: &dyn std::fmt::Display) {
        if self.keeps_fault_log() {
            let line = format!("step {} {}: {what}", self.step, format_time_ms(self.now_ms));
            self.fault_log.get_or_insert_default().push(line);
        }
    }

    /// Counts `events` events that fault model `fault` reshaped before the run (delayed, fanned out
    /// or added): such a model acts only then, so this is when it fires.
    pub fn record_reshaping(&mut self, fault: &str, events: u64) {
        self.count_fault(fault, events);
        self.log_fault(&format_args!("{fault} reshaped {events} events before the run"));
    }

    /// Where one delivery goes: lost on the way, refused (no receiver up), or to a receiver
    /// among those up (the first one up by default). One choice per delivery, always written
    /// down, so that a step sending a delivery and its copies keeps each one's fate apart.
    pub fn route_delivery(&mut self) -> Route {
        let up: Vec<usize> = (0..self.processes.len())
            .filter(|&index| self.processes[index].role == ProcessRole::Receiver && self.processes[index].up)
            .collect();
        if up.is_empty() {
            return Route::Refused;
        }
        let now_ms = self.now_ms;
        let decision = self.choose(DecisionKind::Deliver, |world| {
            let mut lost = false;
            for fault in world.faults.iter_mut() {
                lost |= fault.drops_request(now_ms);
            }
            let receiver = world.processes[*world.network_rng.pick(&up)].name.clone();
            Some(Decision::Deliver(if lost {
                Destination::Lost
            } else {
                Destination::Receiver(receiver)
            }))
        });
        match decision {
            Some(Decision::Deliver(Destination::Lost)) => Route::Lost,
            // A receiver the schedule names that is not up takes the default, the first one up.
            Some(Decision::Deliver(Destination::Receiver(name))) => Route::To(
                up.iter()
                    .copied()
                    .find(|&index| self.processes[index].name == name)
                    .unwrap_or(up[0]),
            ),
            _ => Route::To(up[0]),
        }
    }

    /// The first up process with `role`.
    pub fn process_with_role(&self, role: ProcessRole) -> Option<usize> {
        (0..self.processes.len())
            .find(|&index| self.processes[index].role == role && self.processes[index].up)
    }

    /// Travel time of one webhook answer.
    pub fn network_latency_ms(&mut self) -> i64 {
        match self.choose(DecisionKind::Latency, |world| {
            let ms = world.network_rng.between(1, world.config.network_latency_ms_max);
            Some(Decision::Latency { ms })
        }) {
            Some(Decision::Latency { ms }) => ms,
            _ => 1,
        }
    }

    /// Whether any fault drops this webhook answer. Every model is asked, so that one model's
    /// decision never changes how many draws another one makes.
    pub fn webhook_answer_dropped(&mut self) -> bool {
        let now_ms = self.now_ms;
        self.choose(DecisionKind::LoseAnswer, |world| {
            let mut dropped = false;
            for fault in world.faults.iter_mut() {
                dropped |= fault.drops_webhook_answer(now_ms);
            }
            dropped.then_some(Decision::LoseAnswer)
        })
        .is_some()
    }

    /// How many extra copies of a delivery the fault models send.
    pub fn extra_deliveries(&mut self) -> u32 {
        let now_ms = self.now_ms;
        match self.choose(DecisionKind::Copies, |world| {
            let copies: u32 = world
                .faults
                .iter_mut()
                .map(|fault| fault.extra_deliveries(now_ms))
                .sum();
            (copies > 0).then_some(Decision::Copies(copies))
        }) {
            Some(Decision::Copies(copies)) => copies,
            _ => 0,
        }
    }

    /// The fault (if any) that acts on `process`, about to do `op`, at this scheduling point:
    /// `(fault model name, action)`. Every model is asked, in registry order, and the first that
    /// acts wins.
    pub fn fault_at_scheduling_point(
        &mut self,
        process: usize,
        op: &PendingOp,
    ) -> Option<(String, PointAction)> {
        let point = SchedulingPoint {
            now_ms: self.now_ms,
            role: self.processes[process].role,
            op,
        };
        let decision = self.choose(DecisionKind::Fault, |world| {
            let mut decision = None;
            for fault in world.faults.iter_mut() {
                let action = fault.at_scheduling_point(&point);
                decision = decision.or(action.map(|action| Decision::Fault {
                    model: fault.name().to_owned(),
                    action,
                }));
            }
            decision
        });
        match decision {
            Some(Decision::Fault { model, action }) => Some((model, action)),
            _ => None,
        }
    }

    /// True when nothing is left to do: every stream that can succeed settled with the sender,
    /// no delivery or provider request in flight, no obligation owed, every process up.
    pub fn is_quiescent(&self) -> bool {
        self.sender.unsettled() == 0
            && self.work_in_flight == 0
            && self.processes.iter().all(|process| process.up)
            && self.view.owed_obligations() == 0
    }

    /// What keeps the world from being quiet, for a run that did not settle: `3 streams the
    /// sender has not settled, 1 owed obligation, 2 deliveries, answers or requests in flight,
    /// receiver-2 down`, or `nothing`.
    pub fn pending_work(&self) -> String {
        let plural =
            |count: usize, one: &str, many: &str| format!("{count} {}", if count == 1 { one } else { many });
        let mut parts = Vec::new();
        let streams = self.sender.unsettled();
        if streams > 0 {
            parts.push(plural(
                streams,
                "stream the sender has not settled",
                "streams the sender has not settled",
            ));
        }
        let owed = self.view.owed_obligations();
        if owed > 0 {
            parts.push(plural(owed, "owed obligation", "owed obligations"));
        }
        if self.work_in_flight > 0 {
            parts.push(plural(
                self.work_in_flight,
                "delivery, answer, request or operator action in flight",
                "deliveries, answers, requests or operator actions in flight",
            ));
        }
        for process in self.processes.iter().filter(|process| !process.up) {
            parts.push(format!("{} down", process.name));
        }
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join(", ")
        }
    }

    /// Human-readable duration, for trace remarks.
    pub fn duration(duration_ms: i64) -> String {
        format_duration_ms(duration_ms)
    }
}
