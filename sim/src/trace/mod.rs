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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use commitgap::env::{DbError, Value};
use commitgap::provider::{CallError, ProviderReply};
use commitgap::receiver::Answer;
use sha2::{Digest, Sha256};

use crate::db::StatementOutput;
use crate::faults::Attack;

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
    Rows { count: usize, first: Option<Vec<Value>> },
    /// The error the statement returned.
    Failed(String),
}

/// A change a commit made, as the system's decoder read the rows: the facts about obligations
/// and their leases that the invariants and the timeline care about, whatever the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// A worker took the lease on an obligation: its token grew.
    LeaseTaken { operation_key: String, token: i64 },
    /// The lease's holder moved its expiry later.
    LeaseExtended { operation_key: String },
    /// The lease was given up without the obligation settling (a retry later).
    LeaseReleased { operation_key: String },
    /// The obligation is done.
    Done { operation_key: String },
    /// The obligation is dead.
    Dead { operation_key: String },
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
    Busy { for_ms: i64 },
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
        system: String,
        seed: u64,
        rows: usize,
        accounts: usize,
        /// Business entities among the fixtures.
        subjects: usize,
        events: usize,
        streams: usize,
        receivers: u32,
        relay_workers: u32,
        sender: &'static str,
    },
    /// A statement ran (or a fault failed it without running, `injected`).
    Sql {
        statement: Arc<str>,
        params: Vec<Value>,
        outcome: SqlOutcome,
        injected: bool,
    },
    /// A transaction of the actor's committed: rows written, and what they changed.
    Committed {
        rows: usize,
        observed: Vec<Observed>,
    },
    /// A task ended with its transaction open, which was rolled back.
    TaskEndedInTransaction,
    Sleep {
        duration_ms: i64,
    },
    Wake,
    /// A request to the provider (a `send`, or a `lookup`).
    Call {
        send: bool,
        key: String,
        outcome: CallOutcome,
        reply_lost: bool,
    },
    /// The reply (or the timeout) reached the caller.
    Reply(Result<ProviderReply, String>),
    /// A slow provider acted on a request whose caller had timed out.
    ProviderFinishes {
        key: String,
        outcome: Result<ProviderReply, String>,
    },
    /// The provider forgot a key, at the time the key-expiry fault set for it.
    KeyForgotten {
        key: String,
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
        answer: Answer,
        stream: usize,
    },
    /// The sender got an answer.
    SenderGot {
        answer: Answer,
        stream: usize,
        attempt: u32,
        how: DeliveryHow,
        next_attempt_in_ms: Option<i64>,
    },
    /// The sender created an event.
    Emit {
        /// The event's type on the wire.
        kind: String,
        event_id: String,
        account: String,
        tenant: String,
        subject: String,
        subscriptions: usize,
    },
    /// The sender delivered an event.
    Deliver {
        event_id: String,
        account: String,
        stream: usize,
        how: DeliveryHow,
        arrival: Arrival,
    },
    /// An attempt's timeout came: the next attempt is due in this long, or none (the attempt
    /// had settled).
    AttemptTimedOut {
        stream: usize,
        attempt: u32,
        next_attempt_in_ms: Option<i64>,
        settled: bool,
    },
    Crash {
        process: String,
        tasks: usize,
        open_transactions: usize,
        restart_in_ms: i64,
    },
    Restart {
        process: String,
    },
    RestartSkipped,
    Pause {
        process: String,
        duration_ms: i64,
    },
    ClockSet {
        process: String,
        offset_ms: i64,
    },
    SenderClockSet {
        offset_ms: i64,
    },
    /// A fault model's timer went off.
    FaultTimer,
    Purge {
        older_than_ms: i64,
    },
    PurgeSkipped,
    /// A hostile request, copied from a genuine delivery.
    Attack {
        attack: Attack,
        event_id: String,
        account: String,
        arrival: Arrival,
    },
    /// A hostile request named a delivery this run never made.
    AttackSkipped {
        attack: Attack,
        stream: String,
    },
    OperatorRequeue,
    OperatorRedeliver {
        streams: usize,
        round: u32,
    },
    /// A line the system logged through `Env::log`.
    Log(String),
    /// The fault phase ended.
    Heal {
        restarting: usize,
    },
    /// An invariant failed.
    Failed {
        invariant: String,
        evidence: String,
    },
}

/// One step's record.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceStep {
    pub step: u64,
    pub time_ms: i64,
    pub actor: Actor,
    pub happened: Vec<Happening>,
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
        self.happened.clear();
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

// ----- The digest's encoding -----

/// Fed bytes are hashed once this many are pending.
const PENDING_BYTES_MAX: usize = 4_096;

