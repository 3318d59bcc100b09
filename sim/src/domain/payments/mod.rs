//! Payments: the reference system's domain, and the default.
//!
//! A shop's orders await payment. The payment provider reports a payment (`payment.succeeded`,
//! with the amount), a refund (`charge.refunded`), a cancellation (`order.cancelled`) or an amount
//! update (`order.updated`, with the new amount) for an order of a tenant. The rules a correct
//! receiver keeps:
//! - an order moves `awaiting_payment -> paid | refunded | cancelled` and `paid -> refunded`;
//!   refunded and cancelled are final, and an event that would move an order any other way is
//!   taken (2xx) without a transition;
//! - a payment of an order awaiting it owes one fulfillment, operation
//!   `<tenant>/<order>/fulfill/v1`, whose payload snapshots the order's amount at that moment;
//! - the newest update (by creation time) decides the amount, whatever the arrival order;
//! - a cancellation racing a payment, or a refund racing a cancellation, is decided by whichever
//!   arrives first;
//! - an event for an account or an order that does not exist is refused with 422.
//!
//! This module draws the orders and events (`draw`), computes the model, reads the reference's
//! payload, and holds what a payment's receipt commits with (`receipt`). Its two rules the
//! generic invariants do not cover, `refund-first-never-ships` and `paid-order-settled`, are
//! invariants of their own (`invariants::payments`), checked for systems in this domain. It
//! must not look at the database except through the view it is given.

mod draw;
mod receipt;

use std::collections::BTreeSet;

use commitgap::provider::FulfillmentPayload;

use super::{
    Domain, DomainSituation, DomainWords, EntityState, Model, Owed, Owing, ReceiptWork, Refusal,
    WorkloadSettings,
};
use crate::record::CommitRecord;
use crate::rows::{EntityRow, ObservedRow};
use crate::workload::Fixtures;
use crate::workload::{EventSpec, Workload};

/// The domain's name.
pub const NAME: &str = "payments";
/// A payment of an order (`payment.succeeded`), with its amount.
pub const PAYMENT: &str = "payment";
/// A refund of an order's charge (`charge.refunded`).
pub const REFUND: &str = "refund";
/// A cancellation of an order (`order.cancelled`).
pub const CANCEL: &str = "cancel";
/// A new amount for an order (`order.updated`), with the amount.
pub const UPDATE: &str = "update";
/// The situation of a refund applied to an order still awaiting its payment.
pub const REFUND_BEFORE_PAYMENT: &str = "refund-before-payment";
/// The field a payment and an update carry, and an order's amount.
pub const AMOUNT: &str = "amount_cents";

/// The payments domain. See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Payments;

/// The states of an order. Refunded and cancelled are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OrderStatus {
    /// Created, and waiting for its payment.
    AwaitingPayment,
    /// The payment arrived.
    Paid,
    /// Refunded (final).
    Refunded,
    /// Cancelled (final).
    Cancelled,
}

impl OrderStatus {
    /// Whether an order may move from `self` to `next`: `awaiting_payment -> paid`,
    /// `awaiting_payment | paid -> refunded`, `awaiting_payment -> cancelled`, or stay.
    pub fn may_become(self, next: OrderStatus) -> bool {
        use OrderStatus::*;
        self == next
            || matches!(
                (self, next),
                (AwaitingPayment, Paid | Refunded | Cancelled) | (Paid, Refunded)
            )
    }

    /// The status as the domain's state names it (the reference's column values).
    pub fn name(self) -> &'static str {
        match self {
            OrderStatus::AwaitingPayment => "awaiting_payment",
            OrderStatus::Paid => "paid",
            OrderStatus::Refunded => "refunded",
            OrderStatus::Cancelled => "cancelled",
        }
    }

    /// The status a state names, if it names one.
    pub fn parse(name: &str) -> Option<OrderStatus> {
        [
            OrderStatus::AwaitingPayment,
            OrderStatus::Paid,
            OrderStatus::Refunded,
            OrderStatus::Cancelled,
        ]
        .into_iter()
        .find(|status| status.name() == name)
    }
}

