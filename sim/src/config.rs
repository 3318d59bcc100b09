//! A run's configuration and workload, both drawn from the seed.
//!
//! The configuration says how big the world is (tenants, orders, receivers, relay workers), how
//! the sender, the network, the provider and the relay behave, how long each phase lasts, and
//! each fault model's settings (swarm testing: a random subset of fault models on, with rates
//! drawn across orders of magnitude). The workload is the ground truth the invariants compare
//! against: which accounts and orders exist and which payment events the sender emits, when.
//! Everything here is plain data written to seed files; drawing it must use only the seed.

use std::collections::BTreeMap;

use commitgap::relay::RelaySettings;
use serde::{Deserialize, Serialize};

use crate::db::Backend;
use crate::faults::{self, FaultContext};
use crate::rng::{Ratio, SimRng};
use crate::sender::SenderPreset;
use crate::system::{Fixtures, OrderFixture, OrderStatus};

const SECOND_MS: i64 = 1_000;
const MINUTE_MS: i64 = 60 * SECOND_MS;
const HOUR_MS: i64 = 60 * MINUTE_MS;

/// Everything a run needs besides its seed and system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    pub backend: Backend,
    pub tenants: u32,
    pub orders_per_tenant: u32,
    /// Share of orders whose payment the sender reports; the rest stay unpaid.
    pub paid_orders: Ratio,
    pub receivers: u32,
    pub relay_workers: u32,
    pub sender_preset: SenderPreset,
    /// How long the sender waits for an answer.
    pub sender_timeout_ms: i64,
    /// Events are created at uniform times in `0..emit_window_ms`.
    pub emit_window_ms: i64,
    /// Upper bound on the travel time of a webhook answer.
    pub network_latency_ms_max: i64,
    /// Upper bound on the provider's reply time.
    pub provider_latency_ms_max: i64,
    pub relay: RelaySettings,
    /// The fault phase ends at this virtual time ...
    pub fault_phase_ms: i64,
    /// ... or after this many steps, whichever comes first.
    pub fault_phase_steps_max: u64,
    /// The liveness phase ends at quiescence, or after this much more virtual time ...
    pub liveness_ms_max: i64,
    /// ... or after this many more steps.
    pub liveness_steps_max: u64,
    /// Each fault model's settings, by name.
    pub faults: BTreeMap<String, serde_json::Value>,
}

impl SimConfig {
    /// Draws the configuration of `seed`.
    pub fn draw(seed: u64, backend: Backend) -> SimConfig {
        let mut rng = SimRng::stream(seed, "config");
        let provider_latency_ms_max = *rng.pick(&[50, 500, 3_000]);
        // A timeout of at least twice the slowest reply, so only lost replies time out.
        let call_timeout_ms =
            (*rng.pick(&[5 * SECOND_MS, 10 * SECOND_MS, 30 * SECOND_MS])).max(2 * provider_latency_ms_max);
        let relay = RelaySettings {
            call_timeout_ms,
            // A lease well above the call timeout, as the design rules require of the reference.
            lease_ms: call_timeout_ms * rng.pick(&[2, 4, 10]),
            key_lifetime_ms: *rng.pick(&[30 * MINUTE_MS, HOUR_MS, 6 * HOUR_MS, 24 * HOUR_MS]),
            backoff_base_ms: *rng.pick(&[SECOND_MS, 5 * SECOND_MS, 30 * SECOND_MS]),
            backoff_cap_ms: *rng.pick(&[30 * MINUTE_MS, HOUR_MS, 2 * HOUR_MS]),
            idle_poll_min_ms: SECOND_MS,
            // Idle polls are most of a long run's steps; retries do not depend on them (they sleep
            // until due), only the pickup of new work after a long quiet stretch does.
            idle_poll_max_ms: *rng.pick(&[5 * MINUTE_MS, 15 * MINUTE_MS]),
            attempts_max: *rng.pick(&[10, 30]),
            clock_skew_ms_max: 5 * MINUTE_MS,
            stall_ms_max: 10 * MINUTE_MS,
        };
        let sender_preset = *rng.pick(&SenderPreset::ALL);
        let fault_phase_ms = *rng.pick(&[10 * MINUTE_MS, HOUR_MS, 4 * HOUR_MS]);
        let mut config = SimConfig {
            backend,
            tenants: rng.between(1, 3) as u32,
            orders_per_tenant: rng.between(1, 4) as u32,
            paid_orders: Ratio::new(4, 5),
            receivers: rng.between(1, 3) as u32,
            relay_workers: rng.between(1, 3) as u32,
            sender_preset,
            sender_timeout_ms: sender_preset.timeout_ms(),
            emit_window_ms: *rng.pick(&[MINUTE_MS, 10 * MINUTE_MS]),
            network_latency_ms_max: *rng.pick(&[5, 50, 500]),
            provider_latency_ms_max,
            relay,
            fault_phase_ms,
            fault_phase_steps_max: 20_000,
            liveness_ms_max: 5 * 24 * HOUR_MS,
            liveness_steps_max: 50_000,
            faults: BTreeMap::new(),
        };
        let context = config.fault_context();
        for kind in faults::registry() {
            let mut fault_rng = SimRng::stream(seed, &faults::config_stream_label(kind.name));
            config
                .faults
                .insert(kind.name.to_owned(), (kind.draw)(&mut fault_rng, &context));
        }
        config
    }

