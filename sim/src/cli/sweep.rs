//! `sweep`: runs a range of seeds against a system, says each failure the moment it is found,
//! writes a seed file for it, shrinks what it wrote, and ends with the coverage, the failures
//! grouped by invariant, the reports asked for and the summary line scripts read last.
//!
//! The seeds themselves run in `crate::sweep`; this file turns the command line into that call
//! and its results into lines and files. It must not decide anything a run depends on.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;

use super::{
    ProgressDisplay, ShapeArgs, UsageError, find_backend, report_path_error, resolve_shape, same_file, say,
    system_or_first,
};
use crate::app::App;
use crate::files;
use crate::findings::{
    AfterShrinking, AsFound, FailingRun, FailingSeed, Findings, KeepPolicy, group_failures,
};
use crate::sweep::report::{self, FailedSeed, FirstFailureSummary, NONDETERMINISM, SeedError, SweepSummary};
use crate::sweep::seed_file::Kept;
use crate::sweep::seed_file::replay_command;
use crate::sweep::shrink::DEFAULT_SHRINK_RUNS;
use crate::sweep::{Found, Shard, StopFlag, SweepLimits, SweepOptions, sweep_with_limits};
use crate::system::System;
use crate::trace::format_time_ms;

/// Seeds a plain `sweep` runs: under a minute on a 2-core machine (170-200 seeds/s).
pub const DEFAULT_SEEDS: u64 = 9_000;

/// How wide each run's column is when two diverging traces are printed side by side.
const DIVERGENCE_COLUMN_WIDTH: usize = 70;

#[derive(Args)]
pub(super) struct SweepArgs {
    /// The system under test (see `list`) [default: the program's first system].
    #[arg(long)]
    system: Option<String>,
    /// How many seeds to run.
    #[arg(long, default_value_t = DEFAULT_SEEDS, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// The first seed; the sweep runs S, S+1, ... S+N-1.
    // Negative numbers are read as values, so `-1` is refused as a seed, not as an unknown flag.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    first_seed: u64,
    /// Parallel jobs [default: the number of cores].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    jobs: Option<u64>,
    /// Where failing seeds are written.
    #[arg(long, default_value = "seeds")]
    seeds_dir: PathBuf,
    /// Run every seed twice and fail if the two traces differ.
    #[arg(long)]
    check_determinism: bool,
    /// Turn every fault model on for every seed, instead of a random subset per seed.
    #[arg(long)]
    all_faults: bool,
    /// The SQLite backend: memdb (in memory) or wal-file (WAL on tmpfs).
    #[arg(long, default_value = "memdb")]
    backend: String,
    /// Run only the K-th of N disjoint shards of the range (seed S+i goes to shard i%N+1); the N
    /// shards together run exactly the unsharded sweep.
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// Stop handing out seeds after SECS seconds of wall time; seeds already running finish.
    /// --seeds stays the upper bound.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    time_budget: Option<u64>,
    /// Stop handing out seeds once N seeds have failed (seeds already running finish), then
    /// shrink and report what was found, so that a broken system is reported in seconds rather
    /// than after the whole range [default: no limit].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_failures: Option<u64>,
    /// Write a JUnit XML report to FILE: a test case per failing seed and one for the sweep.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Write a JSON summary of the sweep and its failures to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write every failure's seed file as found, without shrinking it first.
    #[arg(long)]
    no_shrink: bool,
    /// Shrink at most this many failures of each invariant (the first in seed order); further
    /// failures of that invariant get no seed file and replay by seed (--json lists each one's
    /// command).
    #[arg(long, default_value_t = DEFAULT_SHRINK_MAX, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    shrink_max: u64,
    /// The most candidate runs to spend shrinking each failure.
    #[arg(long, default_value_t = DEFAULT_SHRINK_RUNS as u64, value_name = "RUNS", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    shrink_runs: u64,
    #[command(flatten)]
    shape: ShapeArgs,
}

