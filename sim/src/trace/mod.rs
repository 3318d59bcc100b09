//! The trace: one record per step of what the simulator saw happen, and the digest that
//! identifies a run.
//!
//! A step's record ([`TraceStep`]) holds its number, its virtual time, its actor and what
//! happened in it, in order ([`Happening`]): the statements a process ran and their results, the
//! commits and what they changed as the system's own decoder read the rows (a lease taken, an
//! obligation done), provider calls and replies, deliveries and answers, crashes, pauses and the
//! other faults. The digest is a SHA-256 over a fixed binary encoding of the records, so two runs
//! of one seed agree on it exactly when they saw the same things; no text is written to compute
//! it. Records are kept only when someone will read them (`replay --trace`, `--html`, the
//! determinism check), and written as text only when printed (`Display`). The timeline page reads
//! the records, not their text, so it knows leases, effects and outcomes for any system.
//!
//! Nothing here may read the wall clock or the environment, and nothing here decides anything:
//! a record depends on the run alone.
//!
//! The records and the [`Trace`] that keeps them are here; the digest's encoding is in
//! `digest`, and the text written for people (with the helpers that format times and
//! statements, re-exported here) in `text`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use commitgap::env::{DbError, Value};
use commitgap::provider::ProviderReply;
use commitgap::receiver::Answer;
use sha2::{Digest, Sha256};

use crate::db::StatementOutput;
use crate::faults::Attack;

mod digest;
mod text;

use digest::{Feed, PENDING_BYTES_MAX, SqlOutcomeRef, feed_sql};
pub use text::{call_error_text, describe_value, format_duration_ms, format_time_ms, summarize_sql};

/// Who acted in a step.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Actor {
    /// One incarnation of a process: `receiver-2#1`.
    Process(Arc<str>),
    /// The upstream sender.
    Sender,
    /// The provider, finishing a request it was slow to act on.
    Provider,
    /// The operator, after heal.
    Operator,
    /// A fault model's timer.
    Fault(String),
    /// The simulator itself: set-up and heal.
    World,
    /// An invariant that failed.
    Invariant,
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Process(id) => f.write_str(id),
            Actor::Sender => f.write_str("sender"),
            Actor::Provider => f.write_str("provider"),
            Actor::Operator => f.write_str("operator"),
            Actor::Fault(name) => write!(f, "fault:{name}"),
            Actor::World => f.write_str("world"),
            Actor::Invariant => f.write_str("invariant"),
        }
    }
}

/// How a statement ended.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlOutcome {
    /// A statement whose change count means nothing (`BEGIN`, `COMMIT`, DDL).
    Done,
    /// Rows changed by an insert, update or delete.
    Changed(usize),
    /// Rows returned, and the first of them.
    Rows {
        /// Number of rows returned.
        count: usize,
        /// The first row returned, or `None` when there was none.
        first: Option<Vec<Value>>,
    },
    /// The error the statement returned.
    Failed(String),
}

/// A change a commit made, as the system's decoder read the rows: the facts about obligations
/// and their leases that the invariants and the timeline care about, whatever the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// A worker took the lease on an obligation: its token grew.
    LeaseTaken {
        /// Key of the obligation.
        operation_key: String,
        /// The lease's new fencing token.
        token: i64,
    },
    /// The lease's holder moved its expiry later.
    LeaseExtended {
        /// Key of the obligation.
        operation_key: String,
    },
    /// The lease was given up without the obligation settling (a retry later).
    LeaseReleased {
        /// Key of the obligation.
        operation_key: String,
    },
    /// The obligation is done.
    Done {
        /// Key of the obligation.
        operation_key: String,
    },
    /// The obligation is dead.
    Dead {
        /// Key of the obligation.
        operation_key: String,
    },
}

