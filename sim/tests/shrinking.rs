//! Schedules and shrinking: a seeded run written down as a schedule replays to the same trace
//! with no randomness at all; an edited schedule still runs and reports what it could not follow;
//! every planted bug shrinks to a smaller run failing the same invariant; the corpus keeps the
//! shortest file per failure.

mod scratch;

use scratch::Scratch;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use commitgap_sim::run::{RunOptions, RunOutcome, run_seed};
use commitgap_sim::run::{Schedule, StepLine};
use commitgap_sim::sweep::{self, Expectation, SeedFile};
use commitgap_sim::sweep::{Corpus, Kept};
use commitgap_sim::system::System;
use commitgap_sim::systems;

fn system(name: &str) -> Arc<dyn System> {
    systems::by_name(name).unwrap()
}

fn recorded(name: &str, seed: u64) -> RunOutcome {
    run_seed(
        &system(name),
        seed,
        &RunOptions {
            record_schedule: true,
            ..RunOptions::default()
        },
    )
    .unwrap()
}

fn replayed(name: &str, seed: u64, outcome: &RunOutcome, steps: Vec<String>) -> RunOutcome {
    let mut schedule = outcome.schedule.clone().unwrap();
    schedule.steps = steps;
    let options = RunOptions {
        config: Some(outcome.config.clone()),
        schedule: Some(schedule),
        ..RunOptions::default()
    };
    run_seed(&system(name), seed, &options).unwrap()
}

fn seed_files() -> Vec<(PathBuf, SeedFile)> {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds");
    sweep::list(&directory)
        .unwrap()
        .into_iter()
        .map(|path| (path.clone(), SeedFile::read(&path).unwrap()))
        .collect()
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("shrinking", name)
}

#[test]
fn a_recorded_schedule_replays_to_the_same_trace_without_randomness() {
    for name in ["reference", "key-per-attempt", "unfenced-completion"] {
        for seed in 0..25 {
            let original = recorded(name, seed);
            let steps = original.schedule.as_ref().unwrap().steps.clone();
            assert_eq!(
                steps.len() as u64,
                original.steps,
                "{name} {seed}: one line per step"
            );
            let again = replayed(name, seed, &original, steps.clone());
            assert_eq!(again.schedule_report, Vec::<String>::new(), "{name} {seed}");
            assert_eq!(
                again.digest, original.digest,
                "{name} seed {seed}: the schedule reproduces the run"
            );
            assert_eq!(again.failure, original.failure);
            assert_eq!(
                again.schedule.unwrap().steps,
                steps,
                "{name} {seed}: and writes itself down the same"
            );
        }
    }
}

#[test]
fn an_edited_schedule_still_runs_and_reports_what_no_longer_applies() {
    let original = recorded("key-per-attempt", 0);
    let mut steps = original.schedule.as_ref().unwrap().steps.clone();
    // A person's edits: a line deleted, a fault moved to another line, a line for a process that
    // does not exist, and a choice no code asks for.
    steps.remove(steps.len() / 3);
    let from = steps
        .iter()
        .position(|line| StepLine::parse(line).fault_count() > 0)
        .expect("the run has a fault");
    let mut with_fault = StepLine::parse(&steps[from]);
    let fault = with_fault
        .decisions
        .iter()
        .position(commitgap_sim::run::Decision::is_fault)
        .unwrap();
    let moved = with_fault.decisions.remove(fault);
    steps[from] = with_fault.to_string();
    let mut target = StepLine::parse(&steps[from + 5]);
    target.decisions.push(moved);
    steps[from + 5] = target.to_string();
    steps.insert(2, "relay-9#1 call tenant-z/order-9/fulfill/v1".to_owned());
    steps.insert(
        4,
        format!("{} | no-such-choice 7", StepLine::parse(&steps[4]).run),
    );
    let edited = replayed("key-per-attempt", 0, &original, steps);
    assert!(edited.steps > 0);
    let report = edited.schedule_report.join("\n");
    assert!(
        report.contains("relay-9#1 call"),
        "the line for a process that never runs is reported: {report}"
    );
    assert!(
        report.contains("no-such-choice 7"),
        "the unknown choice is reported: {report}"
    );
    assert_ne!(edited.digest, original.digest, "the edits changed the run");
}