/// An order's state as the payments domain writes it: its status, and its amount as a field.
pub fn order_state(status: OrderStatus, amount_cents: i64) -> EntityState {
    EntityState::named(status.name()).with(AMOUNT, amount_cents)
}

/// The row a payments system's decoder gives for an order.
pub fn order_row(tenant: &str, order: &str, status: OrderStatus, amount_cents: i64) -> ObservedRow {
    ObservedRow::Entity(EntityRow {
        tenant: tenant.to_owned(),
        subject: order.to_owned(),
        state: order_state(status, amount_cents),
    })
}

/// The status of an order's state, if the state names one.
pub fn status_of(state: &EntityState) -> Option<OrderStatus> {
    OrderStatus::parse(&state.state)
}

/// Whether events of `kind` carry an amount (payments and updates do).
pub fn carries_amount(kind: &str) -> bool {
    draw::carries_amount(kind)
}

/// The business operation that paying `(tenant, order)` owes: one fulfillment, version 1.
pub fn fulfillment_of(tenant: &str, order: &str) -> String {
    commitgap::provider::operation_key(tenant, order, "fulfill", 1)
}

impl Domain for Payments {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "a shop's orders: payments, refunds, cancellations and amount updates; a paid order owes one fulfillment"
    }

    fn rules(&self) -> Vec<String> {
        [
            "an order moves awaiting_payment -> paid | refunded | cancelled and paid -> refunded; refunded and cancelled are final",
            "a payment of an order awaiting it owes one fulfillment, <tenant>/<order>/fulfill/v1, whose payload snapshots the order's amount",
            "the newest update by creation time decides an order's amount, whatever the arrival order",
            "a cancellation racing a payment, or a refund racing a cancellation, is decided by whichever arrives first",
            "an event that would move an order any other way is taken (2xx) and changes nothing",
            "an event for an account or an order that does not exist is refused with 422 and leaves no receipt",
            "a refund that arrives before its payment leaves the order refunded, and nothing ships",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn words(&self) -> DomainWords {
        DomainWords {
            subjects: "orders awaiting payment".to_owned(),
            updates: "amount-update events per order, on top of its payment, refund or cancellation".to_owned(),
            edge_values: "a 128-character order name, an amount of 10^12 cents, an event created at time 0, a body at the configured limit".to_owned(),
        }
    }

    fn draw(&self, seed: u64, settings: &WorkloadSettings) -> (Fixtures, Vec<EventSpec>) {
        draw::draw(seed, settings)
    }

    fn event_type(&self, event: &EventSpec) -> String {
        use commitgap::receiver::{CHARGE_REFUNDED, ORDER_CANCELLED, ORDER_UPDATED, PAYMENT_SUCCEEDED};
        match event.kind.as_str() {
            PAYMENT => PAYMENT_SUCCEEDED,
            REFUND => CHARGE_REFUNDED,
            CANCEL => ORDER_CANCELLED,
            UPDATE => ORDER_UPDATED,
            other => other,
        }
        .to_owned()
    }

    fn body(&self, event: &EventSpec) -> String {
        // Seed files written before domains existed give refunds and cancellations an amount of
        // zero, which the sender never wrote.
        let carries_amount = draw::carries_amount(&event.kind);
        event.standard_body_with(&self.event_type(event), "order", |name| {
            carries_amount || name != AMOUNT
        })
    }

    fn owes_work(&self, event: &EventSpec) -> bool {
        event.kind == PAYMENT
    }

    fn model(&self, workload: &Workload) -> Model {
        let mut model = Model::default();
        for fixture in &workload.fixtures.subjects {
            let (tenant, order) = (&fixture.tenant, &fixture.subject);
            let events: Vec<&EventSpec> = workload.events_for_subject(tenant, order).collect();
            let amount_cents = final_amount(fixture.number(AMOUNT).unwrap_or(0), &events);
            let statuses = final_statuses(&events);
            let key = (tenant.clone(), order.clone());
            let states = statuses
                .iter()
                .map(|status| order_state(*status, amount_cents))
                .collect();
            model.final_states.insert(key, states);
            let payments: BTreeSet<(String, String)> = events
                .iter()
                .filter(|event| event.kind == PAYMENT && workload.knows(&event.account, tenant, order))
                .map(|event| (event.account.clone(), event.event_id.clone()))
                .collect();
            let owing = if statuses == BTreeSet::from([OrderStatus::Paid]) {
                Owing::Certainly
            } else if statuses.contains(&OrderStatus::Paid) || statuses.contains(&OrderStatus::Refunded) {
                // A refund (or a racing cancellation) may come before or after the payment.
                Owing::Possibly
            } else {
                continue;
            };
            if payments.is_empty() {
                continue;
            }
            // The snapshot is the amount when the payment was applied: the first, or any update's.
            // A payment that carries another amount than the order's (a hand-edited seed file)
            // is snapshotted with the amount it carries.
            let amounts = std::iter::once(fixture.number(AMOUNT).unwrap_or(0)).chain(
                events
                    .iter()
                    .filter(|event| event.kind == UPDATE || event.kind == PAYMENT)
                    .filter_map(|event| event.number(AMOUNT)),
            );
            let payloads = amounts
                .map(|amount_cents| {
                    FulfillmentPayload {
                        tenant: tenant.clone(),
                        order: order.clone(),
                        operation: "fulfill".to_owned(),
                        version: 1,
                        amount_cents,
                    }
                    .to_json()
                })
                .collect();
            model.owed.insert(
                fulfillment_of(tenant, order),
                Owed {
                    owing,
                    payloads,
                    events: payments,
                },
            );
        }
        model
    }

    fn may_become(&self, before: &EntityState, after: &EntityState) -> bool {
        match (status_of(before), status_of(after)) {
            (Some(before), Some(after)) => before.may_become(after),
            // A state the domain does not know is never a move it allows.
            _ => before.state == after.state,
        }
    }

    fn refusal(&self, workload: &Workload, event: &EventSpec) -> Option<Refusal> {
        if ![PAYMENT, REFUND, CANCEL, UPDATE].contains(&event.kind.as_str()) {
            // A hand-edited seed file may name any kind; the receiver does not know its type.
            Some(Refusal::permanent("its type is not one the shop handles"))
        } else if workload.knows(&event.account, &event.tenant, &event.subject) {
            None
        } else {
            Some(Refusal::permanent("its account or order does not exist"))
        }
    }

    fn operation_of(&self, payload: &str) -> Result<String, String> {
        FulfillmentPayload::parse(payload).map(|payload| payload.operation_key())
    }

    fn invalid_body(&self, event: &serde_json::Value, rule: u64) -> serde_json::Value {
        use commitgap::receiver::{AMOUNT_CENTS_MAX, NAME_CHARS_MAX};
        let mut event = event.clone();
        let order = event["order"].as_str().unwrap_or("order").to_owned();
        match rule % 6 {
            0 => event["id"] = "".into(),
            1 => event["order"] = "".into(),
            2 => event["id"] = "i".repeat(NAME_CHARS_MAX + 1).into(),
            3 => event["order"] = format!("{order}\u{7}").into(),
            4 => event["created_ms"] = (-1).into(),
            _ => event["amount_cents"] = (AMOUNT_CENTS_MAX + 1).into(),
        }
        event
    }

    fn unknown_type_body(&self, event: &serde_json::Value) -> Option<serde_json::Value> {
        // An invoice event: real in billing, but not a type the shop's receiver takes.
        let mut event = event.clone();
        event["type"] = "invoice.paid".into();
        Some(event)
    }

    fn tampered_body(&self, event: &serde_json::Value) -> serde_json::Value {
        // What an attacker wants changed: the amount paid, or else which order it pays.
        let mut event = event.clone();
        match event.get(AMOUNT).and_then(serde_json::Value::as_i64) {
            Some(amount_cents) => event[AMOUNT] = (amount_cents + 1).into(),
            None => {
                let order = event["order"].as_str().unwrap_or("order").to_owned();
                event["order"] = format!("{order}-x").into();
            }
        }
        event
    }

    fn situations(&self) -> Vec<DomainSituation> {
        vec![DomainSituation::new(
            REFUND_BEFORE_PAYMENT,
            "a refund was applied to an order still awaiting its payment",
            // The fault models `reorder` and `late-delivery`, by name (a domain names them as a
            // team's would; `coverage` checks they exist).
            &["reorder", "late-delivery"],
        )]
    }

    fn situation_of_move(&self, before: &EntityState, after: &EntityState) -> Option<&str> {
        (status_of(before) == Some(OrderStatus::AwaitingPayment)
            && status_of(after) == Some(OrderStatus::Refunded))
        .then_some(REFUND_BEFORE_PAYMENT)
    }

    fn check_receipt_work(&self, work: &ReceiptWork<'_>) -> Result<(), String> {
        receipt::check_payment_receipt(work.db, work.event)
    }

    fn check_commit_work(&self, commit: &CommitRecord, workload: &Workload) -> Result<(), String> {
        receipt::check_payment_commit(commit, workload)
    }
}

/// The amount an order ends with: the newest update's by creation time, else its first.
fn final_amount(first_cents: i64, events: &[&EventSpec]) -> i64 {
    let (mut amount_cents, mut version_ms) = (first_cents, 0);
    for event in events {
        if event.kind == UPDATE && event.created_ms > version_ms {
            amount_cents = event.number(AMOUNT).unwrap_or(amount_cents);
            version_ms = event.created_ms;
        }
    }
    amount_cents
}

/// Every status an order may end in: its status events applied, with the guarded transitions,
/// in any order they could arrive in. One status for every story but a race
/// (`SimConfig::racing_orders`), where whichever of the racing events arrives first decides.
fn final_statuses(events: &[&EventSpec]) -> BTreeSet<OrderStatus> {
    let kinds: Vec<&str> = events
        .iter()
        .map(|event| event.kind.as_str())
        .filter(|kind| *kind != UPDATE)
        .collect();
    let mut statuses = BTreeSet::new();
    every_order(&mut kinds.clone(), 0, &mut |arrival| {
        statuses.insert(status_after(arrival));
    });
    statuses
}

/// The status a new order ends in after `kinds` arrive in this order, with the guarded
/// transitions: payment only of an order awaiting it, refund of one awaiting payment or paid,
/// cancellation only of one awaiting payment.
fn status_after(kinds: &[&str]) -> OrderStatus {
    let mut status = OrderStatus::AwaitingPayment;
    for kind in kinds {
        match *kind {
            PAYMENT if status == OrderStatus::AwaitingPayment => status = OrderStatus::Paid,
            REFUND if matches!(status, OrderStatus::AwaitingPayment | OrderStatus::Paid) => {
                status = OrderStatus::Refunded
            }
            CANCEL if status == OrderStatus::AwaitingPayment => status = OrderStatus::Cancelled,
            _ => {}
        }
    }
    status
}

/// Calls `visit` with every ordering of `kinds[from..]` (an order has at most three status
/// events but twins, so a few dozen orderings at most).
fn every_order(kinds: &mut [&str], from: usize, visit: &mut impl FnMut(&[&str])) {
    if from + 1 >= kinds.len() {
        visit(kinds);
        return;
    }
    for next in from..kinds.len() {
        kinds.swap(from, next);
        every_order(kinds, from + 1, visit);
        kinds.swap(from, next);
    }
}

/// The status events of every order, for tests: `(tenant, order) -> kinds` in creation order.
#[cfg(test)]
fn stories(workload: &Workload) -> std::collections::BTreeMap<(String, String), Vec<String>> {
    let mut stories: std::collections::BTreeMap<(String, String), Vec<String>> = Default::default();
    for event in &workload.events {
        stories
            .entry((event.tenant.clone(), event.subject.clone()))
            .or_default()
            .push(event.kind.clone());
    }
    stories
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::SubjectFixture;

    fn event(kind: &str, amount_cents: i64, created_ms: i64) -> EventSpec {
        let mut event = EventSpec::new("acct-a", "tenant-a", "order-1", kind, created_ms);
        event.event_id = format!("evt-{created_ms}");
        if draw::carries_amount(kind) {
            event = event.with(AMOUNT, amount_cents);
        }
        event
    }

    fn fixtures() -> Fixtures {
        Fixtures {
            accounts: vec![("acct-a".into(), "tenant-a".into())],
            subjects: vec![SubjectFixture::new("tenant-a", "order-1").with(AMOUNT, 100)],
        }
    }

    #[test]
    fn the_final_state_follows_creation_order_and_races_allow_either() {
        let workload = Workload::new(
            fixtures(),
            vec![
                event(REFUND, 0, 30),
                event(UPDATE, 7, 20),
                event(PAYMENT, 100, 10),
            ],
        );
        let model = Payments.model(&workload);
        let key = ("tenant-a".to_owned(), "order-1".to_owned());
        assert_eq!(
            model.final_states[&key],
            BTreeSet::from([order_state(OrderStatus::Refunded, 7)])
        );
        // Paid then refunded: the fulfillment may or may not have shipped.
        assert_eq!(
            model.owed[&fulfillment_of("tenant-a", "order-1")].owing,
            Owing::Possibly
        );
        assert_eq!(stories(&workload)[&key], ["payment", "update", "refund"]);
        // A cancellation racing a payment: whichever arrives first decides.
        let racing = Workload::new(fixtures(), vec![event(PAYMENT, 100, 10), event(CANCEL, 0, 20)]);
        assert_eq!(
            Payments.model(&racing).final_states[&key],
            BTreeSet::from([
                order_state(OrderStatus::Paid, 100),
                order_state(OrderStatus::Cancelled, 100)
            ])
        );
        // A plain payment owes its fulfillment for certain, with the amount it had.
        let paid = Workload::new(fixtures(), vec![event(PAYMENT, 100, 10)]);
        let owed = &Payments.model(&paid).owed[&fulfillment_of("tenant-a", "order-1")];
        assert_eq!(owed.owing, Owing::Certainly);
        assert_eq!(owed.payloads.len(), 1);
        assert!(
            owed.payloads
                .iter()
                .all(|payload| payload.contains("\"amount_cents\":100"))
        );
    }

    #[test]
    fn an_event_for_an_order_that_does_not_exist_is_refused_and_owes_nothing() {
        let mut missing = event(PAYMENT, 500, 10);
        missing.subject = "order-missing".into();
        let workload = Workload::new(fixtures(), vec![missing.clone()]);
        assert!(Payments.refusal(&workload, &missing).is_some());
        assert!(Payments.refusal(&workload, &event(PAYMENT, 1, 1)).is_none());
        assert!(Payments.model(&workload).owed.is_empty());
    }

    #[test]
    fn bodies_are_what_serde_json_writes_and_old_refunds_carry_no_amount() {
        let payment = event(PAYMENT, 100, 10);
        let expected = serde_json::json!({
            "account": "acct-a", "amount_cents": 100, "created_ms": 10, "id": "evt-10",
            "order": "order-1", "type": "payment.succeeded"
        });
        assert_eq!(Payments.body(&payment), expected.to_string());
        // A refund read from an old seed file has an amount of zero, which the sender never wrote.
        let refund = event(REFUND, 0, 11).with(AMOUNT, 0);
        assert!(!Payments.body(&refund).contains(AMOUNT));
    }

    #[test]
    fn old_seed_files_read_orders_and_amounts_as_subjects_and_fields() {
        let old = r#"{"account":"acct-a","event_id":"evt-1","tenant":"tenant-a","order":"order-1","kind":"payment","amount_cents":5,"created_ms":1,"deliver_at_ms":1,"subscriptions":1,"extra_deliveries":[]}"#;
        let event: EventSpec = serde_json::from_str(old).unwrap();
        assert_eq!(event.subject, "order-1");
        assert_eq!(event.number(AMOUNT), Some(5));
        let fixtures: Fixtures =
            serde_json::from_str(r#"{"accounts":[["acct-a","tenant-a"]],"orders":[{"tenant":"tenant-a","order":"order-1","amount_cents":9}]}"#)
                .unwrap();
        assert_eq!(fixtures.subjects[0].number(AMOUNT), Some(9));
    }
}