/// Failures of one invariant that a sweep shrinks by default (see
/// [`crate::findings::DEFAULT_SHRINK_MAX`]).
pub const DEFAULT_SHRINK_MAX: u64 = crate::findings::DEFAULT_SHRINK_MAX;

pub(super) fn run_sweep(app: &App, args: &SweepArgs) -> Result<i32, UsageError> {
    let system = system_or_first(app, args.system.as_deref())?;
    let shape = resolve_shape(app, &args.shape)?;
    let backend = find_backend(&args.backend)?;
    check_sweep_args(args)?;
    let removed = files::remove_stale_temporaries(&args.seeds_dir);
    if removed > 0 {
        eprintln!(
            "sweep: removed {removed} temporary file{} that killed writers left in {}",
            if removed == 1 { "" } else { "s" },
            args.seeds_dir.display()
        );
    }
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        |jobs| jobs as usize,
    );
    let options = SweepOptions {
        system: Arc::clone(&system),
        first_seed: args.first_seed,
        seeds: args.seeds,
        jobs,
        backend,
        check_determinism: args.check_determinism,
        every_fault: args.all_faults,
        shape: shape.clone(),
        registry: Arc::new(app.registry().clone()),
    };
    let limits = SweepLimits {
        shard: args.shard.unwrap_or(Shard::WHOLE),
        time_budget: args.time_budget.map(Duration::from_secs),
        max_failures: args.max_failures.and_then(std::num::NonZeroU64::new),
        keep_digests: false,
        stop: stop_on_signals(),
    };
    let findings = Findings::new(
        &args.seeds_dir,
        KeepPolicy {
            shrink: !args.no_shrink,
            shrink_max: args.shrink_max,
        },
        Arc::clone(&options.registry),
    );
    let announcer = Announcer {
        args,
        shape_flags: shape.as_flags(),
        prefix: app.prefix(),
        system: system.name(),
        findings: &findings,
        printing: Mutex::new(std::collections::BTreeMap::new()),
    };
    let progress = ProgressDisplay::new("sweep", limits.shard.seeds_of(args.seeds));
    let report = sweep_with_limits(&options, &limits, &|state| progress.update(state), &|found| {
        progress.suspend(|| announcer.announce(found))
    });
    progress.finish();
    for seed in findings.settle() {
        say!(
            "seed {seed}: its file as found was removed: {} earlier seeds failed the same invariant and keep theirs (raise --shrink-max to keep more)",
            args.shrink_max
        );
    }
    let shrinking = shrink_found(app, &system, &report, &findings, args, jobs, &limits.stop);
    let summary = summarize(args, &announcer, &report, jobs);
    let code = sweep_exit_code(&summary, &report);
    print_closing_lines(args, &summary, &report, &findings, jobs, shrinking);
    write_reports(args, &summary, code);
    Ok(code)
}

/// Checks what a sweep's arguments promise before any seed runs, so that a long run does not end
/// in a report it cannot write.
fn check_sweep_args(args: &SweepArgs) -> Result<(), UsageError> {
    if args.first_seed.checked_add(args.seeds - 1).is_none() {
        return Err(UsageError(format!(
            "--first-seed {} plus --seeds {} runs past the largest seed; lower one of them",
            args.first_seed, args.seeds
        )));
    }
    check_seed_directory(&args.seeds_dir)?;
    for (flag, path) in report_paths(args) {
        report::check_report_path(path).map_err(|why| report_path_error(flag, path, &why))?;
    }
    if let (Some(junit), Some(json)) = (&args.junit, &args.json)
        && same_file(junit, json)
    {
        return Err(UsageError(format!(
            "--junit and --json both name {}, and one report would replace the other; give each its own file",
            json.display()
        )));
    }
    Ok(())
}

