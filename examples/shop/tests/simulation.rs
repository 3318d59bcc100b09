//! The shop under the simulation as part of `cargo test`: the seed files in `seeds/` replay as
//! regressions, then a sweep runs (`COMMITGAP_CASES`, `COMMITGAP_FIRST_SEED` and
//! `COMMITGAP_SEED` change which seeds), and a new failure fails the test with the command that
//! replays its seed file.

use std::sync::Arc;

use commitgap_sim::harness::Check;
use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::system::System;
use shop::system::ShopSystem;

/// The shop's program as a check of `system`: its fault models, invariant and replay command come
/// from `shop::app()`, registered there once.
fn check(system: ShopSystem) -> Check {
    Check::of_app(&shop::app(), Arc::new(system)).seeds_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/seeds"))
}

#[test]
fn the_shop_survives_the_simulation() {
    check(ShopSystem::CORRECT).cases(300).run();
}

#[test]
fn the_planted_bug_fails_the_check_with_a_command_that_replays_it() {
    let directory = std::env::temp_dir().join(format!("shop-harness-{}", std::process::id()));
    let message = check(ShopSystem {
        receipt_in_own_transaction: true,
        ..ShopSystem::CORRECT
    })
    .ignore_environment()
    .seeds_dir(&directory)
    .cases(4)
    .try_run()
    .expect_err("the inbox-first flaw is caught within four seeds");
    assert!(message.contains("receipt-commits-with-its-work"), "{message}");
    let replay = format!("replay: {} replay {}", shop::REPLAY_COMMAND, directory.display());
    assert!(message.contains(&replay), "{message}");
    let written = std::fs::read_dir(&directory).unwrap().count();
    assert!(written >= 1, "each failure's seed file is written");
    // The files written are regressions now: the next check replays them first, and they still fail.
    let again = check(ShopSystem {
        receipt_in_own_transaction: true,
        ..ShopSystem::CORRECT
    })
    .seeds_dir(&directory)
    .cases(1)
    .first_seed(1_000_000)
    .try_run()
    .unwrap_err();
    assert!(again.contains("regression"), "{again}");
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn the_shop_does_real_work() {
    let system: Arc<dyn System> = Arc::new(ShopSystem::CORRECT);
    let mut effects = 0;
    for seed in 0..100 {
        let outcome = run_seed(&system, seed, &RunOptions::default()).unwrap();
        assert_eq!(outcome.failure, None, "seed {seed}");
        effects += outcome.effects;
    }
    assert!(
        effects > 100,
        "the relay shipped orders ({effects} effects over 100 seeds)"
    );
}

#[test]
fn the_shops_domain_keeps_its_own_rules() {
    let system = ShopSystem::CORRECT;
    assert_eq!(commitgap_sim::domain::check_domain(&*system.domain()), Ok(()));
}
