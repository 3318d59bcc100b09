//! The simulation as one `#[test]`: regressions first, then a sweep, then one line to act on.
//!
//! Simulations as a proptest `Strategy`, for a team's own property tests, are here too
//! ([`sim_case`]).
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
//! proptest keeps its regressions file), then sweeps a range of seeds. New failures are kept as
//! `sweep` keeps them (see `findings`): the first few of each invariant in seed order
//! ([`Check::shrink_max`]) are written to the seed directory, shrunk, and deduplicated. The test
//! fails with one paragraph per invariant that failed: how many seeds failed it, and the shortest
//! of them with the command that replays it, in the step numbers that command prints.
//!
//! A broken system fails most seeds, so the sweep stops handing out seeds once
//! [`Check::max_failures`] have failed ([`DEFAULT_MAX_FAILURES`] unless told otherwise): its test
//! fails in seconds with a few seed files, rather than after the whole range with hundreds.
//!
//! Environment variables, read once per call, like `PROPTEST_CASES` and `MADSIM_TEST_SEED`:
//! `COMMITGAP_CASES` (seeds to sweep), `COMMITGAP_FIRST_SEED` (where the range starts) and
//! `COMMITGAP_SEED` (run just this one seed); a check that must sweep its own range whatever they
//! say calls [`Check::ignore_environment`]. Nothing else here reads the environment, and every
//! run is decided by its seed alone.

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::Backend;
use crate::faults::FaultKind;
pub use crate::findings::DEFAULT_SHRINK_MAX;
use crate::findings::{
    FailingRun, FailingSeed, FailureGroup, Findings, KeepPolicy, group_failures, seed_list, shrink_and_keep,
};
use crate::invariants::Invariant;
use crate::registry::Registry;
use crate::run::{RunOptions, RunOutcome, run_seed};
use crate::shape::WorkloadShape;
use crate::sweep::report::{NONDETERMINISM, UNSETTLED};
use crate::sweep::seed_file::{self, SeedFile};
use crate::sweep::shrink::DEFAULT_SHRINK_RUNS;
use crate::sweep::{Found, SweepLimits, SweepOptions, SweepReport, sweep_with_limits};
use crate::system::System;

// The simulation as a proptest `Strategy` is the other way to run it inside `cargo test`.
pub use crate::strategy::*;

/// Seeds a check sweeps when `COMMITGAP_CASES` is not set: a few seconds in a release build.
pub const DEFAULT_CASES: u64 = 256;

/// Failing seeds after which a check stops sweeping unless told otherwise: enough to show how
/// often and how many ways a system fails, few enough that a broken system fails its test in
/// seconds.
pub const DEFAULT_MAX_FAILURES: u64 = 20;

/// Failing seeds a failure message names by number for each invariant; the rest are counted.
const SEEDS_NAMED: usize = 5;

/// Seeds that could not run which a failure message names one by one; the rest are counted.
const ERRORS_NAMED: usize = 5;

/// One system's simulation check, built up and then [`Check::run`].
pub struct Check {
    system: Arc<dyn System>,
    seeds_dir: PathBuf,
    cases: u64,
    first_seed: u64,
    /// The fault models and invariants every run reads, and the replay command seed files name.
    registry: Registry,
    /// The first fault model or invariant that could not be added, reported by the run.
    refused: Option<String>,
    shape: WorkloadShape,
    /// The program that replays a seed file, when the team named one.
    replay_prefix: Option<String>,
    /// Runs explored after the sweep, and the team's situations and boundaries to steer them.
    explore_runs: u64,
    steering: crate::explore::Steering,
    backend: Backend,
    max_failures: u64,
    shrink_max: u64,
    /// Whether `COMMITGAP_CASES`, `COMMITGAP_FIRST_SEED` and `COMMITGAP_SEED` change the range.
    reads_environment: bool,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("system", &self.system.name())
            .field("seeds_dir", &self.seeds_dir)
            .field("cases", &self.cases)
            .field("first_seed", &self.first_seed)
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

/// What a check ran, when it found nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// Seed files replayed as regressions.
    pub regressions: usize,
    /// Seeds swept.
    pub seeds: u64,
    /// Runs explored after the sweep (see [`Check::explore`]).
    pub explored: u64,
}