/// Writes the `--junit` and `--json` reports. The sweep's verdict stands when one cannot be
/// written: that is said, not substituted.
fn write_reports(args: &SweepArgs, summary: &SweepSummary, code: i32) {
    for (flag, path) in report_paths(args) {
        let contents = if flag == "--junit" {
            report::junit_report(summary)
        } else {
            report::json_report(summary)
        };
        if let Err(why) = report::write_atomically(path, &contents) {
            eprintln!(
                "error: {flag} {} could not be written ({why}); the sweep's own result stands (exit {code})",
                path.display()
            );
        }
    }
}

/// Raises a stop flag on the first SIGINT or SIGTERM, so that a sweep stops handing out seeds,
/// lets the running ones finish and reports what it found; a second signal exits at once (every
/// failure found so far already has its seed file).
pub(super) fn stop_on_signals() -> StopFlag {
    let stop = StopFlag::new();
    #[cfg(unix)]
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registered in this order, the exit runs only when the flag was already raised, that
        // is, on the second signal.
        let _ = signal_hook::flag::register_conditional_shutdown(signal, 130, stop.shared());
        let _ = signal_hook::flag::register(signal, stop.shared());
    }
    stop
}

/// How many failures of one invariant a sweep prints the moment it finds them. A broken system
/// fails thousands of seeds the same way; past this many, its failures are counted, and the
/// summary names the shortest one with its replay command (the `--json` report lists each).
const FAIL_LINES_PER_INVARIANT: u64 = 10;

/// Says what a sweep finds the moment it finds it, and keeps it: the FAIL line with the command
/// that replays the seed, then where its seed file was written (or why none was). Every failure
/// is kept; the first [`FAIL_LINES_PER_INVARIANT`] of each invariant are printed.
struct Announcer<'a> {
    args: &'a SweepArgs,
    /// The sweep's workload shape as flags, for commands that draw a seed's configuration again.
    shape_flags: String,
    /// The start of every printed command.
    prefix: &'a str,
    system: &'a str,
    findings: &'a Findings,
    /// Held while one finding is written and said, so that its lines stay together; it counts
    /// the findings of each invariant (or verdict) printed so far.
    printing: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl Announcer<'_> {
    /// The command that replays a seed of this sweep by number: it needs no file.
    fn replay_by_seed(&self, seed: u64) -> String {
        format!(
            "{} replay --seed {seed} --system {} --backend {}{}{}",
            self.prefix,
            self.system,
            self.args.backend,
            if self.args.all_faults { " --all-faults" } else { "" },
            self.shape_flags
        )
    }

    /// The command that runs a seed twice and compares the traces.
    fn check_determinism_of(&self, seed: u64) -> String {
        format!(
            "{} sweep --system {} --seeds 1 --first-seed {seed} --check-determinism --backend {}{}{}",
            self.prefix,
            self.system,
            self.args.backend,
            if self.args.all_faults { " --all-faults" } else { "" },
            self.shape_flags
        )
    }

    /// Counts one more finding of `label` and says whether to print it. The finding just past
    /// the bound prints the line that says the rest are counted.
    fn print_one_more(printed: &mut std::collections::BTreeMap<String, u64>, label: &str) -> bool {
        let count = printed.entry(label.to_owned()).or_default();
        *count += 1;
        if *count == FAIL_LINES_PER_INVARIANT + 1 {
            say!(
                "further failures of {label} are counted, not printed; the summary names the shortest with its replay command, and --json lists each"
            );
        }
        *count <= FAIL_LINES_PER_INVARIANT
    }

    fn announce(&self, found: Found<'_>) {
        let mut printed = self.printing.lock().expect("no thread panics while printing");
        match found {
            Found::Error { seed, message } => eprintln!(
                "error: seed {seed} could not run: {message}; reproduce: {}",
                self.replay_by_seed(seed)
            ),
            Found::Failure(result) => {
                if let Some(divergence) = &result.divergence
                    && Self::print_one_more(&mut printed, NONDETERMINISM)
                {
                    say!(
                        "NONDETERMINISTIC seed {} ({}): the two runs differ from trace line {}",
                        result.outcome.seed,
                        self.system,
                        divergence.line
                    );
                    for row in divergence.side_by_side(DIVERGENCE_COLUMN_WIDTH) {
                        say!("  {row}");
                    }
                    say!("  reproduce:  {}", self.check_determinism_of(result.outcome.seed));
                }
                self.announce_failure(&result.outcome, &mut printed);
            }
        }
    }

    fn announce_failure(
        &self,
        outcome: &crate::run::RunOutcome,
        printed: &mut std::collections::BTreeMap<String, u64>,
    ) {
        let seed = outcome.seed;
        let label = match (&outcome.failure, &outcome.unsettled) {
            (Some(failure), _) => failure.invariant.as_str(),
            (None, Some(_)) => report::UNSETTLED,
            (None, None) => return,
        };
        if !Self::print_one_more(printed, label) {
            // Not printed, but kept all the same: its seed file is written as found.
            self.findings.keep_as_found(outcome);
            return;
        }
        if let Some(failure) = &outcome.failure {
            say!(
                "FAIL seed {seed} ({}): {} at step {} ({}): {}",
                self.system,
                failure.invariant,
                failure.step,
                format_time_ms(failure.time_ms),
                failure.message
            );
        } else if let Some(unsettled) = &outcome.unsettled {
            say!("UNSETTLED seed {seed} ({}): {unsettled}", self.system);
        } else {
            return;
        }
        say!("  replay: {}", self.replay_by_seed(seed));
        match self.findings.keep_as_found(outcome) {
            AsFound::Written(path) => say!("  seed file: {} (as found)", path.display()),
            AsFound::PastShrinkMax => say!(
                "  no seed file: {} earlier failures of this kind have one (raise --shrink-max to keep more)",
                self.args.shrink_max
            ),
            AsFound::Unwritable(why) => say!("  no seed file: {why}"),
            AsFound::NoFailure => {}
        }
    }
}

