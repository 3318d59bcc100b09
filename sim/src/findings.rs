//! What a sweep found, kept the moment it is found and improved afterwards.
//!
//! A sweep that is killed, interrupted or short of disk must not lose a failure it has found. So
//! each failure is kept as soon as its seed finishes, from the thread that ran it:
//! [`Findings::keep_as_found`] writes the seed file of the run as found, unshrunk, atomically and
//! flushed to disk, before the sweep goes on. After the sweep, [`shrink_and_keep`] shrinks those
//! files and hands each shrunk run to the [`Corpus`], which replaces the file as found with the
//! shrunk one, or removes it when another file already holds the same failure in as few steps.
//! A file that cannot be written is counted, and the sweep goes on: its failure still has the
//! `replay --seed` command, which needs no file.
//!
//! To keep a sweep of a planted bug from writing thousands of files, at most `shrink_max`
//! failures of each invariant get a file, the first in seed order, unless shrinking is off, in
//! which case every failure gets one. Seeds finish out of order over several threads, so a
//! failure is written as found whenever fewer than `shrink_max` earlier seeds have failed the
//! same way so far, and [`Findings::settle`] removes, after the sweep, the few files that earlier
//! seeds finishing later pushed past the limit: the files that stay are the same whatever the
//! number of threads. This module decides what is written
//! and when; [`crate::files`] decides how. It must not print: the caller says what happened.
//!
//! A broken system fails thousands of seeds the same way, and nobody reads thousands of lines
//! that say so. [`group_failures`] folds the failures into one group per invariant, with the
//! count of failing seeds and the shortest reproduction among them: the one whose replay takes
//! the fewest steps. Its step numbers are those of the run its replay command runs, read back
//! from the seed file when it holds a shrunk run, so that what a summary says and what `replay`
//! then prints agree.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::registry::Registry;
use crate::run::RunOutcome;
use crate::sweep::seed_file::{Corpus, Kept};
use crate::sweep::seed_file::{SeedFile, ShrunkRun};
use crate::sweep::shrink::{Shrunk, shrink_all};
use crate::sweep::{SeedResult, StopFlag};
use crate::system::System;

/// Failures of one invariant that get a seed file by default: a few distinct stories are worth
/// keeping; thousands of failures of one planted bug are not worth thousands of files.
pub const DEFAULT_SHRINK_MAX: u64 = 5;

/// Which failures get a seed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepPolicy {
    /// Shrink the files written as found, after the sweep.
    pub shrink: bool,
    /// With shrinking on, how many failures of each invariant (and how many runs that did not
    /// settle) get a file; the rest are listed with their `replay --seed` command only.
    pub shrink_max: u64,
}

/// What became of a failure the moment it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsFound {
    /// Its seed file, unshrunk, is at this path.
    Written(PathBuf),
    /// No file: `shrink_max` failures of its invariant already have one.
    PastShrinkMax,
    /// No file: writing it failed for this reason (a full or read-only disk).
    Unwritable(String),
    /// No file: the seed ran differently twice but failed no invariant, and a seed file holds a
    /// failure.
    NoFailure,
}

/// The failures a sweep has kept so far. Shared by the sweep's threads.
#[derive(Debug)]
pub struct Findings {
    directory: PathBuf,
    /// The fault models and invariants shrinking runs with, and the program that replays a seed
    /// file, as its replay command names it.
    registry: Arc<Registry>,
    policy: KeepPolicy,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The seeds that failed each invariant (or did not settle) and got a file as found.
    per_invariant: BTreeMap<String, BTreeSet<u64>>,
    /// The file written for each seed.
    written: BTreeMap<u64, PathBuf>,
    /// Seeds whose file could not be written, with the reason.
    unwritable: BTreeMap<u64, String>,
}

impl Findings {
    /// Failures kept in `directory`, shrunk with `registry`'s fault models and invariants, their
    /// seed files replayed by its program (see [`Registry::replay_prefix`]).
    pub fn new(directory: &Path, policy: KeepPolicy, registry: Arc<Registry>) -> Findings {
        Findings {
            directory: directory.to_path_buf(),
            registry,
            policy,
            state: Mutex::new(State::default()),
        }
    }

