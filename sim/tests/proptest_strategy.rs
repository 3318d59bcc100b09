//! Simulations inside a user's own proptest suite: the reference holds in every generated world,
//! and a planted bug is found and shrunk by proptest to the smallest world that shows it.

use std::sync::Arc;

use commitgap_sim::harness::{SimCase, sim_case};
use commitgap_sim::system::System;
use commitgap_sim::systems;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

fn reference() -> Arc<dyn System> {
    systems::by_name("reference").unwrap()
}

proptest! {
    #![proptest_config(commitgap_sim::harness::repeatable_config(24))]

    #[test]
    fn the_reference_holds_in_any_generated_world(case in sim_case()) {
        let outcome = case.run(&reference()).unwrap();
        prop_assert!(outcome.failure.is_none(), "{}: {:?}", case.describe(), outcome.failure);
    }
}

#[test]
fn proptest_finds_a_planted_bug_and_shrinks_its_world() {
    let system = systems::by_name("receipt-first").unwrap();
    // No regression file: this failure is the point of the test, not a regression to keep. A
    // fixed generator seed: proptest's default draws one from the OS, and shrinking from some
    // generated worlds stops at a local minimum (two orders where one would do), so the test
    // would pass or fail by chance.
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 64,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let result = runner.run(&sim_case(), |case| {
        let outcome = case.run(&system).map_err(TestCaseError::fail)?;
        match outcome.failure {
            Some(failure) => Err(TestCaseError::fail(failure.invariant)),
            None => Ok(()),
        }
    });
    let Err(TestError::Fail(reason, minimal)) = result else {
        panic!("receipt-first survived 64 generated worlds: {result:?}");
    };
    assert!(
        reason.to_string().contains("receipt-commits-with-its-work"),
        "{reason}"
    );
    let smallest: SimCase = minimal;
    assert_eq!(
        (
            smallest.tenants,
            smallest.orders_per_tenant,
            smallest.receivers,
            smallest.relay_workers
        ),
        (1, 1, 1, 1),
        "the bug needs no more than one of each: {}",
        smallest.describe()
    );
    assert!(
        smallest.faults.is_empty(),
        "and no fault model: {}",
        smallest.describe()
    );
    let again = smallest.run(&system).unwrap();
    assert_eq!(
        again.failure.map(|failure| failure.invariant).as_deref(),
        Some("receipt-commits-with-its-work"),
        "the shrunk case replays"
    );
}