/// What the sweep of a check found, as lines of its failure message.
struct Swept {
    /// One paragraph per invariant that failed, then the seeds that could not run.
    problems: Vec<String>,
    /// Seeds that failed or could not run.
    failing: usize,
    report: SweepReport,
}

impl Check {
    /// A check of `system` over [`DEFAULT_CASES`] seeds from seed 0, with seed files in `seeds/`.
    pub fn new(system: Arc<dyn System>) -> Check {
        Check {
            system,
            seeds_dir: PathBuf::from("seeds"),
            cases: DEFAULT_CASES,
            first_seed: 0,
            registry: Registry::new(),
            refused: None,
            shape: WorkloadShape::default(),
            replay_prefix: None,
            explore_runs: 0,
            steering: crate::explore::Steering::default(),
            backend: Backend::Memdb,
            max_failures: DEFAULT_MAX_FAILURES,
            shrink_max: DEFAULT_SHRINK_MAX,
            reads_environment: true,
        }
    }

    /// A check of `system` within the program `app`: its fault models, invariants, workload and
    /// replay command (see [`crate::App::check`]).
    pub fn of_app(app: &crate::App, system: Arc<dyn System>) -> Check {
        let mut check = Check::new(system);
        check.registry = app.registry().clone();
        check.refused = app.refused().map(str::to_owned);
        check.shape = app.shape().clone();
        check.replay_prefix = Some(app.prefix().to_owned());
        check.steering = app.steering().clone();
        check
    }

    /// Sweeps exactly the range this check is given, whatever `COMMITGAP_CASES`,
    /// `COMMITGAP_FIRST_SEED` and `COMMITGAP_SEED` say: for a test that expects a failure within
    /// its range (a planted bug's), which `COMMITGAP_SEED=N cargo test`, meant for another test,
    /// would otherwise narrow to one seed that may pass.
    pub fn ignore_environment(mut self) -> Check {
        self.reads_environment = false;
        self
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
        if let Err(why) = self.registry.add_fault(kind) {
            self.refused.get_or_insert(why);
        }
        self
    }

    /// An invariant of the team's own (see [`crate::App::invariant`]).
    pub fn invariant(mut self, invariant: Arc<dyn Invariant>) -> Check {
        if let Err(why) = self.registry.add_invariant(invariant) {
            self.refused.get_or_insert(why);
        }
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
        self.registry.set_replay_prefix(prefix);
        self.replay_prefix = Some(prefix.trim().to_owned());
        self
    }

    /// The SQLite backend.
    pub fn backend(mut self, backend: Backend) -> Check {
        self.backend = backend;
        self
    }

    /// Stop handing out seeds once this many have failed (the seeds already running finish), as
    /// `sweep --max-failures` does; 0 sweeps every seed of the range however many fail. The
    /// default is [`DEFAULT_MAX_FAILURES`].
    pub fn max_failures(mut self, failures: u64) -> Check {
        self.max_failures = failures;
        self
    }

    /// How many failures of each invariant get a seed file, the first in seed order, as
    /// `sweep --shrink-max` does; the others are counted in the message and rerun by seed. At
    /// least 1 (0 is taken as 1). The default is [`DEFAULT_SHRINK_MAX`].
    pub fn shrink_max(mut self, files: u64) -> Check {
        self.shrink_max = files.max(1);
        self
    }

    /// After the sweep, explores `runs` more runs (see [`crate::explore`]) from the check's
    /// first seed, with the check's fault models, invariants and the team's situations and
    /// boundaries; a failure is written to the seed directory as the sweep's are, and fails
    /// the check with its replay command. 0, the default, explores nothing.
    pub fn explore(mut self, runs: u64) -> Check {
        self.explore_runs = runs;
        self
    }