    /// Turns every fault model on, keeping the rates drawn for it.
    pub fn enable_every_fault(&mut self) {
        for settings in self.faults.values_mut() {
            if let Some(enabled) = settings.get_mut("enabled") {
                *enabled = serde_json::Value::Bool(true);
            }
        }
    }

    /// What fault models may base their settings on.
    pub fn fault_context(&self) -> FaultContext {
        FaultContext {
            fault_phase_ms: self.fault_phase_ms,
            emit_window_ms: self.emit_window_ms,
            key_lifetime_ms: self.relay.key_lifetime_ms,
            sender_timeout_ms: self.sender_timeout_ms,
            call_timeout_ms: self.relay.call_timeout_ms,
            lease_ms: self.relay.lease_ms,
            clock_skew_ms_max: self.relay.clock_skew_ms_max,
            stall_ms_max: self.relay.stall_ms_max,
        }
    }

    /// Checks every value a hand-edited seed file could get wrong, against [`limits`]: counts,
    /// durations, ratios and each fault model's settings. The error is one line naming the field
    /// (as a path from the configuration, `relay.lease_ms`), the value and what is allowed.
    pub fn validate(&self) -> Result<(), String> {
        use limits::{DURATION_MS_MAX, check};
        check("tenants", self.tenants, 1, limits::TENANTS_MAX)?;
        check(
            "orders_per_tenant",
            self.orders_per_tenant,
            1,
            limits::ORDERS_PER_TENANT_MAX,
        )?;
        let orders = u64::from(self.tenants) * u64::from(self.orders_per_tenant);
        if orders > limits::ORDERS_MAX {
            return Err(format!(
                "tenants x orders_per_tenant is {} x {} = {orders} orders; allowed at most {} (a bound on a run's memory and time)",
                self.tenants,
                self.orders_per_tenant,
                limits::ORDERS_MAX
            ));
        }
        check("receivers", self.receivers, 1, limits::PROCESSES_MAX)?;
        // Without a relay worker nothing could ever drain the outbox: every paid order would
        // "fail" for want of a process the configuration left out.
        check("relay_workers", self.relay_workers, 1, limits::PROCESSES_MAX)?;
        for (name, value) in [
            ("sender_timeout_ms", self.sender_timeout_ms),
            ("emit_window_ms", self.emit_window_ms),
            ("network_latency_ms_max", self.network_latency_ms_max),
            ("provider_latency_ms_max", self.provider_latency_ms_max),
            ("relay.call_timeout_ms", self.relay.call_timeout_ms),
            ("relay.lease_ms", self.relay.lease_ms),
            ("relay.key_lifetime_ms", self.relay.key_lifetime_ms),
            ("relay.backoff_base_ms", self.relay.backoff_base_ms),
            ("relay.backoff_cap_ms", self.relay.backoff_cap_ms),
            ("relay.idle_poll_min_ms", self.relay.idle_poll_min_ms),
            ("relay.idle_poll_max_ms", self.relay.idle_poll_max_ms),
            ("fault_phase_ms", self.fault_phase_ms),
            ("liveness_ms_max", self.liveness_ms_max),
        ] {
            check(name, value, 1, DURATION_MS_MAX)?;
        }
        for (name, value) in [
            ("relay.clock_skew_ms_max", self.relay.clock_skew_ms_max),
            ("relay.stall_ms_max", self.relay.stall_ms_max),
        ] {
            check(name, value, 0, DURATION_MS_MAX)?;
        }
        // An answer slower than the sender waits could never settle a delivery; the network is
        // held to half the sender's timeout, as every drawn configuration is.
        check(
            "network_latency_ms_max (at most half of sender_timeout_ms)",
            self.network_latency_ms_max,
            1,
            self.sender_timeout_ms / 2,
        )?;
        check(
            "relay.idle_poll_max_ms",
            self.relay.idle_poll_max_ms,
            self.relay.idle_poll_min_ms,
            DURATION_MS_MAX,
        )?;
        check(
            "relay.attempts_max",
            self.relay.attempts_max,
            1,
            limits::ATTEMPTS_MAX,
        )?;
        // The relay's contract: a lease outlives the provider call it covers, with room for the
        // claim before it and the write after it (see `RelaySettings::lease_ms`).
        check(
            "relay.lease_ms (at least twice relay.call_timeout_ms)",
            self.relay.lease_ms,
            self.relay.call_timeout_ms.saturating_mul(2),
            DURATION_MS_MAX,
        )?;
        check(
            "fault_phase_steps_max",
            self.fault_phase_steps_max,
            1,
            limits::FAULT_PHASE_STEPS_MAX,
        )?;
        check(
            "liveness_steps_max",
            self.liveness_steps_max,
            1,
            limits::LIVENESS_STEPS_MAX,
        )?;
        for (name, settings) in &self.faults {
            let Some(kind) = faults::kind(name) else {
                return Err(format!(
                    "faults.{}: no fault model has this name; see `list` for the fault models",
                    crate::files::clip(name, 80)
                ));
            };
            // Building a model checks its settings; the stream it gets is never drawn from.
            (kind.build)(settings, SimRng::stream(0, "validate"), &self.fault_context())
                .map_err(|error| format!("faults.{name}.{error}"))?;
        }
        Ok(())
    }
}