impl Observed {
    /// What a commit's row changes say about obligations and their leases, read from the rows
    /// as the system's decoder gave them: the same for any schema.
    pub fn of(diffs: &[crate::view::RowDiff]) -> Vec<Observed> {
        use crate::system::{ObligationStatus, ObservedRow};
        let mut observed = Vec::new();
        for diff in diffs {
            let Some(ObservedRow::Obligation(after)) = &diff.after else {
                continue;
            };
            let before = match &diff.before {
                Some(ObservedRow::Obligation(before)) => Some(before),
                _ => None,
            };
            let operation_key = after.operation_key.clone();
            let was = |status| before.is_some_and(|before| before.status == status);
            if after.status == ObligationStatus::Done && !was(ObligationStatus::Done) {
                observed.push(Observed::Done { operation_key });
            } else if after.status == ObligationStatus::Dead && !was(ObligationStatus::Dead) {
                observed.push(Observed::Dead { operation_key });
            } else if let Some(before) = before {
                if after.lease_token != before.lease_token {
                    observed.push(Observed::LeaseTaken {
                        operation_key,
                        token: after.lease_token,
                    });
                } else if after.lease_expires_ms > before.lease_expires_ms && after.lease_expires_ms.is_some()
                {
                    observed.push(Observed::LeaseExtended { operation_key });
                } else if after.lease_expires_ms.is_none() && before.lease_expires_ms.is_some() {
                    observed.push(Observed::LeaseReleased { operation_key });
                }
            }
        }
        observed
    }
}

/// `lease on K taken (token 3)`, `K done`: what a commit changed, for people.
impl fmt::Display for Observed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Observed::LeaseTaken { operation_key, token } => {
                write!(f, "lease on {operation_key} taken (token {token})")
            }
            Observed::LeaseExtended { operation_key } => write!(f, "lease on {operation_key} extended"),
            Observed::LeaseReleased { operation_key } => write!(f, "lease on {operation_key} given up"),
            Observed::Done { operation_key } => write!(f, "{operation_key} done"),
            Observed::Dead { operation_key } => write!(f, "{operation_key} dead"),
        }
    }
}

/// What the provider did with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// It replied (or failed) now.
    Replied(Result<ProviderReply, String>),
    /// It is working on the request and will act after the caller's timeout.
    Busy {
        /// How long the provider will work on the request, in milliseconds.
        for_ms: i64,
    },
}

/// How a delivery came about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryHow {
    /// Attempt `n` of the sender's retry schedule.
    Attempt(u32),
    /// A copy sent together with an attempt.
    Copy,
    /// A delivery outside the schedule, and why (`spontaneous duplicate`, `manual resend`).
    Extra(String),
}

/// Where a delivery or hostile request went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arrival {
    /// To this receiver incarnation.
    To(String),
    /// Lost on the way in.
    Lost,
    /// Refused: no receiver was up.
    Refused,
}

