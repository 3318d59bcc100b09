//! A run's configuration and workload, both drawn from the seed.
//!
//! The configuration says how big the world is (tenants, orders, receivers, relay workers), how
//! the sender, the network, the provider and the relay behave, how long each phase lasts, and
//! each fault model's settings (swarm testing: a random subset of fault models on, with rates
//! drawn across orders of magnitude). The workload is the ground truth the invariants compare
//! against: which accounts and orders exist and which payment events the sender emits, when.
//! Everything here is plain data written to seed files; drawing it must use only the seed.

/// The most steps a liveness phase may take, whatever a seed file asks for.
pub use crate::limits::LIVENESS_STEPS_MAX;
use std::collections::BTreeMap;

use commitgap::relay::RelaySettings;
use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::faults::{self, FaultContext};
use crate::rng::{Ratio, SimRng};
use crate::sender::SenderPreset;
use crate::shape::InvariantChoice;
use crate::shape::{CountRange, WorkloadShape};

const SECOND_MS: i64 = 1_000;
const MINUTE_MS: i64 = 60 * SECOND_MS;
const HOUR_MS: i64 = 60 * MINUTE_MS;

/// The least `relay.idle_poll_max_ms` a configuration may set (see `validate_contracts`).
const IDLE_POLL_MS_FLOOR: i64 = MINUTE_MS;

/// Everything a run needs besides its seed and system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// The database backend the run uses.
    pub backend: Backend,
    /// How many tenants the workload has.
    pub tenants: u32,
    /// How many orders each tenant has.
    pub orders_per_tenant: u32,
    /// Share of orders whose payment the sender reports; the rest stay unpaid.
    pub paid_orders: Ratio,
    /// When set, each order gets this many amount updates, drawn from a stream of their own,
    /// instead of the usual none, one or two (see [`crate::shape::WorkloadShape::updates`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updates_per_order: Option<CountRange>,
    /// Share of orders whose story races with itself: a paid order the customer also cancels,
    /// or a cancelled order the sender also reports refunded. Which of the two wins depends on
    /// which arrives first. Drawn from a stream of its own, so every other event is what it
    /// would have been; 0 (the value in seed files written before it existed) adds none.
    #[serde(default = "no_racing_orders", skip_serializing_if = "is_never")]
    pub racing_orders: Ratio,
    /// Values at the receiver's limits, each just inside: an order name of exactly the longest
    /// length, an update to the largest amount, an event created at time 0, and a body limit that
    /// the largest genuine body meets exactly. A receiver whose checks are off by one refuses a
    /// genuine event. Drawn from streams of their own; false (the value in seed files written
    /// before it existed) leaves the workload as it was.
    #[serde(default, skip_serializing_if = "is_false")]
    pub edge_values: bool,
    /// Statements that meet another connection's lock wait for it in virtual time, up to their
    /// connection's busy timeout, as SQLite's busy handler does in production (see
    /// [`crate::system::System::busy_timeout_ms`]). False in seed files written before it
    /// existed: there every refused lock answers busy at once, as it did when they were
    /// recorded.
    #[serde(default, skip_serializing_if = "is_false")]
    pub waits_for_locks: bool,
    /// How many receiver processes handle webhook deliveries.
    pub receivers: u32,
    /// How many relay worker processes run.
    pub relay_workers: u32,
    /// How the sender delivers and retries webhooks.
    pub sender_preset: SenderPreset,
    /// How long the sender waits for an answer.
    pub sender_timeout_ms: i64,
    /// Events are created at uniform times in `0..emit_window_ms`.
    pub emit_window_ms: i64,
    /// Upper bound on the travel time of a webhook answer.
    pub network_latency_ms_max: i64,
    /// Upper bound on the provider's reply time.
    pub provider_latency_ms_max: i64,
    /// The relay workers' settings.
    pub relay: RelaySettings,
    /// The fault phase ends at this virtual time ...
    pub fault_phase_ms: i64,
    /// ... or after this many steps, whichever comes first.
    pub fault_phase_steps_max: u64,
    /// The liveness phase ends at quiescence, or after this much more virtual time ...
    pub liveness_ms_max: i64,
    /// ... or after this many more steps.
    pub liveness_steps_max: u64,
    /// Both liveness bounds grow with the run's streams of deliveries: at least this many steps
    /// per stream (0 keeps `liveness_steps_max` as it is; see [`crate::run::liveness_bounds`]).
    #[serde(default = "default_liveness_steps_per_stream")]
    pub liveness_steps_per_stream: u64,
    /// ... and at least this much virtual time per stream (0 keeps `liveness_ms_max`).
    #[serde(default = "default_liveness_ms_per_stream")]
    pub liveness_ms_per_stream: i64,
    /// Each fault model's settings, by name.
    pub faults: BTreeMap<String, serde_json::Value>,
    /// Which invariants judge the run, as the sweep chose them (every one unless narrowed), so
    /// that a replay of the seed file judges the same way.
    #[serde(default, skip_serializing_if = "InvariantChoice::is_every")]
    pub invariants: InvariantChoice,
}

