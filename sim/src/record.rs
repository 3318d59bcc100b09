//! What the simulator observed while a run went on, for the invariants that judge it and the
//! probes that count what it reached: what one step changed (commits, effects, answers, provider
//! requests and replies) and the facts kept over the whole run (who held each lease, which events
//! were ever received). Plain records, filled in by the world and read by everyone else; this
//! module must not decide or check anything.

use std::collections::{BTreeMap, BTreeSet};

use commitgap::receiver::Answer;

use crate::view::RowDiff;

/// Who made a delivery, for the invariants that judge how it was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The sender, signing with the endpoint's secret at `timestamp_s` by its own clock.
    Sender {
        /// The signature's timestamp by the sender's clock, in seconds.
        timestamp_s: i64,
    },
    /// An attacker or a misbehaving sender: `attack` names what is wrong with it.
    Hostile {
        /// Name of what is wrong with the delivery.
        attack: String,
    },
}

/// What one step changed.
#[derive(Debug, Default)]
pub struct StepRecord {
    /// Transactions committed in this step.
    pub commits: Vec<CommitRecord>,
    /// Indexes of effects the provider performed in this step.
    pub new_effects: Vec<usize>,
    /// Answers receivers gave in this step.
    pub answers: Vec<AnswerRecord>,
    /// Requests sent to the provider in this step.
    pub requests: Vec<RequestRecord>,
    /// Provider replies (or timeouts) received in this step.
    pub replies: Vec<ReplyRecord>,
    /// Processes whose task returned in this step with a transaction still open (a crash is not
    /// a return; a handler whose web framework commits after the answer is not counted).
    pub transactions_left_open: Vec<String>,
    /// What a receipt purge deleted or left against its cutoff, one line each (see
    /// `world/purges.rs`).
    pub purge_violations: Vec<String>,
}

impl StepRecord {
    /// Whether nothing at all was recorded in this step.
    pub fn is_empty(&self) -> bool {
        self.commits.is_empty()
            && self.new_effects.is_empty()
            && self.answers.is_empty()
            && self.requests.is_empty()
            && self.replies.is_empty()
            && self.transactions_left_open.is_empty()
            && self.purge_violations.is_empty()
    }

    /// Empties every list, ready for the next step.
    pub fn clear(&mut self) {
        self.commits.clear();
        self.new_effects.clear();
        self.answers.clear();
        self.requests.clear();
        self.replies.clear();
        self.transactions_left_open.clear();
        self.purge_violations.clear();
    }
}

/// One request a process sent to the provider.
#[derive(Debug)]
pub struct RequestRecord {
    /// Process that sent the request.
    pub process_id: String,
    /// Operation key the request was about.
    pub key: String,
    /// The body of a `Send`; `None` for a lookup.
    pub payload: Option<String>,
    /// Whether the caller's connection had a transaction open when it called.
    pub in_transaction: bool,
}

/// One reply (or timeout) a process received from the provider.
#[derive(Debug)]
pub struct ReplyRecord {
    /// Process that received the reply.
    pub process_id: String,
    /// Operation key of the request answered.
    pub key: String,
    /// The business operation of the request, when it was a readable `Send`.
    pub operation: Option<String>,
    /// The time by the receiving process's own clock.
    pub process_now_ms: i64,
    /// Whether a pause or a clock jump hit the caller while the call was in flight.
    pub disturbed: bool,
}

/// One committed transaction.
#[derive(Debug)]
pub struct CommitRecord {
    /// The process whose connection committed, e.g. `relay-1#2`.
    pub process_id: String,
    /// The attack, when the committing task was handling a hostile delivery.
    pub hostile: Option<String>,
    /// Row changes the transaction made, per observed table.
    pub diffs: Vec<RowDiff>,
}

/// One answer a receiver gave.
#[derive(Debug)]
pub struct AnswerRecord {
    /// Receiver process that answered.
    pub process_id: String,
    /// Account the delivered event came from.
    pub account: String,
    /// Upstream event id of the delivery.
    pub event_id: String,
    /// What the receiver answered.
    pub answer: Answer,
    /// Who made the delivery.
    pub origin: Origin,
    /// The receiver's clock, in seconds, when it answered.
    pub receiver_now_s: i64,
}

impl History {
    /// The entities `(tenant, subject)` that ever moved from state `from` to state `to`.
    pub fn moves_from_to<'a>(
        &'a self,
        from: &'a str,
        to: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.moves
            .iter()
            .filter(move |(_, _, before, after)| before == from && after == to)
            .map(|(tenant, subject, _, _)| (tenant.as_str(), subject.as_str()))
    }
}

/// Facts accumulated over the run, for invariants that need the past.
#[derive(Debug, Default)]
pub struct History {
    /// Who committed each lease: `(operation key, lease token)` to process id.
    pub lease_holders: BTreeMap<(String, i64), String>,
    /// Every `(account, event_id)` whose receipt ever committed (purges do not erase this).
    pub ever_received: BTreeSet<(String, String)>,
    /// Every distinct move of an entity's state committed so far: `(tenant, subject, state
    /// before, state after)`, for rules about which moves happened (a refund before a payment).
    pub moves: BTreeSet<(String, String, String, String)>,
    /// What is stuck after heal, once the world has seen work make no progress for longer than
    /// the system's own waits allow (see `work-progresses-after-heal`).
    pub stuck: Option<String>,
    /// The furthest any process's clock has been from true time so far in the run, in either
    /// direction (0 while no clock has moved).
    pub clock_offset_max_ms: i64,
    /// The obligations (by operation key) that were dead when the operator set out to requeue
    /// the dead ones after heal; empty before that.
    pub dead_at_requeue: BTreeSet<String>,
}