    /// Keeps a failing run as found: writes its seed file now, unless the policy says it gets
    /// none. Called from any sweep thread, the moment the seed finishes.
    pub fn keep_as_found(&self, outcome: &RunOutcome) -> AsFound {
        let label = match (&outcome.failure, &outcome.unsettled) {
            (Some(failure), _) => failure.invariant.clone(),
            (None, Some(_)) => "does-not-settle".to_owned(),
            (None, None) => return AsFound::NoFailure,
        };
        let mut state = self
            .state
            .lock()
            .expect("no thread panics while keeping a failure");
        let seeds = state.per_invariant.entry(label).or_default();
        let earlier = seeds.range(..outcome.seed).count() as u64;
        if self.policy.shrink && earlier >= self.policy.shrink_max {
            return AsFound::PastShrinkMax;
        }
        seeds.insert(outcome.seed);
        match SeedFile::from_outcome(outcome, String::new())
            .write(&self.directory, self.registry.replay_prefix())
        {
            Ok(path) => {
                state.written.insert(outcome.seed, path.clone());
                AsFound::Written(path)
            }
            Err(why) => {
                // It holds no file, so it takes no place among the failures that do: a later
                // one may find room on the disk again.
                if let Some(seeds) = state
                    .per_invariant
                    .values_mut()
                    .find(|seeds| seeds.contains(&outcome.seed))
                {
                    seeds.remove(&outcome.seed);
                }
                state.unwritable.insert(outcome.seed, why.clone());
                AsFound::Unwritable(why)
            }
        }
    }

    /// After the sweep, removes the files of failures that are past `shrink_max` in seed order
    /// (written because later seeds finished first). Returns those seeds.
    pub fn settle(&self) -> Vec<u64> {
        if !self.policy.shrink {
            return Vec::new();
        }
        let mut state = self.state.lock().expect("the sweep is over");
        let State {
            per_invariant,
            written,
            ..
        } = &mut *state;
        let mut past = Vec::new();
        for seeds in per_invariant.values_mut() {
            let limit = usize::try_from(self.policy.shrink_max).unwrap_or(usize::MAX);
            let beyond: Vec<u64> = seeds.iter().skip(limit).copied().collect();
            for seed in beyond {
                seeds.remove(&seed);
                if let Some(path) = written.remove(&seed) {
                    let _ = fs::remove_file(path);
                }
                past.push(seed);
            }
        }
        past.sort_unstable();
        past
    }

    /// The seed file written as found for each seed that got one.
    pub fn written(&self) -> BTreeMap<u64, PathBuf> {
        self.state.lock().expect("the sweep is over").written.clone()
    }

    /// The seeds whose file could not be written, with the reason.
    pub fn unwritable(&self) -> BTreeMap<u64, String> {
        self.state.lock().expect("the sweep is over").unwritable.clone()
    }

    /// Records that the file of `seed` now lives at `path`, or at no path (`None`).
    fn moved(&self, seed: u64, path: Option<PathBuf>) {
        let mut state = self.state.lock().expect("the sweep is over");
        match path {
            Some(path) => state.written.insert(seed, path),
            None => state.written.remove(&seed),
        };
    }
}

/// What shrinking did with a failure's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterShrinking {
    /// The file now holds the shrunk run beside the original. `summary` reads `shrink: 57 -> 17
    /// steps, 6 -> 0 faults`.
    Kept { summary: String, kept: Kept },
    /// Another file holds the same failure in as few steps; the file written as found was
    /// removed.
    Duplicate { summary: String, existing: PathBuf },
    /// Not shrunk (the reason says why); the file as found stays.
    NotShrunk(String),
    /// Shrunk, but the shrunk file could not be written; the file as found stays.
    Unwritable(String),
}