impl SimConfig {
    /// Draws the configuration of `seed`.
    pub fn draw(seed: u64, backend: Backend) -> SimConfig {
        SimConfig::draw_shaped(seed, backend, &WorkloadShape::default())
    }

    /// Draws the configuration of `seed` within `shape`. What the shape leaves open is drawn as
    /// [`SimConfig::draw`] draws it, from the same stream, so an open shape changes nothing; what
    /// it narrows is drawn from a stream of its own per setting. Fault settings are drawn last,
    /// from the final configuration, so none is left computed from a replaced value.
    pub fn draw_shaped(seed: u64, backend: Backend, shape: &WorkloadShape) -> SimConfig {
        SimConfig::draw_with(seed, backend, shape, &faults::built_in())
    }

    /// Draws the configuration of `seed` within `shape`, with the fault models `kinds` (a
    /// registry's, see [`crate::registry::Registry::faults`]) rather than the built-in ones.
    pub fn draw_with(
        seed: u64,
        backend: Backend,
        shape: &WorkloadShape,
        kinds: &[faults::FaultKind],
    ) -> SimConfig {
        let mut config = SimConfig::draw_unshaped(seed, backend);
        config.apply_shape(seed, shape);
        // The processing bound the relay is told of is the one the simulated provider keeps: a
        // slow provider acts within this many times the call timeout (see `provider-slow`).
        config.relay.provider_act_ms_max = config
            .relay
            .call_timeout_ms
            .saturating_mul(faults::PROVIDER_ACT_TIMEOUTS_MAX);
        let context = config.fault_context();
        for kind in kinds {
            let mut fault_rng = SimRng::stream(seed, &faults::config_stream_label(kind.name));
            let mut settings = kind.draw(&mut fault_rng, &context);
            if !shape.allows_fault(kind.name)
                && let Some(enabled) = settings.get_mut("enabled")
            {
                *enabled = serde_json::Value::Bool(false);
            }
            config.faults.insert(kind.name.to_owned(), settings);
        }
        faults::after_draw(kinds, &mut config.faults, shape, &|name| shape.allows_fault(name));
        // A stalled worker is found out only by the worker that takes its obligation over:
        // a seed that stalls workers gets a second one unless the shape chose the number.
        if config.stalls_workers(kinds) && shape.relay_workers.is_none() {
            config.relay_workers = config.relay_workers.max(2);
        }
        config
    }

    /// Whether a fault model that stalls relay workers is on.
    fn stalls_workers(&self, kinds: &[faults::FaultKind]) -> bool {
        kinds.iter().any(|kind| {
            kind.stalls_workers
                && self
                    .faults
                    .get(kind.name)
                    .is_some_and(|settings| !faults::turned_off(settings))
        })
    }