/// Shrinks the failures written as found, unless `--no-shrink` or the sweep was interrupted,
/// and says what became of each one. Returns how long the shrinking took, when it ran: the
/// sweep's own wall time ends before it.
fn shrink_found(
    app: &App,
    system: &Arc<dyn System>,
    report: &crate::sweep::SweepReport,
    findings: &Findings,
    args: &SweepArgs,
    jobs: usize,
    stop: &StopFlag,
) -> Option<Duration> {
    let to_shrink = report
        .failures
        .iter()
        .filter(|result| {
            result.outcome.failure.is_some() && findings.written().contains_key(&result.outcome.seed)
        })
        .count();
    if args.no_shrink || to_shrink == 0 {
        return None;
    }
    if stop.is_raised() {
        say!(
            "not shrunk: the sweep was interrupted; the {to_shrink} seed files hold the runs as found (shrink each later with `{} shrink FILE`)",
            app.prefix()
        );
        return None;
    }
    let started = std::time::Instant::now();
    eprintln!(
        "sweep: shrinking {to_shrink} failing seed{} (at most {} runs each; --no-shrink skips this, Ctrl-C stops it and keeps the files as found)",
        if to_shrink == 1 { "" } else { "s" },
        args.shrink_runs
    );
    let runs_max = usize::try_from(args.shrink_runs).unwrap_or(usize::MAX);
    let after = crate::findings::shrink_and_keep(system, &report.failures, findings, jobs, runs_max, stop);
    for (seed, result) in &after {
        match result {
            AfterShrinking::Kept { summary, kept } => {
                let replaced = match kept {
                    Kept::Replaced { removed, .. } => {
                        format!(
                            " (replaces {}, a longer run of the same failure)",
                            removed.display()
                        )
                    }
                    _ => String::new(),
                };
                say!(
                    "shrunk seed {seed}: {}{replaced}; replay: {}",
                    summary.trim_start_matches("shrink: "),
                    replay_command(app.prefix(), kept.path())
                );
            }
            AfterShrinking::Duplicate { summary, existing } => say!(
                "shrunk seed {seed}: {}; not kept: {} holds the same failure in as few steps; replay: {}",
                summary.trim_start_matches("shrink: "),
                existing.display(),
                replay_command(app.prefix(), existing)
            ),
            AfterShrinking::NotShrunk(why) => {
                say!("not shrunk seed {seed}: {why}; its file holds the run as found")
            }
            AfterShrinking::Unwritable(why) => {
                say!(
                    "shrunk seed {seed}, but the shrunk file could not be written ({why}); its file holds the run as found"
                )
            }
        }
    }
    Some(started.elapsed())
}