/// Feeds a record's fields to the hasher in a fixed encoding: a tag byte per variant, integers
/// little-endian, strings and lists prefixed with their length. Two records feed the same bytes
/// exactly when they are equal.
struct Feed<'a> {
    pending: &'a mut Vec<u8>,
    hasher: &'a mut Sha256,
    statements: &'a mut BTreeMap<Arc<str>, u64>,
}

impl Feed<'_> {
    /// A statement's text the first time the run feeds it, its number after that.
    fn statement(&mut self, statement: &Arc<str>) {
        match self.statements.get(statement) {
            Some(&number) => {
                self.tag(b'#');
                self.u64(number);
            }
            None => {
                let number = self.statements.len() as u64;
                self.statements.insert(Arc::clone(statement), number);
                self.tag(b'"');
                self.str(statement);
            }
        }
    }

    fn tag(&mut self, tag: u8) {
        self.pending.push(tag);
    }

    fn u64(&mut self, value: u64) {
        self.pending.extend_from_slice(&value.to_le_bytes());
    }

    fn i64(&mut self, value: i64) {
        self.pending.extend_from_slice(&value.to_le_bytes());
    }

    /// Long byte strings go to the hasher at once, after what is pending, in the same order.
    fn bytes(&mut self, bytes: &[u8]) {
        if bytes.len() >= PENDING_BYTES_MAX {
            self.hasher.update(&*self.pending);
            self.pending.clear();
            self.hasher.update(bytes);
        } else {
            self.pending.extend_from_slice(bytes);
        }
    }

    fn usize(&mut self, value: usize) {
        self.u64(value as u64);
    }

    fn bool(&mut self, value: bool) {
        self.tag(u8::from(value));
    }

    fn str(&mut self, value: &str) {
        self.usize(value.len());
        self.bytes(value.as_bytes());
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.tag(0),
            Value::Integer(number) => {
                self.tag(1);
                self.i64(*number);
            }
            Value::Real(number) => {
                self.tag(2);
                self.u64(number.to_bits());
            }
            Value::Text(text) => {
                self.tag(3);
                self.str(text);
            }
            Value::Blob(bytes) => {
                self.tag(4);
                self.usize(bytes.len());
                self.bytes(bytes);
            }
        }
    }

    fn values(&mut self, values: &[Value]) {
        self.usize(values.len());
        for value in values {
            self.value(value);
        }
    }

    fn reply(&mut self, reply: &Result<ProviderReply, String>) {
        match reply {
            Ok(ProviderReply::Accepted { effect_id, replayed }) => {
                self.tag(0);
                self.str(effect_id);
                self.bool(*replayed);
            }
            Ok(ProviderReply::Found { effect_id }) => {
                self.tag(1);
                self.str(effect_id);
            }
            Ok(ProviderReply::NotFound) => self.tag(2),
            Ok(ProviderReply::Conflict) => self.tag(3),
            Ok(ProviderReply::Rejected { status, reason }) => {
                self.tag(4);
                self.u64(u64::from(*status));
                self.str(reason);
            }
            Err(error) => {
                self.tag(5);
                self.str(error);
            }
        }
    }

    fn answer(&mut self, answer: &Answer) {
        self.u64(u64::from(answer.status()));
        self.displayed(answer);
    }

    /// What `self.str(&value.to_string())` feeds, written in place without the string.
    fn displayed(&mut self, value: &dyn std::fmt::Display) {
        use std::io::Write as _;
        let at = self.pending.len();
        self.pending.extend_from_slice(&[0; 8]);
        write!(self.pending, "{value}").expect("writing to memory does not fail");
        let len = (self.pending.len() - at - 8) as u64;
        self.pending[at..at + 8].copy_from_slice(&len.to_le_bytes());
    }

    fn how(&mut self, how: &DeliveryHow) {
        match how {
            DeliveryHow::Attempt(attempt) => {
                self.tag(0);
                self.u64(u64::from(*attempt));
            }
            DeliveryHow::Copy => self.tag(1),
            DeliveryHow::Extra(reason) => {
                self.tag(2);
                self.str(reason);
            }
        }
    }

    fn arrival(&mut self, arrival: &Arrival) {
        match arrival {
            Arrival::To(process) => {
                self.tag(0);
                self.str(process);
            }
            Arrival::Lost => self.tag(1),
            Arrival::Refused => self.tag(2),
        }
    }

    fn option_i64(&mut self, value: Option<i64>) {
        match value {
            Some(value) => {
                self.tag(1);
                self.i64(value);
            }
            None => self.tag(0),
        }
    }
}