    fn apply_shape(&mut self, seed: u64, shape: &WorkloadShape) {
        let draw = |name: &str, range: Option<CountRange>, drawn: u32| match range {
            Some(range) => SimRng::stream(seed, &format!("config/shape/{name}"))
                .between(i64::from(range.min), i64::from(range.max)) as u32,
            None => drawn,
        };
        self.tenants = draw("tenants", shape.tenants, self.tenants);
        // The stream keeps its first name, so a shape draws the same counts it always did.
        self.orders_per_tenant = draw("orders", shape.subjects, self.orders_per_tenant);
        self.receivers = draw("receivers", shape.receivers, self.receivers);
        self.relay_workers = draw("relay-workers", shape.relay_workers, self.relay_workers);
        self.updates_per_order = shape.updates;
        if let Some(preset) = shape.sender {
            self.sender_preset = preset;
            self.sender_timeout_ms = preset.timeout_ms();
            // The network must stay well inside the sender's patience, as drawn configurations do.
            self.network_latency_ms_max = self.network_latency_ms_max.min(self.sender_timeout_ms / 2);
        }
        if shape.no_edge_values {
            self.edge_values = false;
        }
        if let Some(key_lifetime_ms) = shape.key_lifetime_ms {
            self.relay.key_lifetime_ms = key_lifetime_ms;
        }
        if let Some(lease_ms) = shape.lease_ms {
            self.relay.lease_ms = lease_ms;
            // The lease must outlive two calls (the configuration's contract); a shorter call
            // timeout keeps a chosen lease valid without changing it.
            self.relay.call_timeout_ms = self.relay.call_timeout_ms.min(lease_ms / 2);
            // And the provider still answers well inside the shorter timeout, as drawn
            // configurations do (the configuration's contract, see `validate_contracts`).
            self.provider_latency_ms_max = self
                .provider_latency_ms_max
                .min(self.relay.call_timeout_ms / 2)
                .max(1);
        }
        self.invariants = InvariantChoice {
            only: shape
                .invariants
                .as_ref()
                .map(|names| names.iter().cloned().collect()),
            without: shape.without_invariants.iter().cloned().collect(),
        };
    }

