//! The simulated world: processes, tasks, the clock, the scheduler's queues, the database, the
//! sender, the provider and the fault models, plus what the current step did.
//!
//! The world is shared between the executor (`run`) and every task's environment (`sim_env`)
//! through one `RefCell`; nobody holds the borrow while a task is being polled, so the code under
//! test may call into the world at each of its scheduling points. Time is virtual and only moves
//! forward: one millisecond per step, and in jumps to the next timer when nothing is ready. Each
//! process reads true time plus its own clock offset (see the `clock-jump` fault). The world must
//! not consult anything outside the run: every choice comes from a seeded stream.
//!
//! This file holds the world's types and state, a step's life, and the records of what happened;
//! what acts on the state lives in a file per job: `scheduler` (the ready queue, timers, events
//! and decisions), `tasks` (tasks and their processes), `statements` (a task's SQL), `provider`
//! (a task's provider calls), `deliveries` (the sender and the network), `incidents` (what fault
//! models do) and `progress` (stuck or slow after heal).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use commitgap::env::DbError;
use commitgap::provider::{CallError, ProviderReply, ProviderRequest};
use commitgap::receiver::Answer;

use crate::config::SimConfig;
use crate::coverage::Probes;
use crate::db::{ConnectionId, Database, RowChange};
use crate::domain::{Domain, Model};
use crate::faults::{ActiveFault, PendingOp, ProcessRole, StatementFailure};
use crate::provider::ProviderModel;
pub use crate::record::Origin;
use crate::record::{History, StepRecord};
use crate::rng::SimRng;
use crate::schedule::Decider;
use crate::sender::Sender;
use crate::trace::{Actor, Happening, Trace, format_duration_ms, format_time_ms};
use crate::view::DbView;
use crate::workload::Workload;

mod deliveries;
mod incidents;
mod locks;
mod progress;
mod provider;
mod purges;
mod scheduler;
mod statements;
mod tasks;

pub use deliveries::Arrived;
pub use statements::StatementStep;

/// Identifies a task for the whole run; never reused.
pub type TaskId = u64;
/// Identifies a scheduled world event for the whole run; never reused.
pub type EventId = u64;

/// Something the scheduler can pick: a task to poll or a world event to handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Item {
    /// A task to poll.
    Task(TaskId),
    /// A world event to handle.
    Event(EventId),
}

/// One simulated OS process.
#[derive(Debug)]
pub struct Process {
    /// The process's name, without incarnation (`receiver-2`).
    pub name: String,
    /// What the process does: receive, relay, purge.
    pub role: ProcessRole,
    /// Starts at 1 and grows with every restart.
    pub incarnation: u32,
    /// Whether the process is running (false between a crash and its restart).
    pub up: bool,
    /// `name#incarnation`, what `Env::process_id` returns; shared, since every step names it.
    pub id: Arc<str>,
    /// Connections a finished task returned, ready for the next task (a connection pool).
    pub idle_connections: Vec<ConnectionId>,
    /// How far this process's clock is from true time.
    pub clock_offset_ms: i64,
}

impl Process {
    /// A running first incarnation of process `name` with `role`, its clock at true time.
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
    /// Waiting for a lock SQLite refused: until a transaction ends, or this virtual time at the
    /// latest (the statement's busy timeout).
    ForLock(i64),
}

/// What a task is, for the trace and the quiescence check.
#[derive(Debug, Clone)]
pub enum TaskKind {
    /// `delivery` is `None` for a delivery a scenario made by hand or an attacker sent (no sender
    /// awaits it).
    Handler {
        /// Which attempt of which stream the handler answers, when a sender awaits it.
        delivery: Option<DeliveryRef>,
        /// The upstream account of the delivered event.
        account: String,
        /// The delivered event's id.
        event_id: String,
        /// Who made the delivery.
        origin: Origin,
    },
    /// A relay worker's loop, draining the outbox to the provider.
    RelayWorker,
    /// The purge process's loop, deleting old receipts.
    Purge,
    /// An operator's action after heal.
    Operator,
}