/// A statement's outcome, borrowed from the result it came from.
enum SqlOutcomeRef<'a> {
    Done,
    Changed(usize),
    Rows {
        count: usize,
        first: Option<&'a [Value]>,
    },
    Failed(String),
}

impl<'a> SqlOutcomeRef<'a> {
    fn of(result: &'a Result<StatementOutput, DbError>, changes_rows: bool) -> SqlOutcomeRef<'a> {
        match result {
            // SQLite's change count is stale after BEGIN, COMMIT and other non-DML statements.
            Ok(StatementOutput::Changed(_)) if !changes_rows => SqlOutcomeRef::Done,
            Ok(StatementOutput::Changed(count)) => SqlOutcomeRef::Changed(*count),
            Ok(StatementOutput::Rows(rows)) => SqlOutcomeRef::Rows {
                count: rows.len(),
                first: rows.first().map(|row| row.0.as_slice()),
            },
            Err(error) => SqlOutcomeRef::Failed(error.to_string()),
        }
    }

    fn of_owned(outcome: &'a SqlOutcome) -> SqlOutcomeRef<'a> {
        match outcome {
            SqlOutcome::Done => SqlOutcomeRef::Done,
            SqlOutcome::Changed(count) => SqlOutcomeRef::Changed(*count),
            SqlOutcome::Rows { count, first } => SqlOutcomeRef::Rows {
                count: *count,
                first: first.as_deref(),
            },
            SqlOutcome::Failed(message) => SqlOutcomeRef::Failed(message.clone()),
        }
    }

    fn to_owned(&self) -> SqlOutcome {
        match self {
            SqlOutcomeRef::Done => SqlOutcome::Done,
            SqlOutcomeRef::Changed(count) => SqlOutcome::Changed(*count),
            SqlOutcomeRef::Rows { count, first } => SqlOutcome::Rows {
                count: *count,
                first: first.map(<[Value]>::to_vec),
            },
            SqlOutcomeRef::Failed(message) => SqlOutcome::Failed(message.clone()),
        }
    }
}

/// The encoding of a statement, shared by the borrowed and the kept form so that both feed the
/// same bytes.
fn feed_sql(
    feed: &mut Feed<'_>,
    statement: &Arc<str>,
    params: &[Value],
    outcome: &SqlOutcomeRef<'_>,
    injected: bool,
) {
    feed.tag(b'q');
    feed.statement(statement);
    feed.values(params);
    match outcome {
        SqlOutcomeRef::Done => feed.tag(0),
        SqlOutcomeRef::Changed(count) => {
            feed.tag(1);
            feed.usize(*count);
        }
        SqlOutcomeRef::Rows { count, first } => {
            feed.tag(2);
            feed.usize(*count);
            match first {
                Some(first) => {
                    feed.tag(1);
                    feed.values(first);
                }
                None => feed.tag(0),
            }
        }
        SqlOutcomeRef::Failed(message) => {
            feed.tag(3);
            feed.str(message);
        }
    }
    feed.bool(injected);
}

impl Actor {
    fn feed(&self, feed: &mut Feed<'_>) {
        match self {
            Actor::Process(id) => {
                feed.tag(0);
                feed.str(id);
            }
            Actor::Sender => feed.tag(1),
            Actor::Provider => feed.tag(2),
            Actor::Operator => feed.tag(3),
            Actor::Fault(name) => {
                feed.tag(4);
                feed.str(name);
            }
            Actor::World => feed.tag(5),
            Actor::Invariant => feed.tag(6),
        }
    }
}

impl Observed {
    fn feed(&self, feed: &mut Feed<'_>) {
        let (tag, key) = match self {
            Observed::LeaseTaken { operation_key, token } => {
                feed.tag(0);
                feed.i64(*token);
                return feed.str(operation_key);
            }
            Observed::LeaseExtended { operation_key } => (1, operation_key),
            Observed::LeaseReleased { operation_key } => (2, operation_key),
            Observed::Done { operation_key } => (3, operation_key),
            Observed::Dead { operation_key } => (4, operation_key),
        };
        feed.tag(tag);
        feed.str(key);
    }
}

impl Happening {
    fn feed(&self, feed: &mut Feed<'_>) {
        match self {
            Happening::Sql {
                statement,
                params,
                outcome,
                injected,
            } => feed_sql(
                feed,
                statement,
                params,
                &SqlOutcomeRef::of_owned(outcome),
                *injected,
            ),
            other => other.feed_other(feed),
        }
    }

    /// The encoding of everything but statements.
    fn feed_other(&self, feed: &mut Feed<'_>) {
        match self {
            Happening::Sql { .. } => unreachable!("statements are fed by Happening::feed"),
            Happening::Setup {
                system,
                seed,
                rows,
                accounts,
                subjects,
                events,
                streams,
                receivers,
                relay_workers,
                sender,
            } => {
                feed.tag(b'a');
                feed.str(system);
                feed.u64(*seed);
                for count in [*rows, *accounts, *subjects, *events, *streams] {
                    feed.usize(count);
                }
                feed.u64(u64::from(*receivers));
                feed.u64(u64::from(*relay_workers));
                feed.str(sender);
            }
            Happening::Committed { rows, observed } => {
                feed.tag(b'c');
                feed.usize(*rows);
                feed.usize(observed.len());
                for change in observed {
                    change.feed(feed);
                }
            }
            Happening::TaskEndedInTransaction => feed.tag(b't'),
            Happening::Sleep { duration_ms } => {
                feed.tag(b's');
                feed.i64(*duration_ms);
            }
            Happening::Wake => feed.tag(b'w'),
            Happening::Call {
                send,
                key,
                outcome,
                reply_lost,
            } => {
                feed.tag(b'k');
                feed.bool(*send);
                feed.str(key);
                match outcome {
                    CallOutcome::Replied(reply) => {
                        feed.tag(0);
                        feed.reply(reply);
                    }
                    CallOutcome::Busy { for_ms } => {
                        feed.tag(1);
                        feed.i64(*for_ms);
                    }
                }
                feed.bool(*reply_lost);
            }
            Happening::Reply(reply) => {
                feed.tag(b'r');
                feed.reply(reply);
            }
            Happening::ProviderFinishes { key, outcome } => {
                feed.tag(b'f');
                feed.str(key);
                feed.reply(outcome);
            }
            Happening::KeyForgotten { key } => {
                feed.tag(b'x');
                feed.str(key);
            }
            other => other.feed_messages(feed),
        }
    }

    /// The encoding of deliveries, answers and the sender's side.
    fn feed_messages(&self, feed: &mut Feed<'_>) {
        match self {
            Happening::Answer(answer) => {
                feed.tag(b'A');
                feed.answer(answer);
            }
            Happening::AnswerSent => feed.tag(b'B'),
            Happening::AnswerWritten => feed.tag(b'C'),
            Happening::AnswerLostInCrash => feed.tag(b'D'),
            Happening::AnswerLost { answer, stream } => {
                feed.tag(b'F');
                feed.answer(answer);
                feed.usize(*stream);
            }
            Happening::SenderGot {
                answer,
                stream,
                attempt,
                how,
                next_attempt_in_ms,
            } => {
                feed.tag(b'G');
                feed.answer(answer);
                feed.usize(*stream);
                feed.u64(u64::from(*attempt));
                feed.how(how);
                feed.option_i64(*next_attempt_in_ms);
            }
            Happening::Emit {
                kind,
                event_id,
                account,
                tenant,
                subject,
                subscriptions,
            } => {
                feed.tag(b'H');
                feed.str(kind);
                for text in [event_id, account, tenant, subject] {
                    feed.str(text);
                }
                feed.usize(*subscriptions);
            }
            Happening::Deliver {
                event_id,
                account,
                stream,
                how,
                arrival,
            } => {
                feed.tag(b'I');
                feed.str(event_id);
                feed.str(account);
                feed.usize(*stream);
                feed.how(how);
                feed.arrival(arrival);
            }
            Happening::AttemptTimedOut {
                stream,
                attempt,
                next_attempt_in_ms,
                settled,
            } => {
                feed.tag(b'J');
                feed.usize(*stream);
                feed.u64(u64::from(*attempt));
                feed.option_i64(*next_attempt_in_ms);
                feed.bool(*settled);
            }
            other => other.feed_faults(feed),
        }
    }

    /// The encoding of faults, recovery and the rest.
    fn feed_faults(&self, feed: &mut Feed<'_>) {
        match self {
            Happening::Crash {
                process,
                tasks,
                open_transactions,
                restart_in_ms,
            } => {
                feed.tag(b'K');
                feed.str(process);
                feed.usize(*tasks);
                feed.usize(*open_transactions);
                feed.i64(*restart_in_ms);
            }
            Happening::Restart { process } => {
                feed.tag(b'L');
                feed.str(process);
            }
            Happening::RestartSkipped => feed.tag(b'M'),
            Happening::Pause { process, duration_ms } => {
                feed.tag(b'N');
                feed.str(process);
                feed.i64(*duration_ms);
            }
            Happening::ClockSet { process, offset_ms } => {
                feed.tag(b'O');
                feed.str(process);
                feed.i64(*offset_ms);
            }
            Happening::SenderClockSet { offset_ms } => {
                feed.tag(b'P');
                feed.i64(*offset_ms);
            }
            Happening::FaultTimer => feed.tag(b'Q'),
            Happening::Purge { older_than_ms } => {
                feed.tag(b'R');
                feed.i64(*older_than_ms);
            }
            Happening::PurgeSkipped => feed.tag(b'T'),
            Happening::Attack {
                attack,
                event_id,
                account,
                arrival,
            } => {
                feed.tag(b'U');
                feed.str(attack.name());
                feed.str(event_id);
                feed.str(account);
                feed.arrival(arrival);
            }
            Happening::AttackSkipped { attack, stream } => {
                feed.tag(b'V');
                feed.str(attack.name());
                feed.str(stream);
            }
            Happening::OperatorRequeue => feed.tag(b'W'),
            Happening::OperatorRedeliver { streams, round } => {
                feed.tag(b'X');
                feed.usize(*streams);
                feed.u64(u64::from(*round));
            }
            Happening::Log(message) => {
                feed.tag(b'Y');
                feed.str(message);
            }
            Happening::Heal { restarting } => {
                feed.tag(b'Z');
                feed.usize(*restarting);
            }
            Happening::Failed { invariant, evidence } => {
                feed.tag(b'!');
                feed.str(invariant);
                feed.str(evidence);
            }
            other => unreachable!("fed by an earlier match: {other:?}"),
        }
    }
}

// ----- Text, for people -----

/// `    42  0:00:01.042 receiver-2#1  sql INSERT ... | answer 200 Applied`: the step, the virtual
/// time, the actor, and what happened, parts joined by ` | `. The set-up is one line of its own.
impl fmt::Display for TraceStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [setup @ Happening::Setup { .. }] = &self.happened[..] {
            return write!(f, "{setup}");
        }
        write!(
            f,
            "{:>6} {:>12} {:<13} ",
            self.step,
            format_time_ms(self.time_ms),
            self.actor.to_string()
        )?;
        for (index, happening) in self.happened.iter().enumerate() {
            if index > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "{happening}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Happening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Happening::Setup {
                system,
                seed,
                rows,
                accounts,
                subjects,
                events,
                streams,
                receivers,
                relay_workers,
                sender,
            } => write!(
                f,
                "setup system={system} seed={seed} rows={rows} accounts={accounts} subjects={subjects} events={events} streams={streams} receivers={receivers} relay-workers={relay_workers} sender={sender}"
            ),
            Happening::Sql {
                statement,
                params,
                outcome,
                injected,
            } => write_sql(f, statement, params, outcome, *injected),
            Happening::Committed { rows, observed } => {
                write!(f, "commit {}", count(*rows, "row", "rows"))?;
                for (index, change) in observed.iter().enumerate() {
                    f.write_str(if index == 0 { ": " } else { ", " })?;
                    write!(f, "{change}")?;
                }
                Ok(())
            }
            Happening::TaskEndedInTransaction => f.write_str("task ended inside a transaction; rolled back"),
            Happening::Sleep { duration_ms } => write!(f, "sleep {}", format_duration_ms(*duration_ms)),
            Happening::Wake => f.write_str("wake"),
            Happening::Call {
                send,
                key,
                outcome,
                reply_lost,
            } => {
                let verb = if *send { "send" } else { "lookup" };
                write!(f, "call {verb} key={key} -> ")?;
                match outcome {
                    CallOutcome::Replied(reply) => write!(f, "provider {}", Reply(reply))?,
                    CallOutcome::Busy { for_ms } => {
                        write!(f, "provider busy for {}", format_duration_ms(*for_ms))?
                    }
                }
                if *reply_lost {
                    f.write_str(", reply lost")?;
                }
                Ok(())
            }
            Happening::Reply(reply) => write!(f, "reply {}", Reply(reply)),
            Happening::ProviderFinishes { key, outcome } => {
                write!(
                    f,
                    "provider finishes key={key}: {} (the caller timed out)",
                    Reply(outcome)
                )
            }
            Happening::KeyForgotten { key } => write!(f, "provider forgot key {key}"),
            other => other.fmt_messages(f),
        }
    }
}

