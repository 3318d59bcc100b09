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
//! [`Domain`] and returning it from [`crate::system::System::domain`], or by declaring it in a
//! TOML file that [`declared`] reads.
//!
//! [`check_domain`] checks a domain's own consistency before any system runs (its draws, its
//! model, its transitions, the bodies it makes for the attacker), so a sweep never blames a
//! system for a domain's mistake.
//!
//! A domain is plain configuration shared by every sweep thread. It must decide nothing outside
//! the seed it is given (its draws come from [`SimRng`] streams of that seed) and must not look
//! at the database: the model is a function of the workload alone.

mod check;
pub mod declared;
pub mod payments;

pub use check::{DEFAULT_CASES, PROPERTIES, check_domain, check_domain_with};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::record::{CommitRecord, History};
use crate::view::DbView;
use crate::workload::Fixtures;

pub use crate::rng::SimRng;
// A domain draws events and reads the workload, so both are named here as well as in `run`.
pub use crate::workload::{EventSpec, Workload};

/// The business a system serves. See the module documentation.
pub trait Domain: Send + Sync {
    /// The domain's name, as `list` shows it (`payments`).
    fn name(&self) -> &str;

    /// One line saying what the domain is.
    fn description(&self) -> &str;

    /// The business rules a correct receiver and relay keep, one line each, as
    /// `list --contract` prints them after the pattern's.
    fn rules(&self) -> Vec<String>;

    /// How the workload's flags read in this business, for a program's `--help`: what its
    /// subjects are (`--subjects`), what an update event is (`--updates`), and which of its
    /// values edge values put at the receiver's limits (`--no-edge-values`).
    fn words(&self) -> DomainWords {
        DomainWords::default()
    }

    /// The fixtures and the events of the run of `seed` with `settings`. Events may come in any
    /// order; each needs an id unique within its account, and a creation time of 0 or more,
    /// most inside `0..settings.emit_window_ms` (where the faults act). Draw only from
    /// [`SimRng::stream`]s of `seed`.
    fn draw(&self, seed: u64, settings: &WorkloadSettings) -> (Fixtures, Vec<EventSpec>);

    /// The event's `type` as the sender writes it on the wire (and the trace records it).
    /// [`check_domain`] checks that an unknown type is none of these.
    fn event_type(&self, event: &EventSpec) -> String;

    /// The JSON body the sender delivers for `event`, the same bytes on every attempt.
    fn body(&self, event: &EventSpec) -> String {
        event.standard_body(&self.event_type(event), "subject")
    }

    /// Whether `event` is of a kind that may owe an operation (payments: a payment). The
    /// default [`Domain::twin`] twins these. The default: every event.
    fn owes_work(&self, event: &EventSpec) -> bool {
        let _ = event;
        true
    }

    /// The model: from the events of `workload`, in creation order, the states every entity may
    /// end in and the operations owed. Computed once per run. The domain-generic invariants
    /// judge by it: `final-state-matches-creation-order` (the final states),
    /// `owed-operation-settles` and `only-owed-operations-take-effect` (the operations owed,
    /// their owing and payloads), and `receipt-commits-with-its-work` (through
    /// [`Domain::check_receipt_work`]'s default). It must depend on creation order alone, never
    /// on arrival ([`check_domain`] checks that).
    fn model(&self, workload: &Workload) -> Model;

    /// Whether an entity may move from `before` to `after` (both of one entity) in one commit.
    /// `state-moves-along-allowed-transitions` asks it for every commit that changes an entity's
    /// state in any way: its name, or any field within a state of the same name (a version that
    /// must only grow, an amount). Return true for every change the business allows, the ones
    /// that keep the name included.
    fn may_become(&self, before: &EntityState, after: &EntityState) -> bool;

    /// Whether a correct receiver must refuse `event` for good, and how. `None`: it must accept
    /// it (a 2xx, or a 503 while it cannot), even if it changes nothing. `genuine-delivery-accepted`
    /// fails a receiver that refuses an event this accepts, `receipt-commits-with-its-work` one
    /// that commits a receipt for an event this refuses, and `every-event-processed` and
    /// `sender-converges` expect no receipt for it.
    fn refusal(&self, workload: &Workload, event: &EventSpec) -> Option<Refusal>;