/// One transaction committed in the current step, before the view decodes it.
#[derive(Debug)]
pub struct StepCommit {
    /// The incarnation whose connection committed (`relay-1#2`).
    pub process_id: String,
    /// The attack, when the committing task handles a hostile delivery.
    pub hostile: Option<String>,
    /// Row changes the transaction committed, in order.
    pub changes: Vec<RowChange>,
}

/// What a scripted run's own moves (a reply the test drops) are credited to in the fault counts:
/// no fault model made them.
pub const SCRIPTED: &str = "scenario";

/// Where a delivery goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Lost on the way in: the receiver never sees it.
    Lost,
    /// No receiver is up to take it.
    Refused,
    /// To the receiver process with this index.
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
    /// Attempt number within the stream's retry schedule.
    pub attempt: u32,
    /// How the delivery came about.
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
    /// Index of the process the task runs in.
    pub process: usize,
    /// The incarnation the task runs in (`receiver-2#1`).
    pub process_id: Arc<str>,
    /// What the task is.
    pub kind: TaskKind,
    /// The database connection the task holds, once it first ran a statement.
    pub connection: Option<ConnectionId>,
    /// How the task waits, as it told the world when it last parked.
    pub park: Option<Park>,
    /// What the task will do when it next runs.
    pub pending: PendingOp,
    /// What it is about to do, for schedule labels: the statement's verb and table, or the key
    /// of the provider call. Kept only while schedules are written down.
    pub pending_detail: String,
    /// The provider's reply (or the call's error) for the task to take when it runs.
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
    Emit {
        /// Index of the event in the workload.
        event: usize,
    },
    /// The sender makes the next scheduled attempt of `stream`.
    Attempt {
        /// Index of the stream into the sender's streams.
        stream: usize,
    },
    /// The sender stops waiting for attempt `attempt`.
    AttemptTimeout {
        /// Index of the stream into the sender's streams.
        stream: usize,
        /// The attempt whose timeout came.
        attempt: u32,
    },
    /// A delivery outside the schedule.
    Extra {
        /// Index of the stream into the sender's streams.
        stream: usize,
        /// Why the delivery happens (`spontaneous duplicate`, `manual resend`).
        reason: String,
        /// The fault model that added it (empty in a seed file written before this was kept).
        fault: String,
    },
    /// A receiver writes its answer to the socket (a crash before this loses it).
    SendAnswer {
        /// Index of the receiver's process.
        process: usize,
        /// The incarnation that answered; a later one means the answer died in a crash.
        incarnation: u32,
        /// The delivery answered, or `None` when no sender awaits the answer.
        delivery: Option<DeliveryRef>,
        /// The receiver's answer.
        answer: Answer,
    },
    /// The answer reaches the sender.
    AnswerArrives {
        /// The delivery answered.
        delivery: DeliveryRef,
        /// The receiver's answer.
        answer: Answer,
    },
    /// A crashed process starts again.
    Restart {
        /// Index of the process.
        process: usize,
    },
    /// A fault model asked to be woken.
    FaultTimer {
        /// Index of the fault model among the run's faults.
        fault: usize,
    },
    /// A fault model asked for an action when the run started or at heal.
    FaultActs {
        /// Index of the fault model among the run's faults.
        fault: usize,
        /// What the fault model does.
        action: crate::faults::TimerAction,
    },
    /// A slow provider finishes processing a request and acts.
    ProviderActs {
        /// The request the provider acts on.
        request: ProviderRequest,
        /// How long the key stays locked once the provider acted, as decided when the request
        /// arrived (`Conditions::lock_after_ms`).
        lock_after_ms: i64,
        /// The fault model that decided the lock, credited when it holds the key.
        lock_by: Option<String>,
    },
    /// After heal, the operator requeues dead obligations.
    OperatorRequeue,
    /// After heal, the operator redelivers failed webhooks by hand (senders without retries).
    OperatorRedeliver {
        /// The round of redelivery, counting from one.
        round: u32,
    },
}
// Written by hand: it holds connections, futures or closures that cannot print themselves.
impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").finish_non_exhaustive()
    }
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
    /// The attacks the domain cannot make, with why: the attacker never sends them.
    attacks_left_out: Vec<(crate::faults::Attack, String)>,
    /// How the observed tables' rows read: the declared tables by name, the rest by the system.
    row_reader: crate::system::RowReader,
    /// By idempotency key: the fault model that let a request overtake one still in progress,
    /// credited when the overtaken one acts too.
    overtaken_by: BTreeMap<String, String>,
    /// By idempotency key and part: the fault model whose error, refusal or lock the provider
    /// keeps under the key, credited when a later request meets it.
    stored_by: BTreeMap<(String, crate::faults::ProviderPart), String>,
    /// The claims made after heal, to tell stuck work from slow work.
    stuck_watch: progress::StuckWatch,
    /// The receipt purges running, to judge what they delete.
    purge_watch: purges::PurgeWatch,
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
    /// How many fault actions the run has counted: the liveness phase measures its bounds from
    /// the last one (see `run::liveness::liveness_bounds`).
    fault_actions: u64,
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
    /// Every commit of the run as a journal of real commits would hold it, kept only when asked
    /// for (see [`World::keep_commit_journal`]).
    commit_journal: Option<Vec<crate::commit_journal::JournalCommit>>,
    step_record: StepRecord,
    /// What happened in each step, and the run's digest.
    trace: Trace,
    /// Work that keeps the world from being quiet: handler tasks, answers on the wire, scheduled
    /// extra deliveries, slow provider requests and pending operator actions.
    work_in_flight: usize,
    /// The world events among that work, with when each is due: one scheduled hours ahead (a
    /// late delivery, an operator's redelivery) keeps the world from being quiet, but is not
    /// yet work due (see [`World::has_due_work`]).
    work_events_due_ms: BTreeMap<EventId, i64>,
    /// What a scripted run (a scenario) records and injects; `None` in seeded runs.
    scripted: Option<Scripted>,
    /// Set when the system did something that makes the run depend on more than its seed; the
    /// run stops with this message.
    determinism_hazard: Option<String>,
    /// Where the run's decisions come from (the seeded streams or a schedule), and the record.
    decider: Decider,
    /// The receivers' configuration ([`commitgap::env::Env::setting`]): the endpoints' secrets.
    settings: BTreeMap<String, String>,
    /// The receiver's body limit and the event padded up to it (see [`World::set_body_limit`]).
    body_limit: deliveries::BodyLimit,
    /// How far the sender's clock is from true time; it stamps `webhook-timestamp` with it.
    sender_clock_offset_ms: i64,
    /// The system's web framework commits what a handler left open (see
    /// `System::commits_after_answer`), so a handler's open transaction is the framework's.
    framework_commits_handlers: bool,
    /// Statements waiting for a lock, and each connection's busy timeout.
    lock_waits: locks::LockWaits,
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
// Written by hand: it holds connections, futures or closures that cannot print themselves.
impl std::fmt::Debug for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finished").finish_non_exhaustive()
    }
}

