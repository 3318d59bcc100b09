//! The business a system serves, apart from the webhook pattern it keeps.
//!
//! The pattern (a receipt per event committed with its work, an obligation per operation, a fenced
//! claim, the call outside any transaction) is the same for a shop, a CI service or a chat bot,
//! and the pattern invariants judge it through receipts, obligations, effects, answers and
//! transactions alone. What differs is the business: which entities exist, which events the
//! sender reports about them, what state the events lead to, and which operations they owe the
//! provider. A [`Domain`] supplies that: the fixtures and events of a run, the model (from the
//! events created, in creation order, the final state and the operations owed), the allowed
//! transitions, which events a correct receiver refuses, and how the provider reads a payload.
//! The domain-generic invariants compare what a system did with the model.
//!
//! [`payments`](mod@payments) is the reference's domain and the default; a team brings its own by implementing
//! [`Domain`] and returning it from [`crate::system::System::domain`].
//!
//! A domain is plain configuration shared by every sweep thread. It must decide nothing outside
//! the seed it is given (its draws come from [`SimRng`] streams of that seed) and must not look
//! at the database: the model is a function of the workload alone.

pub mod payments;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::record::CommitRecord;
use crate::view::DbView;
use crate::workload::Fixtures;
use crate::workload::{EventSpec, Workload};

pub use crate::rng::SimRng;

/// The business a system serves. See the module documentation.
pub trait Domain: Send + Sync {
    /// The domain's name, as `list` shows it (`payments`).
    fn name(&self) -> &str;

    /// One line saying what the domain is.
    fn description(&self) -> &str;

    /// The business rules a correct receiver and relay keep, one line each, as
    /// `list --contract` prints them after the pattern's.
    fn rules(&self) -> Vec<String>;

    /// The fixtures and the events of the run of `seed` with `settings`. Events may come in any
    /// order; each needs an id unique within its account, and a creation time inside
    /// `0..settings.emit_window_ms`. Draw only from [`SimRng::stream`]s of `seed`.
    fn draw(&self, seed: u64, settings: &WorkloadSettings) -> (Fixtures, Vec<EventSpec>);

    /// The event's `type` as the sender writes it on the wire (and the trace records it).
    fn event_type(&self, event: &EventSpec) -> String;

    /// The JSON body the sender delivers for `event`, the same bytes on every attempt.
    fn body(&self, event: &EventSpec) -> String {
        event.standard_body(&self.event_type(event), "subject")
    }

    /// Whether `event` is of a kind that may owe an operation (payments: a payment). Fault models
    /// that send one fact twice under two ids (`twin-events`) twin these. The default: every
    /// event.
    fn owes_work(&self, event: &EventSpec) -> bool {
        let _ = event;
        true
    }

    /// The model: from the events of `workload`, in creation order, the states every entity may
    /// end in and the operations owed. Computed once per run.
    fn model(&self, workload: &Workload) -> Model;

    /// Whether an entity may move from `before` to `after` (both of one entity) in one commit.
    fn may_become(&self, before: &EntityState, after: &EntityState) -> bool;

    /// Whether a correct receiver must refuse `event` for good, and how. `None`: it must accept
    /// it (a 2xx, or a 503 while it cannot), even if it changes nothing.
    fn refusal(&self, workload: &Workload, event: &EventSpec) -> Option<Refusal>;

    /// The business operation a payload sent to the provider is for, as the provider reads it:
    /// the key effects are counted under. `Err` says why the provider cannot read it (it
    /// refuses such a request with a 400).
    fn operation_of(&self, payload: &str) -> Result<String, String>;

    /// A body that is not a valid event of this domain, made from a genuine one, for the
    /// attacker's invalid-event request; `rule` chooses among the domain's ways of breaking it
    /// (any number; take it modulo yours). The default breaks what every event has: its id and
    /// creation time.
    fn invalid_body(&self, event: &serde_json::Value, rule: u64) -> serde_json::Value {
        let mut event = event.clone();
        match rule % 3 {
            0 => event["id"] = "".into(),
            1 => event["id"] = "i".repeat(commitgap::receiver::NAME_CHARS_MAX + 1).into(),
            _ => event["created_ms"] = (-1).into(),
        }
        event
    }