/// One thing that happened in a step.
#[derive(Debug, Clone, PartialEq)]
pub enum Happening {
    /// The run's set-up: the system, the seed and the size of the world.
    Setup {
        /// Name of the system under test.
        system: String,
        /// The run's seed.
        seed: u64,
        /// Fixture rows written at set-up.
        rows: usize,
        /// Upstream accounts among the fixtures.
        accounts: usize,
        /// Business entities among the fixtures.
        subjects: usize,
        /// Events in the workload.
        events: usize,
        /// Streams: deliveries of an event to one subscription.
        streams: usize,
        /// Receiver processes.
        receivers: u32,
        /// Relay worker processes.
        relay_workers: u32,
        /// Name of the sender preset.
        sender: &'static str,
    },
    /// A statement ran (or a fault failed it without running, `injected`).
    Sql {
        /// The statement's SQL text.
        statement: Arc<str>,
        /// The values bound to the statement's parameters.
        params: Vec<Value>,
        /// How the statement ended.
        outcome: SqlOutcome,
        /// Whether a fault failed the statement without running it.
        injected: bool,
    },
    /// SQLite refused a statement a lock, and it waits, as its connection's busy timeout says,
    /// until a transaction ends or `until_ms`, then runs again.
    LockWait {
        /// The statement's SQL text.
        statement: Arc<str>,
        /// When the wait ends at the latest (virtual time, milliseconds).
        until_ms: i64,
    },
    /// A transaction of the actor's committed: rows written, and what they changed.
    Committed {
        /// Rows the transaction wrote.
        rows: usize,
        /// What the commit changed about obligations and their leases.
        observed: Vec<Observed>,
    },
    /// A task ended with its transaction open, which was rolled back.
    TaskEndedInTransaction,
    /// The actor's task went to sleep.
    Sleep {
        /// How long the task sleeps, in milliseconds.
        duration_ms: i64,
    },
    /// The actor's sleeping task woke.
    Wake,
    /// A request to the provider (a `send`, or a `lookup`).
    Call {
        /// Whether the call was a `send` (true) or a `lookup` (false).
        send: bool,
        /// The operation key the call was about.
        key: String,
        /// What the provider did with the call.
        outcome: CallOutcome,
        /// Whether the provider's reply was lost on its way to the caller.
        reply_lost: bool,
    },
    /// The reply (or the timeout) reached the caller.
    Reply(Result<ProviderReply, String>),
    /// A slow provider acted on a request whose caller had timed out.
    ProviderFinishes {
        /// The operation key of the request.
        key: String,
        /// The reply the provider made, or its error.
        outcome: Result<ProviderReply, String>,
    },
    /// The provider forgot a key, at the time a fault model set for it. It is recorded in
    /// whichever step first runs at or after that time, so the step's actor is not its source;
    /// `model` is.
    KeyForgotten {
        /// The operation key the provider forgot.
        key: String,
        /// The fault model that set the key's lifetime.
        model: String,
    },
    /// A receiver answered a delivery.
    Answer(Answer),
    /// The answer left the receiver.
    AnswerSent,
    /// An answer to a delivery no sender waits for (a scenario's, an attacker's).
    AnswerWritten,
    /// The receiver crashed before writing its answer.
    AnswerLostInCrash,
    /// The answer was lost on its way to the sender.
    AnswerLost {
        /// The answer that was lost.
        answer: Answer,
        /// Index of the stream the answer belonged to.
        stream: usize,
    },
    /// The sender got an answer.
    SenderGot {
        /// The answer the sender got.
        answer: Answer,
        /// Index of the stream the answer belongs to.
        stream: usize,
        /// The attempt the answer is for.
        attempt: u32,
        /// How the answered delivery came about.
        how: DeliveryHow,
        /// Delay until the next attempt, in milliseconds, or `None` when none follows.
        next_attempt_in_ms: Option<i64>,
    },
    /// The sender created an event.
    Emit {
        /// The event's type on the wire.
        kind: String,
        /// The event's id, unique within its account.
        event_id: String,
        /// The upstream account the event belongs to.
        account: String,
        /// The tenant of the entity the event is about.
        tenant: String,
        /// The entity the event is about, within its tenant.
        subject: String,
        /// Subscriptions the event is delivered to.
        subscriptions: usize,
    },
    /// The sender delivered an event.
    Deliver {
        /// The delivered event's id.
        event_id: String,
        /// The upstream account the event belongs to.
        account: String,
        /// Index of the stream delivered.
        stream: usize,
        /// How the delivery came about.
        how: DeliveryHow,
        /// Where the delivery went.
        arrival: Arrival,
    },
    /// An attempt's timeout came: the next attempt is due in this long, or none (the attempt
    /// had settled).
    AttemptTimedOut {
        /// Index of the stream whose attempt timed out.
        stream: usize,
        /// The attempt that timed out.
        attempt: u32,
        /// Delay until the next attempt, in milliseconds, or `None` when the sender gave up.
        next_attempt_in_ms: Option<i64>,
        /// Whether the attempt had settled before its timeout.
        settled: bool,
    },
    /// A process crashed.
    Crash {
        /// The incarnation that crashed.
        process: String,
        /// Tasks of the process dropped by the crash.
        tasks: usize,
        /// Open transactions the crash rolled back.
        open_transactions: usize,
        /// Delay until the process restarts, in milliseconds.
        restart_in_ms: i64,
    },
    /// A crashed process restarted.
    Restart {
        /// The new incarnation's id.
        process: String,
    },
    /// A restart was due but the process was already up.
    RestartSkipped,
    /// A process paused, running nothing (a GC pause, a stopped VM).
    Pause {
        /// The process that paused.
        process: String,
        /// How long the pause lasts, in milliseconds.
        duration_ms: i64,
    },
    /// A process's clock was set away from true time.
    ClockSet {
        /// The process whose clock moved.
        process: String,
        /// The clock's new offset from true time, in milliseconds.
        offset_ms: i64,
    },
    /// The sender's clock was set away from true time.
    SenderClockSet {
        /// The clock's new offset from true time, in milliseconds.
        offset_ms: i64,
    },
    /// A fault model's timer went off.
    FaultTimer,
    /// The purge process deleted old receipts.
    Purge {
        /// Receipts received before this virtual time, in milliseconds, were purged.
        older_than_ms: i64,
    },
    /// A purge was due but the purge process was down.
    PurgeSkipped,
    /// A hostile request, copied from a genuine delivery.
    Attack {
        /// What is wrong with the hostile request.
        attack: Attack,
        /// Id of the event the request was copied from.
        event_id: String,
        /// Account of the event the request was copied from.
        account: String,
        /// Where the hostile request went.
        arrival: Arrival,
    },
    /// A hostile request named a delivery this run never made.
    AttackSkipped {
        /// What is wrong with the hostile request.
        attack: Attack,
        /// Name of the stream the request meant to copy.
        stream: String,
    },
    /// The operator requeued the dead obligations.
    OperatorRequeue,
    /// The operator redelivered the deliveries the sender gave up on.
    OperatorRedeliver {
        /// Failed deliveries redelivered.
        streams: usize,
        /// The operator's round of redelivery, counting from one.
        round: u32,
    },
    /// A line the system logged through `Env::log`.
    Log(String),
    /// The fault phase ended.
    Heal {
        /// Crashed processes restarted by the heal.
        restarting: usize,
    },
    /// An invariant failed.
    Failed {
        /// Name of the invariant that failed.
        invariant: String,
        /// What the invariant saw, in words.
        evidence: String,
    },
}