impl Happening {
    fn fmt_messages(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Happening::Answer(answer) => write!(f, "answer {answer}"),
            Happening::AnswerSent => f.write_str("answer sent"),
            Happening::AnswerWritten => f.write_str("answer written (no sender waits for it)"),
            Happening::AnswerLostInCrash => {
                f.write_str("answer lost: the receiver crashed before writing it")
            }
            Happening::AnswerLost { answer, stream } => write!(f, "answer {answer} to stream {stream} lost"),
            Happening::SenderGot {
                answer,
                stream,
                attempt,
                how,
                next_attempt_in_ms,
            } => {
                write!(f, "sender got {answer} for stream {stream} attempt {attempt}")?;
                if *how == DeliveryHow::Copy {
                    f.write_str(" (a copy; ignored)")?;
                }
                if let Some(next_ms) = next_attempt_in_ms {
                    write!(f, "; next attempt in {}", format_duration_ms(*next_ms))?;
                }
                Ok(())
            }
            Happening::Emit {
                kind,
                event_id,
                account,
                tenant,
                subject,
                subscriptions,
            } => write!(
                f,
                "emit {kind} {event_id} ({account}, {tenant}/{subject}, {})",
                count(*subscriptions, "subscription", "subscriptions")
            ),
            Happening::Deliver {
                event_id,
                account,
                stream,
                how,
                arrival,
            } => {
                write!(f, "deliver {event_id} ({account}) stream {stream} ")?;
                match how {
                    DeliveryHow::Attempt(attempt) => write!(f, "attempt {attempt}")?,
                    DeliveryHow::Copy => f.write_str("(copy)")?,
                    DeliveryHow::Extra(reason) => write!(f, "({reason})")?,
                }
                write!(f, "{arrival}")
            }
            Happening::AttemptTimedOut {
                stream,
                attempt,
                next_attempt_in_ms,
                settled,
            } => match (settled, next_attempt_in_ms) {
                (true, _) => write!(
                    f,
                    "attempt {attempt} of stream {stream} settled before its timeout"
                ),
                (false, Some(next_ms)) => write!(
                    f,
                    "attempt {attempt} of stream {stream} timed out; next attempt in {}",
                    format_duration_ms(*next_ms)
                ),
                (false, None) => write!(
                    f,
                    "attempt {attempt} of stream {stream} timed out; the sender gave up"
                ),
            },
            other => other.fmt_faults(f),
        }
    }

    fn fmt_faults(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Happening::Crash {
                process,
                tasks,
                open_transactions,
                restart_in_ms,
            } => write!(
                f,
                "crash {process}: {} dropped, {} rolled back, restart in {}",
                count(*tasks, "task", "tasks"),
                count(*open_transactions, "open transaction", "open transactions"),
                format_duration_ms(*restart_in_ms)
            ),
            Happening::Restart { process } => write!(f, "restart as {process}"),
            Happening::RestartSkipped => f.write_str("restart skipped: already up"),
            Happening::Pause { process, duration_ms } => {
                write!(f, "{process} pauses for {}", format_duration_ms(*duration_ms))
            }
            Happening::ClockSet { process, offset_ms } => {
                write!(f, "{process} clock set {offset_ms:+} ms from true time")
            }
            Happening::SenderClockSet { offset_ms } => {
                write!(f, "sender clock set {offset_ms:+} ms from true time")
            }
            Happening::FaultTimer => f.write_str("timer"),
            Happening::Purge { older_than_ms } => {
                write!(
                    f,
                    "purge receipts received before {}",
                    format_time_ms(*older_than_ms)
                )
            }
            Happening::PurgeSkipped => f.write_str("purge skipped: the purge process is down"),
            Happening::Attack {
                attack,
                event_id,
                account,
                arrival,
            } => write!(
                f,
                "attacker sends {} copied from {event_id} ({account}){arrival}",
                attack.name()
            ),
            Happening::AttackSkipped { attack, stream } => {
                write!(
                    f,
                    "attack `{} {stream}` names nothing in this run; skipped",
                    attack.name()
                )
            }
            Happening::OperatorRequeue => f.write_str("operator requeues dead obligations"),
            Happening::OperatorRedeliver { streams, round } => write!(
                f,
                "operator redelivers {} (round {round})",
                count(*streams, "failed delivery", "failed deliveries")
            ),
            Happening::Log(message) => write!(f, "log: {message}"),
            Happening::Heal { restarting } => write!(
                f,
                "heal: faults stop, {} restart, clocks are set right",
                count(*restarting, "crashed process", "crashed processes")
            ),
            Happening::Failed { invariant, evidence } => write!(f, "FAILED {invariant}: {evidence}"),
            other => unreachable!("written by an earlier match: {other:?}"),
        }
    }
}

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arrival::To(process) => write!(f, " -> {process}"),
            Arrival::Lost => f.write_str(": lost on the way in"),
            Arrival::Refused => f.write_str(": connection refused, no receiver up"),
        }
    }
}