/// Shrinks every failure that [`Findings::keep_as_found`] wrote a file for, over `jobs` threads,
/// and offers the shrunk files to the corpus of the seed directory, smallest first, so that of
/// several failures with one signature the shortest is kept. Stops shrinking when `stop` is
/// raised; whatever was not shrunk keeps its file as found. Returns what became of each seed.
pub fn shrink_and_keep(
    system: &Arc<dyn System>,
    failures: &[SeedResult],
    findings: &Findings,
    jobs: usize,
    runs_max: usize,
    stop: &StopFlag,
) -> BTreeMap<u64, AfterShrinking> {
    let written = findings.written();
    let chosen: Vec<(u64, crate::config::SimConfig)> = failures
        .iter()
        .map(|result| &result.outcome)
        .filter(|outcome| outcome.failure.is_some() && written.contains_key(&outcome.seed))
        .map(|outcome| (outcome.seed, outcome.config.clone()))
        .collect();
    let mut after = BTreeMap::new();
    if chosen.is_empty() {
        return after;
    }
    let results = shrink_all(system, &chosen, jobs, runs_max, stop, &findings.registry);
    let mut shrunk_files: Vec<(SeedFile, Shrunk)> = Vec::new();
    for ((seed, _), result) in chosen.iter().zip(results) {
        match result {
            Ok((recorded, shrunk)) => {
                let mut file = SeedFile::from_outcome(&recorded, String::new());
                file.shrunk = Some(ShrunkRun::from_shrunk(&shrunk));
                shrunk_files.push((file, shrunk));
            }
            Err(why) => {
                after.insert(*seed, AfterShrinking::NotShrunk(why));
            }
        }
    }
    let mut corpus = match Corpus::open(&findings.directory, findings.registry.replay_prefix()) {
        Ok(corpus) => corpus,
        Err(why) => {
            for (file, _) in &shrunk_files {
                after.insert(file.seed, AfterShrinking::Unwritable(why.clone()));
            }
            return after;
        }
    };
    shrunk_files.sort_by_key(|(file, _)| (file.smallest(), file.seed));
    for (file, shrunk) in shrunk_files {
        let seed = file.seed;
        let summary = shrunk.summary();
        let as_found = written.get(&seed);
        let result = match corpus.add(&file) {
            // The file that already holds this failure is the one written as found: this seed's
            // own file, from an earlier sweep, shrunk at least as far.
            Ok(Kept::Duplicate(existing)) if as_found == Some(&existing) => {
                findings.moved(seed, Some(existing.clone()));
                AfterShrinking::Kept {
                    summary,
                    kept: Kept::Duplicate(existing),
                }
            }
            Ok(Kept::Duplicate(existing)) => {
                // The file as found is a longer copy of a failure already kept: it goes.
                if let Some(path) = as_found
                    && *path != existing
                {
                    let _ = fs::remove_file(path);
                }
                findings.moved(seed, None);
                AfterShrinking::Duplicate { summary, existing }
            }
            Ok(kept) => {
                if let Some(path) = as_found
                    && path.as_path() != kept.path()
                {
                    // Written under a name of its own (another run of this seed held the
                    // usual one); the file as found is the same failure, unshrunk.
                    let _ = fs::remove_file(path);
                }
                findings.moved(seed, Some(kept.path().to_path_buf()));
                AfterShrinking::Kept { summary, kept }
            }
            Err(why) => AfterShrinking::Unwritable(why),
        };
        after.insert(seed, result);
    }
    after
}

/// A failing run as a reader meets it: how long it is, where it fails and what it said there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailingRun {
    /// Steps the run takes.
    pub steps: u64,
    /// The step at which it failed an invariant or reached its bound; `None` for two runs of a
    /// seed that differed, which fail at no step.
    pub step: Option<u64>,
    /// What the invariant (or the bound) said, if anything.
    pub message: Option<String>,
    /// Whether this is a shrunk run rather than the seed's run as drawn.
    pub shrunk: bool,
}