/// Every failed seed of the sweep, in seed order: a divergence between two runs of one seed
/// first, then its invariant failure or the bound it did not settle within.
fn failed_seeds(announcer: &Announcer<'_>, report: &crate::sweep::SweepReport) -> Vec<FailedSeed> {
    let written = announcer.findings.written();
    let mut failed_seeds = Vec::new();
    for result in &report.failures {
        let outcome = &result.outcome;
        let seed = outcome.seed;
        if let Some(divergence) = &result.divergence {
            failed_seeds.push(FailedSeed {
                seed,
                invariant: NONDETERMINISM.to_owned(),
                kind: "determinism".to_owned(),
                step: None,
                virtual_time_ms: None,
                message: format!(
                    "the two runs differ from trace line {}\n{}",
                    divergence.line,
                    divergence.side_by_side(DIVERGENCE_COLUMN_WIDTH).join("\n")
                ),
                seed_file: None,
                replay: announcer.check_determinism_of(seed),
            });
        }
        let seed_file = written.get(&seed).cloned();
        // A failure whose file another one's made redundant still replays exactly by its seed.
        let replay = match &seed_file {
            Some(path) => replay_command(announcer.prefix, path),
            None => announcer.replay_by_seed(seed),
        };
        let seed_file = seed_file.map(|path| path.display().to_string());
        if let Some(failure) = &outcome.failure {
            failed_seeds.push(FailedSeed {
                seed,
                invariant: failure.invariant.clone(),
                kind: failure.kind.clone(),
                step: Some(failure.step),
                virtual_time_ms: Some(failure.time_ms),
                message: failure.message.clone(),
                seed_file,
                replay,
            });
        } else if let Some(unsettled) = &outcome.unsettled {
            failed_seeds.push(FailedSeed {
                seed,
                invariant: report::UNSETTLED.to_owned(),
                kind: "bound".to_owned(),
                step: Some(unsettled.step),
                virtual_time_ms: Some(unsettled.time_ms),
                message: unsettled.to_string(),
                seed_file,
                replay,
            });
        }
    }
    failed_seeds
}

/// The sweep's findings as the reports carry them, each with its final seed file and the one
/// command that replays it.
fn summarize(
    args: &SweepArgs,
    announcer: &Announcer<'_>,
    report: &crate::sweep::SweepReport,
    jobs: usize,
) -> SweepSummary {
    let failed_seeds = failed_seeds(announcer, report);
    let seed_errors = report
        .errors
        .iter()
        .map(|(seed, error)| SeedError {
            seed: *seed,
            message: error.clone(),
            replay: announcer.replay_by_seed(*seed),
        })
        .collect();
    SweepSummary {
        system: announcer.system.to_owned(),
        first_seed: args.first_seed,
        seeds: args.seeds,
        shard: args.shard,
        jobs,
        backend: args.backend.clone(),
        check_determinism: args.check_determinism,
        time_budget_s: args.time_budget,
        seeds_planned: report.seeds_planned,
        seeds_run: report.seeds_run,
        steps: report.steps,
        wall_ms: millis(report.wall),
        failures: failed_seeds,
        errors: seed_errors,
        first_failure: report.first_failure.map(|first| FirstFailureSummary {
            seed: first.seed,
            seeds_until: first.seeds_until,
            wall_ms: millis(first.wall),
        }),
        coverage: report.coverage.clone(),
        interrupted: report.interrupted,
        stopped_by_max_failures: report.stopped_by_max_failures,
    }
}