/// A provider's reply, or why there was none, for people.
struct Reply<'a>(&'a Result<ProviderReply, String>);

impl fmt::Display for Reply<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Ok(ProviderReply::Accepted {
                effect_id,
                replayed: false,
            }) => write!(f, "accepted {effect_id} (new effect)"),
            Ok(ProviderReply::Accepted {
                effect_id,
                replayed: true,
            }) => write!(f, "accepted {effect_id} (replayed)"),
            Ok(ProviderReply::Found { effect_id }) => write!(f, "found {effect_id}"),
            Ok(ProviderReply::NotFound) => f.write_str("not found"),
            Ok(ProviderReply::Conflict) => f.write_str("409 conflict"),
            Ok(ProviderReply::Rejected { status, reason }) => write!(f, "rejected {status}: {reason}"),
            Err(error) => write!(f, "error: {error}"),
        }
    }
}

/// A call's failure as the records hold it.
pub fn call_error_text(error: &CallError) -> String {
    match error {
        CallError::Timeout => "timed out".to_owned(),
        CallError::Unavailable(reason) => format!("unavailable: {reason}"),
    }
}

/// `1 row`, `3 rows`.
fn count(number: usize, one: &str, many: &str) -> String {
    format!("{number} {}", if number == 1 { one } else { many })
}