/// The bounds every configuration is held to, so that any seed file a user edits runs in bounded
/// memory and time and no arithmetic on its values can overflow: every duration is at most a
/// year, so the sum of a few of them is far from the largest `i64`. The README lists them.
pub mod limits {
    use std::fmt::Display;

    /// The longest duration any setting may have: a year, in milliseconds.
    pub const DURATION_MS_MAX: i64 = 365 * 24 * super::HOUR_MS;
    /// Tenants are named `tenant-a` to `tenant-z`.
    pub const TENANTS_MAX: u32 = 26;
    pub const ORDERS_PER_TENANT_MAX: u32 = 64;
    /// Orders over all tenants. With at most five events an order and each event fanned out to
    /// at most [`FAN_OUT_MAX`] subscriptions, any workload the simulator draws stays within the
    /// stream limits below, so every seed file it writes can be read back.
    pub const ORDERS_MAX: u64 = 64;
    /// Receivers, and relay workers, each.
    pub const PROCESSES_MAX: u32 = 16;
    /// Subscriptions one event is delivered to.
    pub const SUBSCRIPTIONS_MAX: u32 = 8;
    /// Subscriptions a fault model may fan an event out to.
    pub const FAN_OUT_MAX: u32 = 4;
    /// Deliveries of one event outside the retry schedule.
    pub const EXTRA_DELIVERIES_MAX: usize = 8;
    /// Events in a workload: a few per order, plus what fault models add.
    pub const EVENTS_MAX: usize = 512;
    /// Streams (an event's delivery to one subscription) over the whole workload, and extra
    /// deliveries over the whole workload. A hand-made schedule at these limits, with every event
    /// at once, runs in about a minute on a 2-core machine; drawn workloads are far smaller.
    pub const STREAMS_MAX: usize = 2_048;
    pub const ALL_EXTRA_DELIVERIES_MAX: usize = 2_048;
    pub const ATTEMPTS_MAX: i64 = 1_000;
    pub const FAULT_PHASE_STEPS_MAX: u64 = 1_000_000;
    pub const LIVENESS_STEPS_MAX: u64 = 5_000_000;
    /// Lines in a schedule: one per step of the longest run.
    pub const SCHEDULE_STEPS_MAX: usize = (FAULT_PHASE_STEPS_MAX + LIVENESS_STEPS_MAX) as usize;
    /// Outage windows a fault model may list.
    pub const WINDOWS_MAX: usize = 16;
    /// Characters in a name (an account, a tenant, an order, an event id).
    pub const NAME_CHARS_MAX: usize = 64;