    /// Checks that the work of `event`, whose receipt is committed, is committed too. The default
    /// asks the model: every operation `event` owes for certain has an obligation. A domain whose
    /// events owe work only in some states says so here.
    fn check_receipt_work(&self, db: &DbView, model: &Model, event: &EventSpec) -> Result<(), String> {
        for operation in model.certainly_owed_by(&event.account, &event.event_id) {
            if db.obligations_for(operation).next().is_none() {
                return Err(format!(
                    "receipt ({}, {}) is committed but no obligation for {operation} exists",
                    event.account, event.event_id
                ));
            }
        }
        Ok(())
    }

    /// Checks one commit's business rules beyond the pattern's (for example "a transition to
    /// paid commits with its obligation"). The default has none.
    fn check_commit_work(&self, commit: &CommitRecord, workload: &Workload) -> Result<(), String> {
        let _ = (commit, workload);
        Ok(())
    }
}

pub use crate::shape::WorkloadSettings;

/// The workload `domain` draws for `seed` with `settings`, its events in creation order.
pub fn draw_workload(domain: &dyn Domain, seed: u64, settings: &WorkloadSettings) -> Workload {
    let (fixtures, events) = domain.draw(seed, settings);
    Workload::new(fixtures, events)
}

/// The reference's domain, shared.
pub fn payments() -> Arc<dyn Domain> {
    Arc::new(payments::Payments)
}

/// How a correct receiver refuses an event it must not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The status class the answer must have: 4 for a permanent refusal (the sender gives up).
    pub status_class: u16,
    /// Why, in a few words ("the order does not exist").
    pub reason: String,
}

impl Refusal {
    /// A permanent refusal (a 4xx) for `reason`.
    pub fn permanent(reason: impl Into<String>) -> Refusal {
        Refusal {
            status_class: 4,
            reason: reason.into(),
        }
    }
}

pub use crate::rows::EntityState;

/// Whether an operation is owed whatever order the events arrive in, or only in some.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owing {
    /// Owed in every arrival order: exactly one effect, or a dead obligation with a reason.
    Certainly,
    /// Owed in some arrival orders only (a refund racing a payment): at most one effect.
    Possibly,
}

/// An operation the model owes the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owed {
    /// Whether the operation is owed in every arrival order or only in some.
    pub owing: Owing,
    /// Every payload the effect may carry (more than one where arrival order decides a value).
    pub payloads: BTreeSet<String>,
    /// The events that owe it, `(account, event_id)`.
    pub events: BTreeSet<(String, String)>,
}

/// What the domain says a run must end in, computed from the workload alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    /// For every entity `(tenant, subject)`, each state it may end in: one, unless the arrival
    /// order of racing events decides.
    pub final_states: BTreeMap<(String, String), BTreeSet<EntityState>>,
    /// The operations owed, by operation key.
    pub owed: BTreeMap<String, Owed>,
    /// The events a correct receiver refuses, by `(account, event_id)`.
    pub refusals: BTreeMap<(String, String), Refusal>,
}

impl Model {
    /// The refusal the domain expects for event `(account, event_id)`, if any.
    pub fn refusal(&self, account: &str, event_id: &str) -> Option<&Refusal> {
        self.refusals.get(&(account.to_owned(), event_id.to_owned()))
    }

    /// Whether event `(account, event_id)` must be refused for good.
    pub fn expects_rejection(&self, event: &EventSpec) -> bool {
        self.refusals
            .contains_key(&(event.account.clone(), event.event_id.clone()))
    }

    /// The operations event `(account, event_id)` owes whatever the arrival order.
    pub fn certainly_owed_by<'a>(
        &'a self,
        account: &'a str,
        event_id: &'a str,
    ) -> impl Iterator<Item = &'a str> {
        self.owed
            .iter()
            .filter(move |(_, owed)| {
                owed.owing == Owing::Certainly
                    && owed.events.iter().any(|(a, e)| a == account && e == event_id)
            })
            .map(|(key, _)| key.as_str())
    }

    /// Fills [`Model::refusals`] from `domain` for every event of `workload`.
    pub fn with_refusals(mut self, domain: &dyn Domain, workload: &Workload) -> Model {
        for event in &workload.events {
            if let Some(refusal) = domain.refusal(workload, event) {
                self.refusals
                    .insert((event.account.clone(), event.event_id.clone()), refusal);
            }
        }
        self
    }
}
