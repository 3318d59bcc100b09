//! A provider that executes concurrent requests with one idempotency key twice.
//!
//! Not every provider locks a key while a request for it is in flight. Without the lock, a
//! request that arrives while another with its key is still being processed finds no stored
//! result, so the provider executes it; the first request, which passed the same check when it
//! arrived, performs its effect too when it finishes. Two effects under one key, and the key store
//! keeps only the first. A caller is safe only if two requests with one key are never at the
//! provider at once: the reference leaves a key alone for the provider's processing bound after a
//! timeout or a 409, and holds each lease for that bound and a call timeout more.
//!
//! No caller can keep its requests apart when a worker stalls past its lease between its last
//! check and its send (`worker-pause`, `hung-worker`) or when a worker's clock runs ahead of the
//! lease it judges (`clock-jump`): a check made before the stall cannot protect a request sent
//! after it. So this model is never on together with those three; a drawn seed that turns it on
//! turns them off, `--all-faults` leaves this one off, and a seed file with both on is refused.
//! It also needs the provider to finish within the bound the relay is told of, so a slow provider
//! in the same seed acts within `relay.provider_act_ms_max`; and only a slow provider leaves a
//! request in progress for another to overtake, so a seed that draws this model turns
//! `provider-slow` on.
//!
//! This model only sets the provider's behaviour; the provider model does the rest. It stops at
//! heal.

use serde::{Deserialize, Serialize};

use commitgap::provider::ProviderRequest;

use super::{
    Fault, FaultContext, FaultKind, FaultModel, FaultSettings, ProviderFaults, Switches, TimerAction,
    turned_off,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<ProviderDoubleExecute>();

impl Fault for ProviderDoubleExecute {
    const NAME: &'static str = "provider-double-execute";
    const DESCRIPTION: &'static str =
        "the provider executes a request whose key is still in progress, and the first acts too";
    const DETAILS: &'static str =
        "a request that arrives while one with its key is in flight is executed, and the one in flight \
        performs its effect too when it finishes; on in one seed in three, with `provider-slow` on for one \
        send in two (which leaves requests in flight) and `provider-refusal` off";
    const ACTS_ONLY_ON_FAULTY_SYSTEMS: bool = true;
    type Settings = Settings;

    // On in one seed in three rather than the usual three in four: a seed with it on has the
    // three models it is kept apart from off.
    fn draw_enabled(rng: &mut SimRng) -> bool {
        rng.chance(Ratio::new(1, 3))
    }

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }

    fn after_draw(switches: &mut Switches<'_>) {
        keep_apart_in_draw(switches);
    }

    fn after_all_on(switches: &mut Switches<'_>) {
        keep_apart_when_all_on(switches);
    }

    fn check_with_others(faults: &FaultSettings, context: &FaultContext) -> Result<(), String> {
        check_apart(faults, context)
    }
}

/// The model has no settings but its switch.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {}

struct ProviderDoubleExecute {
    healed: bool,
}

fn draw(_rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {}
}

fn build(_settings: Settings, _rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(ProviderDoubleExecute { healed: false }))
}

/// The fault models this one is never on with: each can put two requests with one key at the
/// provider at once whatever the caller does.
const KEPT_APART_FROM: [&str; 3] = [
    super::worker_pause::KIND.name,
    super::hung_worker::KIND.name,
    super::clock_jump::KIND.name,
];

/// The fault model this one needs to act at all: only a slow provider leaves a request in
/// progress for another to overtake.
const NEEDS: &str = super::provider_slow::KIND.name;

/// After a seed drew its fault settings, with this model on: the models it is kept apart from
/// are turned off and the one it needs is turned on, if the shape allows it (swarm testing: a
/// seed that draws this model should be able to see it act).
fn keep_apart_in_draw(switches: &mut Switches<'_>) {
    for name in KEPT_APART_FROM {
        switches.turn_off(name);
    }
    // Not a matter of correctness but of power: a declined operation is buried at its first
    // try, before a retry can overtake it.
    switches.turn_off(super::provider_refusal::KIND.name);
    if let Some(settings) = switches.turn_on(NEEDS) {
        // A retry overtakes a request only while one is in progress: slow requests must be
        // common, not one in twenty.
        settings["rate"] = serde_json::to_value(Ratio::new(1, 2)).expect("a ratio is plain data");
    }
}

/// After every fault model was turned on (`--all-faults`): this one goes off again if any model
/// it is kept apart from is on.
fn keep_apart_when_all_on(switches: &mut Switches<'_>) {
    if KEPT_APART_FROM.iter().any(|name| switches.is_on(name)) {
        switches.turn_off(KIND.name);
    }
}

