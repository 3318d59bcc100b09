//! Fault models and invariants from outside the crate plug in through the traits the built-in
//! ones use: an added model draws from streams of its own, so it changes no other model's
//! settings; an added invariant is checked on every step and its failure is reported like any
//! other. A registry is a value each run is given, so two programs with models of one name can run in
//! one process.

use std::sync::Arc;

use commitgap_sim::faults::{self, Fault, FaultContext, FaultKind, FaultModel, TimerAction};
use commitgap_sim::invariants::{Invariant, InvariantKind, Observation};
use commitgap_sim::rng::{Ratio, SimRng};
use commitgap_sim::run::Backend;
use commitgap_sim::run::Registry;
use commitgap_sim::run::SimConfig;
use commitgap_sim::run::WorkloadShape;
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

    let mut registry = Registry::new();
    registry.add_fault(GREEDY).unwrap();
    assert_eq!(
        registry.add_fault(GREEDY),
        Ok(()),
        "adding the same model again is harmless"
    );
    assert_eq!(registry.faults().len(), faults::built_in().len() + 1);
    assert!(
        registry
            .add_fault(FaultKind::of::<Impostor<false>>())
            .unwrap_err()
            .contains("already registered")
    );
    assert!(registry.notices().is_empty());

    for (seed, old) in before.iter().enumerate() {
        let new = SimConfig::draw_with(
            seed as u64,
            Backend::Memdb,
            &WorkloadShape::default(),
            registry.faults(),
        );
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
        assert_eq!(
            SimConfig::draw(seed as u64, Backend::Memdb),
            *old,
            "seed {seed}: a registry elsewhere in the process changes nothing here"
        );
    }
    let with_greedy = RunOptions {
        registry: Arc::new(registry.clone()),
        ..RunOptions::default()
    };
    assert_eq!(
        run_seed(&reference, 3, &with_greedy).unwrap().digest,
        digest_before,
        "a model that does nothing leaves the run as it was"
    );

    registry.add_invariant(Arc::new(NothingIsEverPaid)).unwrap();
    let judged = RunOptions {
        registry: Arc::new(registry),
        ..RunOptions::default()
    };
    let failure = (0..10)
        .find_map(|seed| run_seed(&reference, seed, &judged).unwrap().failure)
        .expect("some seed pays an order");
    assert_eq!(failure.invariant, "nothing-is-ever-paid");
    assert!(failure.message.ends_with("is paid"), "{}", failure.message);
    assert!(
        (0..10).all(|seed| run_seed(&reference, seed, &RunOptions::default())
            .unwrap()
            .failure
            .is_none()),
        "runs without the registry are not judged by its invariant"
    );
}

/// A built-in added in a later release must not break a program whose own model or invariant
/// already had its name: the program's own takes the built-in's place, and it is told so.
#[test]
fn a_model_or_invariant_of_a_built_in_name_replaces_it_with_a_notice() {
    let mut registry = Registry::new();
    registry
        .add_fault(FaultKind::of::<Impostor<true>>())
        .expect("a built-in's name is not refused");
    assert_eq!(registry.faults().len(), faults::built_in().len());
    assert_eq!(
        registry.faults().last().map(|kind| kind.name),
        Some("crash"),
        "the program's model comes after the built-in ones"
    );
    assert_eq!(registry.notices().len(), 1, "{:?}", registry.notices());
    assert!(
        registry.notices()[0].contains("\"crash\""),
        "{:?}",
        registry.notices()
    );
    registry
        .add_fault(FaultKind::of::<Impostor<true>>())
        .expect("adding it again is harmless");
    assert_eq!(registry.notices().len(), 1);
    let error = run_seed(
        &systems::by_name("reference").unwrap(),
        1,
        &RunOptions {
            registry: Arc::new(registry.clone()),
            every_fault: true,
            ..RunOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        error.contains("never built"),
        "the program's model is the one run: {error}"
    );

    struct AlwaysFails;
    impl Invariant for AlwaysFails {
        fn name(&self) -> &'static str {
            "one-effect-per-operation"
        }
        fn description(&self) -> &'static str {
            "a program's own rule under a built-in's name"
        }
        fn kind(&self) -> InvariantKind {
            InvariantKind::Safety
        }
        fn check(&self, _observation: &Observation<'_>) -> Result<(), String> {
            Err("the program's own check ran".to_owned())
        }
    }
    let mut registry = Registry::new();
    registry.add_invariant(Arc::new(AlwaysFails)).unwrap();
    assert_eq!(registry.notices().len(), 1, "{:?}", registry.notices());
    let domain = commitgap_sim::domain::payments::Payments;
    let named: Vec<&str> = registry
        .invariants(&domain)
        .iter()
        .map(|invariant| invariant.name())
        .filter(|name| *name == "one-effect-per-operation")
        .collect::<Vec<_>>();
    assert_eq!(named.len(), 1, "one invariant of that name is checked");
    let failure = run_seed(
        &systems::by_name("reference").unwrap(),
        1,
        &RunOptions {
            registry: Arc::new(registry),
            ..RunOptions::default()
        },
    )
    .unwrap()
    .failure
    .expect("the program's invariant fails");
    assert_eq!(failure.message, "the program's own check ran");
}