/// `sql <statement, whitespace collapsed, cut at 96 bytes> [params] -> outcome`.
fn write_sql(
    f: &mut fmt::Formatter<'_>,
    statement: &str,
    params: &[Value],
    outcome: &SqlOutcome,
    injected: bool,
) -> fmt::Result {
    write!(f, "sql {}", summarize_sql(statement))?;
    if !params.is_empty() {
        let described: Vec<String> = params.iter().map(describe_value).collect();
        write!(f, " [{}]", described.join(", "))?;
    }
    match outcome {
        SqlOutcome::Done => f.write_str(" -> ok")?,
        SqlOutcome::Changed(changed) => write!(f, " -> {changed} changed")?,
        SqlOutcome::Rows { count: rows, first } => {
            write!(f, " -> {}", count(*rows, "row", "rows"))?;
            if let Some(first) = first {
                let described: Vec<String> = first.iter().map(describe_value).collect();
                write!(f, " ({})", described.join(", "))?;
            }
        }
        SqlOutcome::Failed(error) => write!(f, " -> error: {error}")?,
    }
    if injected {
        f.write_str(" (injected)")?;
    }
    Ok(())
}

/// Collapses whitespace and shortens `sql` for people: at most 96 bytes, then `…`.
pub fn summarize_sql(sql: &str) -> String {
    const LIMIT: usize = 96;
    let mut out = String::new();
    for word in sql.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        if out.len() + word.len() >= LIMIT {
            let room = LIMIT.saturating_sub(out.len()).max(1);
            let cut = (0..=room.min(word.len()))
                .rev()
                .find(|&index| word.is_char_boundary(index))
                .unwrap_or(0);
            out.push_str(&word[..cut.max(word.chars().next().map_or(0, char::len_utf8))]);
            out.push('…');
            return out;
        }
        out.push_str(word);
    }
    out
}