/// What a run leaves behind once it ends, taken out of the world.
pub struct Finished {
    /// The run's trace digest (see [`Trace::digest`]).
    pub digest: String,
    /// The trace's records, when the run kept them.
    pub trace: Option<Vec<crate::trace::TraceStep>>,
    /// The fixtures, events and decisions, when the run recorded or followed a schedule.
    pub schedule: Option<crate::schedule::Schedule>,
    /// What became of the schedule's lines (see [`Decider::finish`]).
    pub schedule_report: Vec<String>,
    /// Every statement run on process connections, when SQL was recorded for `--sql`.
    pub sql: Option<Vec<crate::db::SqlOp>>,
}

// Reading the world: the executor, the environments and the scenarios see it through these, and
// change it only through the methods below that keep its records in step.
impl World {
    /// True virtual time now, in milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// The number of the current step (0 before the first).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The run's configuration.
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

    /// The run's fixtures and events.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The upstream sender and its streams.
    pub fn sender(&self) -> &Sender {
        &self.sender
    }

    /// The provider model and what it stored.
    pub fn provider(&self) -> &ProviderModel {
        &self.provider
    }

    /// The process with index `index`.
    pub fn process(&self, index: usize) -> &Process {
        &self.processes[index]
    }

    /// Every process, by index.
    pub fn processes(&self) -> &[Process] {
        &self.processes
    }

    /// How often each interesting situation was reached.
    pub fn probes(&self) -> &Probes {
        &self.probes
    }