/// Two programs in one process, each with its own model of one name: each run reads its own.
#[test]
fn two_registries_with_models_of_one_name_live_side_by_side() {
    let mut greedy = Registry::new();
    greedy.add_fault(GREEDY).unwrap();
    let mut impostor = Registry::new();
    impostor.add_fault(FaultKind::of::<Impostor<false>>()).unwrap();
    let reference: Arc<dyn System> = systems::by_name("reference").unwrap();
    let on = |registry: Registry| RunOptions {
        registry: Arc::new(registry),
        every_fault: true,
        ..RunOptions::default()
    };
    assert!(run_seed(&reference, 1, &on(greedy)).is_ok());
    let error = run_seed(&reference, 1, &on(impostor)).unwrap_err();
    assert!(error.contains("never built"), "{error}");
}

/// A relay of a team's own that sends the persisted payload written again: its fields in another
/// order and pretty-printed, as a relay that parses what it stored and serializes it once more
/// does. The wire contract sends the payload as JSON, so this is the same payload: neither the
/// invariants nor the provider may read it as another one.
struct RewrittenPayload;

impl commitgap_sim::commitgap::receiver::ReceiverSteps for RewrittenPayload {}

impl commitgap_sim::commitgap::relay::RelaySteps for RewrittenPayload {
    async fn payload(
        &self,
        _env: &dyn commitgap_sim::commitgap::env::Env,
        claim: &commitgap_sim::commitgap::relay::Claim,
    ) -> Result<String, commitgap_sim::commitgap::env::DbError> {
        let value: serde_json::Value = serde_json::from_str(&claim.payload).expect("the payload is JSON");
        let rewritten = serde_json::to_string_pretty(&value).expect("a value serializes");
        assert_ne!(
            rewritten, claim.payload,
            "the text sent differs from the text persisted"
        );
        Ok(rewritten)
    }
}

impl systems::Variant for RewrittenPayload {
    fn name(&self) -> &'static str {
        "rewritten-payload"
    }
    fn description(&self) -> String {
        "the reference, its relay sending the persisted payload re-serialized".to_owned()
    }
}

#[test]
fn a_payload_sent_as_the_same_json_in_other_text_is_the_persisted_payload() {
    let seeds_dir =
        std::env::temp_dir().join(format!("commitgap-extension-rewritten-{}", std::process::id()));
    let report =
        commitgap_sim::harness::Check::new(Arc::new(systems::ReferenceSystem::new(RewrittenPayload)))
            .seeds_dir(&seeds_dir)
            .cases(150)
            .try_run();
    let _ = std::fs::remove_dir_all(&seeds_dir);
    let report = report.unwrap_or_else(|failure| panic!("a correct relay was judged failing: {failure}"));
    assert_eq!(report.seeds, 150);
}
