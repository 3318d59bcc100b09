//! The command-line program: `sweep`, `replay` and `list`.
//!
//! Exit codes: 0 when every invariant held, 1 when one failed (or two runs of a seed disagreed),
//! 2 for bad usage or bad input, with one line on standard error that says what is wrong and how
//! to fix it. Every failure printed carries the command that replays it. Results go to standard
//! output; progress and errors go to standard error.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::db::Backend;
use crate::faults;
use crate::invariants;
use crate::run::{RunOptions, RunOutcome, run_seed};
use crate::seed_file::{SeedFile, replay_command};
use crate::sweep::{SweepOptions, sweep};
use crate::system::System;
use crate::systems;
use crate::trace::format_time_ms;

/// Seeds a plain `sweep` runs: under a minute on a 2-core machine (330-400 seeds/s).
pub const DEFAULT_SEEDS: u64 = 15_000;

#[derive(Parser)]
#[command(
    name = "commitgap",
    version,
    about = "Deterministic simulation testing for webhook receivers and transactional-outbox relays on SQLite",
    long_about = "Runs a real webhook receiver and outbox relay on real SQLite under a seeded scheduler that \
                  interleaves deliveries, duplicates, crashes, lost acknowledgments, receipt purges and \
                  provider key expiry, and checks invariants after every step.\n\n\
                  Exit status: 0 every invariant held, 1 an invariant failed, 2 bad usage or input."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a range of seeds against a system and write every failing seed to a file.
    Sweep(SweepArgs),
    /// Re-run one seed, from its seed file or by number.
    Replay(ReplayArgs),
    /// List the systems, fault models and invariants.
    List,
}

#[derive(Args)]
struct SweepArgs {
    /// The system under test (see `list`).
    #[arg(long, default_value = "reference")]
    system: String,
    /// How many seeds to run.
    #[arg(long, default_value_t = DEFAULT_SEEDS, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// The first seed; the sweep runs S, S+1, ... S+N-1.
    #[arg(long, default_value_t = 0)]
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
    /// The SQLite backend: memdb (in memory) or wal-file (WAL on tmpfs).
    #[arg(long, default_value = "memdb")]
    backend: String,
}

#[derive(Args)]
struct ReplayArgs {
    /// A seed file written by `sweep`.
    file: Option<PathBuf>,
    /// Replay this seed number instead of a file.
    #[arg(long, conflicts_with = "file")]
    seed: Option<u64>,
    /// The system to run [default: the file's system, or `reference` with --seed]; naming another
    /// system replays a failing seed against a fix.
    #[arg(long)]
    system: Option<String>,
    /// Print the full trace, one line per step.
    #[arg(long)]
    trace: bool,
    /// The SQLite backend for --seed: memdb or wal-file (a file's own setting wins).
    #[arg(long, default_value = "memdb")]
    backend: String,
}

/// A failure to carry out a command, reported with exit code 2.
struct UsageError(String);

/// Set once standard output is closed (`sweep | head`): printing stops, work goes on, so that
/// every failing seed still gets its file.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Prints one line to standard output, unless the reader has gone away.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    if writeln!(std::io::stdout().lock(), "{line}").is_err() {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

macro_rules! say {
    ($($argument:tt)*) => { say(format_args!($($argument)*)) };
}

/// Runs the program and returns its exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return clap_error(&error),
    };
    let result = match cli.command {
        Command::Sweep(args) => run_sweep(&args),
        Command::Replay(args) => run_replay(&args),
        Command::List => {
            list();
            Ok(0)
        }
    };
    match result {
        Ok(code) => code,
        Err(UsageError(message)) => {
            eprintln!("error: {message}");
            2
        }
    }
}

/// Prints clap's verdict: help and version in full, a usage error as one line.
fn clap_error(error: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                2
            } else {
                0
            }
        }
        _ => {
            let rendered = error.render().to_string();
            let first = rendered
                .lines()
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ");
            eprintln!("error: {first}; run with --help for usage");
            2
        }
    }
}

fn find_system(name: &str) -> Result<Arc<dyn System>, UsageError> {
    systems::by_name(name).ok_or_else(|| {
        UsageError(format!(
            "unknown system {name:?}; choose one of {} (see `cargo run --release -- list`)",
            systems::names().join(", ")
        ))
    })
}

fn find_backend(name: &str) -> Result<Backend, UsageError> {
    Backend::from_name(name)
        .ok_or_else(|| UsageError(format!("unknown backend {name:?}; choose memdb or wal-file")))
}

