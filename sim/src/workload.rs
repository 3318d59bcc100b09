//! The workload: which accounts and orders exist and which events the sender emits, when, and
//! how each is delivered. It is the ground truth the invariants compare against, plain data
//! written to seed files and schedules. Drawing one from a seed lives in `config`; this module
//! only holds and answers questions about it, and must not draw or decide anything.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::system::{Fixtures, OrderStatus};

/// What an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    Payment,
    Refund,
    Cancel,
    Update,
}

impl EventKind {
    /// The event's `type` on the wire.
    pub fn type_name(self) -> &'static str {
        match self {
            EventKind::Payment => commitgap::receiver::PAYMENT_SUCCEEDED,
            EventKind::Refund => commitgap::receiver::CHARGE_REFUNDED,
            EventKind::Cancel => commitgap::receiver::ORDER_CANCELLED,
            EventKind::Update => commitgap::receiver::ORDER_UPDATED,
        }
    }
}

/// A delivery beyond the sender's retry schedule: a spontaneous duplicate or an operator's
/// manual resend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtraDelivery {
    pub at_ms: i64,
    pub reason: String,
}

/// One event the sender will emit, and how it will be delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSpec {
    pub account: String,
    /// Unique within the account only.
    pub event_id: String,
    /// The tenant the account belongs to.
    pub tenant: String,
    pub order: String,
    pub kind: EventKind,
    /// The amount paid (payments) or the new amount (updates); zero otherwise.
    pub amount_cents: i64,
    /// When the sender created the event; the order of creation is the order of the facts.
    pub created_ms: i64,
    /// When the first attempt goes out (later than creation when delivery is late or reordered).
    pub deliver_at_ms: i64,
    /// How many subscriptions receive it; each delivers (and retries) on its own.
    pub subscriptions: u32,
    /// Deliveries outside the retry schedule.
    pub extra_deliveries: Vec<ExtraDelivery>,
}

impl EventSpec {
    /// The JSON body the sender delivers: an object with its keys in sorted order, as
    /// `serde_json` writes a map. Written field by field because the sender writes one on every
    /// attempt, and building a `serde_json::Value` first cost a thirtieth of a sweep.
    pub fn body(&self) -> String {
        let mut body = Vec::with_capacity(160);
        push_json_field(&mut body, "account", self.account.as_str());
        if matches!(self.kind, EventKind::Payment | EventKind::Update) {
            push_json_field(&mut body, "amount_cents", &self.amount_cents);
        }
        push_json_field(&mut body, "created_ms", &self.created_ms);
        push_json_field(&mut body, "id", self.event_id.as_str());
        push_json_field(&mut body, "order", self.order.as_str());
        push_json_field(&mut body, "type", self.kind.type_name());
        body.push(b'}');
        // serde_json writes UTF-8 only, and the names are ASCII.
        String::from_utf8(body).unwrap_or_default()
    }
}

/// Appends `"name":value` to an object being written, opening it first if `body` is empty.
fn push_json_field<T: serde::Serialize + ?Sized>(body: &mut Vec<u8>, name: &str, value: &T) {
    body.push(if body.is_empty() { b'{' } else { b',' });
    body.push(b'"');
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(b"\":");
    // Writing a string or a number to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *body, value);
}

/// The ground truth of a run: fixtures and the events that will be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub fixtures: Fixtures,
    /// Sorted by creation time.
    pub events: Vec<EventSpec>,
    events_by_key: BTreeMap<(String, String), usize>,
    events_by_order: BTreeMap<(String, String), Vec<usize>>,
}

impl Workload {
    /// A workload from explicit parts (scenarios, tests, and fault models that reshape it).
    pub fn new(fixtures: Fixtures, mut events: Vec<EventSpec>) -> Workload {
        events.sort_by_key(|event| event.created_ms);
        let mut events_by_key = BTreeMap::new();
        let mut events_by_order: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
        for (index, event) in events.iter().enumerate() {
            events_by_key.insert((event.account.clone(), event.event_id.clone()), index);
            events_by_order
                .entry((event.tenant.clone(), event.order.clone()))
                .or_default()
                .push(index);
        }
        Workload {
            fixtures,
            events,
            events_by_key,
            events_by_order,
        }
    }

    /// The next unused event id of `account` (for events added after drawing).
    pub fn next_event_id(events: &[EventSpec], account: &str) -> String {
        let used = events.iter().filter(|event| event.account == account).count();
        format!("evt-{}", used + 1)
    }

    /// The event with id `event_id` in `account`.
    pub fn event(&self, account: &str, event_id: &str) -> Option<&EventSpec> {
        self.events_by_key
            .get(&(account.to_owned(), event_id.to_owned()))
            .map(|&index| &self.events[index])
    }

    /// The events about order `(tenant, order)`, in creation order.
    pub fn events_for_order(&self, tenant: &str, order: &str) -> impl Iterator<Item = &EventSpec> {
        self.events_by_order
            .get(&(tenant.to_owned(), order.to_owned()))
            .into_iter()
            .flatten()
            .map(|&index| &self.events[index])
    }

    /// Whether the receiver must reject `event` for good: its account or order does not exist.
    pub fn expects_rejection(&self, event: &EventSpec) -> bool {
        let account_known = self
            .fixtures
            .accounts
            .iter()
            .any(|(account, tenant)| *account == event.account && *tenant == event.tenant);
        let order_known = self
            .fixtures
            .orders
            .iter()
            .any(|order| order.tenant == event.tenant && order.order == event.order);
        !(account_known && order_known)
    }