    /// The business operation a payload sent to the provider is for, as the provider reads it:
    /// the key effects are counted under. `Err` says why the provider cannot read it (it
    /// refuses such a request with a 400). Every invariant about effects and obligations reads
    /// operations through it (`one-effect-per-operation`, `request-matches-obligation`,
    /// `owed-operation-settles`, ...), so every payload the model owes must read as the key it
    /// is owed under ([`check_domain`] checks that).
    fn operation_of(&self, payload: &str) -> Result<String, String>;

    /// A body that is not a valid event of this domain, made from a genuine one, for the
    /// attacker's `invalid-event` request; `rule` chooses among the domain's ways of breaking it
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

    /// A body of an event type this domain does not have, made from a genuine one (`event`), for
    /// the attacker's `unknown-type` request, which a correct receiver refuses with a 4xx.
    /// `None`, the default, turns that attack off for this domain, and a sweep's coverage says
    /// so: a type the framework made up might be one the business really sends, and a receiver
    /// that acknowledges types it does not handle (as Stripe advises) must not be judged by it.
    /// A domain whose receiver refuses unknown types returns the genuine body with a type it
    /// never sends, written where its bodies carry their type.
    fn unknown_type_body(&self, event: &serde_json::Value) -> Option<serde_json::Value> {
        let _ = event;
        None
    }

    /// The body of the attacker's `tampered-body` request: a genuine body (`event`) with a value
    /// changed after it was signed, sent with the genuine signature, so a receiver that checks
    /// signatures refuses it whatever changed. Change what an attacker would want changed (an
    /// amount, a quantity). The default changes the event's id, which a receiver that skips the
    /// check takes as a new event.
    fn tampered_body(&self, event: &serde_json::Value) -> serde_json::Value {
        let mut event = event.clone();
        let id = event["id"].as_str().unwrap_or("evt").to_owned();
        event["id"] = format!("{id}-x").into();
        event
    }

    /// The body of the attacker's `cross-account` request: a genuine body (`event`) that names
    /// `other_account` instead of its own, signed for its own endpoint, which a correct receiver
    /// refuses with a 403. The default writes `other_account` into the body's `account` field,
    /// where [`EventSpec::standard_body`] puts it, and is `None` (the attack off for this
    /// domain) for a body without one: a field the receiver never reads would leave the request
    /// a genuine event.
    fn cross_account_body(
        &self,
        event: &serde_json::Value,
        other_account: &str,
    ) -> Option<serde_json::Value> {
        let mut event = event.clone();
        let field = event.get_mut("account")?;
        *field = other_account.into();
        Some(event)
    }

    /// A second event, with an id of its own, that this business's sender may emit for the same
    /// fact as `event`, for the `twin-events` fault model (Stripe sends
    /// `checkout.session.completed` and `payment_intent.succeeded` for one payment). The
    /// simulator gives it an id of its own and creates and first delivers it 0 to 1,000 ms after
    /// the original, as a second event object is: it may so come after a later event about the
    /// same entity, and the model reads it at its own creation time. `None`: the sender never
    /// reports this event twice. The default twins the events that may owe work
    /// ([`Domain::owes_work`]) as they are.
    fn twin(&self, event: &EventSpec) -> Option<EventSpec> {
        self.owes_work(event).then(|| event.clone())
    }

    /// Checks that the work of an event whose receipt is committed is committed too.
    /// `receipt-commits-with-its-work` calls it after every step (and every commit of a journal)
    /// for each event whose receipt exists and that the step touched: its receipt, its entity or
    /// an obligation it owes changed. It sees the event, the committed rows, the model, the
    /// workload and what the run remembers (every receipt that ever committed).
    ///
    /// The default asks the model: every operation the event owes for certain has an obligation,
    /// once every event that owes it has committed its receipt. An operation owed only when
    /// several events have all arrived (one kind of event following another) is demanded when
    /// the last of them commits, whichever that is; one owed by any of several events alone
    /// (twins) is demanded once all have arrived, and the liveness invariants judge the rest.
    /// A domain whose events owe work only in some states says so here.
    fn check_receipt_work(&self, work: &ReceiptWork<'_>) -> Result<(), String> {
        let event = work.event;
        for operation in work.model.certainly_owed_by(&event.account, &event.event_id) {
            let owed = &work.model.owed[operation];
            if !owed
                .events
                .iter()
                .all(|(account, event_id)| work.received(account, event_id))
            {
                continue;
            }
            if work.db.obligations_for(operation).next().is_none() {
                return Err(format!(
                    "receipt ({}, {}) is committed but no obligation for {operation} exists",
                    event.account, event.event_id
                ));
            }
        }
        Ok(())
    }