fn run_sweep(args: &SweepArgs) -> Result<i32, UsageError> {
    let system = find_system(&args.system)?;
    let backend = find_backend(&args.backend)?;
    if args.first_seed.checked_add(args.seeds - 1).is_none() {
        return Err(UsageError(format!(
            "--first-seed {} plus --seeds {} runs past the largest seed; lower one of them",
            args.first_seed, args.seeds
        )));
    }
    check_writable(&args.seeds_dir)?;
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
    };
    let progress = progress_bar(args.seeds);
    let report = sweep(&options, &|done, failures| {
        progress.set_position(done);
        if failures > 0 {
            progress.set_message(format!("{failures} failing"));
        }
    });
    progress.finish_and_clear();

    let mut code = 0;
    for (seed, error) in &report.errors {
        eprintln!("error: seed {seed} could not run: {error}");
        code = 2;
    }
    for result in &report.failures {
        if code == 0 {
            code = 1;
        }
        let outcome = &result.outcome;
        if let Some(divergence) = &result.divergence {
            say!(
                "NONDETERMINISTIC seed {} ({}): the two runs differ from trace line {}",
                outcome.seed,
                outcome.system,
                divergence.line
            );
            say!("  first run:  {}", divergence.first);
            say!("  second run: {}", divergence.second);
            say!(
                "  reproduce:  cargo run --release -- sweep --system {} --seeds 1 --first-seed {} --check-determinism",
                outcome.system,
                outcome.seed
            );
        }
        if outcome.failure.is_some() {
            print_failure(outcome, &args.seeds_dir)?;
        }
    }
    say!(
        "sweep: {} seeds, {} failures, {} steps, {:.1} s wall, {:.1} seeds/s (system {}, seeds {}..{}, {} jobs)",
        report.seeds_run,
        report.failures.len(),
        report.steps,
        report.wall.as_secs_f64(),
        report.seeds_per_second(),
        system.name(),
        args.first_seed,
        args.first_seed + args.seeds,
        jobs
    );
    Ok(code)
}

/// Writes the seed file of a failing run and prints the failure with its replay command.
fn print_failure(outcome: &RunOutcome, seeds_dir: &Path) -> Result<(), UsageError> {
    let failure = outcome.failure.as_ref().expect("called for failures");
    let path = seeds_dir.join(format!("{}-{}.json", outcome.system, outcome.seed));
    let file = SeedFile::from_outcome(outcome, replay_command(&path));
    let written = file.write(seeds_dir).map_err(UsageError)?;
    let command = replay_command(&written);
    say!(
        "FAIL seed {} ({}): {} at step {} ({}): {}",
        outcome.seed,
        outcome.system,
        failure.invariant,
        failure.step,
        format_time_ms(failure.time_ms),
        failure.message
    );
    say!("  replay: {command}");
    Ok(())
}

fn check_writable(directory: &Path) -> Result<(), UsageError> {
    std::fs::create_dir_all(directory).map_err(|error| {
        UsageError(format!(
            "--seeds-dir {} cannot be created ({error}); choose a writable directory",
            directory.display()
        ))
    })?;
    let probe = directory.join(format!(".write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|error| {
        UsageError(format!(
            "--seeds-dir {} is not writable ({error}); choose a writable directory",
            directory.display()
        ))
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} seeds, {per_sec}, {eta} left {msg}")
            .expect("the template is valid"),
    );
    bar
}

fn run_replay(args: &ReplayArgs) -> Result<i32, UsageError> {
    let (seed, system_name, options, file) = match (&args.file, args.seed) {
        (Some(path), _) => {
            let file = SeedFile::read(path).map_err(UsageError)?;
            let system = args.system.clone().unwrap_or_else(|| file.system.clone());
            let options = RunOptions {
                backend: file.config.backend,
                keep_trace: args.trace,
                config: Some(file.config.clone()),
            };
            (file.seed, system, options, Some(file))
        }
        (None, Some(seed)) => {
            let system = args.system.clone().unwrap_or_else(|| "reference".to_owned());
            let options = RunOptions {
                backend: find_backend(&args.backend)?,
                keep_trace: args.trace,
                config: None,
            };
            (seed, system, options, None)
        }
        (None, None) => {
            return Err(UsageError(
                "replay needs a seed file or --seed S; for example `cargo run --release -- replay seeds/reference-7.json`".to_owned(),
            ));
        }
    };
    let system = find_system(&system_name)?;
    let outcome = run_seed(&system, seed, &options).map_err(UsageError)?;
    if let Some(lines) = &outcome.trace {
        for line in lines {
            say!("{line}");
        }
    }
    let verdict = match &outcome.failure {
        Some(failure) => format!(
            "FAILED {} at step {} ({}): {}",
            failure.invariant,
            failure.step,
            format_time_ms(failure.time_ms),
            failure.message
        ),
        None => "passed every invariant".to_owned(),
    };
    say!(
        "replay: seed {seed} on {}: {verdict} ({} steps, digest {})",
        system.name(),
        outcome.steps,
        outcome.digest
    );
    if let Some(file) = &file {
        if file.system == system.name() && file.trace_digest != outcome.digest {
            say!(
                "replay: the trace digest differs from the file's ({}): the code changed since the file was written",
                file.trace_digest
            );
        }
        if !file.expect.is_met_by(outcome.failure.as_ref()) {
            say!(
                "replay: the file expects this run to {}, and it did not",
                file.expect
            );
        }
    }
    if outcome.failure.is_none() {
        return Ok(0);
    }
    if args.file.is_none() {
        say!(
            "replay: to keep it, sweep it: cargo run --release -- sweep --system {} --seeds 1 --first-seed {seed}",
            system.name()
        );
    }
    Ok(1)
}

fn list() {
    for system in systems::all() {
        say!("system     {:<42} {}", system.name(), system.description());
    }
    for kind in faults::registry() {
        say!("fault      {:<42} {}", kind.name, kind.description);
    }
    for invariant in invariants::registry() {
        say!(
            "invariant  {:<42} {}: {}",
            invariant.name(),
            invariant.kind().name(),
            invariant.description()
        );
    }
}