    /// The committed state of the database, as the invariants see it.
    pub fn view(&self) -> &DbView {
        &self.view
    }

    /// Facts kept over the whole run, for invariants that need the past.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// What the current step changed so far.
    pub fn step_record(&self) -> &StepRecord {
        &self.step_record
    }

    /// The run's trace and its digest so far.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// Where the run's decisions come from, and the steps written down.
    pub fn decider(&self) -> &Decider {
        &self.decider
    }

    /// How many fault actions the run has counted so far, over every model.
    pub fn fault_actions(&self) -> u64 {
        self.fault_actions
    }

    /// How many times each fault model fired, by name.
    pub fn fault_counts(&self) -> &BTreeMap<String, u64> {
        &self.fault_counts
    }

    /// What the faults did, in words, one line each (empty once the log is forgotten).
    pub fn fault_log(&self) -> &[String] {
        self.fault_log.as_deref().unwrap_or_default()
    }

    /// Stops writing the fault log: what it would hold is then never formatted. Counting what
    /// fired goes on, and nothing a run decides depends on the log.
    pub fn forget_fault_log(&mut self) {
        self.fault_log = None;
    }

    /// Number of fault models active in the run.
    pub fn fault_count(&self) -> usize {
        self.faults.len()
    }

    /// Whether the fault phase ended and the world healed.
    pub fn healed(&self) -> bool {
        self.healed
    }

    /// The receivers' configuration value `name` ([`commitgap::env::Env::setting`]).
    pub fn setting(&self, name: &str) -> Option<String> {
        self.settings.get(name).cloned()
    }

    /// Whether `task` still exists (it has not returned or been dropped).
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

    /// What a scripted run records and injects, to change; `None` in seeded runs.
    pub fn scripted_mut(&mut self) -> Option<&mut Scripted> {
        self.scripted.as_mut()
    }

    /// Where the run's database lives.
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

    /// Notes the invariants not checked against the system, with why, for the run's outcome.
    pub fn note_invariants_left_out(&mut self, left_out: Vec<(String, String)>) {
        self.invariants_left_out = left_out;
    }

    /// The invariants not checked against the system, with why.
    pub fn invariants_left_out(&self) -> &[(String, String)] {
        &self.invariants_left_out
    }

    /// Reads the observed tables' rows with `reader` from now on (set before the set-up's rows).
    pub fn set_row_reader(&mut self, reader: crate::system::RowReader) {
        self.row_reader = reader;
    }

    /// Notes the attacks the domain cannot make, if the attacker is on: it never sends them.
    pub fn note_attacks_left_out(&mut self) {
        let attacker_on = self
            .faults
            .iter()
            .any(|fault| fault.name() == crate::faults::attacker::KIND.name);
        self.attacks_left_out = match self.workload.events.first() {
            Some(event) if attacker_on => crate::signing::attacks_left_out(&*self.domain, event),
            _ => Vec::new(),
        };
    }

    /// The attacks the domain cannot make, with why (see [`crate::signing::attacks_left_out`]).
    pub fn attacks_left_out(&self) -> &[(crate::faults::Attack, String)] {
        &self.attacks_left_out
    }

    /// Tells the world that the system's web framework commits whatever a handler left open.
    pub fn set_framework_commits_handlers(&mut self, commits: bool) {
        self.framework_commits_handlers = commits;
    }

    /// Tells the world whether statements wait for locks, and the busy timeout the system's
    /// connections open with (see `System::busy_timeout_ms`).
    pub fn set_lock_waits(&mut self, waits: bool, timeout_ms: i64) {
        self.lock_waits = locks::LockWaits::new(waits, timeout_ms);
    }