    fn draw_unshaped(seed: u64, backend: Backend) -> SimConfig {
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
            // Set with the call timeout, which a shape may change (see `draw_shaped`).
            provider_act_ms_max: 0,
        };
        let sender_preset = *rng.pick(&SenderPreset::ALL);
        let fault_phase_ms = *rng.pick(&[10 * MINUTE_MS, HOUR_MS, 4 * HOUR_MS]);
        let mut relay = relay;
        // Swarm testing: a key that outlives the fault phase is rarely forgotten while a retry is
        // still owed, so half of those seeds get one of the short lifetimes real providers have
        // (Qonto's 30 minutes, an hour). A stream of its own keeps every other draw as it was.
        let mut lifetime_rng = SimRng::stream(seed, "config/key-lifetime");
        if relay.key_lifetime_ms > fault_phase_ms && lifetime_rng.chance(Ratio::new(1, 2)) {
            relay.key_lifetime_ms = *lifetime_rng.pick(&[30 * MINUTE_MS, HOUR_MS]);
        }
        SimConfig {
            backend,
            tenants: rng.between(1, 3) as u32,
            orders_per_tenant: rng.between(1, 4) as u32,
            paid_orders: Ratio::new(4, 5),
            updates_per_order: None,
            racing_orders: Ratio::new(1, 4),
            edge_values: SimRng::stream(seed, "config/edge-values").chance(Ratio::new(1, 2)),
            waits_for_locks: true,
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
            liveness_steps_per_stream: default_liveness_steps_per_stream(),
            liveness_ms_per_stream: default_liveness_ms_per_stream(),
            faults: BTreeMap::new(),
            invariants: InvariantChoice::default(),
        }
    }

    /// What this configuration says about the workload its system's domain draws.
    pub fn workload_settings(&self) -> crate::shape::WorkloadSettings {
        crate::shape::WorkloadSettings {
            tenants: self.tenants,
            subjects_per_tenant: self.orders_per_tenant,
            emit_window_ms: self.emit_window_ms,
            completed_subjects: self.paid_orders,
            updates_per_subject: self.updates_per_order.map(|range| (range.min, range.max)),
            racing_subjects: self.racing_orders,
            edge_values: self.edge_values,
        }
    }

    /// Turns every fault model on, keeping the rates drawn for it.
    pub fn enable_every_fault(&mut self) {
        self.enable_faults_allowed_by(&WorkloadShape::default(), &faults::built_in());
    }

    /// Turns on every fault model `shape` allows, keeping the rates drawn for it; `kinds` keep
    /// their rules with each other (see [`faults::Fault::after_all_on`]).
    pub fn enable_faults_allowed_by(&mut self, shape: &WorkloadShape, kinds: &[faults::FaultKind]) {
        for (name, settings) in &mut self.faults {
            if !shape.allows_fault(name) {
                continue;
            }
            if let Some(enabled) = settings.get_mut("enabled") {
                *enabled = serde_json::Value::Bool(true);
            }
        }
        faults::after_all_on(kinds, &mut self.faults);
    }

    /// What fault models may base their settings on.
    pub fn fault_context(&self) -> FaultContext {
        FaultContext {
            fault_phase_ms: self.fault_phase_ms,
            emit_window_ms: self.emit_window_ms,
            key_lifetime_ms: self.relay.key_lifetime_ms,
            sender_timeout_ms: self.sender_timeout_ms,
            call_timeout_ms: self.relay.call_timeout_ms,
            // The lease a relay holds, which a fault model that stalls a worker past it must outlast.
            lease_ms: self.relay.lease_held_ms(),
            clock_skew_ms_max: self.relay.clock_skew_ms_max,
            stall_ms_max: self.relay.stall_ms_max,
            provider_act_ms_max: self.relay.provider_act_ms_max,
        }
    }

    /// Checks every value a hand-edited seed file could get wrong, against the limits: counts,
    /// durations, ratios and each fault model's settings. The error is one line naming the field
    /// (as a path from the configuration, `relay.lease_ms`), the value and what is allowed.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_with(&faults::built_in())
    }

    /// [`SimConfig::validate`] as far as it can go without knowing the program's registry: a
    /// fault model of a name no built-in model has is taken to be the program's own, and its
    /// settings are checked when a run builds it (with the same error). A seed file is read this
    /// way, since the file is read before the program that replays it is known.
    pub fn validate_without_registry(&self) -> Result<(), String> {
        let built_in = faults::built_in();
        self.validate_counts()?;
        self.validate_durations()?;
        self.validate_contracts(&built_in)?;
        let known: Vec<faults::FaultKind> = built_in
            .into_iter()
            .filter(|kind| self.faults.contains_key(kind.name))
            .collect();
        let mut own = self.clone();
        own.faults
            .retain(|name, _| known.iter().any(|kind| kind.name == name));
        own.validate_fault_settings(&known)
    }

    /// [`SimConfig::validate`] with the fault models `kinds` (a registry's) rather than the
    /// built-in ones.
    pub fn validate_with(&self, kinds: &[faults::FaultKind]) -> Result<(), String> {
        self.validate_before_building(kinds)?;
        self.validate_fault_settings(kinds)
    }

    /// Everything [`SimConfig::validate`] checks but each fault model's settings, which building
    /// the model checks: a run builds its models anyway and reports the same error then.
    pub(crate) fn validate_before_building(&self, kinds: &[faults::FaultKind]) -> Result<(), String> {
        self.validate_counts()?;
        self.validate_durations()?;
        self.validate_contracts(kinds)?;
        self.validate_fault_names(kinds)
    }

    fn validate_counts(&self) -> Result<(), String> {
        use crate::limits::{self, check};
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
        if let Some(range) = self.updates_per_order {
            check(
                "updates_per_order.max",
                range.max,
                range.min,
                crate::shape::UPDATES_PER_ORDER_MAX,
            )?;
        }
        check("receivers", self.receivers, 1, limits::PROCESSES_MAX)?;
        // Without a relay worker nothing could ever drain the outbox: every paid order would
        // "fail" for want of a process the configuration left out.
        check("relay_workers", self.relay_workers, 1, limits::PROCESSES_MAX)?;
        check(
            "relay.attempts_max",
            self.relay.attempts_max,
            1,
            limits::ATTEMPTS_MAX,
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
        check(
            "liveness_steps_per_stream",
            self.liveness_steps_per_stream,
            0,
            limits::LIVENESS_STEPS_MAX,
        )?;
        check(
            "liveness_ms_per_stream",
            self.liveness_ms_per_stream,
            0,
            limits::DURATION_MS_MAX,
        )
    }

    fn validate_durations(&self) -> Result<(), String> {
        use crate::limits::{DURATION_MS_MAX, check};
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
        Ok(())
    }

    /// The longest a correct relay may wait, after heal, before it settles an owed obligation:
    /// a crashed worker's lease, the provider's processing bound after a timeout or a 409, the
    /// longest backoff and the longest idle poll, once each. The liveness bound is never shorter
    /// than twice this (see [`crate::run::liveness_bounds`]), so a configuration that tells the
    /// relay to wait long is judged by a bound that allows it.
    pub fn relay_waits_ms(&self) -> i64 {
        let relay = &self.relay;
        relay
            .lease_held_ms()
            .saturating_add(relay.provider_act_ms_max)
            .saturating_add(relay.backoff_cap_ms)
            .saturating_add(relay.idle_poll_max_ms)
    }

    /// Values that are each in range but together would break a contract the reference relies
    /// on, so that a run of them could only end in a false verdict.
    fn validate_contracts(&self, kinds: &[faults::FaultKind]) -> Result<(), String> {
        use crate::limits::{DURATION_MS_MAX, check};
        // The liveness bound grows to twice these waits and is held to the longest duration.
        check(
            "relay.lease_ms + relay.provider_act_ms_max + relay.backoff_cap_ms + relay.idle_poll_max_ms (the relay's waits after heal)",
            self.relay_waits_ms(),
            0,
            DURATION_MS_MAX / 2,
        )?;
        // An answer slower than the sender waits could never settle a delivery; the network is
        // held to half the sender's timeout, as every drawn configuration is.
        check(
            "network_latency_ms_max (at most half of sender_timeout_ms)",
            self.network_latency_ms_max,
            1,
            self.sender_timeout_ms / 2,
        )?;
        // The provider's ordinary latency is not a fault and never heals: were it longer than the
        // relay waits, calls would keep timing out after heal and the relay would rightly give
        // obligations up, which liveness would then judge as the system's fault. Slowness past
        // the timeout is `provider-slow`'s, which heals. Drawn configurations keep it to half.
        check(
            "provider_latency_ms_max (at most half of relay.call_timeout_ms)",
            self.provider_latency_ms_max,
            1,
            self.relay.call_timeout_ms / 2,
        )?;
        // Events are created while faults are on, and the latest first delivery (a reordered
        // one comes up to two windows after its event) still leaves half the liveness bound to
        // settle in; an event created later than that could only be judged lost. Drawn
        // configurations create events within minutes and give liveness days.
        let emit_window_high_ms = self
            .fault_phase_ms
            .min(self.fault_phase_ms.saturating_add(self.liveness_ms_max / 2) / 3)
            .max(1);
        check(
            "emit_window_ms (at most fault_phase_ms and a third of fault_phase_ms + liveness_ms_max / 2)",
            self.emit_window_ms,
            1,
            emit_window_high_ms,
        )?;
        // Idle polls are most of a long run's steps: a worker that polls more often than once a
        // minute when idle would need more steps than any liveness bound gives while the world
        // waits days for a sender's last retry. Drawn configurations poll every 5 or 15 minutes.
        check(
            "relay.idle_poll_max_ms (at least relay.idle_poll_min_ms and a minute)",
            self.relay.idle_poll_max_ms,
            self.relay.idle_poll_min_ms.max(IDLE_POLL_MS_FLOOR),
            DURATION_MS_MAX,
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
            "relay.provider_act_ms_max",
            self.relay.provider_act_ms_max,
            0,
            DURATION_MS_MAX,
        )?;
        faults::check_with_others(kinds, &self.faults, &self.fault_context())
    }

    fn validate_fault_names(&self, kinds: &[faults::FaultKind]) -> Result<(), String> {
        let known = |name: &String| kinds.iter().any(|kind| kind.name == name);
        match self.faults.keys().find(|name| !known(name)) {
            Some(name) => Err(format!(
                "faults.{}: no fault model has this name; see `list` for the fault models",
                crate::files::clip(name, 80)
            )),
            None => Ok(()),
        }
    }

    fn validate_fault_settings(&self, kinds: &[faults::FaultKind]) -> Result<(), String> {
        for (name, settings) in &self.faults {
            let kind = kinds
                .iter()
                .find(|kind| kind.name == name)
                .expect("fault names are checked first");
            // Building a model checks its settings; the stream it gets is never drawn from.
            kind.build(settings, SimRng::stream(0, "validate"), &self.fault_context())
                .map_err(|error| format!("faults.{name}.{error}"))?;
        }
        Ok(())
    }
}

