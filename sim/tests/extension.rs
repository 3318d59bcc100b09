//! Fault models and invariants from outside the crate plug in through the traits the built-in
//! ones use: an added model draws from streams of its own, so it changes no other model's
//! settings; an added invariant is checked on every step and its failure is reported like any
//! other. This file is its own test binary because adding to the registries lasts for the process.

use std::sync::Arc;

use commitgap_sim::config::SimConfig;
use commitgap_sim::db::Backend;
use commitgap_sim::faults::{self, Fault, FaultContext, FaultKind, FaultModel, TimerAction};
use commitgap_sim::invariants::{self, Invariant, InvariantKind, Observation};
use commitgap_sim::rng::{Ratio, SimRng};
use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::system::System;
use commitgap_sim::systems;

/// A model that draws a lot and does nothing: if its draws leaked into anyone else's stream,
/// the other models' settings would change.
struct Greedy;

#[derive(serde::Serialize, serde::Deserialize)]
struct GreedySettings {
    first: bool,
}

impl Fault for Greedy {
    const NAME: &'static str = "greedy";
    const DESCRIPTION: &'static str = "draws much, does nothing";
    type Settings = GreedySettings;

    fn draw(rng: &mut SimRng, _context: &FaultContext) -> GreedySettings {
        let draws: Vec<bool> = (0..100).map(|_| rng.chance(Ratio::new(1, 2))).collect();
        GreedySettings { first: draws[0] }
    }

    fn build(
        _settings: GreedySettings,
        _rng: SimRng,
        _context: &FaultContext,
    ) -> Result<Box<dyn FaultModel>, String> {
        Ok(Box::new(Greedy))
    }
}

impl FaultModel for Greedy {
    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}

const GREEDY: FaultKind = FaultKind::of::<Greedy>();

/// Another model that takes a name already registered.
struct Impostor<const BUILT_IN: bool>;

impl<const BUILT_IN: bool> Fault for Impostor<BUILT_IN> {
    const NAME: &'static str = if BUILT_IN { "crash" } else { "greedy" };
    const DESCRIPTION: &'static str = "never built";
    type Settings = GreedySettings;

    fn draw(_rng: &mut SimRng, _context: &FaultContext) -> GreedySettings {
        GreedySettings { first: false }
    }

    fn build(
        _settings: GreedySettings,
        _rng: SimRng,
        _context: &FaultContext,
    ) -> Result<Box<dyn FaultModel>, String> {
        Err("never built".to_owned())
    }
}

/// Fails as soon as any order is paid: proves an added invariant runs on every step.
struct NothingIsEverPaid;

impl Invariant for NothingIsEverPaid {
    fn name(&self) -> &'static str {
        "nothing-is-ever-paid"
    }
    fn description(&self) -> &'static str {
        "a deliberately false invariant"
    }
    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }
    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        match observation
            .db
            .entities()
            .find(|order| order.state.state == "paid")
        {
            Some(order) => Err(format!("{}/{} is paid", order.tenant, order.subject)),
            None => Ok(()),
        }
    }
}

#[test]
fn added_models_and_invariants_join_every_run_and_change_no_other_draw() {
    let before: Vec<SimConfig> = (0..50)
        .map(|seed| SimConfig::draw(seed, Backend::Memdb))
        .collect();
    let reference: Arc<dyn System> = systems::by_name("reference").unwrap();
    let digest_before = run_seed(&reference, 3, &RunOptions::default()).unwrap().digest;

    faults::register(GREEDY).unwrap();
    assert_eq!(
        faults::register(GREEDY),
        Ok(()),
        "adding the same model again is harmless"
    );
    assert!(
        faults::register(FaultKind::of::<Impostor<false>>())
            .unwrap_err()
            .contains("already registered")
    );
    assert!(faults::register(FaultKind::of::<Impostor<true>>()).is_err());

    for (seed, old) in before.iter().enumerate() {
        let new = SimConfig::draw(seed as u64, Backend::Memdb);
        assert!(
            new.faults.contains_key("greedy"),
            "seed {seed} draws the added model"
        );
        let mut without = new.clone();
        without.faults.remove("greedy");
        assert_eq!(
            &without, old,
            "seed {seed}: the added model changed another's draws"
        );
    }
    assert_eq!(
        run_seed(&reference, 3, &RunOptions::default()).unwrap().digest,
        digest_before,
        "a model that does nothing leaves the run as it was"
    );

    assert!(invariants::register(Arc::new(NothingIsEverPaid)).is_ok());
    let failure = (0..10)
        .find_map(|seed| {
            run_seed(&reference, seed, &RunOptions::default())
                .unwrap()
                .failure
        })
        .expect("some seed pays an order");
    assert_eq!(failure.invariant, "nothing-is-ever-paid");
    assert!(failure.message.ends_with("is paid"), "{}", failure.message);
}
