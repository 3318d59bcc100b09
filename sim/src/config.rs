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
use crate::system::{Fixtures, OrderFixture};

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
            idle_poll_max_ms: *rng.pick(&[MINUTE_MS, 5 * MINUTE_MS]),
        };
        let fault_phase_ms = *rng.pick(&[10 * MINUTE_MS, HOUR_MS, 4 * HOUR_MS]);
        let mut config = SimConfig {
            backend,
            tenants: rng.between(1, 3) as u32,
            orders_per_tenant: rng.between(1, 4) as u32,
            paid_orders: Ratio::new(4, 5),
            receivers: rng.between(1, 3) as u32,
            relay_workers: rng.between(1, 3) as u32,
            sender_preset: *rng.pick(&SenderPreset::ALL),
            sender_timeout_ms: *rng.pick(&[10 * SECOND_MS, 15 * SECOND_MS, 30 * SECOND_MS]),
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
        let context = FaultContext {
            fault_phase_ms,
            emit_window_ms: config.emit_window_ms,
            key_lifetime_ms: config.relay.key_lifetime_ms,
        };
        for kind in faults::registry() {
            let mut fault_rng = SimRng::stream(seed, &faults::config_stream_label(kind.name));
            config
                .faults
                .insert(kind.name.to_owned(), (kind.draw)(&mut fault_rng, &context));
        }
        config
    }

    /// Checks the values a hand-edited seed file could get wrong.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("tenants", i64::from(self.tenants)),
            ("orders_per_tenant", i64::from(self.orders_per_tenant)),
            ("receivers", i64::from(self.receivers)),
            ("sender_timeout_ms", self.sender_timeout_ms),
            ("emit_window_ms", self.emit_window_ms),
            ("network_latency_ms_max", self.network_latency_ms_max),
            ("provider_latency_ms_max", self.provider_latency_ms_max),
            ("relay.call_timeout_ms", self.relay.call_timeout_ms),
            ("relay.lease_ms", self.relay.lease_ms),
            ("relay.idle_poll_min_ms", self.relay.idle_poll_min_ms),
            ("fault_phase_ms", self.fault_phase_ms),
        ];
        for (name, value) in positive {
            if value <= 0 {
                return Err(format!("configuration: {name} must be positive, found {value}"));
            }
        }
        if self.paid_orders.denominator == 0 || self.paid_orders.numerator > self.paid_orders.denominator {
            return Err("configuration: paid_orders must be a ratio between 0 and 1".to_owned());
        }
        if self.tenants > 26 {
            return Err(format!(
                "configuration: at most 26 tenants, found {}",
                self.tenants
            ));
        }
        for name in self.faults.keys() {
            if faults::kind(name).is_none() {
                return Err(format!("configuration: unknown fault model {name:?}"));
            }
        }
        Ok(())
    }
}

/// One payment event the sender will emit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSpec {
    pub account: String,
    pub event_id: String,
    pub tenant: String,
    pub order: String,
    pub emit_at_ms: i64,
}

/// The ground truth of a run: fixtures and the events that will be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub fixtures: Fixtures,
    /// Sorted by emission time.
    pub events: Vec<EventSpec>,
    events_by_key: BTreeMap<(String, String), usize>,
    events_by_order: BTreeMap<(String, String), Vec<usize>>,
}

impl Workload {
    /// Draws the workload of `seed` for `config`.
    pub fn draw(seed: u64, config: &SimConfig) -> Workload {
        let mut rng = SimRng::stream(seed, "workload");
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
                orders.push(OrderFixture {
                    tenant: tenant.clone(),
                    order: order.clone(),
                    amount_cents: rng.between(100, 100_000),
                });
                if rng.chance(config.paid_orders) {
                    events.push(EventSpec {
                        account: account.clone(),
                        event_id: String::new(),
                        tenant: tenant.clone(),
                        order,
                        emit_at_ms: rng.between(0, config.emit_window_ms - 1),
                    });
                }
            }
        }
        events.sort_by_key(|event| event.emit_at_ms);
        for (index, event) in events.iter_mut().enumerate() {
            event.event_id = format!("evt-{}", index + 1);
        }
        Workload::new(Fixtures { accounts, orders }, events)
    }

    /// A workload from explicit parts (scenarios and tests).
    pub fn new(fixtures: Fixtures, mut events: Vec<EventSpec>) -> Workload {
        events.sort_by_key(|event| event.emit_at_ms);
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

    /// The event with id `event_id` in `account`.
    pub fn event(&self, account: &str, event_id: &str) -> Option<&EventSpec> {
        self.events_by_key
            .get(&(account.to_owned(), event_id.to_owned()))
            .map(|&index| &self.events[index])
    }

    /// The events that pay order `(tenant, order)`.
    pub fn events_for_order(&self, tenant: &str, order: &str) -> impl Iterator<Item = &EventSpec> {
        self.events_by_order
            .get(&(tenant.to_owned(), order.to_owned()))
            .into_iter()
            .flatten()
            .map(|&index| &self.events[index])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                    .all(|pair| pair[0].emit_at_ms <= pair[1].emit_at_ms)
            );
            for event in &workload.events {
                assert_eq!(workload.event(&event.account, &event.event_id), Some(event));
            }
        }
    }

    #[test]
    fn validation_names_the_bad_field() {
        let mut config = SimConfig::draw(1, Backend::Memdb);
        config.receivers = 0;
        assert!(config.validate().unwrap_err().contains("receivers"));
    }
}