impl FailingRun {
    /// A run as it came out of a sweep: the seed's run as drawn.
    pub fn of_outcome(outcome: &RunOutcome) -> FailingRun {
        let (step, message) = match (&outcome.failure, &outcome.unsettled) {
            (Some(failure), _) => (Some(failure.step), Some(failure.message.clone())),
            (None, Some(unsettled)) => (Some(unsettled.step), Some(unsettled.to_string())),
            (None, None) => (None, None),
        };
        FailingRun {
            steps: outcome.steps,
            step,
            message,
            shrunk: false,
        }
    }

    /// The run that `replay FILE` replays by default: the shrunk one when the file holds one,
    /// else the run the file was written from.
    pub fn of_file(path: &Path) -> Result<FailingRun, String> {
        let file = SeedFile::read(path)?;
        if let Some(shrunk) = &file.shrunk {
            return Ok(FailingRun {
                steps: shrunk.steps,
                step: Some(shrunk.failure.step),
                message: Some(shrunk.failure.message.clone()),
                shrunk: true,
            });
        }
        let (step, message) = match (&file.failure, &file.unsettled) {
            (Some(failure), _) => (Some(failure.step), Some(failure.message.clone())),
            (None, Some(unsettled)) => (Some(unsettled.step), Some(unsettled.to_string())),
            (None, None) => (None, None),
        };
        Ok(FailingRun {
            steps: file.steps,
            step,
            message,
            shrunk: false,
        })
    }
}

/// One failing seed, as [`group_failures`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailingSeed {
    /// What it failed: an invariant's name, or a name for a verdict of its own (a run that did
    /// not settle, two runs that differed). Seeds with the same label form one group.
    pub label: String,
    pub seed: u64,
    /// The seed's run as drawn, as the sweep found it.
    pub drawn: FailingRun,
    /// The seed file that holds its failure, if one does.
    pub file: Option<PathBuf>,
}

/// The failing seeds of one label, and the shortest reproduction among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureGroup {
    pub label: String,
    /// Every failing seed of the label, in seed order.
    pub seeds: Vec<u64>,
    /// The seed whose replay takes the fewest steps (of equals, the lowest seed).
    pub shortest: Shortest,
}

/// The shortest reproduction of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortest {
    pub seed: u64,
    /// Its seed file, if it has one.
    pub file: Option<PathBuf>,
    /// The run that replaying `file` runs, or the run as drawn when there is no file.
    pub replayed: FailingRun,
    /// The seed's run as drawn.
    pub drawn: FailingRun,
}

impl Shortest {
    /// Where the run fails, in the step numbers of the run that its replay command runs:
    /// `step 14 of its shrunk run (step 305 of seed 7 as drawn)` when the command replays a shrunk
    /// seed file, `step 305 of seed 7 as drawn (step 14 of the shrunk run in its seed file)` when
    /// the command runs the seed itself (`replays_file` false), `step 305` when there is only one
    /// run, and `41 steps` for runs that differed, which fail at no step.
    pub fn where_it_fails(&self, replays_file: bool) -> String {
        let seed = self.seed;
        let (Some(drawn_step), Some(shrunk_step)) = (self.drawn.step, self.replayed.step) else {
            return format!("{} steps", self.drawn.steps);
        };
        if !self.replayed.shrunk || self.file.is_none() {
            return format!("step {drawn_step}");
        }
        if replays_file {
            format!("step {shrunk_step} of its shrunk run (step {drawn_step} of seed {seed} as drawn)")
        } else {
            format!(
                "step {drawn_step} of seed {seed} as drawn (step {shrunk_step} of the shrunk run in its seed file)"
            )
        }
    }
}