/// One step's record.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceStep {
    /// Step number within the run.
    pub step: u64,
    /// Virtual time when the step ended, in milliseconds.
    pub time_ms: i64,
    /// Who acted in the step.
    pub actor: Actor,
    /// The task that acted, when a process's task did. One process runs several tasks at once
    /// (a receiver's concurrent handlers), and the actor alone cannot tell them apart. Only the
    /// text shows it; the digest does not read it, so numbering tasks changed no run's digest.
    pub task: Option<u64>,
    /// What happened in the step, in order.
    pub happened: Vec<Happening>,
}
// Written by hand: it holds connections, futures or closures that cannot print themselves.
impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace").finish_non_exhaustive()
    }
}

/// The records of one run, and their digest.
pub struct Trace {
    hasher: Sha256,
    /// Bytes fed but not yet hashed. A step feeds dozens of fields of a few bytes each; the
    /// hasher takes them in a few large pieces instead, which gives the same digest.
    pending: Vec<u8>,
    /// Each distinct statement text, numbered in the order the run first ran it. The digest
    /// takes a statement's text the first time and its number after that: a run repeats a few
    /// dozen statements thousands of times, and hashing their text each time was most of the
    /// digest's cost. The numbering depends only on the order of texts, so it is as
    /// deterministic as the run.
    statements: BTreeMap<Arc<str>, u64>,
    /// The records, when someone will read them.
    kept: Option<Vec<TraceStep>>,
    /// The step being recorded.
    current: Option<(u64, i64, Actor)>,
    /// The task acting in the step being recorded, if a task is.
    current_task: Option<u64>,
    happened: Vec<Happening>,
    count: u64,
}

