//! A system written outside the simulator crate plugs in through the public `System` interface
//! and is swept like the reference: the team's own receiver and relay in
//! `examples/custom_system/system.rs`, with a schema of its own, passes a sweep with every fault
//! model in play, and its flawed variant (inbox row committed before the work) is caught through
//! its own row decoder.

#[path = "../examples/custom_system/system.rs"]
mod system;

use std::sync::Arc;

use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::system::System;

#[test]
fn a_separately_written_system_passes_a_sweep_and_does_real_work() {
    let system: Arc<dyn System> = Arc::new(system::ShopSystem {
        receipt_in_own_transaction: false,
    });
    let mut effects = 0;
    for seed in 0..150 {
        let outcome = run_seed(&system, seed, &RunOptions::default()).unwrap();
        assert_eq!(outcome.failure, None, "seed {seed}");
        effects += outcome.effects;
    }
    assert!(
        effects > 150,
        "the relay shipped orders ({effects} effects over 150 seeds)"
    );
}

#[test]
fn its_flawed_variant_is_caught_through_its_own_decoder() {
    let system: Arc<dyn System> = Arc::new(system::ShopSystem {
        receipt_in_own_transaction: true,
    });
    let failure = (0..5)
        .find_map(|seed| run_seed(&system, seed, &RunOptions::default()).unwrap().failure)
        .expect("the inbox-first flaw is caught within five seeds");
    assert_eq!(
        failure.invariant, "receipt-commits-with-its-work",
        "{}",
        failure.message
    );
}