    /// `Ok` when `low <= value <= high`; otherwise one line naming `field`, the value and the
    /// allowed range.
    pub fn check<T: PartialOrd + Display>(field: &str, value: T, low: T, high: T) -> Result<(), String> {
        if value >= low && value <= high {
            Ok(())
        } else {
            Err(format!(
                "{field} is {}; allowed {low} to {high}",
                crate::files::clip(&value.to_string(), 80)
            ))
        }
    }
}

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
    /// Draws the workload of `seed` for `config`: per order, a story (paid; paid then refunded;
    /// cancelled; or left unpaid), sometimes amount updates, sometimes an event for an order that
    /// does not exist. Event ids count per account, so accounts share id strings.
    pub fn draw(seed: u64, config: &SimConfig) -> Workload {
        let mut rng = SimRng::stream(seed, "workload");
        let window_ms = config.emit_window_ms;
        let mut accounts = Vec::new();
        let mut orders = Vec::new();
        let mut events = Vec::new();
        for tenant_index in 0..config.tenants {
            let letter = char::from(b'a' + tenant_index as u8);
            let tenant = format!("tenant-{letter}");
            let account = format!("acct-{letter}");
            accounts.push((account.clone(), tenant.clone()));
            for order_index in 1..=config.orders_per_tenant {
                let order = format!("order-{order_index}");
                let amount_cents = rng.between(100, 100_000);
                orders.push(OrderFixture {
                    tenant: tenant.clone(),
                    order: order.clone(),
                    amount_cents,
                });
                let new_event = |kind, amount_cents, created_ms| EventSpec {
                    account: account.clone(),
                    event_id: String::new(),
                    tenant: tenant.clone(),
                    order: order.clone(),
                    kind,
                    amount_cents,
                    created_ms,
                    deliver_at_ms: created_ms,
                    subscriptions: 1,
                    extra_deliveries: Vec::new(),
                };
                let paid_at_ms = rng.between(0, window_ms - 1);
                let story = rng.below(20);
                if rng.chance(config.paid_orders) && story < 14 {
                    events.push(new_event(EventKind::Payment, amount_cents, paid_at_ms));
                    if story >= 11 {
                        events.push(new_event(
                            EventKind::Refund,
                            0,
                            rng.between(paid_at_ms + 1, paid_at_ms + window_ms),
                        ));
                    }
                } else if story < 17 {
                    events.push(new_event(EventKind::Cancel, 0, paid_at_ms));
                }
                if rng.chance(Ratio::new(1, 4)) {
                    // Updates get distinct creation times, so "newest wins" is well defined.
                    let first_ms = rng.between(0, window_ms - 1);
                    events.push(new_event(EventKind::Update, rng.between(100, 100_000), first_ms));
                    if rng.chance(Ratio::new(1, 2)) {
                        let second_ms = first_ms + rng.between(1, window_ms);
                        events.push(new_event(EventKind::Update, rng.between(100, 100_000), second_ms));
                    }
                }
            }
        }
        if rng.chance(Ratio::new(1, 4)) {
            let (account, tenant) = accounts[rng.below(accounts.len() as u64) as usize].clone();
            let created_ms = rng.between(0, window_ms - 1);
            events.push(EventSpec {
                account,
                event_id: String::new(),
                tenant,
                order: "order-missing".to_owned(),
                kind: EventKind::Payment,
                amount_cents: 500,
                created_ms,
                deliver_at_ms: created_ms,
                subscriptions: 1,
                extra_deliveries: Vec::new(),
            });
        }
        events.sort_by_key(|event| event.created_ms);
        let mut next_id: BTreeMap<String, u32> = BTreeMap::new();
        for event in &mut events {
            let counter = next_id.entry(event.account.clone()).or_insert(0);
            *counter += 1;
            event.event_id = format!("evt-{counter}");
        }
        Workload::new(Fixtures { accounts, orders }, events)
    }

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
        let (mut status, mut amount_cents, mut version_ms) =
            (OrderStatus::AwaitingPayment, fixture.amount_cents, 0);
        for event in self.events_for_order(tenant, order) {
            match event.kind {
                EventKind::Payment if status == OrderStatus::AwaitingPayment => status = OrderStatus::Paid,
                EventKind::Refund if matches!(status, OrderStatus::AwaitingPayment | OrderStatus::Paid) => {
                    status = OrderStatus::Refunded
                }
                EventKind::Cancel if status == OrderStatus::AwaitingPayment => {
                    status = OrderStatus::Cancelled
                }
                EventKind::Update if event.created_ms > version_ms => {
                    amount_cents = event.amount_cents;
                    version_ms = event.created_ms;
                }
                _ => {}
            }
        }
        Some((status, amount_cents))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_what_serde_json_writes() {
        let mut checked = 0;
        for seed in 0..200 {
            let config = SimConfig::draw(seed, Backend::Memdb);
            for event in Workload::draw(seed, &config).events {
                let mut expected = serde_json::json!({
                    "id": event.event_id,
                    "type": event.kind.type_name(),
                    "account": event.account,
                    "order": event.order,
                    "created_ms": event.created_ms,
                });
                if matches!(event.kind, EventKind::Payment | EventKind::Update) {
                    expected["amount_cents"] = event.amount_cents.into();
                }
                assert_eq!(event.body(), expected.to_string());
                checked += 1;
            }
        }
        let mut odd = EventSpec {
            account: "acct-\"quoted\"\n é".to_owned(),
            ..Workload::draw(1, &SimConfig::draw(1, Backend::Memdb)).events[0].clone()
        };
        odd.amount_cents = -5;
        let parsed: serde_json::Value = serde_json::from_str(&odd.body()).unwrap();
        assert_eq!(parsed["account"], "acct-\"quoted\"\n é");
        assert!(checked > 1_000, "{checked} events");
    }

    #[test]
    fn drawing_is_deterministic_and_valid() {
        for seed in 0..50 {
            let config = SimConfig::draw(seed, Backend::Memdb);
            assert_eq!(config, SimConfig::draw(seed, Backend::Memdb));
            config.validate().unwrap();
            assert!(config.relay.lease_ms > config.relay.call_timeout_ms);
            assert!(config.relay.call_timeout_ms >= 2 * config.provider_latency_ms_max);
            assert_eq!(config.faults.len(), faults::registry().len());
            let workload = Workload::draw(seed, &config);
            assert_eq!(workload, Workload::draw(seed, &config));
            assert!(
                workload
                    .events
                    .windows(2)
                    .all(|pair| pair[0].created_ms <= pair[1].created_ms)
            );
            for event in &workload.events {
                assert_eq!(workload.event(&event.account, &event.event_id), Some(event));
            }
        }
    }

    #[test]
    fn the_final_state_follows_creation_order() {
        let config = SimConfig::draw(3, Backend::Memdb);
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
        let _ = config;
    }

    #[test]
    fn validation_names_the_bad_field() {
        let mut config = SimConfig::draw(1, Backend::Memdb);
        config.receivers = 0;
        assert!(config.validate().unwrap_err().contains("receivers"));
    }
}