    /// The state order `(tenant, order)` must end in: its events applied in creation order, with
    /// the same guarded transitions the reference uses. `None` for an order that does not exist.
    pub fn final_order_state(&self, tenant: &str, order: &str) -> Option<(OrderStatus, i64)> {
        let fixture = self
            .fixtures
            .orders
            .iter()
            .find(|fixture| fixture.tenant == tenant && fixture.order == order)?;
        let (mut amount_cents, mut version_ms) = (fixture.amount_cents, 0);
        for event in self.events_for_order(tenant, order) {
            if event.kind == EventKind::Update && event.created_ms > version_ms {
                amount_cents = event.amount_cents;
                version_ms = event.created_ms;
            }
        }
        let kinds: Vec<EventKind> = self
            .events_for_order(tenant, order)
            .map(|event| event.kind)
            .collect();
        Some((status_after(&kinds), amount_cents))
    }

    /// Every status order `(tenant, order)` may end in: its status events applied, with the
    /// guarded transitions, in any order they could arrive in. One status for every story but a
    /// race (`SimConfig::racing_orders`), where whichever of the racing events arrives first
    /// decides. `None` for an order that does not exist.
    pub fn final_order_statuses(&self, tenant: &str, order: &str) -> Option<BTreeSet<OrderStatus>> {
        self.fixtures
            .orders
            .iter()
            .find(|fixture| fixture.tenant == tenant && fixture.order == order)?;
        let kinds: Vec<EventKind> = self
            .events_for_order(tenant, order)
            .map(|event| event.kind)
            .filter(|kind| *kind != EventKind::Update)
            .collect();
        let mut statuses = BTreeSet::new();
        every_order(&mut kinds.clone(), 0, &mut |arrival| {
            statuses.insert(status_after(arrival));
        });
        Some(statuses)
    }
}

/// The status a new order ends in after `kinds` arrive in this order, with the guarded
/// transitions: payment only of an order awaiting it, refund of one awaiting payment or paid,
/// cancellation only of one awaiting payment.
fn status_after(kinds: &[EventKind]) -> OrderStatus {
    let mut status = OrderStatus::AwaitingPayment;
    for kind in kinds {
        match kind {
            EventKind::Payment if status == OrderStatus::AwaitingPayment => status = OrderStatus::Paid,
            EventKind::Refund if matches!(status, OrderStatus::AwaitingPayment | OrderStatus::Paid) => {
                status = OrderStatus::Refunded
            }
            EventKind::Cancel if status == OrderStatus::AwaitingPayment => status = OrderStatus::Cancelled,
            _ => {}
        }
    }
    status
}

/// Calls `visit` with every ordering of `kinds[from..]` (an order has at most three status
/// events, so at most six orderings).
fn every_order(kinds: &mut [EventKind], from: usize, visit: &mut impl FnMut(&[EventKind])) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::OrderFixture;

    #[test]
    fn the_final_state_follows_creation_order() {
        let fixtures = Fixtures {
            accounts: vec![("acct-a".into(), "tenant-a".into())],
            orders: vec![OrderFixture {
                tenant: "tenant-a".into(),
                order: "order-1".into(),
                amount_cents: 100,
            }],
        };
        let event = |kind, amount_cents, created_ms| EventSpec {
            account: "acct-a".into(),
            event_id: format!("evt-{created_ms}"),
            tenant: "tenant-a".into(),
            order: "order-1".into(),
            kind,
            amount_cents,
            created_ms,
            deliver_at_ms: 0,
            subscriptions: 1,
            extra_deliveries: Vec::new(),
        };
        let workload = Workload::new(
            fixtures,
            vec![
                event(EventKind::Refund, 0, 30),
                event(EventKind::Update, 7, 20),
                event(EventKind::Payment, 100, 10),
            ],
        );
        assert_eq!(
            workload.final_order_state("tenant-a", "order-1"),
            Some((OrderStatus::Refunded, 7))
        );
        assert_eq!(workload.final_order_state("tenant-a", "order-9"), None);
        assert!(!workload.expects_rejection(&workload.events[0]));
        // A refund and a payment end refunded in either order: one status.
        assert_eq!(
            workload.final_order_statuses("tenant-a", "order-1"),
            Some(BTreeSet::from([OrderStatus::Refunded]))
        );
        // A cancellation racing a payment: whichever arrives first decides.
        let racing = Workload::new(
            workload.fixtures.clone(),
            vec![
                event(EventKind::Payment, 100, 10),
                event(EventKind::Cancel, 0, 20),
            ],
        );
        assert_eq!(
            racing.final_order_state("tenant-a", "order-1"),
            Some((OrderStatus::Paid, 100))
        );
        assert_eq!(
            racing.final_order_statuses("tenant-a", "order-1"),
            Some(BTreeSet::from([OrderStatus::Paid, OrderStatus::Cancelled]))
        );
        // A refund racing a cancellation.
        let racing = Workload::new(
            workload.fixtures.clone(),
            vec![event(EventKind::Cancel, 0, 10), event(EventKind::Refund, 0, 20)],
        );
        assert_eq!(
            racing.final_order_statuses("tenant-a", "order-1"),
            Some(BTreeSet::from([OrderStatus::Cancelled, OrderStatus::Refunded]))
        );
    }
}