/// Refuses a configuration (a hand-edited seed file) that has this model on together with one it
/// is kept apart from, or with a slow provider that may act later than the relay is told.
fn check_apart(faults: &FaultSettings, context: &FaultContext) -> Result<(), String> {
    let is_on = |name: &str| faults.get(name).is_some_and(|settings| !turned_off(settings));
    if let Some(other) = KEPT_APART_FROM.iter().find(|name| is_on(name)) {
        return Err(format!(
            "faults.{}: cannot be on together with {other}, which can put two requests with one key \
             at the provider whatever the relay does; turn one of them off",
            KIND.name
        ));
    }
    let slow_act_ms_max = faults
        .get(NEEDS)
        .filter(|settings| !turned_off(settings))
        .and_then(|settings| settings.get("act_after_ms_max"))
        .and_then(serde_json::Value::as_i64);
    if let Some(act_ms_max) = slow_act_ms_max
        && act_ms_max > context.provider_act_ms_max
    {
        return Err(format!(
            "faults.{NEEDS}.act_after_ms_max: {act_ms_max} is above relay.provider_act_ms_max \
             {}, the processing bound the relay keeps requests apart by; with {} on it must be at most that",
            context.provider_act_ms_max, KIND.name
        ));
    }
    Ok(())
}

impl FaultModel for ProviderDoubleExecute {
    fn provider_faults(&mut self, _now_ms: i64, request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        if !self.healed && matches!(request, ProviderRequest::Send { .. }) {
            faults.conditions.double_execute = true;
        }
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;
    use crate::db::Backend;
    use crate::shape::WorkloadShape;

    fn is_on(faults: &FaultSettings, name: &str) -> bool {
        faults.get(name).is_some_and(|settings| !turned_off(settings))
    }

    #[test]
    fn a_drawn_seed_never_has_it_on_with_a_model_it_is_kept_apart_from() {
        let mut on = 0;
        for seed in 0..300 {
            let config = SimConfig::draw_shaped(seed, Backend::Memdb, &WorkloadShape::default());
            config.validate().unwrap();
            if is_on(&config.faults, KIND.name) {
                on += 1;
                for name in KEPT_APART_FROM {
                    assert!(!is_on(&config.faults, name), "seed {seed}: {name}");
                }
                assert!(
                    !is_on(&config.faults, super::super::provider_refusal::KIND.name),
                    "seed {seed}"
                );
                let slow = &config.faults[NEEDS];
                assert!(is_on(&config.faults, NEEDS), "seed {seed}");
                assert_eq!(
                    slow["rate"],
                    serde_json::json!({"numerator": 1, "denominator": 2})
                );
            }
            let mut every = config.clone();
            every.enable_faults_allowed_by(&WorkloadShape::default(), &super::super::built_in());
            every.validate().unwrap();
            assert!(
                !is_on(&every.faults, KIND.name),
                "seed {seed} with every fault on"
            );
        }
        assert!(
            (60..140).contains(&on),
            "on in about a third of 300 seeds, not {on}"
        );
    }

    #[test]
    fn it_turns_provider_slow_on_only_where_the_shape_allows_it() {
        let alone = WorkloadShape {
            faults: Some(vec![KIND.name.to_owned()]),
            ..WorkloadShape::default()
        };
        let mut on = 0;
        for seed in 0..60 {
            let open = SimConfig::draw_shaped(seed, Backend::Memdb, &WorkloadShape::default());
            let shaped = SimConfig::draw_shaped(seed, Backend::Memdb, &alone);
            assert!(
                !is_on(&shaped.faults, NEEDS),
                "seed {seed}: --faults leaves it off"
            );
            if is_on(&open.faults, KIND.name) {
                on += 1;
                assert!(is_on(&open.faults, NEEDS), "seed {seed}: turned on with it");
            }
        }
        assert!(on > 0);
    }

    #[test]
    fn a_seed_file_with_it_on_beside_a_stall_or_a_late_provider_is_refused() {
        let config = (0..)
            .map(|seed| SimConfig::draw_shaped(seed, Backend::Memdb, &WorkloadShape::default()))
            .find(|config| is_on(&config.faults, KIND.name))
            .unwrap();
        let mut paused = config.clone();
        paused
            .faults
            .get_mut(super::super::worker_pause::KIND.name)
            .unwrap()["enabled"] = true.into();
        let error = paused.validate().unwrap_err();
        assert!(
            error.starts_with("faults.provider-double-execute: cannot be on together with worker-pause"),
            "{error}"
        );
        let mut late = config.clone();
        let slow = late.faults.get_mut(NEEDS).unwrap();
        slow["enabled"] = true.into();
        slow["act_after_ms_max"] = (config.relay.provider_act_ms_max + 1).into();
        let error = late.validate().unwrap_err();
        assert!(
            error.starts_with("faults.provider-slow.act_after_ms_max:"),
            "{error}"
        );
    }
}