/// A parameter or column value for people: text quoted and cut at 40 bytes.
pub fn describe_value(value: &Value) -> String {
    const LIMIT: usize = 40;
    match value {
        Value::Null => "NULL".to_owned(),
        Value::Integer(number) => number.to_string(),
        Value::Real(number) => number.to_string(),
        Value::Text(text) if text.len() > LIMIT => {
            let cut = (0..=LIMIT)
                .rev()
                .find(|&index| text.is_char_boundary(index))
                .unwrap_or(0);
            format!("'{}…'", &text[..cut])
        }
        Value::Text(text) => format!("'{text}'"),
        Value::Blob(bytes) => format!("<{} bytes>", bytes.len()),
    }
}

/// Formats virtual milliseconds as `h:mm:ss.mmm` (hours are not wrapped at a day; times before
/// the start, such as a purge cutoff, get a minus sign).
pub fn format_time_ms(time_ms: i64) -> String {
    let sign = if time_ms < 0 { "-" } else { "" };
    let magnitude = time_ms.unsigned_abs();
    let (seconds, millis) = (magnitude / 1_000, magnitude % 1_000);
    format!(
        "{sign}{}:{:02}:{:02}.{millis:03}",
        seconds / 3_600,
        (seconds / 60) % 60,
        seconds % 60
    )
}