/// Steps the liveness phase may take per stream of deliveries. After heal, an operator
/// redelivers every stream the sender gave up on at once; the receivers settle a few per round
/// while the rest meet a busy database and wait for the next round, so the work grows with the
/// streams given up. Measured on the reference under `--sender github --tenants 4..8 --orders
/// 5..8` (up to about 300 streams): with the fixed 50,000 steps, 5 seeds in 2,000 did not settle;
/// with this, none of 10,000.
fn default_liveness_steps_per_stream() -> u64 {
    2_000
}

/// Virtual time the liveness phase may take per stream, for the same reason: the operator looks
/// again every 30 minutes, and each round settles a few streams.
fn default_liveness_ms_per_stream() -> i64 {
    30 * MINUTE_MS
}

fn no_racing_orders() -> Ratio {
    Ratio::NEVER
}

fn is_never(ratio: &Ratio) -> bool {
    ratio.numerator == 0
}

fn is_false(value: &bool) -> bool {
    !*value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Domain;
    use crate::domain::payments::{AMOUNT, CANCEL, PAYMENT, Payments, REFUND, UPDATE};
    use crate::workload::{EventSpec, Workload};

    #[test]
    fn a_shape_narrows_what_it_names_and_leaves_every_other_draw_alone() {
        let shape = WorkloadShape {
            tenants: Some(CountRange { min: 2, max: 2 }),
            updates: Some(CountRange { min: 2, max: 2 }),
            sender: Some(SenderPreset::GitHub),
            without_faults: vec!["crash".to_owned()],
            ..WorkloadShape::default()
        };
        for seed in 0..40 {
            let open = SimConfig::draw(seed, Backend::Memdb);
            assert_eq!(
                open,
                SimConfig::draw_shaped(seed, Backend::Memdb, &WorkloadShape::default())
            );
            let shaped = SimConfig::draw_shaped(seed, Backend::Memdb, &shape);
            assert_eq!(shaped.tenants, 2);
            assert_eq!(shaped.sender_timeout_ms, SenderPreset::GitHub.timeout_ms());
            assert_eq!(shaped.faults["crash"]["enabled"], false);
            assert_eq!(
                shaped.relay, open.relay,
                "seed {seed}: unnamed settings are drawn as before"
            );
            shaped.validate().unwrap();
            let workload = crate::domain::draw_workload(&Payments, seed, &shaped.workload_settings());
            for order in &workload.fixtures.subjects {
                let updates = workload
                    .events
                    .iter()
                    .filter(|event| event.subject == order.subject && event.tenant == order.tenant)
                    .filter(|event| event.kind == UPDATE)
                    .count();
                assert_eq!(updates, 2, "seed {seed}: {}/{}", order.tenant, order.subject);
            }
        }
    }

    #[test]
    fn a_seed_that_stalls_workers_has_a_second_worker_to_take_over() {
        for seed in 0..300 {
            let config = SimConfig::draw(seed, Backend::Memdb);
            let stalling: Vec<&str> = faults::built_in()
                .into_iter()
                .filter(|kind| kind.stalls_workers)
                .map(|kind| kind.name)
                .collect();
            assert_eq!(
                stalling,
                [faults::worker_pause::KIND.name, faults::hung_worker::KIND.name]
            );
            let stalls = stalling
                .iter()
                .any(|name| !faults::turned_off(&config.faults[*name]));
            assert!(!stalls || config.relay_workers >= 2, "seed {seed}");
            let one = WorkloadShape {
                relay_workers: Some(CountRange::exactly(1)),
                ..WorkloadShape::default()
            };
            assert_eq!(
                SimConfig::draw_shaped(seed, Backend::Memdb, &one).relay_workers,
                1
            );
        }
    }

    #[test]
    fn half_the_keys_that_would_outlive_the_fault_phase_get_a_short_lifetime() {
        // Drawn alone, a key outlives a fault phase of an hour or more in half the seeds; the
        // swarm draw gives half of those a lifetime of 30 minutes or an hour.
        let (mut long_phases, mut outliving) = (0, 0);
        for seed in 0..800 {
            let config = SimConfig::draw(seed, Backend::Memdb);
            config.validate().unwrap();
            if config.fault_phase_ms >= HOUR_MS {
                long_phases += 1;
                if config.relay.key_lifetime_ms > config.fault_phase_ms {
                    outliving += 1;
                }
            }
        }
        let share = f64::from(outliving) / f64::from(long_phases);
        assert!((0.15..0.35).contains(&share), "{outliving} of {long_phases}");
    }

    #[test]
    fn edge_values_sit_just_inside_the_receivers_limits_and_a_shape_can_turn_them_off() {
        use commitgap::receiver::{AMOUNT_CENTS_MAX, NAME_CHARS_MAX};
        let mut with_edges = 0;
        for seed in 0..200 {
            let config = SimConfig::draw(seed, Backend::Memdb);
            let workload = crate::domain::draw_workload(&Payments, seed, &config.workload_settings());
            let longest = workload
                .fixtures
                .subjects
                .iter()
                .map(|order| order.subject.len())
                .max();
            if !config.edge_values {
                assert!(longest < Some(NAME_CHARS_MAX), "seed {seed}");
                continue;
            }
            with_edges += 1;
            assert_eq!(longest, Some(NAME_CHARS_MAX), "seed {seed}");
            for event in &workload.events {
                commitgap::receiver::WebhookEvent::parse(&Payments.body(event))
                    .unwrap_or_else(|why| panic!("seed {seed}: {why}"));
            }
            if let Some(update) = workload.events.iter().find(|event| event.kind == UPDATE) {
                assert!(
                    workload
                        .events
                        .iter()
                        .any(|event| event.number(AMOUNT) == Some(AMOUNT_CENTS_MAX)),
                    "seed {seed}: {update:?}"
                );
            }
            let shape = WorkloadShape {
                no_edge_values: true,
                ..WorkloadShape::default()
            };
            assert!(!SimConfig::draw_shaped(seed, Backend::Memdb, &shape).edge_values);
        }
        assert!(
            (60..140).contains(&with_edges),
            "about half of 200 seeds: {with_edges}"
        );
    }

    #[test]
    fn racing_orders_add_a_racing_event_and_old_seed_files_draw_none() {
        let mut raced = 0;
        for seed in 0..200 {
            // Edge values move the first event to time 0, which a race can change; leave them out.
            let config = SimConfig {
                edge_values: false,
                ..SimConfig::draw(seed, Backend::Memdb)
            };
            let with_races = crate::domain::draw_workload(&Payments, seed, &config.workload_settings());
            let without = crate::domain::draw_workload(
                &Payments,
                seed,
                &SimConfig {
                    racing_orders: Ratio::NEVER,
                    ..config.clone()
                }
                .workload_settings(),
            );
            let is_race = |event: &EventSpec, workload: &Workload| {
                let kinds: Vec<&str> = workload
                    .events_for_subject(&event.tenant, &event.subject)
                    .map(|event| event.kind.as_str())
                    .collect();
                (kinds.contains(&PAYMENT) && kinds.contains(&CANCEL))
                    || (kinds.contains(&CANCEL) && kinds.contains(&REFUND))
            };
            assert!(
                !without.events.iter().any(|event| is_race(event, &without)),
                "seed {seed}"
            );
            // Every event of the workload without races is still there, at the same time.
            let key = |event: &EventSpec| {
                (
                    event.tenant.clone(),
                    event.subject.clone(),
                    event.kind.clone(),
                    event.created_ms,
                )
            };
            let all: Vec<_> = with_races.events.iter().map(key).collect();
            assert!(
                without.events.iter().all(|event| all.contains(&key(event))),
                "seed {seed}"
            );
            raced += with_races.events.len() - without.events.len();
        }
        assert!(raced > 20, "races are drawn: {raced} in 200 seeds");
    }

    #[test]
    fn bodies_are_what_serde_json_writes() {
        let mut checked = 0;
        for seed in 0..200 {
            let config = SimConfig::draw(seed, Backend::Memdb);
            for event in crate::domain::draw_workload(&Payments, seed, &config.workload_settings()).events {
                let mut expected = serde_json::json!({
                    "id": event.event_id,
                    "type": Payments.event_type(&event),
                    "account": event.account,
                    "order": event.subject,
                    "created_ms": event.created_ms,
                });
                if event.kind == PAYMENT || event.kind == UPDATE {
                    expected["amount_cents"] = event.number(AMOUNT).into();
                }
                assert_eq!(Payments.body(&event), expected.to_string());
                checked += 1;
            }
        }
        let mut odd = EventSpec {
            account: "acct-\"quoted\"\n é".to_owned(),
            ..crate::domain::draw_workload(
                &Payments,
                1,
                &SimConfig::draw(1, Backend::Memdb).workload_settings(),
            )
            .events[0]
                .clone()
        };
        odd.fields.insert(AMOUNT.to_owned(), (-5).into());
        let parsed: serde_json::Value = serde_json::from_str(&Payments.body(&odd)).unwrap();
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
            assert_eq!(config.faults.len(), faults::built_in().len());
            let workload = crate::domain::draw_workload(&Payments, seed, &config.workload_settings());
            assert_eq!(
                workload,
                crate::domain::draw_workload(&Payments, seed, &config.workload_settings())
            );
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
    fn validation_names_the_bad_field() {
        let mut config = SimConfig::draw(1, Backend::Memdb);
        config.receivers = 0;
        assert!(config.validate().unwrap_err().contains("receivers"));
    }

    #[test]
    fn a_provider_slower_than_the_relay_waits_is_refused_and_a_lease_shape_keeps_it_valid() {
        // A seed file once set the provider's ordinary latency to ten minutes: every call timed
        // out after heal, the relay gave its obligations up, and liveness blamed the reference.
        let mut config = SimConfig::draw(3, Backend::Memdb);
        config.provider_latency_ms_max = config.relay.call_timeout_ms / 2 + 1;
        let refusal = config.validate().unwrap_err();
        assert!(refusal.contains("provider_latency_ms_max"), "{refusal}");
        config.provider_latency_ms_max = config.relay.call_timeout_ms / 2;
        config.validate().unwrap();

        for seed in 0..200 {
            let shape = WorkloadShape {
                lease_ms: Some(crate::shape::LEASE_MS_MIN),
                ..WorkloadShape::default()
            };
            SimConfig::draw_shaped(seed, Backend::Memdb, &shape)
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn a_relay_told_to_wait_long_is_judged_by_a_bound_that_allows_it() {
        // A seed file once told the relay the provider may act on a request for 50 days: the
        // relay rightly left a timed-out key alone that long, and a five-day liveness bound
        // blamed it. The bound now grows to twice the relay's waits.
        let mut config = SimConfig::draw(26, Backend::Memdb);
        config.relay.provider_act_ms_max = 50 * 24 * HOUR_MS;
        config.validate().unwrap();
        crate::run::assert_reference_survives(&config, 26);
        // Waits the longest bound cannot hold twice are refused.
        config.relay.backoff_cap_ms = crate::limits::DURATION_MS_MAX / 2;
        let refusal = config.validate().unwrap_err();
        assert!(refusal.contains("the relay's waits after heal"), "{refusal}");
    }

    #[test]
    fn workers_that_poll_often_get_the_steps_they_need_and_too_often_is_refused() {
        // A seed file once set the idle poll to a second: three workers polled through the days
        // a sender's last retry was away, and the fixed step bound cut the run off.
        let mut config = SimConfig::draw(1, Backend::Memdb);
        config.relay.idle_poll_max_ms = 1_000;
        let refusal = config.validate().unwrap_err();
        assert!(refusal.contains("relay.idle_poll_max_ms (at least"), "{refusal}");
        for seed in 0..40 {
            let mut config = SimConfig::draw(seed, Backend::Memdb);
            config.relay_workers = 16;
            config.relay.idle_poll_max_ms = IDLE_POLL_MS_FLOOR;
            config.validate().unwrap();
            crate::run::assert_reference_survives(&config, seed);
        }
    }

    #[test]
    fn events_created_too_late_to_settle_are_refused() {
        // A seed file once spread its events over a year while faults healed after an hour and
        // liveness gave five days: the run could not settle, and liveness blamed the reference.
        let mut config = SimConfig::draw(3, Backend::Memdb);
        config.emit_window_ms = config.fault_phase_ms + 1;
        let refusal = config.validate().unwrap_err();
        assert!(
            refusal.contains("emit_window_ms (at most fault_phase_ms"),
            "{refusal}"
        );
        config.emit_window_ms = config.fault_phase_ms;
        config.validate().unwrap();
        // A long fault phase with a short liveness bound: the latest reordered delivery, three
        // windows in, must still leave half the bound.
        config.fault_phase_ms = 30 * HOUR_MS;
        config.liveness_ms_max = 2 * HOUR_MS;
        config.emit_window_ms = 11 * HOUR_MS;
        assert!(config.validate().is_err());
        config.emit_window_ms = 10 * HOUR_MS + 20 * MINUTE_MS;
        config.validate().unwrap();
    }
}
