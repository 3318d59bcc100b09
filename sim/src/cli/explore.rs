//! `explore`: a search over runs that keeps the ones that reached something new and builds on
//! them (see `crate::explore`). It says each failure the moment it is found, with the command
//! that replays it, shrinks what it wrote, and ends with what the search reached that its
//! sampled runs did not and the summary line scripts read last.
//!
//! The search itself runs in `crate::explore`; this file turns the command line into that call
//! and its results into lines and files. It must not decide anything a run depends on.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::{PROGRESS_INTERVAL, ShapeArgs, UsageError, find_backend, resolve_shape, say, system_or_first};
use crate::app::App;
use crate::explore::{ExploreEvent, ExploreOptions, ExploreReport, ExploredFailure, explore};
use crate::sweep::seed_file::{SeedFile, ShrunkRun, replay_command};
use crate::sweep::shrink::DEFAULT_SHRINK_RUNS;

/// Runs an `explore` makes when neither `--runs` nor `--time` says how many.
pub const DEFAULT_RUNS: u64 = 1_000;

#[derive(Args)]
pub(super) struct ExploreArgs {
    /// The system under test (see `list`) [default: the program's first system].
    #[arg(long)]
    system: Option<String>,
    /// The explorer's own seed: which seeds it samples and which runs it makes from them.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    seed: u64,
    /// The most runs to make [default: 1000 when --time is not given, else no limit].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    runs: Option<u64>,
    /// Stop starting runs after SECONDS of wall time; runs already going finish.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    time: Option<u64>,
    /// A directory of corpus runs: read at the start, grown as the search keeps runs, so the
    /// next search (a nightly CI job's, with this directory cached) starts where this one ended.
    #[arg(long, value_name = "DIR")]
    corpus: Option<PathBuf>,
    /// Where failing runs are written.
    #[arg(long, default_value = "seeds")]
    seeds_dir: PathBuf,
    /// Stop once this many runs have failed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_failures: Option<u64>,
    /// Parallel jobs [default: the number of cores].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    jobs: Option<u64>,
    /// Turn every fault model on in sampled runs, instead of a random subset per run.
    #[arg(long)]
    all_faults: bool,
    /// The SQLite backend: memdb (in memory) or wal-file (WAL on tmpfs).
    #[arg(long, default_value = "memdb")]
    backend: String,
    /// Write each failure's seed file as found, without shrinking it.
    #[arg(long)]
    no_shrink: bool,
    /// The most candidate runs to spend shrinking each failure.
    #[arg(long, default_value_t = DEFAULT_SHRINK_RUNS as u64, value_name = "RUNS", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    shrink_runs: u64,
    /// The most wall time to spend shrinking each failure; shrinking ends at whichever of this
    /// and --shrink-runs comes first [default: no time bound].
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    shrink_time: Option<u64>,
    #[command(flatten)]
    shape: ShapeArgs,
}

pub(super) fn run_explore(app: &App, args: &ExploreArgs) -> Result<i32, UsageError> {
    let system = system_or_first(app, args.system.as_deref())?;
    let shape = resolve_shape(app, &args.shape)?;
    let backend = find_backend(&args.backend)?;
    super::sweep::check_seed_directory(&args.seeds_dir)?;
    if let Some(corpus) = &args.corpus {
        check_corpus_directory(corpus, &args.seeds_dir)?;
    }
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        |jobs| jobs as usize,
    );
    let runs = match (args.runs, args.time) {
        (None, None) => Some(DEFAULT_RUNS),
        (runs, _) => runs,
    };
    let options = ExploreOptions {
        system: Arc::clone(&system),
        seed: args.seed,
        runs,
        time: args.time.map(Duration::from_secs),
        jobs,
        backend,
        every_fault: args.all_faults,
        shape,
        registry: Arc::new(app.registry().clone()),
        steering: app.steering().clone(),
        corpus_dir: args.corpus.clone(),
        seeds_dir: Some(args.seeds_dir.clone()),
        max_failures: args.max_failures,
        stop: super::sweep::stop_on_signals(),
    };
    let progress = Progress::new(runs);
    let prefix = app.prefix().to_owned();
    let report = explore(&options, &mut |event| match event {
        ExploreEvent::Progress {
            runs,
            corpus,
            failures,
        } => progress.update(runs, corpus, failures),
        ExploreEvent::Failed(failure) => progress.suspend(|| announce(&prefix, failure)),
    });
    progress.finish();
    if !args.no_shrink {
        let time = args.shrink_time.map(Duration::from_secs);
        shrink_failures(app, &options, &report, args.shrink_runs as usize, time);
    }
    print_summary(&report);
    for error in &report.errors {
        say!("explore: error: {error}");
    }
    say!("{}", report.summary());
    Ok(if report.failing_runs > 0 || !report.errors.is_empty() {
        1
    } else {
        0
    })
}

/// The corpus directory must be a directory that can be written, and not the seed directory:
/// corpus runs pass, and a seed directory's files are regressions that must fail.
fn check_corpus_directory(corpus: &std::path::Path, seeds_dir: &std::path::Path) -> Result<(), UsageError> {
    if super::same_file(corpus, seeds_dir) {
        return Err(UsageError(format!(
            "--corpus {} is the seed directory; give the corpus a directory of its own (corpus runs pass, seed files fail)",
            corpus.display()
        )));
    }
    if corpus.exists() && !corpus.is_dir() {
        return Err(UsageError(format!(
            "--corpus {} is not a directory; give a directory (it is created if missing)",
            corpus.display()
        )));
    }
    std::fs::create_dir_all(corpus).map_err(|error| {
        UsageError(format!(
            "--corpus {} cannot be created ({error}); choose a writable directory",
            corpus.display()
        ))
    })?;
    crate::files::check_writable_file(&corpus.join(".write-probe")).map_err(|error| {
        UsageError(format!(
            "--corpus {} is not writable ({error}); choose a writable directory",
            corpus.display()
        ))
    })
}