#[test]
fn every_planted_bug_shrinks_to_a_smaller_run_failing_the_same_invariant() {
    // Bugs whose smallest story needs no fault at all: a redelivery or the ordinary order of
    // steps exposes them.
    let fault_free = [
        "receipt-first",
        "receipt-after",
        "outbox-on-other-connection",
        "ack-before-commit",
        "no-receipt-dedup",
        "per-delivery-dedup-key",
        "mark-sent-before-call",
    ];
    let mut shrunk_systems = Vec::new();
    for (path, file) in seed_files() {
        let Expectation::Fails { invariant } = &file.expect else {
            continue;
        };
        let system = system(&file.system);
        let original = sweep::record_schedule(&system, file.seed, &file.config, &Default::default()).unwrap();
        let schedule: Schedule = original.schedule.clone().unwrap();
        let shrunk = sweep::shrink(&system, file.seed, &file.config, &schedule, 150).unwrap();
        let (before, after) = (&shrunk.original, &shrunk.shrunk);
        assert_eq!(&after.failure.invariant, invariant, "{}", path.display());
        assert!(
            after.steps < before.steps,
            "{}: {}",
            path.display(),
            shrunk.summary()
        );
        assert!(
            after.faults() <= before.faults(),
            "{}: {}",
            path.display(),
            shrunk.summary()
        );
        if fault_free.contains(&file.system.as_str()) {
            assert_eq!(after.faults(), 0, "{}: {}", path.display(), shrunk.summary());
            assert!(after.steps <= 30, "{}: {}", path.display(), shrunk.summary());
        }
        // What the file keeps is at least as small as this shorter search found.
        let kept = file.shrunk.as_ref().expect("seed files in the corpus are shrunk");
        assert_eq!(&kept.failure.invariant, invariant);
        assert!(kept.steps <= file.steps, "{}", path.display());
        shrunk_systems.push(file.system.clone());
    }
    assert_eq!(
        shrunk_systems.len(),
        systems::all().len() - 1,
        "one seed file per planted bug: {shrunk_systems:?}"
    );
}

#[test]
fn the_corpus_keeps_the_shortest_reproduction_of_each_failure() {
    let directory = scratch("corpus");
    let (_, short) = seed_files()
        .into_iter()
        .find(|(_, file)| file.system == "receipt-first")
        .unwrap();
    // The same failure (same system, invariant and shape), found by another seed in more steps.
    let mut long = short.clone();
    long.seed = 1_000;
    long.trace_digest = "0".repeat(32);
    long.shrunk.as_mut().unwrap().steps += 40;
    let mut corpus = Corpus::open(&directory, commitgap_sim::run::COMMITGAP_REPLAY_PREFIX).unwrap();
    let Kept::New(long_path) = corpus.add(&long).unwrap() else {
        panic!("the first file is new")
    };
    let Kept::Replaced { path, removed } = corpus.add(&short).unwrap() else {
        panic!("the shorter file replaces the longer")
    };
    assert_eq!(removed, long_path);
    assert!(!long_path.exists() && path.exists());
    assert_eq!(
        corpus.add(&long).unwrap(),
        Kept::Duplicate(path.clone()),
        "the longer is not written again"
    );
    // A fresh look at the directory finds the same: one file, and it is the short one.
    let mut reopened = Corpus::open(&directory, commitgap_sim::run::COMMITGAP_REPLAY_PREFIX).unwrap();
    assert_eq!(reopened.add(&long).unwrap(), Kept::Duplicate(path.clone()));
    assert_eq!(sweep::list(&directory).unwrap(), vec![path]);
    // A file that expects to pass (a fixed bug kept as a regression) is never deduplicated.
    let mut regression = long.clone();
    regression.expect = Expectation::Passes;
    assert!(matches!(corpus.add(&regression).unwrap(), Kept::New(_)));
    assert_eq!(sweep::list(&directory).unwrap().len(), 2);
}

#[test]
fn a_version_1_file_still_reads_and_replays() {
    let (_, file) = seed_files()
        .into_iter()
        .find(|(_, file)| file.system == "receipt-first")
        .unwrap();
    let mut value = serde_json::to_value(&file).unwrap();
    let object = value.as_object_mut().unwrap();
    object.remove("schedule");
    object.remove("shrunk");
    object.insert("format_version".to_owned(), 1.into());
    let old = SeedFile::parse(serde_json::to_string(&value).unwrap().as_bytes()).unwrap();
    assert_eq!((old.schedule.is_none(), old.shrunk.is_none()), (true, true));
    let outcome = run_seed(
        &system(&old.system),
        old.seed,
        &RunOptions {
            config: Some(old.config.clone()),
            ..RunOptions::default()
        },
    )
    .unwrap();
    assert!(old.expect.is_met_by(outcome.failure.as_ref()));
}