    /// The first up process with `role`.
    pub fn process_with_role(&self, role: ProcessRole) -> Option<usize> {
        (0..self.processes.len())
            .find(|&index| self.processes[index].role == role && self.processes[index].up)
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
        let reader = &self.row_reader;
        let diffs = self.view.apply(
            &|table, values| reader.read(system, table, values),
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
        if let Item::Task(task) = item {
            self.trace.set_task(task);
        }
        self.record_forgotten_keys();
    }

    /// Begins a step that `process` takes (a scenario's crash).
    pub fn begin_step_as(&mut self, process: usize) {
        let actor = Actor::Process(self.processes[process].id.clone());
        self.begin_step(actor);
    }

    fn begin_step(&mut self, actor: Actor) {
        self.step += 1;
        self.probes.at_step(self.step);
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
            if let Some(journal) = &mut self.commit_journal {
                journal.push(crate::commit_journal::JournalCommit {
                    process_id: commit.process_id.clone(),
                    at_ms: self.now_ms,
                    changes: commit
                        .changes
                        .iter()
                        .map(|change| crate::commit_journal::JournalChange {
                            table: self.observed_tables[change.table].to_owned(),
                            rowid: change.rowid,
                            values: change.values.clone(),
                        })
                        .collect(),
                });
            }
            let reader = &self.row_reader;
            let diffs = self.view.apply(
                &|table, values| reader.read(system, table, values),
                &self.observed_tables,
                commit.changes,
            )?;
            let observed = crate::trace::Observed::of(&diffs);
            self.trace.record(Happening::Committed { rows, observed });
            crate::commit_journal::remember(&mut self.history, &commit.process_id, &diffs);
            self.stuck_watch.committed(self.now_ms, &diffs);
            self.purge_committed(&commit.process_id, &diffs);
            self.probes
                .committed(&commit.process_id, &diffs, &self.view, &*self.domain);
            self.step_record.commits.push(crate::record::CommitRecord {
                process_id: commit.process_id,
                hostile: commit.hostile,
                diffs,
            });
        }
        self.judge_returned_purges();
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

impl World {
    /// A world at time zero, before set-up, whose random streams are drawn from `seed`.
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
        let settings = crate::signing::receiver_settings(
            workload
                .fixtures
                .accounts
                .iter()
                .map(|(account, _)| account.as_str()),
        );
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
            attacks_left_out: Vec::new(),
            row_reader: crate::system::RowReader::default(),
            overtaken_by: BTreeMap::new(),
            stored_by: BTreeMap::new(),
            stuck_watch: progress::StuckWatch::default(),
            purge_watch: purges::PurgeWatch::default(),
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
            fault_actions: 0,
            fault_log: Some(Vec::new()),
            probes: Probes::default(),
            healed: false,
            view,
            history: History::default(),
            step_commits: Vec::new(),
            commit_journal: None,
            step_record: StepRecord::default(),
            trace: Trace::new(keep_trace),
            work_in_flight: 0,
            work_events_due_ms: BTreeMap::new(),
            scripted: scripted.then(Scripted::default),
            determinism_hazard: None,
            decider,
            settings,
            body_limit: deliveries::BodyLimit::default(),
            sender_clock_offset_ms: 0,
            framework_commits_handlers: false,
            lock_waits: locks::LockWaits::new(true, crate::system::DEFAULT_BUSY_TIMEOUT_MS),
        }
    }

    /// Keeps every commit from now on as a journal of real commits would hold it, so that a
    /// test can judge a simulated run's journal as a check over real processes judges its own.
    pub fn keep_commit_journal(&mut self) {
        self.commit_journal.get_or_insert_with(Vec::new);
    }

    /// The commits kept since [`World::keep_commit_journal`], oldest first.
    pub fn commit_journal(&self) -> &[crate::commit_journal::JournalCommit] {
        self.commit_journal.as_deref().unwrap_or_default()
    }

    /// Notes which obligations are dead as the operator sets out to requeue them.
    pub fn note_dead_at_requeue(&mut self) {
        self.history.dead_at_requeue = self
            .view
            .obligations()
            .filter(|obligation| obligation.status == crate::system::ObligationStatus::Dead)
            .map(|obligation| obligation.operation_key.clone())
            .collect();
    }

    /// Records what happened in the current step.
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
        self.fault_actions += times;
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
        for (key, model) in self.probes.keys_forgotten_by(self.now_ms, &self.view) {
            self.record_fault(&model, &format_args!("provider forgot key {key}"));
            self.record(Happening::KeyForgotten { key, model });
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

    /// Human-readable duration, for trace remarks.
    pub fn duration(duration_ms: i64) -> String {
        format_duration_ms(duration_ms)
    }
}