/// Formats a duration for people: `250ms`, `12s`, `5m`, `21m47.357s`, `2d3h`.
pub fn format_duration_ms(duration_ms: i64) -> String {
    if duration_ms < 1_000 {
        return format!("{duration_ms}ms");
    }
    let mut rest = duration_ms;
    let mut text = String::new();
    for (size, unit) in [(86_400_000, 'd'), (3_600_000, 'h'), (60_000, 'm')] {
        if rest >= size {
            text.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    match (rest / 1_000, rest % 1_000) {
        (0, 0) => {}
        (seconds, 0) => text.push_str(&format!("{seconds}s")),
        (seconds, millis) => text.push_str(&format!("{seconds}.{millis:03}s")),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(sql: &str) -> Arc<str> {
        Arc::from(sql)
    }

    #[test]
    fn the_digest_is_the_same_whether_records_are_kept_or_not() {
        let run = |keep: bool| {
            let mut trace = Trace::new(keep);
            trace.begin(1, 5, Actor::Process("receiver-1#1".into()));
            let rows = vec![commitgap::env::Row(vec![
                Value::Integer(7),
                Value::Text("a".into()),
            ])];
            trace.record_sql(
                &statement("SELECT a, b FROM t"),
                &[Value::Text("x".into())],
                &Ok(StatementOutput::Rows(rows)),
                false,
                false,
            );
            trace.record_sql(&statement("BEGIN"), &[], &Err(DbError::Busy), false, true);
            trace.record(Happening::Wake);
            trace.end(5);
            trace
        };
        let (kept, unkept) = (run(true), run(false));
        assert_eq!(kept.digest(), unkept.digest());
        // The kept records, fed again from their owned form, give the same digest.
        let mut again = Trace::new(false);
        for step in kept.steps() {
            again.begin(step.step, step.time_ms, step.actor.clone());
            for happening in &step.happened {
                again.record(happening.clone());
            }
            again.end(step.time_ms);
        }
        assert_eq!(again.digest(), kept.digest());
        assert_eq!(
            kept.steps()[0].to_string(),
            "     1  0:00:00.005 receiver-1#1  sql SELECT a, b FROM t ['x'] -> 1 row (7, 'a') | sql BEGIN -> error: database is busy (injected) | wake"
        );
    }

    #[test]
    fn the_digest_depends_on_every_field() {
        let digest = |happening: Happening| {
            let mut trace = Trace::new(false);
            trace.push(3, 9, Actor::Sender, happening);
            trace.digest()
        };
        let sleeps: Vec<String> = [1, 2]
            .iter()
            .map(|&duration_ms| digest(Happening::Sleep { duration_ms }))
            .collect();
        assert_ne!(sleeps[0], sleeps[1]);
        assert_ne!(digest(Happening::Wake), digest(Happening::FaultTimer));
        assert_ne!(
            digest(Happening::Log("ab".into())),
            digest(Happening::Log("a".into())),
        );
        assert_eq!(digest(Happening::Wake).len(), 32);
    }

    #[test]
    fn summaries_collapse_whitespace_and_stop_at_the_limit() {
        assert_eq!(summarize_sql("SELECT  a,\n  b\tFROM t"), "SELECT a, b FROM t");
        let long = format!("SELECT {} FROM t", "x".repeat(200));
        let summary = summarize_sql(&long);
        assert!(summary.ends_with('…') && summary.len() <= 100, "{summary}");
        assert_eq!(
            describe_value(&Value::Text("x".repeat(41))),
            format!("'{}…'", "x".repeat(40))
        );
    }

    #[test]
    fn times_and_durations_read_naturally() {
        assert_eq!(format_time_ms(0), "0:00:00.000");
        assert_eq!(format_time_ms(27 * 3_600_000 + 61_042), "27:01:01.042");
        assert_eq!(format_time_ms(-30_000), "-0:00:30.000");
        assert_eq!(format_duration_ms(300_000), "5m");
        assert_eq!(format_duration_ms(1_500), "1.500s");
        assert_eq!(format_duration_ms(250), "250ms");
        assert_eq!(format_duration_ms(1_307_357), "21m47.357s");
        assert_eq!(format_duration_ms(2 * 86_400_000 + 3 * 3_600_000), "2d3h");
    }

    #[test]
    fn counts_agree_with_their_number() {
        assert_eq!(count(1, "row", "rows"), "1 row");
        assert_eq!(count(0, "row", "rows"), "0 rows");
        let emit = Happening::Emit {
            kind: "payment.succeeded".into(),
            event_id: "evt-1".into(),
            account: "acct-a".into(),
            tenant: "tenant-a".into(),
            subject: "order-1".into(),
            subscriptions: 1,
        };
        assert!(emit.to_string().ends_with("1 subscription)"), "{emit}");
    }
}