    /// A situation of the team's own for [`Check::explore`] to reach, as
    /// [`crate::App::sometimes`] adds one to a program.
    pub fn sometimes(mut self, situation: crate::explore::Sometimes) -> Check {
        if let Err(why) = self.steering.add_sometimes(situation) {
            self.refused.get_or_insert(why);
        }
        self
    }

    /// A boundary of the team's own for [`Check::explore`] to come close to, as
    /// [`crate::App::boundary`] adds one to a program.
    pub fn boundary(mut self, boundary: crate::explore::BoundaryMeasure) -> Check {
        if let Err(why) = self.steering.add_boundary(boundary) {
            self.refused.get_or_insert(why);
        }
        self
    }

    /// Runs the check and panics with one paragraph per regression that still fails and per
    /// invariant the sweep saw fail, each with the command that reproduces it. Meant to be the
    /// body of a `#[test]`.
    pub fn run(self) {
        if let Err(message) = self.try_run() {
            panic!("{message}");
        }
    }

    /// Runs the check and returns what failed, if anything, as the message [`Check::run`]
    /// panics with.
    pub fn try_run(self) -> Result<CheckReport, String> {
        if let Some(why) = &self.refused {
            return Err(why.clone());
        }
        for notice in self.registry.notices() {
            eprintln!("note: {notice}");
        }
        let (first_seed, cases) = self.range_from_environment()?;
        let (regression_problems, regressions) = self.replay_regressions()?;
        let swept = self.sweep_range(first_seed, cases)?;
        let (explored, explore_problems) = self.explore_after(first_seed);
        if regression_problems.is_empty() && swept.problems.is_empty() && explore_problems.is_empty() {
            return Ok(CheckReport {
                regressions,
                seeds: swept.report.seeds_run,
                explored,
            });
        }
        let mut headline = format!("commitgap: {}:", self.system.name());
        if !regression_problems.is_empty() {
            headline.push_str(&format!(
                " {} of {regressions} seed files still fail;",
                regression_problems.len()
            ));
        }
        headline.push_str(&format!(
            " {} of {} seeds swept failed",
            swept.failing, swept.report.seeds_run
        ));
        if swept.report.stopped_by_max_failures {
            // The seeds running when the limit was reached finish, so more may have failed.
            headline.push_str(&format!(
                " (stopped after {} failing seeds, max_failures {}; {} of {} seeds run)",
                swept.failing, self.max_failures, swept.report.seeds_run, swept.report.seeds_planned
            ));
        }
        if !explore_problems.is_empty() {
            headline.push_str(&format!(
                "; {} of {explored} runs explored failed",
                explore_problems.len()
            ));
        }
        let mut lines = vec![headline];
        lines.extend(regression_problems);
        lines.extend(swept.problems);
        lines.extend(explore_problems);
        Err(lines.join("\n"))
    }