    /// The situations worth reaching in this business, for the coverage report beside the
    /// pattern's (payments: a refund applied before its payment). Each is counted when a
    /// commit moves an entity as [`Domain::situation_of_move`] says, and a sweep warns about
    /// each one it never reached. The default declares none.
    fn situations(&self) -> Vec<DomainSituation> {
        Vec::new()
    }

    /// The name of the situation (one of [`Domain::situations`]) that a commit moving an
    /// entity from `before` to `after` reaches, if any. Called for every commit that changes an
    /// entity's state, so it must be cheap.
    fn situation_of_move(&self, before: &EntityState, after: &EntityState) -> Option<&str> {
        let _ = (before, after);
        None
    }

    /// Checks one commit's business rules beyond the pattern's (for example "a transition to
    /// paid commits with its obligation"). `receipt-commits-with-its-work` calls it for every
    /// commit of every step, and for every commit of a journal of real commits. The default has
    /// none.
    fn check_commit_work(&self, commit: &CommitRecord, workload: &Workload) -> Result<(), String> {
        let _ = (commit, workload);
        Ok(())
    }
}

/// A domain's words for the workload's flags (see [`Domain::words`]), each a phrase that
/// completes the flag's help line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainWords {
    /// What `--subjects` counts per tenant: `orders awaiting payment`.
    pub subjects: String,
    /// What `--updates` adds to each subject's story: `amount-update events per order`.
    pub updates: String,
    /// The values at the receiver's limits that `--no-edge-values` keeps out.
    pub edge_values: String,
}

impl Default for DomainWords {
    fn default() -> DomainWords {
        DomainWords {
            subjects: "business entities, the subjects events are about".to_owned(),
            updates: "update events per subject, on top of its story".to_owned(),
            edge_values: "a 128-character name, an event created at time 0, a body at the configured limit"
                .to_owned(),
        }
    }
}

/// A situation worth reaching, as a coverage report lists it: a domain's own, or one of the
/// pattern's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainSituation {
    /// Its short name, as reports write it (`refund-before-payment`).
    pub name: String,
    /// What reaching it means, in one line.
    pub description: String,
    /// The fault models that can lead there (by name); empty when ordinary concurrency is
    /// enough. A sweep uses them to say why it was never reached.
    pub needs: Vec<String>,
}

impl DomainSituation {
    /// A situation called `name` that `description` explains, reached with help from the fault
    /// models named in `needs`.
    pub fn new(name: &str, description: &str, needs: &[&str]) -> DomainSituation {
        DomainSituation {
            name: name.to_owned(),
            description: description.to_owned(),
            needs: needs.iter().map(|&need| need.to_owned()).collect(),
        }
    }
}

/// What [`Domain::check_receipt_work`] sees: the event whose receipt is committed, and what
/// the run knows at that moment.
#[derive(Debug, Clone, Copy)]
pub struct ReceiptWork<'a> {
    /// The event whose receipt is committed.
    pub event: &'a EventSpec,
    /// The committed rows.
    pub db: &'a DbView,
    /// What the domain says the run owes and ends in.
    pub model: &'a Model,
    /// Every event of the run, and the fixtures.
    pub workload: &'a Workload,
    /// What the run remembers: every receipt that ever committed, moves, leases.
    pub history: &'a History,
}

impl ReceiptWork<'_> {
    /// Whether event `(account, event_id)` has committed its receipt at some point in the run
    /// (a purge since does not undo that).
    pub fn received(&self, account: &str, event_id: &str) -> bool {
        self.db.receipts(account, event_id).next().is_some()
            || self
                .history
                .ever_received
                .contains(&(account.to_owned(), event_id.to_owned()))
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
