//! Invariants: what must hold, one file each, named as positive statements, listed once in
//! [`registry`].
//!
//! Safety invariants are checked after every step that committed rows, performed an effect or
//! answered a delivery; they look at that step's changes ([`StepRecord`]) against the committed
//! state, so each check costs what the step changed, not the size of the database. Liveness
//! invariants are checked once, after the faults healed and the world went quiet. Every check
//! reads an [`Observation`] and nothing else: it must not change the world or read the database.

mod completion_by_lease_holder;
mod dedupe_scope_per_account;
mod effect_matches_obligation;
mod every_event_processed;
mod final_state_matches_creation_order;
mod genuine_delivery_accepted;
mod hostile_delivery_changes_nothing;
mod hostile_delivery_refused;
mod lease_outlives_call;
mod no_call_inside_transaction;
mod no_stuck_key;
mod obligation_settles_with_effect_or_reason;
mod one_effect_per_operation;
mod one_obligation_per_operation;
mod one_receipt_per_event;
mod order_state_moves_forward;
mod outbox_drains;
mod paid_order_settled;
mod receipt_commits_with_its_work;
mod refund_first_never_ships;
mod request_matches_obligation;
mod sender_converges;
mod success_answer_has_receipt;

use std::collections::{BTreeMap, BTreeSet};

use commitgap::receiver::Answer;

use crate::config::Workload;
use crate::provider::ProviderModel;
use crate::sender::Sender;
use crate::view::{DbView, RowDiff};

/// When an invariant is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum InvariantKind {
    /// After every step, faults or not.
    Safety,
    /// Once, after heal, at quiescence.
    Liveness,
}

impl InvariantKind {
    pub fn name(self) -> &'static str {
        match self {
            InvariantKind::Safety => "safety",
            InvariantKind::Liveness => "liveness",
        }
    }
}

/// One invariant.
pub trait Invariant: Send + Sync {
    fn name(&self) -> &'static str;
    /// What it asserts, in one line.
    fn description(&self) -> &'static str;
    fn kind(&self) -> InvariantKind;
    /// `Err` carries the evidence, in one line a person can act on.
    fn check(&self, observation: &Observation<'_>) -> Result<(), String>;
}

/// Every invariant, safety first. Adding one is one file and one line here.
pub fn registry() -> Vec<Box<dyn Invariant>> {
    vec![
        // First, so that a hostile request's commit is named for what it is, not for the
        // inconsistency it causes elsewhere.
        Box::new(hostile_delivery_changes_nothing::HostileDeliveryChangesNothing),
        Box::new(hostile_delivery_refused::HostileDeliveryRefused),
        Box::new(genuine_delivery_accepted::GenuineDeliveryAccepted),
        Box::new(one_effect_per_operation::OneEffectPerOperation),
        Box::new(effect_matches_obligation::EffectMatchesObligation),
        Box::new(request_matches_obligation::RequestMatchesObligation),
        Box::new(no_call_inside_transaction::NoCallInsideTransaction),
        Box::new(receipt_commits_with_its_work::ReceiptCommitsWithItsWork),
        Box::new(one_receipt_per_event::OneReceiptPerEvent),
        Box::new(one_obligation_per_operation::OneObligationPerOperation),
        Box::new(success_answer_has_receipt::SuccessAnswerHasReceipt),
        Box::new(dedupe_scope_per_account::DedupeScopePerAccount),
        Box::new(completion_by_lease_holder::CompletionByLeaseHolder),
        Box::new(lease_outlives_call::LeaseOutlivesCall),
        Box::new(obligation_settles_with_effect_or_reason::ObligationSettlesWithEffectOrReason),
        Box::new(order_state_moves_forward::OrderStateMovesForward),
        Box::new(refund_first_never_ships::RefundFirstNeverShips),
        Box::new(paid_order_settled::PaidOrderSettled),
        Box::new(outbox_drains::OutboxDrains),
        Box::new(every_event_processed::EveryEventProcessed),
        Box::new(sender_converges::SenderConverges),
        Box::new(final_state_matches_creation_order::FinalStateMatchesCreationOrder),
        Box::new(no_stuck_key::NoStuckKey),
    ]
}

/// Everything an invariant may look at.
pub struct Observation<'a> {
    /// Committed rows after this step.
    pub db: &'a DbView,
    /// The provider's ledger of effects.
    pub provider: &'a ProviderModel,
    /// The ground truth: fixtures and events.
    pub workload: &'a Workload,
    /// What the sender knows.
    pub sender: &'a Sender,
    /// Facts accumulated over the run.
    pub history: &'a History,
    /// What this step changed (empty for liveness checks).
    pub step: &'a StepRecord,
}

/// What one step changed.
#[derive(Debug, Default)]
pub struct StepRecord {
    pub commits: Vec<CommitRecord>,
    /// Indexes of effects the provider performed in this step.
    pub new_effects: Vec<usize>,
    /// Answers receivers gave in this step.
    pub answers: Vec<AnswerRecord>,
    /// Requests sent to the provider in this step.
    pub requests: Vec<RequestRecord>,
    /// Provider replies (or timeouts) received in this step.
    pub replies: Vec<ReplyRecord>,
}

impl StepRecord {
    pub fn is_empty(&self) -> bool {
        self.commits.is_empty()
            && self.new_effects.is_empty()
            && self.answers.is_empty()
            && self.requests.is_empty()
            && self.replies.is_empty()
    }

    pub fn clear(&mut self) {
        self.commits.clear();
        self.new_effects.clear();
        self.answers.clear();
        self.requests.clear();
        self.replies.clear();
    }
}

/// One request a process sent to the provider.
#[derive(Debug)]
pub struct RequestRecord {
    pub process_id: String,
    pub key: String,
    /// The body of a `Send`; `None` for a lookup.
    pub payload: Option<String>,
    /// Whether the caller's connection had a transaction open when it called.
    pub in_transaction: bool,
}

/// One reply (or timeout) a process received from the provider.
#[derive(Debug)]
pub struct ReplyRecord {
    pub process_id: String,
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
    pub diffs: Vec<RowDiff>,
}

/// One answer a receiver gave.
#[derive(Debug)]
pub struct AnswerRecord {
    pub process_id: String,
    pub account: String,
    pub event_id: String,
    pub answer: Answer,
    /// Who made the delivery.
    pub origin: crate::world::Origin,
    /// The receiver's clock, in seconds, when it answered.
    pub receiver_now_s: i64,
}

/// Facts accumulated over the run, for invariants that need the past.
#[derive(Debug, Default)]
pub struct History {
    /// Who committed each lease: `(operation key, lease token)` to process id.
    pub lease_holders: BTreeMap<(String, i64), String>,
    /// Every `(account, event_id)` whose receipt ever committed (purges do not erase this).
    pub ever_received: BTreeSet<(String, String)>,
    /// Orders refunded while still awaiting payment: `(tenant, order)`.
    pub refunded_before_payment: BTreeSet<(String, String)>,
}

/// The business operation that paying `(tenant, order)` owes: one fulfillment, version 1.
pub fn fulfillment_of(tenant: &str, order: &str) -> String {
    commitgap::provider::operation_key(tenant, order, "fulfill", 1)
}
