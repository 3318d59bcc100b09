//! `explore`: the search finds what sampling finds only by luck, every failure it writes replays
//! to the same run, the search is the same search given its seed, its corpus carries over to the
//! next search, and a correct system explored with every mutation fails nothing.

mod scratch;

use std::sync::Arc;

use commitgap_sim::explore::{BoundaryMeasure, ExploreOptions, ExploreReport, Sometimes, Steering, explore};
use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::sweep::SeedFile;
use commitgap_sim::system::System;
use commitgap_sim::systems;

use scratch::Scratch;

fn options(system: Arc<dyn System>, seed: u64, runs: u64) -> ExploreOptions {
    ExploreOptions {
        seed,
        max_failures: Some(1),
        ..ExploreOptions::new(system, runs)
    }
}

fn run(options: &ExploreOptions) -> ExploreReport {
    explore(options, &mut |_| {})
}

#[test]
fn explore_finds_a_planted_bug_and_its_file_replays_to_the_same_run() {
    let scratch = Scratch::new("explore", "found");
    let system = systems::by_name("blind-retry-after-expiry").unwrap();
    let mut options = options(Arc::clone(&system), 1, 200);
    options.seeds_dir = Some(scratch.to_path_buf());
    let report = run(&options);
    let failure = report
        .failures
        .first()
        .unwrap_or_else(|| panic!("not found: {}", report.summary()));
    assert!(
        report
            .summary()
            .contains(&format!("first failure after {} runs", failure.after_runs))
    );
    let path = failure.file.clone().expect("the failure was written");
    let file = SeedFile::read(&path).unwrap();
    let replayed = run_seed(
        &system,
        file.seed,
        &RunOptions {
            config: Some(file.config.clone()),
            schedule: file.schedule.clone(),
            ..RunOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        replayed.digest, file.trace_digest,
        "the file replays to the same run"
    );
    assert_eq!(replayed.failure, failure.outcome.failure);
    assert_eq!(replayed.failure.unwrap().invariant, "one-effect-per-operation");
}

#[test]
fn one_seed_makes_one_search_and_the_corpus_carries_over() {
    let reference = systems::by_name("reference").unwrap();
    let first = Scratch::new("explore", "corpus-a");
    let second = Scratch::new("explore", "corpus-b");
    let search = |corpus: &Scratch| {
        let mut options = options(Arc::clone(&reference), 3, 48);
        options.corpus_dir = Some(corpus.to_path_buf());
        run(&options)
    };
    let (a, b) = (search(&first), search(&second));
    assert_eq!(a.summary(), b.summary());
    assert_eq!(a.features, b.features);
    assert_eq!(a.by_mutation, b.by_mutation);
    assert_eq!(a.situations, b.situations);
    let names = |directory: &Scratch| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let written = names(&first);
    assert_eq!(written, names(&second), "the same runs were kept");
    assert_eq!(written.len(), a.corpus, "every corpus run was written");
    assert!(a.corpus > 8, "a corpus grew: {}", a.summary());

    // The next search reads the corpus back before it makes anything new.
    let mut options = options(Arc::clone(&reference), 4, 48 + written.len() as u64);
    options.corpus_dir = Some(first.to_path_buf());
    let next = run(&options);
    assert!(next.loaded > 0 && next.loaded <= written.len(), "{next:?}");
    assert!(next.corpus >= next.loaded);
    assert!(next.failures.is_empty(), "{}", next.summary());
}

#[test]
fn the_reference_explored_with_every_fault_fails_nothing() {
    let mut options = options(systems::by_name("reference").unwrap(), 11, 300);
    options.every_fault = true;
    options.max_failures = None;
    let report = run(&options);
    assert_eq!(report.runs, 300);
    assert!(report.mutant_runs > 150, "{report:?}");
    let failures: Vec<String> = report
        .failures
        .iter()
        .map(|failure| format!("{:?} ({})", failure.outcome.failure, failure.how))
        .collect();
    assert!(
        failures.is_empty() && report.errors.is_empty(),
        "{failures:?} {:?}",
        report.errors
    );
}

#[test]
fn a_team_steers_the_search_with_its_own_situations_and_boundaries() {
    let mut steering = Steering::default();
    steering
        .add_sometimes(Sometimes::new("three-receivers", |outcome| {
            outcome.config.receivers >= 3
        }))
        .unwrap();
    steering
        .add_boundary(BoundaryMeasure::new("steps-from-1000", |outcome| {
            Some((outcome.steps as i64 - 1000).abs())
        }))
        .unwrap();
    assert!(
        steering
            .add_sometimes(Sometimes::new("three-receivers", |_| true))
            .is_err(),
        "a name is taken once"
    );
    let mut options = options(systems::by_name("reference").unwrap(), 2, 40);
    options.steering = steering;
    let report = run(&options);
    let (sampled, mutants) = report.situations["three-receivers"];
    assert!(sampled + mutants > 0, "{report:?}");
    let (_, closest) = report.boundaries["steps-from-1000"];
    assert!(closest >= 0);
}

#[test]
fn the_harness_explores_after_its_sweep_and_keeps_what_it_found_as_a_regression() {
    use commitgap_sim::harness::Check;
    let scratch = Scratch::new("explore", "harness");
    let system = systems::by_name("blind-retry-after-expiry").unwrap();
    let check = || {
        Check::new(Arc::clone(&system))
            .seeds_dir(&*scratch)
            .first_seed(3)
            .cases(1)
            .max_failures(1)
            .ignore_environment()
    };
    let message = check().explore(300).try_run().expect_err("explore finds the bug");
    assert!(message.contains("explored run "), "{message}");
    let explored: Vec<SeedFile> = std::fs::read_dir(&*scratch)
        .unwrap()
        .map(|entry| SeedFile::read(&entry.unwrap().path()).unwrap())
        .filter(|file| file.explored)
        .collect();
    assert_eq!(explored.len(), 1, "{message}");
    // The next check replays the explored run from its schedule, where it still fails.
    let again = check().try_run().expect_err("the regression still fails");
    let path = format!("{}-{}", explored[0].system, explored[0].seed);
    assert!(
        again
            .lines()
            .any(|line| line.contains("regression") && line.contains(&path)),
        "{again}"
    );
}
