//! The simulation as one `#[test]`: regressions first, then a sweep, then one line to act on.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use commitgap_sim::systems::ReferenceSystem as ShopSystem;
//! #[test]
//! fn the_shop_survives_the_simulation() {
//!     commitgap_sim::harness::Check::new(Arc::new(ShopSystem::reference()))
//!         .replay_command("cargo run --release -p shop --bin shop-sim --")
//!         .run();
//! }
//! ```
//!
//! [`Check::run`] first replays every seed file of the system in the seed directory (`seeds/` of
//! the package by default; each one a failure found before, kept as a regression the way
//! proptest keeps its regressions file), then sweeps a range of seeds. Each new failure is shrunk
//! and written to the seed directory, and the test fails with the command that replays it.
//!
//! Environment variables, read once per call, like `PROPTEST_CASES` and `MADSIM_TEST_SEED`:
//! `COMMITGAP_CASES` (seeds to sweep), `COMMITGAP_FIRST_SEED` (where the range starts) and
//! `COMMITGAP_SEED` (run just this one seed). Nothing else here reads the environment, and every
//! run is decided by its seed alone.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::Backend;
use crate::faults::{self, FaultKind};
use crate::invariants::{self, Invariant};
use crate::run::{RunOptions, RunOutcome, run_seed};
use crate::seed_file::{self, SeedFile, ShrunkRun};
use crate::shape::WorkloadShape;
use crate::shrink::{DEFAULT_SHRINK_RUNS, shrink};
use crate::sweep::{SweepOptions, sweep};
use crate::system::System;

/// Seeds a check sweeps when `COMMITGAP_CASES` is not set: a few seconds in a release build.
pub const DEFAULT_CASES: u64 = 256;

/// One system's simulation check, built up and then [`Check::run`].
pub struct Check {
    system: Arc<dyn System>,
    seeds_dir: PathBuf,
    cases: u64,
    first_seed: u64,
    faults: Vec<FaultKind>,
    invariants: Vec<Arc<dyn Invariant>>,
    shape: WorkloadShape,
    replay_prefix: Option<String>,
    backend: Backend,
}

/// What a check ran, when it found nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// Seed files replayed as regressions.
    pub regressions: usize,
    /// Seeds swept.
    pub seeds: u64,
}

impl Check {
    /// A check of `system` over [`DEFAULT_CASES`] seeds from seed 0, with seed files in `seeds/`.
    pub fn new(system: Arc<dyn System>) -> Check {
        Check {
            system,
            seeds_dir: PathBuf::from("seeds"),
            cases: DEFAULT_CASES,
            first_seed: 0,
            faults: Vec::new(),
            invariants: Vec::new(),
            shape: WorkloadShape::default(),
            replay_prefix: None,
            backend: Backend::Memdb,
        }
    }

    /// Where regressions are read from and new failures written to.
    pub fn seeds_dir(mut self, directory: impl AsRef<Path>) -> Check {
        self.seeds_dir = directory.as_ref().to_path_buf();
        self
    }

    /// How many seeds to sweep (`COMMITGAP_CASES` overrides it).
    pub fn cases(mut self, cases: u64) -> Check {
        self.cases = cases;
        self
    }

    /// The first seed of the sweep (`COMMITGAP_FIRST_SEED` overrides it).
    pub fn first_seed(mut self, seed: u64) -> Check {
        self.first_seed = seed;
        self
    }

    /// A fault model of the team's own (see [`crate::App::fault`]).
    pub fn fault(mut self, kind: FaultKind) -> Check {
        self.faults.push(kind);
        self
    }

    /// An invariant of the team's own (see [`crate::App::invariant`]).
    pub fn invariant(mut self, invariant: Arc<dyn Invariant>) -> Check {
        self.invariants.push(invariant);
        self
    }

    /// The workload each seed is drawn within.
    pub fn workload(mut self, shape: WorkloadShape) -> Check {
        self.shape = shape;
        self
    }

    /// The team's simulation program, up to its command name (`cargo run --release -p shop
    /// --bin shop-sim --`), so that a failure names the command that replays its seed file.
    pub fn replay_command(mut self, prefix: &str) -> Check {
        self.replay_prefix = Some(prefix.trim().to_owned());
        self
    }

    /// The SQLite backend.
    pub fn backend(mut self, backend: Backend) -> Check {
        self.backend = backend;
        self
    }

    /// Runs the check and panics with one paragraph per failure, each with the command that
    /// reproduces it. Meant to be the body of a `#[test]`.
    pub fn run(self) {
        if let Err(message) = self.try_run() {
            panic!("{message}");
        }
    }

    /// Runs the check and returns what failed, if anything, as the message [`Check::run`]
    /// panics with.
    pub fn try_run(self) -> Result<CheckReport, String> {
        for kind in &self.faults {
            faults::register(*kind)?;
        }
        for invariant in &self.invariants {
            invariants::register(Arc::clone(invariant))?;
        }
        let (first_seed, cases) = self.range_from_environment()?;
        let mut problems = self.replay_regressions()?;
        let regressions = problems.1;
        let sweep_problems = self.sweep_range(first_seed, cases)?;
        problems.0.extend(sweep_problems);
        if problems.0.is_empty() {
            Ok(CheckReport {
                regressions,
                seeds: cases,
            })
        } else {
            Err(format!(
                "commitgap: {} failing run(s) of {}:\n{}",
                problems.0.len(),
                self.system.name(),
                problems.0.join("\n")
            ))
        }
    }