/// 2 when a seed could not run, else 1 when a seed failed, else 130 when a signal stopped the
/// sweep, else 0.
fn sweep_exit_code(summary: &SweepSummary, report: &crate::sweep::SweepReport) -> i32 {
    if !summary.errors.is_empty() {
        2
    } else if !summary.failures.is_empty() {
        1
    } else if report.interrupted {
        130
    } else {
        0
    }
}

/// The lines after the findings: coverage, the corpus, seed files that could not be written, one
/// line per invariant that failed, the first failure, and the summary line that scripts read
/// last.
fn print_closing_lines(
    args: &SweepArgs,
    summary: &SweepSummary,
    report: &crate::sweep::SweepReport,
    findings: &Findings,
    jobs: usize,
    shrinking: Option<Duration>,
) {
    for line in summary.coverage.lines() {
        say!("{line}");
    }
    let findings_with_runs = summary
        .failures
        .iter()
        .filter(|failure| failure.step.is_some())
        .count();
    if findings_with_runs > 0 {
        let with_file = summary
            .failures
            .iter()
            .filter(|failure| failure.seed_file.is_some())
            .count();
        let rest = if with_file == findings_with_runs {
            ""
        } else if args.no_shrink {
            "; the rest repeat a kept failure or could not be written"
        } else {
            "; the rest repeat a kept failure, were past --shrink-max or could not be written"
        };
        say!(
            "corpus: {with_file} of {findings_with_runs} failures hold a seed file in {}{rest}",
            args.seeds_dir.display(),
        );
    }
    let unwritable = findings.unwritable();
    if let Some(why) = unwritable.values().next() {
        say!(
            "corpus: {} seed file{} could not be written ({why}); each failure printed above still has its replay --seed command, and --json lists every one",
            unwritable.len(),
            if unwritable.len() == 1 { "" } else { "s" },
        );
    }
    print_failure_groups(args, summary, report);
    if let Some(first) = &summary.first_failure {
        say!("{}", report::first_failure_line(first));
    }
    let scope = sweep_scope(args, summary, report, jobs);
    let unsettled = summary
        .failures
        .iter()
        .filter(|failure| failure.invariant == report::UNSETTLED)
        .count();
    say!(
        "sweep: {} seed{}, {} failure{}{}, {} steps, {:.1} s wall{}, {:.1} seeds/s ({scope})",
        report.seeds_run,
        if report.seeds_run == 1 { "" } else { "s" },
        report.failures.len() - unsettled,
        if report.failures.len() - unsettled == 1 {
            ""
        } else {
            "s"
        },
        if unsettled > 0 {
            format!(", {unsettled} unsettled")
        } else {
            String::new()
        },
        report.steps,
        report.wall.as_secs_f64(),
        shrinking.map_or_else(String::new, |shrinking| format!(
            " and {:.1} s shrinking after it",
            shrinking.as_secs_f64()
        )),
        report.seeds_per_second(),
    );
}

