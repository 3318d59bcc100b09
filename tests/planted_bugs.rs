//! The simulator finds every planted bug within a stated seed budget, and a failing seed, written
//! to a file and read back, replays to the same invariant with the same trace. The reference
//! passes a larger range.
//!
//! Budgets are a few times the seeds each bug needed on average when measured over five starting
//! points (0, 1000, ... 4000) with `sweep --first-seed`: receipt-first failed at the first seed
//! every time (97% of seeds fail), key-per-attempt within two seeds (45% of seeds fail),
//! blind-retry-after-expiry after 0 to 16 seeds (5% of seeds fail, a mean gap of about 20).

use std::sync::Arc;

use commitgap_sim::db::Backend;
use commitgap_sim::run::{RunOptions, RunOutcome, run_seed};
use commitgap_sim::seed_file::{Expectation, SeedFile, replay_command};
use commitgap_sim::sweep::{SweepOptions, sweep};
use commitgap_sim::systems;

/// Runs seeds 0, 1, ... until one fails, at most `budget` of them.
fn first_failure(system: &str, budget: u64) -> Option<RunOutcome> {
    let system = systems::by_name(system).expect("a registered system");
    (0..budget)
        .map(|seed| run_seed(&system, seed, &RunOptions::default()).expect("the run completes"))
        .find(|outcome| outcome.failure.is_some())
}

fn caught_within_budget_and_replayable(system: &str, budget: u64, invariant: &str) {
    let outcome = first_failure(system, budget)
        .unwrap_or_else(|| panic!("{system} survived {budget} seeds: the simulator lost its power"));
    let failure = outcome.failure.as_ref().unwrap();
    assert_eq!(
        failure.invariant, invariant,
        "{system} seed {}: {}",
        outcome.seed, failure.message
    );

    let directory = std::env::temp_dir().join(format!("commitgap-planted-{system}-{}", std::process::id()));
    let path = SeedFile::from_outcome(&outcome, replay_command(&directory))
        .write(&directory)
        .unwrap();
    let file = SeedFile::read(&path).unwrap();
    let _ = std::fs::remove_dir_all(&directory);
    assert_eq!(
        file.expect,
        Expectation::Fails {
            invariant: invariant.to_owned()
        }
    );

    let options = RunOptions {
        config: Some(file.config.clone()),
        ..RunOptions::default()
    };
    let replayed = run_seed(&systems::by_name(&file.system).unwrap(), file.seed, &options).unwrap();
    assert_eq!(replayed.failure, outcome.failure, "the replay fails the same way");
    assert_eq!(
        replayed.digest, file.trace_digest,
        "the replay has the same trace"
    );
}

/// `(planted bug, seed budget, the invariant that catches it first)`.
const BUDGETS: [(&str, u64, &str); 17] = [
    ("receipt-first", 5, "receipt-commits-with-its-work"),
    ("key-per-attempt", 10, "one-effect-per-operation"),
    ("blind-retry-after-expiry", 100, "one-effect-per-operation"),
    ("no-receipt-dedup", 5, "one-receipt-per-event"),
    ("receipt-after", 5, "receipt-commits-with-its-work"),
    ("check-then-insert", 60, "one-receipt-per-event"),
    ("per-delivery-dedup-key", 5, "one-receipt-per-event"),
    ("rebuild-payload", 20, "request-matches-obligation"),
    ("key-from-event", 10, "receipt-commits-with-its-work"),
    ("unfenced-completion", 300, "completion-by-lease-holder"),
    ("short-lease", 10, "lease-outlives-call"),
    ("receipt-only-guard", 20, "order-state-moves-forward"),
    ("ack-before-commit", 5, "success-answer-has-receipt"),
    ("call-inside-transaction", 5, "request-matches-obligation"),
    ("outbox-on-other-connection", 5, "receipt-commits-with-its-work"),
    (
        "mark-sent-before-call",
        5,
        "obligation-settles-with-effect-or-reason",
    ),
    ("new-key-after-error", 10, "one-effect-per-operation"),
];

#[test]
fn every_planted_bug_is_caught_within_its_budget_and_replays() {
    for (system, budget, invariant) in BUDGETS {
        caught_within_budget_and_replayable(system, budget, invariant);
    }
}

#[test]
fn the_budget_table_covers_every_planted_bug() {
    let names: Vec<&str> = BUDGETS.iter().map(|(name, _, _)| *name).collect();
    for bug in commitgap::planted::PlantedBug::ALL {
        assert!(names.contains(&bug.name()), "{bug} has no budget");
    }
}

#[test]
fn the_reference_passes_a_larger_range_on_both_backends() {
    for (backend, seeds) in [(Backend::Memdb, 400), (Backend::WalFile, 60)] {
        let options = SweepOptions {
            system: Arc::clone(&systems::by_name("reference").unwrap()),
            first_seed: 10_000,
            seeds,
            jobs: 2,
            backend,
            check_determinism: false,
        };
        let report = sweep(&options, &|_, _| {});
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        let failures: Vec<_> = report
            .failures
            .iter()
            .map(|result| (result.outcome.seed, result.outcome.failure.clone()))
            .collect();
        assert!(failures.is_empty(), "{backend:?}: {failures:?}");
    }
}
