//! The CI service under the simulation as part of `cargo test`: the seed files in `seeds/` (if
//! any) replay as regressions, then a sweep runs (`COMMITGAP_CASES`, `COMMITGAP_FIRST_SEED` and
//! `COMMITGAP_SEED` change which seeds), and a new failure fails the test with the command that
//! replays its seed file. The planted flaw must fail it, and fail it through the domain-generic
//! invariant that judges a branch's final head.

use std::sync::Arc;

use ci::system::CiSystem;
use commitgap_sim::harness::Check;
use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::system::System;

const CORRECT: CiSystem = CiSystem {
    last_arrival_wins: false,
};
const LAST_ARRIVAL_WINS: CiSystem = CiSystem {
    last_arrival_wins: true,
};

fn check(system: CiSystem) -> Check {
    Check::new(Arc::new(system))
        .seeds_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/seeds"))
        .replay_command(ci::REPLAY_COMMAND)
        .workload(ci::shape())
}

#[test]
fn the_ci_service_survives_the_simulation() {
    check(CORRECT).cases(300).run();
}

#[test]
fn the_planted_flaw_fails_the_check_with_a_command_that_replays_it() {
    let directory = std::env::temp_dir().join(format!("ci-harness-{}", std::process::id()));
    let message = check(LAST_ARRIVAL_WINS)
        .ignore_environment()
        .seeds_dir(&directory)
        .cases(60)
        .max_failures(2)
        .try_run()
        .expect_err("a late push overwriting a newer head is caught within sixty seeds");
    assert!(
        message.contains("final-state-matches-creation-order"),
        "{message}"
    );
    let replay = format!("replay: {} replay {}", ci::REPLAY_COMMAND, directory.display());
    assert!(message.contains(&replay), "{message}");
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn only_the_final_state_invariant_catches_the_last_arrival_flaw() {
    // The flaw breaks no pattern rule (receipt, obligation, lease and answer are all right) and
    // no transition (building -> building is allowed): only the model's final head tells.
    let system: Arc<dyn System> = Arc::new(LAST_ARRIVAL_WINS);
    let mut caught = Vec::new();
    for seed in 0..60 {
        let outcome = run_seed(&system, seed, &RunOptions::default()).unwrap();
        if let Some(failure) = outcome.failure {
            assert_eq!(
                failure.invariant, "final-state-matches-creation-order",
                "seed {seed}"
            );
            caught.push(seed);
        }
    }
    assert!(caught.len() >= 2, "caught on seeds {caught:?}");
}

#[test]
fn the_ci_service_does_real_work() {
    let system: Arc<dyn System> = Arc::new(CORRECT);
    let mut effects = 0;
    for seed in 0..100 {
        let outcome = run_seed(&system, seed, &RunOptions::default()).unwrap();
        assert_eq!(outcome.failure, None, "seed {seed}");
        effects += outcome.effects;
    }
    assert!(
        effects > 200,
        "the relay created check runs ({effects} over 100 seeds)"
    );
}

#[test]
fn the_ci_domain_keeps_its_own_rules() {
    // Before any system runs: its draws, its model, its transitions and the bodies it makes for
    // the attacker are consistent, so no sweep blames the service for the domain's mistake.
    let domain = CORRECT.domain();
    assert_eq!(commitgap_sim::domain::check_domain(&*domain), Ok(()));
}