/// What the summary line says in parentheses: which seeds of which system, how many jobs, and
/// what stopped the sweep before its last seed, if anything did.
fn sweep_scope(
    args: &SweepArgs,
    summary: &SweepSummary,
    report: &crate::sweep::SweepReport,
    jobs: usize,
) -> String {
    let mut scope = format!("system {}, seeds {}", summary.system, summary.range());
    if let Some(shard) = args.shard {
        scope.push_str(&format!(", shard {shard}"));
    }
    scope.push_str(&format!(", {jobs} jobs"));
    if let (Some(budget_s), true) = (args.time_budget, report.stopped_by_budget) {
        scope.push_str(&format!(
            ", stopped by the {budget_s} s time budget after {} of {} seeds",
            report.seeds_run, report.seeds_planned
        ));
    }
    if let (Some(most), true) = (args.max_failures, report.stopped_by_max_failures) {
        // The seeds that were running when the limit was reached finish, so more than N may
        // have failed; the count is what failed.
        let failing = report.failures.len() + report.errors.len();
        scope.push_str(&format!(
            ", stopped after {failing} failing seed{} (--max-failures {most}), {} of {} seeds run",
            if failing == 1 { "" } else { "s" },
            report.seeds_run,
            report.seeds_planned
        ));
    }
    if report.interrupted {
        scope.push_str(&format!(
            ", interrupted after {} of {} seeds",
            report.seeds_run, report.seeds_planned
        ));
    }
    scope
}

/// One line per invariant (or verdict) that failed: how many seeds failed it, and the shortest
/// of them with the command that replays it, in the step numbers that replay prints. A broken
/// system's thousands of failures read as one line each way it breaks.
fn print_failure_groups(args: &SweepArgs, summary: &SweepSummary, report: &crate::sweep::SweepReport) {
    let steps: std::collections::BTreeMap<u64, &crate::run::RunOutcome> = report
        .failures
        .iter()
        .map(|result| (result.outcome.seed, &result.outcome))
        .collect();
    let mut replays = std::collections::BTreeMap::new();
    let failing = summary
        .failures
        .iter()
        .filter_map(|failed| {
            let outcome = steps.get(&failed.seed)?;
            replays.insert((failed.invariant.clone(), failed.seed), failed.replay.clone());
            let mut drawn = FailingRun::of_outcome(outcome);
            if failed.invariant == NONDETERMINISM {
                // Two runs that differ fail at no step, whatever else the seed failed.
                drawn.step = None;
                drawn.message = None;
            }
            Some(FailingSeed {
                label: failed.invariant.clone(),
                seed: failed.seed,
                drawn,
                file: failed.seed_file.as_ref().map(PathBuf::from),
            })
        })
        .collect();
    // With shrinking on, at most --shrink-max files of each invariant exist to be read; with it
    // off, every file holds its run as found, and only the shortest is read back.
    for group in group_failures(failing, !args.no_shrink) {
        let shortest = &group.shortest;
        let replay = replays
            .get(&(group.label.clone(), shortest.seed))
            .map_or("", String::as_str);
        say!(
            "failures: {} in {} seed{}; shortest: seed {}, {}; replay: {replay}",
            group.label,
            group.seeds.len(),
            if group.seeds.len() == 1 { "" } else { "s" },
            shortest.seed,
            shortest.where_it_fails(true),
        );
    }
}

/// The report files asked for, with the flag that asked for each.
fn report_paths(args: &SweepArgs) -> Vec<(&'static str, &Path)> {
    let junit = args.junit.as_deref().map(|path| ("--junit", path));
    let json = args.json.as_deref().map(|path| ("--json", path));
    junit.into_iter().chain(json).collect()
}

/// Whole milliseconds, for reports.
fn millis(wall: Duration) -> u64 {
    u64::try_from(wall.as_millis()).unwrap_or(u64::MAX)
}

/// Refuses a seed directory a sweep must not fill or clean, and one it cannot write to.
pub(super) fn check_seed_directory(directory: &Path) -> Result<(), UsageError> {
    files::check_seed_directory(directory).map_err(|why| UsageError(format!("--seeds-dir {why}")))?;
    std::fs::create_dir_all(directory).map_err(|error| {
        UsageError(format!(
            "--seeds-dir {} cannot be created ({error}); choose a writable directory",
            directory.display()
        ))
    })?;
    files::check_writable_file(&directory.join(".write-probe")).map_err(|error| {
        UsageError(format!(
            "--seeds-dir {} is not writable ({error}); choose a writable directory",
            directory.display()
        ))
    })
}