impl Trace {
    /// A trace that keeps its records when `keep` is true.
    pub fn new(keep: bool) -> Trace {
        Trace {
            hasher: Sha256::new(),
            pending: Vec::with_capacity(PENDING_BYTES_MAX + 256),
            statements: BTreeMap::new(),
            kept: keep.then(Vec::new),
            current: None,
            current_task: None,
            happened: Vec::new(),
            count: 0,
        }
    }

    fn feed(&mut self) -> Feed<'_> {
        if self.pending.len() >= PENDING_BYTES_MAX {
            self.hasher.update(&self.pending);
            self.pending.clear();
        }
        Feed {
            pending: &mut self.pending,
            hasher: &mut self.hasher,
            statements: &mut self.statements,
        }
    }

    /// Starts recording step `step`, of `actor`, at `time_ms`.
    pub fn begin(&mut self, step: u64, time_ms: i64, actor: Actor) {
        let mut feed = self.feed();
        feed.tag(b'S');
        feed.u64(step);
        feed.i64(time_ms);
        actor.feed(&mut feed);
        self.current = Some((step, time_ms, actor));
        self.current_task = None;
        self.happened.clear();
    }

    /// Names the task acting in the current step, for the text only (see [`TraceStep::task`]).
    pub fn set_task(&mut self, task: u64) {
        self.current_task = Some(task);
    }

    /// Records one happening of the current step.
    pub fn record(&mut self, happening: Happening) {
        happening.feed(&mut self.feed());
        if self.kept.is_some() {
            self.happened.push(happening);
        }
    }

    /// Records a statement without copying it unless the trace is kept: statements are most of
    /// what a run does, and the digest reads them where they are.
    pub fn record_sql(
        &mut self,
        statement: &Arc<str>,
        params: &[Value],
        result: &Result<StatementOutput, DbError>,
        changes_rows: bool,
        injected: bool,
    ) {
        let outcome = SqlOutcomeRef::of(result, changes_rows);
        feed_sql(&mut self.feed(), statement, params, &outcome, injected);
        if self.kept.is_some() {
            self.happened.push(Happening::Sql {
                statement: Arc::clone(statement),
                params: params.to_vec(),
                outcome: outcome.to_owned(),
                injected,
            });
        }
    }

    /// Ends the current step and keeps its record, if records are kept. The time may have
    /// moved since the step began (it is the time its changes were applied).
    pub fn end(&mut self, time_ms: i64) {
        let Some((step, _, actor)) = self.current.take() else {
            return;
        };
        let mut feed = self.feed();
        feed.tag(b'E');
        feed.i64(time_ms);
        self.count += 1;
        if let Some(kept) = &mut self.kept {
            kept.push(TraceStep {
                step,
                time_ms,
                actor,
                task: self.current_task.take(),
                happened: std::mem::take(&mut self.happened),
            });
        }
    }

    /// Records a whole step at once (set-up, heal, a failed invariant).
    pub fn push(&mut self, step: u64, time_ms: i64, actor: Actor, happening: Happening) {
        self.begin(step, time_ms, actor);
        self.record(happening);
        self.end(time_ms);
    }

    /// How many steps were recorded.
    pub fn step_count(&self) -> u64 {
        self.count
    }

    /// The digest so far: the first 16 bytes of the SHA-256, in hex.
    pub fn digest(&self) -> String {
        let mut hasher = self.hasher.clone();
        hasher.update(&self.pending);
        let full = hasher.finalize();
        full[..16].iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// The records, if they were kept.
    pub fn into_steps(self) -> Option<Vec<TraceStep>> {
        self.kept
    }

    /// The records kept so far (none unless records are kept).
    pub fn steps(&self) -> &[TraceStep] {
        self.kept.as_deref().unwrap_or(&[])
    }
}