    /// The seed range, from the builder and the environment.
    fn range_from_environment(&self) -> Result<(u64, u64), String> {
        let read = |name: &str| -> Result<Option<u64>, String> {
            match std::env::var(name) {
                Ok(text) => text.trim().parse::<u64>().map(Some).map_err(|_| {
                    format!(
                        "{name}={text:?} is not a whole number; unset it or set a number such as {name}=100"
                    )
                }),
                Err(_) => Ok(None),
            }
        };
        if let Some(seed) = read("COMMITGAP_SEED")? {
            return Ok((seed, 1));
        }
        let first = read("COMMITGAP_FIRST_SEED")?.unwrap_or(self.first_seed);
        let cases = read("COMMITGAP_CASES")?.unwrap_or(self.cases);
        if cases == 0 || first.checked_add(cases - 1).is_none() {
            return Err(format!(
                "commitgap: {cases} cases from seed {first} is not a seed range; use at least 1 case and stay below 2^64"
            ));
        }
        Ok((first, cases))
    }

    /// Replays every seed file of this system: each must now pass. Returns the problems and how
    /// many files were replayed.
    fn replay_regressions(&self) -> Result<(Vec<String>, usize), String> {
        let mut problems = Vec::new();
        let mut replayed = 0;
        for path in seed_file::list(&self.seeds_dir)? {
            let file = SeedFile::read(&path)?;
            if file.system != self.system.name() {
                continue;
            }
            replayed += 1;
            let options = RunOptions {
                backend: file.config.backend,
                config: Some(file.config.clone()),
                ..RunOptions::default()
            };
            let outcome = run_seed(&self.system, file.seed, &options)?;
            if let Some(verdict) = verdict_of(&outcome) {
                problems.push(format!(
                    "  regression {} (seed {}) still fails: {verdict}\n    replay: {}",
                    path.display(),
                    file.seed,
                    self.replay_line(&path, file.seed)
                ));
            }
        }
        Ok((problems, replayed))
    }

    /// Sweeps the range; shrinks and writes each failure.
    fn sweep_range(&self, first_seed: u64, seeds: u64) -> Result<Vec<String>, String> {
        let options = SweepOptions {
            system: Arc::clone(&self.system),
            first_seed,
            seeds,
            jobs: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            backend: self.backend,
            check_determinism: false,
            every_fault: false,
            shape: self.shape.clone(),
        };
        let report = sweep(&options, &|_, _| {});
        let mut problems: Vec<String> = report
            .errors
            .iter()
            .map(|(seed, error)| format!("  seed {seed} could not run: {error}"))
            .collect();
        for result in &report.failures {
            problems.push(self.keep(&result.outcome));
        }
        Ok(problems)
    }

    /// Writes a failing run's seed file (shrunk when it can be) and says how to replay it.
    fn keep(&self, outcome: &RunOutcome) -> String {
        let verdict = verdict_of(outcome).unwrap_or_else(|| "ran differently twice".to_owned());
        // A sweep does not write runs down; the seed runs once more with its schedule recorded,
        // which is what shrinking starts from.
        let recorded = crate::shrink::record(&self.system, outcome.seed, &outcome.config).ok();
        let outcome = recorded.as_ref().unwrap_or(outcome);
        let mut file = SeedFile::from_outcome(outcome, String::new());
        if let (Some(_), Some(schedule)) = (&outcome.failure, &outcome.schedule)
            && let Ok(shrunk) = shrink(
                &self.system,
                outcome.seed,
                &outcome.config,
                schedule,
                DEFAULT_SHRINK_RUNS,
            )
        {
            file.shrunk = Some(ShrunkRun::from_shrunk(&shrunk));
        }
        match file.write(&self.seeds_dir) {
            Ok(path) => format!(
                "  seed {} {verdict}\n    seed file: {}\n    replay: {}",
                outcome.seed,
                path.display(),
                self.replay_line(&path, outcome.seed)
            ),
            Err(error) => format!(
                "  seed {} {verdict}\n    its seed file could not be written: {error}\n    rerun: {}",
                outcome.seed,
                self.rerun_line(outcome.seed)
            ),
        }
    }

    /// The command that replays a seed file: the team's program if it named one, else this
    /// test with the seed set.
    fn replay_line(&self, path: &Path, seed: u64) -> String {
        match &self.replay_prefix {
            Some(prefix) => format!("{prefix} replay {}", path.display()),
            None => self.rerun_line(seed),
        }
    }

    /// This test again, on one seed.
    fn rerun_line(&self, seed: u64) -> String {
        let test = std::thread::current()
            .name()
            .filter(|name| *name != "main")
            .map_or_else(String::new, |name| format!(" {name}"));
        format!("COMMITGAP_SEED={seed} cargo test --release{test}")
    }
}

/// What went wrong in a run, in one line, or `None` when it passed.
fn verdict_of(outcome: &RunOutcome) -> Option<String> {
    if let Some(failure) = &outcome.failure {
        return Some(format!(
            "failed {} at step {}: {}",
            failure.invariant, failure.step, failure.message
        ));
    }
    outcome
        .unsettled
        .as_ref()
        .map(|unsettled| format!("did not settle: {unsettled}"))
}