    /// Explores [`Check::explore`]'s runs after the sweep: how many ran, and one paragraph per
    /// invariant a run failed, with the command that replays it.
    fn explore_after(&self, seed: u64) -> (u64, Vec<String>) {
        if self.explore_runs == 0 {
            return (0, Vec::new());
        }
        let options = crate::explore::ExploreOptions {
            system: Arc::clone(&self.system),
            seed,
            runs: Some(self.explore_runs),
            time: None,
            jobs: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            backend: self.backend,
            every_fault: false,
            shape: self.shape.clone(),
            registry: Arc::new(self.registry.clone()),
            steering: self.steering.clone(),
            corpus_dir: None,
            seeds_dir: Some(self.seeds_dir.clone()),
            max_failures: Some(self.max_failures.max(1)),
            stop: crate::sweep::StopFlag::new(),
        };
        let report = crate::explore::explore(&options, &mut |_| {});
        let problems = report
            .failures
            .iter()
            .map(|failure| {
                let verdict = verdict_of(&failure.outcome).unwrap_or_default();
                let replay = match (&failure.file, &self.replay_prefix) {
                    (Some(path), Some(prefix)) => format!("replay: {prefix} replay {}", path.display()),
                    (Some(path), None) => format!("seed file: {}", path.display()),
                    (None, _) => format!("not written: {}", failure.not_written.clone().unwrap_or_default()),
                };
                format!(
                    "  explored run {} ({}) failed: {verdict}\n    {replay}",
                    failure.after_runs, failure.how
                )
            })
            .chain(
                report
                    .errors
                    .iter()
                    .map(|error| format!("  an explored run could not run: {error}")),
            )
            .collect();
        (report.runs, problems)
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
        let read = |name: &str| {
            if self.reads_environment {
                read(name)
            } else {
                Ok(None)
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
            let file = SeedFile::read_with(&path, &self.registry)?;
            if file.system != self.system.name() {
                continue;
            }
            replayed += 1;
            // An explored run is held by its schedule alone; any other runs from its seed.
            let schedule = file.schedule.clone().filter(|_| file.explored);
            let options = RunOptions {
                backend: file.config.backend,
                config: Some(file.config.clone()),
                schedule,
                registry: Arc::new(self.registry.clone()),
                ..RunOptions::default()
            };
            let outcome = run_seed(&self.system, file.seed, &options)?;
            if let Some(verdict) = verdict_of(&outcome) {
                // The check runs the file's seed as drawn (an explored file's recorded
                // schedule), not its shrunk run, so the command named is the one that runs the
                // same: its step numbers are the ones said here.
                let replay = match &self.replay_prefix {
                    Some(prefix) if file.explored => {
                        format!("replay: {prefix} replay {} --from schedule", path.display())
                    }
                    Some(prefix) => format!("replay: {prefix} replay {} --from seed", path.display()),
                    None => format!("rerun: {}", self.rerun_line(file.seed)),
                };
                problems.push(format!(
                    "  regression {} (seed {}) still fails, run from its seed as drawn: {verdict}\n    {replay}",
                    path.display(),
                    file.seed,
                ));
            }
        }
        Ok((problems, replayed))
    }

    /// Sweeps the range, keeps the failures as `sweep` does (written as found, at most
    /// `shrink_max` of each invariant, then shrunk and deduplicated), and describes them.
    fn sweep_range(&self, first_seed: u64, seeds: u64) -> Result<Swept, String> {
        let jobs = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let options = SweepOptions {
            system: Arc::clone(&self.system),
            first_seed,
            seeds,
            jobs,
            backend: self.backend,
            check_determinism: false,
            every_fault: false,
            shape: self.shape.clone(),
            registry: Arc::new(self.registry.clone()),
        };
        let limits = SweepLimits {
            max_failures: NonZeroU64::new(self.max_failures),
            ..SweepLimits::default()
        };
        let findings = Findings::new(
            &self.seeds_dir,
            KeepPolicy {
                shrink: true,
                shrink_max: self.shrink_max,
            },
            Arc::new(self.registry.clone()),
        );
        let report = sweep_with_limits(&options, &limits, &|_| {}, &|found| {
            if let Found::Failure(result) = found {
                findings.keep_as_found(&result.outcome);
            }
        });
        findings.settle();
        shrink_and_keep(
            &self.system,
            &report.failures,
            &findings,
            jobs,
            DEFAULT_SHRINK_RUNS,
            &limits.stop,
        );
        let failing = failing_seeds(&report, &findings.written());
        let unwritable = findings.unwritable();
        let mut problems: Vec<String> = group_failures(failing, true)
            .iter()
            .map(|group| self.describe(group, unwritable.get(&group.shortest.seed)))
            .collect();
        problems.extend(self.describe_errors(&report.errors));
        Ok(Swept {
            problems,
            failing: report.failures.len() + report.errors.len(),
            report,
        })
    }

    /// One invariant's failures: how many seeds, and the shortest with the command that
    /// replays it, in the step numbers that command prints.
    fn describe(&self, group: &FailureGroup, unwritable: Option<&String>) -> String {
        let shortest = &group.shortest;
        let count = group.seeds.len();
        let replays_file = self.replay_prefix.is_some() && shortest.file.is_some();
        let mut text = format!(
            "  {}: {count} failing seed{} ({}); shortest: seed {}, {}",
            group.label,
            if count == 1 { "" } else { "s" },
            seed_list(&group.seeds, SEEDS_NAMED),
            shortest.seed,
            shortest.where_it_fails(replays_file)
        );
        // The message of the run the command replays: the shrunk run's, when it replays the file.
        let run = if replays_file {
            &shortest.replayed
        } else {
            &shortest.drawn
        };
        if let Some(message) = &run.message {
            text.push_str(&format!(": {message}"));
        }
        match (&shortest.file, unwritable) {
            (Some(path), _) => text.push_str(&format!(
                "\n    seed file: {}\n    {}",
                path.display(),
                self.replay_line(path, shortest.seed)
            )),
            (None, Some(why)) => text.push_str(&format!(
                "\n    its seed file could not be written: {why}\n    rerun: {}",
                self.rerun_line(shortest.seed)
            )),
            (None, None) => text.push_str(&format!("\n    rerun: {}", self.rerun_line(shortest.seed))),
        }
        text
    }

    /// The seeds that could not run, the first few by name, each with the command that runs it
    /// again.
    fn describe_errors(&self, errors: &[(u64, String)]) -> Vec<String> {
        let mut lines: Vec<String> = errors
            .iter()
            .take(ERRORS_NAMED)
            .map(|(seed, error)| {
                format!(
                    "  seed {seed} could not run: {error}\n    rerun: {}",
                    self.rerun_line(*seed)
                )
            })
            .collect();
        if errors.len() > ERRORS_NAMED {
            lines.push(format!(
                "  {} more seeds could not run: {}",
                errors.len() - ERRORS_NAMED,
                seed_list(
                    &errors
                        .iter()
                        .skip(ERRORS_NAMED)
                        .map(|(seed, _)| *seed)
                        .collect::<Vec<_>>(),
                    SEEDS_NAMED
                )
            ));
        }
        lines
    }

    /// The line that says how to reproduce a seed file's failure: `replay:` with the command
    /// that replays the file, when the team named its program, else `rerun:` with this test on
    /// the file's seed (which runs the seed as drawn, not the file's shrunk run).
    fn replay_line(&self, path: &Path, seed: u64) -> String {
        match &self.replay_prefix {
            Some(prefix) => format!("replay: {prefix} replay {}", path.display()),
            None => format!("rerun: {}", self.rerun_line(seed)),
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

/// Each failure of a sweep as [`group_failures`] takes it: a seed that failed an invariant or did
/// not settle, with the seed file `written` for it, and a seed whose two runs differed.
fn failing_seeds(report: &SweepReport, written: &BTreeMap<u64, PathBuf>) -> Vec<FailingSeed> {
    report
        .failures
        .iter()
        .flat_map(|result| {
            let outcome = &result.outcome;
            let failed = (outcome.failure.is_some() || outcome.unsettled.is_some()).then(|| FailingSeed {
                label: label_of(outcome),
                seed: outcome.seed,
                drawn: FailingRun::of_outcome(outcome),
                file: written.get(&outcome.seed).cloned(),
            });
            let diverged = result.divergence.as_ref().map(|divergence| FailingSeed {
                label: NONDETERMINISM.to_owned(),
                seed: outcome.seed,
                drawn: FailingRun {
                    steps: outcome.steps,
                    step: None,
                    message: Some(format!(
                        "two runs of the seed differ from trace line {}",
                        divergence.line
                    )),
                    shrunk: false,
                },
                file: None,
            });
            failed.into_iter().chain(diverged)
        })
        .collect()
}

/// What a failing run failed: its invariant, or [`UNSETTLED`] for a run that did not settle.
fn label_of(outcome: &RunOutcome) -> String {
    outcome
        .failure
        .as_ref()
        .map_or_else(|| UNSETTLED.to_owned(), |failure| failure.invariant.clone())
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