/// Folds failing seeds into one group per label, in label order, each with its shortest
/// reproduction. A seed with a file is measured by the run that replaying the file runs; with
/// `read_files` off (every file holds its run as found, as with shrinking off) only the shortest
/// seed's file is read, so that its step numbers are still exactly those its replay prints.
pub fn group_failures(failing: Vec<FailingSeed>, read_files: bool) -> Vec<FailureGroup> {
    // A file that cannot be read back is measured as the run it was written from.
    let replayed = |seed: &FailingSeed| -> FailingRun {
        seed.file
            .as_deref()
            .and_then(|path| FailingRun::of_file(path).ok())
            .unwrap_or_else(|| seed.drawn.clone())
    };
    let mut by_label: BTreeMap<String, Vec<(FailingRun, FailingSeed)>> = BTreeMap::new();
    for seed in failing {
        let run = if read_files {
            replayed(&seed)
        } else {
            seed.drawn.clone()
        };
        by_label.entry(seed.label.clone()).or_default().push((run, seed));
    }
    by_label
        .into_iter()
        .filter_map(|(label, members)| {
            let mut seeds: Vec<u64> = members.iter().map(|(_, seed)| seed.seed).collect();
            seeds.sort_unstable();
            let (run, shortest) = members
                .into_iter()
                .min_by_key(|(run, seed)| (run.steps, seed.seed))?;
            let run = if read_files { run } else { replayed(&shortest) };
            Some(FailureGroup {
                label,
                seeds,
                shortest: Shortest {
                    seed: shortest.seed,
                    file: shortest.file,
                    replayed: run,
                    drawn: shortest.drawn,
                },
            })
        })
        .collect()
}

/// `0, 1, 2, 4, 5 and 15 more`: the first `shown` seeds of a list and how many follow.
pub fn seed_list(seeds: &[u64], shown: usize) -> String {
    let mut text = seeds
        .iter()
        .take(shown)
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if seeds.len() > shown {
        text.push_str(&format!(" and {} more", seeds.len() - shown));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(steps: u64, step: u64) -> FailingRun {
        FailingRun {
            steps,
            step: Some(step),
            message: Some(format!("failed at {step}")),
            shrunk: false,
        }
    }

    fn failing(label: &str, seed: u64, steps: u64) -> FailingSeed {
        FailingSeed {
            label: label.to_owned(),
            seed,
            drawn: run(steps, steps),
            file: None,
        }
    }

    #[test]
    fn failures_group_by_label_with_their_shortest_seed() {
        let groups = group_failures(
            vec![
                failing("b-invariant", 9, 40),
                failing("a-invariant", 4, 300),
                failing("b-invariant", 2, 40),
                failing("a-invariant", 1, 120),
                failing("b-invariant", 5, 70),
            ],
            true,
        );
        let labels: Vec<&str> = groups.iter().map(|group| group.label.as_str()).collect();
        assert_eq!(labels, ["a-invariant", "b-invariant"]);
        assert_eq!(groups[0].seeds, [1, 4]);
        assert_eq!(groups[0].shortest.seed, 1, "120 steps beat 300");
        assert_eq!(groups[1].seeds, [2, 5, 9]);
        assert_eq!(
            groups[1].shortest.seed, 2,
            "of two runs of 40 steps, the lower seed"
        );
        assert_eq!(groups[1].shortest.where_it_fails(true), "step 40");
    }

    #[test]
    fn the_shortest_seed_names_the_steps_of_the_run_its_command_replays() {
        let shortest = Shortest {
            seed: 7,
            file: Some(PathBuf::from("seeds/x-7.json")),
            replayed: FailingRun {
                shrunk: true,
                ..run(14, 14)
            },
            drawn: run(305, 305),
        };
        assert_eq!(
            shortest.where_it_fails(true),
            "step 14 of its shrunk run (step 305 of seed 7 as drawn)"
        );
        assert_eq!(
            shortest.where_it_fails(false),
            "step 305 of seed 7 as drawn (step 14 of the shrunk run in its seed file)"
        );
        let differed = Shortest {
            replayed: FailingRun {
                step: None,
                ..run(41, 0)
            },
            drawn: FailingRun {
                step: None,
                ..run(41, 0)
            },
            file: None,
            ..shortest
        };
        assert_eq!(differed.where_it_fails(true), "41 steps");
        assert_eq!(seed_list(&[1, 2, 3], 5), "1, 2, 3");
        assert_eq!(seed_list(&[1, 2, 3, 4], 2), "1, 2 and 2 more");
    }
}