fn announce(prefix: &str, failure: &ExploredFailure) {
    let outcome = &failure.outcome;
    let verdict = outcome.failure.as_ref().map_or_else(
        || "did not settle within its bounds".to_owned(),
        |failure| {
            format!(
                "{}: {}",
                failure.invariant,
                crate::files::clip(&failure.message, 300)
            )
        },
    );
    say!(
        "FAIL after {} runs ({}, {} steps): {verdict}",
        failure.after_runs,
        failure.how,
        outcome.steps
    );
    match (&failure.file, &failure.not_written) {
        (Some(path), _) => say!("  replay: {}", replay_command(prefix, path)),
        (None, Some(why)) => say!("  not written: {why}"),
        (None, None) => {}
    }
}

/// Shrinks each failure written, and puts its shrunk run in its file beside the original.
fn shrink_failures(
    app: &App,
    options: &ExploreOptions,
    report: &ExploreReport,
    runs_max: usize,
    time: Option<Duration>,
) {
    for failure in &report.failures {
        let Some(path) = &failure.file else { continue };
        if failure.outcome.failure.is_none() {
            continue;
        }
        let Ok(mut file) = SeedFile::read_with(path, &options.registry) else {
            continue;
        };
        let Some(schedule) = file.schedule.clone() else {
            continue;
        };
        let started = Instant::now();
        let shrunk = crate::db::reusing_databases(|| {
            crate::sweep::shrink::shrink_within(
                &options.system,
                file.seed,
                &file.config,
                &schedule,
                runs_max,
                time,
                &options.stop,
                &options.registry,
            )
        });
        match shrunk {
            Ok(shrunk) => {
                file.shrunk = Some(ShrunkRun::from_shrunk(&shrunk));
                if let Err(why) = file.write_to(path) {
                    say!("explore: {} not updated: {why}", path.display());
                    continue;
                }
                say!(
                    "{} in {:.1} s ({}); replay: {}",
                    shrunk.summary(),
                    started.elapsed().as_secs_f64(),
                    shrunk.details(),
                    replay_command(app.prefix(), path)
                );
            }
            Err(why) => say!("explore: {} not shrunk: {why}", path.display()),
        }
    }
}

fn print_summary(report: &ExploreReport) {
    let share = |count: u64, of: u64| {
        (count * 100)
            .checked_div(of)
            .map_or_else(|| "-".to_owned(), |percent| format!("{percent}%"))
    };
    say!(
        "explore: {} sampled runs, {} made from the corpus ({} refused as beyond a limit), {} read back from the corpus",
        report.sampled_runs,
        report.mutant_runs,
        report.mutants_refused,
        report.loaded
    );
    for (situation, (sampled, mutants)) in &report.situations {
        say!(
            "explore: situation {situation}: {} of runs ({} of sampled, {} of those made from the corpus)",
            share(sampled + mutants, report.sampled_runs + report.mutant_runs),
            share(*sampled, report.sampled_runs),
            share(*mutants, report.mutant_runs)
        );
    }
    for (boundary, (sampled, closest)) in &report.boundaries {
        let sampled = sampled.map_or_else(|| "never near".to_owned(), |ms| format!("{ms} ms"));
        say!("explore: boundary {boundary}: closest {closest} ms (sampled runs: {sampled})");
    }
    if !report.mutant_only.is_empty() {
        let kinds: Vec<String> = report
            .mutant_only
            .iter()
            .map(|(kind, count)| format!("{count} {kind}"))
            .collect();
        say!(
            "explore: reached only by runs made from the corpus: {}{}",
            kinds.join(", "),
            if report.mutant_only_situations.is_empty() {
                String::new()
            } else {
                format!("; situations {}", report.mutant_only_situations.join(", "))
            }
        );
    }
    let ways: Vec<String> = report
        .by_mutation
        .iter()
        .map(|(how, (made, kept, failed))| format!("{how} {made} ({kept} kept, {failed} failed)"))
        .collect();
    say!(
        "explore: {} features; runs by how they were made: {}; {:.1} s",
        report.features,
        ways.join(", "),
        report.wall.as_secs_f64()
    );
}

/// The search's progress on standard error: a spinner on a terminal, else a line every
/// [`PROGRESS_INTERVAL`].
struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    next_line_at: std::cell::Cell<Duration>,
}

impl Progress {
    fn new(runs: Option<u64>) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(runs.unwrap_or(0));
            let template = if runs.is_some() {
                "{bar:40} {msg}"
            } else {
                "{spinner} {msg}"
            };
            bar.set_style(ProgressStyle::with_template(template).expect("the template is valid"));
            bar
        });
        Progress {
            bar,
            started: Instant::now(),
            next_line_at: std::cell::Cell::new(PROGRESS_INTERVAL),
        }
    }

    fn update(&self, runs: u64, corpus: usize, failures: u64) {
        let elapsed = self.started.elapsed();
        let line = format!(
            "{runs} runs, corpus {corpus}, {failures} failing, {:.0} s",
            elapsed.as_secs_f64()
        );
        match &self.bar {
            Some(bar) => {
                bar.set_position(runs);
                bar.set_message(line);
            }
            None => {
                if elapsed >= self.next_line_at.get() {
                    eprintln!("explore: {line}");
                    let mut next = self.next_line_at.get();
                    while next <= elapsed {
                        next += PROGRESS_INTERVAL;
                    }
                    self.next_line_at.set(next);
                }
            }
        }
    }

    fn suspend(&self, print: impl FnOnce()) {
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
