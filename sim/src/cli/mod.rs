//! The command-line program: `sweep`, `replay`, `shrink`, `list`, `mutants` and `bench`.
//!
//! Exit codes: 0 when every invariant held, 1 when one failed (or two runs of a seed disagreed),
//! 2 for bad usage or bad input, with one line on standard error that says what is wrong and how
//! to fix it. Every failure printed carries the command that replays it. Results go to standard
//! output; progress and errors go to standard error.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::app::App;
use crate::corpus::Kept;
use crate::coverage::Situation;
use crate::db::Backend;
use crate::faults;
use crate::files;
use crate::findings::{
    AfterShrinking, AsFound, FailingRun, FailingSeed, Findings, KeepPolicy, group_failures,
};
use crate::invariants;
use crate::report::{self, FailedSeed, FirstFailureSummary, NONDETERMINISM, SeedError, SweepSummary};
use crate::run::{RunOptions, run_seed};
use crate::seed_file::{Expectation, SeedFile, ShrunkRun, replay_command};
use crate::sender::SenderPreset;
use crate::shape::{CountRange, WorkloadShape};
use crate::shrink::DEFAULT_SHRINK_RUNS;
use crate::sweep::{Found, Progress, Shard, StopFlag, SweepLimits, SweepOptions, sweep_with_limits};
use crate::system::System;
use crate::trace::format_time_ms;

/// Seeds a plain `sweep` runs: under a minute on a 2-core machine (170-200 seeds/s).
pub const DEFAULT_SEEDS: u64 = 9_000;

/// How wide each run's column is when two diverging traces are printed side by side.
const DIVERGENCE_COLUMN_WIDTH: usize = 70;

/// How often a sweep prints a progress line when standard error is not a terminal (a CI log):
/// often enough to show it is alive, seldom enough to keep the log short.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

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
    /// Reduce a seed file's failing run to the fewest steps and faults that still fail it.
    Shrink(ShrinkArgs),
    /// List the systems, fault models and invariants, or the contract a system is judged by.
    List(ListArgs),
    /// Write a new crate that plugs its own receiver and relay into the simulation: a small
    /// system built from the reference's steps, its simulation program, a harness test and a
    /// README with the next three steps.
    New(NewArgs),
    /// Measure the simulator's power: how fast each planted bug is caught.
    Mutants(MutantsArgs),
    /// Measure the simulator's speed, peak memory and cost against SQLite alone.
    #[command(
        long_about = "Measure the simulator's speed, peak memory and cost against SQLite alone.\n\n\
        Runs a fixed range of seeds of the reference system as a sweep does, timed, then once more \
        with every statement recorded, and replays each seed's statements on a fresh database of \
        the same backend, with plain connections and nothing else. Prints simulated steps and seeds per second (each job's rate, \
        added up), the ratio sim/raw (the replay's time over the simulation's; 1.0 would be a \
        simulator that costs nothing beyond SQLite) and the process's peak resident memory. It also \
        prints the ratio with set-up left out on both sides, since the replay sets up a new database \
        for every seed while a sweep reuses its database. The last line reads: bench: <steps/s> steps/s, <seeds/s> seeds/s, sim/raw <ratio>, peak <MiB> MiB \
        (peak unknown MiB where /proc does not report it).\n\n\
        Exit status: 0 measured, 1 a seed failed an invariant or a replayed statement returned \
        something else than in the run, 2 bad usage or a seed that could not run."
    )]
    Bench(BenchArgs),
}

#[derive(Args)]
struct BenchArgs {
    /// The system to measure [default: the program's first system].
    #[arg(long)]
    system: Option<String>,
    /// How many seeds to measure.
    #[arg(long, default_value_t = crate::bench::DEFAULT_BENCH_SEEDS, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// The first seed; bench measures S, S+1, ... S+N-1.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Parallel jobs [default: the number of cores].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    jobs: Option<u64>,
    /// The SQLite backend, of the simulation and of the replay: memdb or wal-file.
    #[arg(long, default_value = "memdb")]
    backend: String,
}

#[derive(Args)]
struct MutantsArgs {
    /// The most seeds to spend on each planted bug (and to sweep the reference with).
    #[arg(long, default_value_t = DEFAULT_MUTANT_BUDGET, value_parser = clap::value_parser!(u64).range(1..))]
    budget: u64,
    /// Mutate the system's own SQL instead: learn its statements and schema, then sweep each
    /// rewrite of each (a WHERE conjunct dropped, ON CONFLICT or RETURNING dropped, BEGIN IMMEDIATE
    /// made deferred, the statement dropped, COMMIT made ROLLBACK, a key column dropped) until
    /// an invariant catches it or the budget is spent.
    #[arg(long)]
    sql: bool,
    /// With --sql: the system whose SQL to mutate [default: the program's first system].
    #[arg(long, requires = "sql")]
    system: Option<String>,
    /// Search each planted bug from K first seeds (S, S+1000000, ...) and print the mean and the
    /// worst seeds to first failure, instead of one search and the sweep of the systems under test.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..=1000))]
    starts: Option<u64>,
    /// The first seed of every search.
    // Negative numbers are read as values, so `-1` is refused as a seed, not as an unknown flag.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    first_seed: u64,
    /// Parallel jobs [default: the number of cores].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    jobs: Option<u64>,
    /// The SQLite backend: memdb or wal-file.
    #[arg(long, default_value = "memdb")]
    backend: String,
    #[command(flatten)]
    shape: ShapeArgs,
}

/// The seeds `mutants` spends on each planted bug by default: several times what the rarest one
/// needed when measured.
pub const DEFAULT_MUTANT_BUDGET: u64 = 500;

#[derive(Args)]
struct SweepArgs {
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

/// The workload's shape (see README, "Shaping the workload"): each flag narrows what a seed may
/// draw, and what no flag names is drawn from the seed as usual. Seed files record the
/// configuration drawn, so replaying a file needs none of these.
#[derive(Args)]
#[command(next_help_heading = "Workload")]
struct ShapeArgs {
    /// A JSON file of workload settings (the flags below override it).
    #[arg(long, value_name = "FILE")]
    shape: Option<PathBuf>,
    /// The sender's retry contract: stripe-like, svix, shopify-like or github (no automatic retry).
    #[arg(long, value_name = "PRESET")]
    sender: Option<String>,
    /// Tenants (one sender account each): N or MIN..MAX.
    #[arg(long, value_name = "RANGE")]
    tenants: Option<CountRange>,
    /// Orders awaiting payment per tenant: N or MIN..MAX.
    #[arg(long, value_name = "RANGE")]
    orders: Option<CountRange>,
    /// Receiver processes: N or MIN..MAX.
    #[arg(long, value_name = "RANGE")]
    receivers: Option<CountRange>,
    /// Relay worker processes: N or MIN..MAX.
    #[arg(long, value_name = "RANGE")]
    relay_workers: Option<CountRange>,
    /// Amount-update events per order, on top of its payment, refund or cancellation: N or MIN..MAX, at most 3.
    #[arg(long, value_name = "RANGE")]
    updates: Option<CountRange>,
    /// How long the provider keeps an idempotency key, in milliseconds.
    #[arg(long, value_name = "MS")]
    key_lifetime_ms: Option<i64>,
    /// How long a relay worker's lease lasts, in milliseconds (at least 60000).
    #[arg(long, value_name = "MS")]
    lease_ms: Option<i64>,
    /// How old a receipt must be before the purge job deletes it, in milliseconds.
    #[arg(long, value_name = "MS")]
    receipt_retention_ms: Option<i64>,
    /// Only these fault models may be drawn (comma-separated; see `list`).
    #[arg(long, value_name = "A,B")]
    faults: Option<String>,
    /// These fault models are never drawn (comma-separated).
    #[arg(long, value_name = "A,B")]
    without_faults: Option<String>,
    /// Only these invariants judge the runs (comma-separated; see `list`). Recorded in seed files, so a replay judges the same way.
    #[arg(long, value_name = "A,B")]
    invariants: Option<String>,
    /// These invariants never judge the runs (comma-separated).
    #[arg(long, value_name = "A,B")]
    without_invariants: Option<String>,
    /// Never put values at the receiver's limits (a 128-character order name, an amount of 10^12 cents, an event created at time 0, a body at the configured limit), for a receiver with stricter limits.
    #[arg(long)]
    no_edge_values: bool,
}

/// Failures of one invariant that a sweep shrinks by default (see
/// [`crate::findings::DEFAULT_SHRINK_MAX`]).
pub const DEFAULT_SHRINK_MAX: u64 = crate::findings::DEFAULT_SHRINK_MAX;

#[derive(Args)]
struct NewArgs {
    /// The directory to create (new or empty); its name names the package.
    directory: PathBuf,
    /// Depend on the commitgap checkout at CHECKOUT (its root) by path, instead of by version.
    #[arg(long, value_name = "CHECKOUT")]
    path_dependency: Option<PathBuf>,
}

#[derive(Args)]
struct ListArgs {
    /// Print the contract instead: for every invariant that judges the system, the rule it must
    /// keep, one line each, then its domain's business rules.
    #[arg(long)]
    contract: bool,
    /// The system whose contract to print [default: the program's first system].
    #[arg(long, value_name = "SYSTEM", requires = "contract")]
    system: Option<String>,
    /// Only these invariants judge (comma-separated), as in `sweep`.
    #[arg(long, value_name = "A,B", requires = "contract")]
    invariants: Option<String>,
    /// These invariants do not judge (comma-separated), as in `sweep`.
    #[arg(long, value_name = "A,B", requires = "contract")]
    without_invariants: Option<String>,
}

#[derive(Args)]
struct ShrinkArgs {
    /// A seed file written by `sweep`; the shrunk run is written back into it.
    file: PathBuf,
    /// The most candidate runs to try.
    #[arg(long, default_value_t = DEFAULT_SHRINK_RUNS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    runs: u64,
}

/// Which run of a seed file `replay` runs.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReplayFrom {
    /// The seed and its configuration, drawing every decision again.
    Seed,
    /// The schedule written down when the failure was found.
    Schedule,
    /// The shrunk schedule.
    Shrunk,
}

#[derive(Args)]
struct ReplayArgs {
    /// A seed file written by `sweep`.
    file: Option<PathBuf>,
    /// Replay this seed number instead of a file.
    #[arg(long, conflicts_with = "file", allow_negative_numbers = true)]
    seed: Option<u64>,
    /// The system to run [default: the file's system, or `reference` with --seed]; naming another
    /// system replays a failing seed against a fix.
    #[arg(long)]
    system: Option<String>,
    /// Print the full trace, one line per step.
    #[arg(long)]
    trace: bool,
    /// The SQLite backend: memdb or wal-file [default: memdb with --seed; with a file, the
    /// backend its run used, which this replaces].
    #[arg(long)]
    backend: Option<String>,
    /// With --seed: turn every fault model on, as `sweep --all-faults` did.
    #[arg(long)]
    all_faults: bool,
    /// Which run of the file to replay [default: shrunk if the file has one, else schedule if
    /// it has one, else seed].
    #[arg(long, value_enum)]
    from: Option<ReplayFrom>,
    /// Write the run as a self-contained HTML timeline to FILE: one lane per process, every
    /// delivery, crash, commit and provider call, and the failing step with its evidence.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// With --seed: the workload's shape the sweep ran with (a file records its own).
    #[command(flatten)]
    shape: ShapeArgs,
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

/// Tells glibc's allocator to keep memory it frees rather than hand it back to the system at once.
/// SQLite's page caches free and reallocate pages all the time; by default glibc then trims each
/// thread's heap with `madvise` and the next pages fault in again, five times per seed, and the
/// faults of parallel sweep threads queue on the process's one memory map: `--jobs 2` did 13%
/// more CPU work than `--jobs 1` for the same seeds. Peak memory is what it was (the heap only
/// stops shrinking below its high-water mark). Other C libraries are left alone.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const KEPT_BYTES: std::ffi::c_int = 256 * 1024 * 1024;
        // SAFETY: mallopt only changes a tuning parameter of glibc's allocator, which is safe at
        // any time; this runs first thing in the command, before any thread starts.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_BYTES);
        }
    }
}

/// Runs the `commitgap` program and returns its exit code.
pub fn main() -> i32 {
    App::commitgap().run()
}

impl App {
    /// Runs the command line and returns its exit code: 0 every invariant held, 1 one failed,
    /// 2 bad usage or input. Installs the program first (see [`App::install`]).
    pub fn run(self) -> i32 {
        if let Err(error) = self.install() {
            eprintln!("error: {error}");
            return 2;
        }
        run(&crate::app::current())
    }

    /// Runs the command line and exits the process with its code.
    pub fn main(self) -> ! {
        std::process::exit(self.run())
    }
}

/// Runs `app`'s command line.
fn run(app: &App) -> i32 {
    use clap::{CommandFactory, FromArgMatches};
    keep_freed_memory();
    let command = Cli::command()
        .name(app.name().to_owned())
        .bin_name(app.name().to_owned());
    let cli = match command
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches))
    {
        Ok(cli) => cli,
        Err(error) => return clap_error(&error),
    };
    let result = match cli.command {
        Command::Sweep(args) => run_sweep(app, &args),
        Command::Replay(args) => run_replay(app, &args),
        Command::Shrink(args) => run_shrink(&args),
        Command::List(args) => run_list(app, &args),
        Command::New(args) => run_new(&args),
        Command::Mutants(args) => run_mutants(app, &args),
        Command::Bench(args) => run_bench(app, &args),
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
    let app = crate::app::current();
    app.find(name).ok_or_else(|| {
        let names: Vec<String> = app
            .every_system()
            .map(|system| system.name().to_owned())
            .collect();
        let suggestion = closest_name(name, &names)
            .map_or_else(String::new, |closest| format!("did you mean {closest}? "));
        UsageError(format!(
            "unknown system {:?}; {suggestion}`{} list` names every system",
            files::clip(name, 80),
            app.prefix()
        ))
    })
}

/// The system a command names, or the program's first system when it names none.
fn system_or_first(app: &App, name: Option<&str>) -> Result<Arc<dyn System>, UsageError> {
    match name {
        Some(name) => find_system(name),
        None => Ok(Arc::clone(&app.systems()[0])),
    }
}

/// The workload shape a command runs: the program's own, narrowed by `--shape FILE`, then by
/// the flags.
fn resolve_shape(app: &App, args: &ShapeArgs) -> Result<WorkloadShape, UsageError> {
    let mut shape = app.shape().clone();
    if let Some(path) = &args.shape {
        let text = std::fs::read_to_string(path)
            .map_err(|error| UsageError(format!("cannot read --shape {}: {error}", path.display())))?;
        let from_file: WorkloadShape =
            serde_json::from_str(text.trim_start_matches('\u{feff}')).map_err(|error| {
                UsageError(format!(
                    "--shape {} is not a workload shape: {}; see README, \"Shaping the workload\"",
                    path.display(),
                    files::clip(&error.to_string(), 120)
                ))
            })?;
        shape = overlay(shape, from_file);
    }
    let from_flags = WorkloadShape {
        tenants: args.tenants,
        orders: args.orders,
        receivers: args.receivers,
        relay_workers: args.relay_workers,
        updates: args.updates,
        sender: args
            .sender
            .as_deref()
            .map(|name| {
                SenderPreset::from_name(name).ok_or_else(|| {
                    let names: Vec<&str> = SenderPreset::ALL.iter().map(|preset| preset.name()).collect();
                    UsageError(format!(
                        "unknown sender preset {:?}; choose one of {}",
                        files::clip(name, 80),
                        names.join(", ")
                    ))
                })
            })
            .transpose()?,
        key_lifetime_ms: args.key_lifetime_ms,
        lease_ms: args.lease_ms,
        receipt_retention_ms: args.receipt_retention_ms,
        faults: args.faults.as_deref().map(split_names),
        without_faults: names_or_none(args.without_faults.as_deref()),
        no_edge_values: args.no_edge_values,
        invariants: args.invariants.as_deref().map(split_names),
        without_invariants: names_or_none(args.without_invariants.as_deref()),
    };
    shape = overlay(shape, from_flags);
    check_invariant_names(app, &shape)?;
    let known: Vec<String> = faults::registry()
        .iter()
        .map(|kind| kind.name.to_owned())
        .collect();
    shape.check(&known).map_err(UsageError)?;
    Ok(shape)
}

/// Refuses invariant names that no system of `app` is judged by.
fn check_invariant_names(app: &App, shape: &WorkloadShape) -> Result<(), UsageError> {
    let mut known = std::collections::BTreeSet::new();
    for system in app.systems().iter().chain(app.planted_bugs()) {
        for invariant in invariants::registry(&*system.domain()) {
            known.insert(invariant.name().to_owned());
        }
    }
    let named = shape.invariants.iter().flatten().chain(&shape.without_invariants);
    for name in named {
        if !known.contains(name) {
            let flag = if shape.without_invariants.contains(name) {
                "--without-invariants"
            } else {
                "--invariants"
            };
            return Err(UsageError(format!(
                "{flag} names {:?}, which is no invariant of this program; `list` shows them",
                files::clip(name, 80)
            )));
        }
    }
    Ok(())
}

/// `base` with every setting `top` narrows replaced by `top`'s.
fn overlay(base: WorkloadShape, top: WorkloadShape) -> WorkloadShape {
    let mut without_faults = base.without_faults;
    without_faults.extend(top.without_faults);
    WorkloadShape {
        tenants: top.tenants.or(base.tenants),
        orders: top.orders.or(base.orders),
        receivers: top.receivers.or(base.receivers),
        relay_workers: top.relay_workers.or(base.relay_workers),
        updates: top.updates.or(base.updates),
        sender: top.sender.or(base.sender),
        key_lifetime_ms: top.key_lifetime_ms.or(base.key_lifetime_ms),
        lease_ms: top.lease_ms.or(base.lease_ms),
        receipt_retention_ms: top.receipt_retention_ms.or(base.receipt_retention_ms),
        faults: top.faults.or(base.faults),
        without_faults,
        invariants: top.invariants.or(base.invariants),
        without_invariants: [base.without_invariants, top.without_invariants].concat(),
        no_edge_values: top.no_edge_values || base.no_edge_values,
    }
}

/// The names a comma-separated flag gives, none when it is not given.
fn names_or_none(text: Option<&str>) -> Vec<String> {
    text.map(split_names).unwrap_or_default()
}

fn split_names(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The known name nearest to a mistyped one, if one is near: at most a third of its letters
/// changed, added or dropped.
fn closest_name<'a>(typed: &str, names: &'a [String]) -> Option<&'a str> {
    let distance = |left: &str, right: &str| -> usize {
        let right: Vec<char> = right.chars().collect();
        let mut previous: Vec<usize> = (0..=right.len()).collect();
        for (row, left_char) in left.chars().enumerate() {
            let mut current = vec![row + 1];
            for (column, right_char) in right.iter().enumerate() {
                let substitution = previous[column] + usize::from(left_char != *right_char);
                current.push(
                    substitution
                        .min(previous[column + 1] + 1)
                        .min(current[column] + 1),
                );
            }
            previous = current;
        }
        previous[right.len()]
    };
    let typed_length = typed.chars().count();
    if typed_length > 200 {
        return None;
    }
    names
        .iter()
        .map(|name| (distance(typed, name), name.as_str()))
        .filter(|(distance, _)| *distance * 3 <= typed_length.max(3))
        .min()
        .map(|(_, name)| name)
}

fn find_backend(name: &str) -> Result<Backend, UsageError> {
    Backend::from_name(name)
        .ok_or_else(|| UsageError(format!("unknown backend {name:?}; choose memdb or wal-file")))
}

fn run_sweep(app: &App, args: &SweepArgs) -> Result<i32, UsageError> {
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
    shrink_found(&system, &report, &findings, args, jobs, &limits.stop);
    let summary = summarize(args, &announcer, &report, jobs);
    let code = sweep_exit_code(&summary, &report);
    print_closing_lines(args, &summary, &report, &findings, jobs);
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
fn stop_on_signals() -> StopFlag {
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
/// and says what became of each one.
fn shrink_found(
    system: &Arc<dyn System>,
    report: &crate::sweep::SweepReport,
    findings: &Findings,
    args: &SweepArgs,
    jobs: usize,
    stop: &StopFlag,
) {
    let to_shrink = report
        .failures
        .iter()
        .filter(|result| {
            result.outcome.failure.is_some() && findings.written().contains_key(&result.outcome.seed)
        })
        .count();
    if args.no_shrink || to_shrink == 0 {
        return;
    }
    if stop.is_raised() {
        say!(
            "not shrunk: the sweep was interrupted; the {to_shrink} seed files hold the runs as found (shrink each later with `{} shrink FILE`)",
            crate::app::command_prefix()
        );
        return;
    }
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
                    replay_command(kept.path())
                );
            }
            AfterShrinking::Duplicate { summary, existing } => say!(
                "shrunk seed {seed}: {}; not kept: {} holds the same failure in as few steps; replay: {}",
                summary.trim_start_matches("shrink: "),
                existing.display(),
                replay_command(existing)
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
            Some(path) => replay_command(path),
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
        "sweep: {} seed{}, {} failure{}{}, {} steps, {:.1} s wall, {:.1} seeds/s ({scope})",
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

/// Whether two paths name the same file: the same path, or the same existing file reached two
/// ways (a link, `..`).
fn same_file(first: &Path, second: &Path) -> bool {
    // A file that does not exist yet is placed by its directory, which must exist by now.
    let resolved = |path: &Path| {
        std::fs::canonicalize(path).unwrap_or_else(|_| {
            let directory = std::fs::canonicalize(files::directory_of(path));
            match (directory, path.file_name()) {
                (Ok(directory), Some(name)) => directory.join(name),
                _ => path.to_path_buf(),
            }
        })
    };
    first == second || resolved(first) == resolved(second)
}

/// The report files asked for, with the flag that asked for each.
fn report_paths(args: &SweepArgs) -> Vec<(&'static str, &Path)> {
    let junit = args.junit.as_deref().map(|path| ("--junit", path));
    let json = args.json.as_deref().map(|path| ("--json", path));
    junit.into_iter().chain(json).collect()
}

fn report_path_error(flag: &str, path: &Path, why: &str) -> UsageError {
    UsageError(format!(
        "{flag} {} cannot be written: {why}; choose a file in a writable directory",
        path.display()
    ))
}

/// Whole milliseconds, for reports.
fn millis(wall: Duration) -> u64 {
    u64::try_from(wall.as_millis()).unwrap_or(u64::MAX)
}

/// Refuses a seed directory a sweep must not fill or clean, and one it cannot write to.
fn check_seed_directory(directory: &Path) -> Result<(), UsageError> {
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

/// A sweep's progress on standard error: a bar on a terminal; elsewhere (a CI log, a pipe) a
/// plain line every [`PROGRESS_INTERVAL`] and nothing else, because a bar's redraws would fill a
/// log with control characters.
enum ProgressDisplay {
    Bar(ProgressBar),
    Lines {
        /// The command that prints the lines, which starts each of them.
        command: &'static str,
        /// The sweep's wall time at which the next line is due.
        next_line_at: Mutex<Duration>,
    },
}

impl ProgressDisplay {
    fn new(command: &'static str, total: u64) -> ProgressDisplay {
        if !std::io::stderr().is_terminal() {
            return ProgressDisplay::Lines {
                command,
                next_line_at: Mutex::new(PROGRESS_INTERVAL),
            };
        }
        let bar = ProgressBar::new(total);
        bar.set_style(ProgressStyle::with_template("{bar:40} {msg}").expect("the template is valid"));
        ProgressDisplay::Bar(bar)
    }

    /// Called after every seed, from any sweep thread.
    fn update(&self, progress: &Progress) {
        match self {
            ProgressDisplay::Bar(bar) => {
                bar.set_position(progress.done);
                bar.set_message(progress.to_string());
            }
            ProgressDisplay::Lines {
                command,
                next_line_at,
            } => {
                // Printed while holding the lock, so that lines come out in order.
                let mut next_line_at = next_line_at.lock().expect("no thread panics while printing");
                if progress.wall >= *next_line_at {
                    eprintln!("{command}: {progress}");
                    while *next_line_at <= progress.wall {
                        *next_line_at += PROGRESS_INTERVAL;
                    }
                }
            }
        }
    }

    fn finish(&self) {
        if let ProgressDisplay::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }

    /// Runs `print` with the bar hidden, so that lines printed while a sweep runs do not tear it.
    fn suspend(&self, print: impl FnOnce()) {
        match self {
            ProgressDisplay::Bar(bar) => bar.suspend(print),
            ProgressDisplay::Lines { .. } => print(),
        }
    }
}

fn run_replay(app: &App, args: &ReplayArgs) -> Result<i32, UsageError> {
    if args.from.is_some() && args.file.is_none() {
        return Err(UsageError(
            "--from chooses which run of a seed file to replay; give the file, or drop --from when replaying --seed".to_owned(),
        ));
    }
    // Checked before the run, so that a long replay does not end in a page it cannot write.
    if let Some(path) = &args.html {
        report::check_report_path(path).map_err(|why| report_path_error("--html", path, &why))?;
        if let Some(file) = &args.file
            && same_file(path, file)
        {
            return Err(UsageError(format!(
                "--html {} is the seed file being replayed, which the page would replace; choose another path, such as timeline.html",
                path.display()
            )));
        }
    }
    let plan = match (&args.file, args.seed) {
        (Some(path), _) => ReplayPlan::from_file(args, path)?,
        (None, Some(seed)) => ReplayPlan {
            seed,
            system: system_or_first(app, args.system.as_deref())?.name().to_owned(),
            options: RunOptions {
                backend: find_backend(args.backend.as_deref().unwrap_or("memdb"))?,
                keep_trace: args.trace || args.html.is_some(),
                config: None,
                every_fault: args.all_faults,
                shape: resolve_shape(app, &args.shape)?,
                ..RunOptions::default()
            },
            file: None,
        },
        (None, None) => {
            return Err(UsageError(format!(
                "replay needs a seed file or --seed S; for example `{} replay seeds/NAME.json`",
                app.prefix()
            )));
        }
    };
    let system = find_system(&plan.system)?;
    let outcome = run_seed(&system, plan.seed, &plan.options).map_err(UsageError)?;
    if args.trace
        && let Some(lines) = &outcome.trace
    {
        for line in lines {
            say!("{line}");
        }
    }
    say_replay_verdict(&plan, system.name(), &outcome);
    if let Some(path) = &args.html {
        write_timeline(args, path, &plan, system.name(), &outcome)?;
    }
    for line in &outcome.schedule_report {
        say!("replay: schedule: {line}");
    }
    if !outcome.schedule_report.is_empty() {
        say!(
            "replay: {} schedule entries did not apply and were skipped; the run took the default there",
            outcome.schedule_report.len()
        );
    }
    if let Some(file) = &plan.file {
        say_against_file(file, system.name(), &outcome);
    }
    if outcome.failure.is_none() && outcome.unsettled.is_none() {
        return Ok(0);
    }
    if args.file.is_none() {
        say!(
            "replay: to keep it, sweep it: {} sweep --system {} --seeds 1 --first-seed {}{}",
            app.prefix(),
            system.name(),
            plan.seed,
            plan.options.shape.as_flags()
        );
    }
    Ok(1)
}

/// Writes a replayed run's HTML timeline to `path`.
fn write_timeline(
    args: &ReplayArgs,
    path: &Path,
    plan: &ReplayPlan,
    system: &str,
    outcome: &crate::run::RunOutcome,
) -> Result<(), UsageError> {
    let title = match &args.file {
        Some(file_path) => format!("{system} seed {} ({})", plan.seed, file_path.display()),
        None => format!("{system} seed {}", plan.seed),
    };
    let lines = outcome.trace.as_deref().unwrap_or(&[]);
    let page = crate::timeline::render(&title, lines, outcome.failure.as_ref());
    report::write_atomically(path, &page).map_err(|why| report_path_error("--html", path, &why))?;
    say!("replay: timeline written to {}", path.display());
    Ok(())
}

/// What `replay` runs: a seed, a system and how, and the seed file it came from.
struct ReplayPlan {
    seed: u64,
    system: String,
    options: RunOptions,
    file: Option<ReplayedFile>,
}

/// A seed file being replayed, and which of its runs.
struct ReplayedFile {
    contents: SeedFile,
    /// The digest the chosen run had when the file was written.
    digest: String,
    /// `its seed`, `its recorded schedule` or `its shrunk schedule`.
    what: &'static str,
    /// The backend the file's run used, when `--backend` asked for another one.
    backend_replaced: Option<Backend>,
}

impl ReplayPlan {
    fn from_file(args: &ReplayArgs, path: &Path) -> Result<ReplayPlan, UsageError> {
        let file = SeedFile::read(path).map_err(UsageError)?;
        let system = args.system.clone().unwrap_or_else(|| file.system.clone());
        let from = args.from.unwrap_or(match (&file.shrunk, &file.schedule) {
            (Some(_), _) => ReplayFrom::Shrunk,
            (None, Some(_)) => ReplayFrom::Schedule,
            (None, None) => ReplayFrom::Seed,
        });
        let (mut config, schedule, digest, what) = match from {
            ReplayFrom::Seed => (file.config.clone(), None, file.trace_digest.clone(), "its seed"),
            ReplayFrom::Schedule => {
                let schedule = file.schedule.clone().ok_or_else(|| {
                    UsageError(format!(
                        "{} holds no schedule (it was written before schedules were recorded, or as found by a sweep); replay it with --from seed, or record one with `{} shrink {}`",
                        path.display(),
                        crate::app::command_prefix(),
                        path.display()
                    ))
                })?;
                let digest = file.trace_digest.clone();
                (
                    file.config.clone(),
                    Some(schedule),
                    digest,
                    "its recorded schedule",
                )
            }
            ReplayFrom::Shrunk => {
                let shrunk = file.shrunk.clone().ok_or_else(|| {
                    UsageError(format!(
                        "{} has not been shrunk; shrink it with `{} shrink {}`, or replay it with --from seed",
                        path.display(),
                        crate::app::command_prefix(),
                        path.display()
                    ))
                })?;
                (
                    shrunk.config,
                    Some(shrunk.schedule),
                    shrunk.trace_digest,
                    "its shrunk schedule",
                )
            }
        };
        let mut backend_replaced = None;
        if let Some(name) = &args.backend {
            let backend = find_backend(name)?;
            if backend != config.backend {
                backend_replaced = Some(config.backend);
                config.backend = backend;
            }
        }
        let options = RunOptions {
            backend: config.backend,
            keep_trace: args.trace || args.html.is_some(),
            config: Some(config),
            schedule,
            ..RunOptions::default()
        };
        Ok(ReplayPlan {
            seed: file.seed,
            system,
            options,
            file: Some(ReplayedFile {
                contents: file,
                digest,
                what,
                backend_replaced,
            }),
        })
    }
}

/// `replay: seed 3 on receipt-first from its shrunk schedule: FAILED ... (17 steps, digest ...)`.
fn say_replay_verdict(plan: &ReplayPlan, system: &str, outcome: &crate::run::RunOutcome) {
    let verdict = match (&outcome.failure, &outcome.unsettled) {
        (Some(failure), _) => format!(
            "FAILED {} at step {} ({}): {}",
            failure.invariant,
            failure.step,
            format_time_ms(failure.time_ms),
            failure.message
        ),
        (None, Some(unsettled)) => format!("UNSETTLED: {unsettled}"),
        (None, None) => "passed every invariant".to_owned(),
    };
    let mut from = String::new();
    if let Some(file) = &plan.file {
        from = format!(" from {}", file.what);
        if file.backend_replaced.is_some() {
            from.push_str(&format!(" on backend {}", plan.options.backend.name()));
        }
    }
    say!(
        "replay: seed {} on {system}{from}: {verdict} ({} steps, digest {})",
        plan.seed,
        outcome.steps,
        outcome.digest
    );
}

/// Compares a replayed run with what its seed file recorded and expects, in words a reader can
/// act on.
fn say_against_file(file: &ReplayedFile, system: &str, outcome: &crate::run::RunOutcome) {
    let contents = &file.contents;
    let old_digest = contents.format_version < crate::seed_file::DIGEST_VERSION;
    if old_digest {
        say!(
            "replay: the file is of format version {}, whose trace digests this build does not compute, so its digest is not compared; `shrink` rewrites it in version {}",
            contents.format_version,
            crate::seed_file::FORMAT_VERSION
        );
    }
    if let Some(recorded) = file.backend_replaced {
        say!(
            "replay: the file's run used backend {}; a run on another backend may take other turns, so its digest is not compared",
            recorded.name()
        );
    } else if !old_digest && contents.system == system && file.digest != outcome.digest {
        say!(
            "replay: the trace digest differs from the file's ({}): the code or the schedule changed since the file was written",
            file.digest
        );
    }
    let met = contents.expect.is_met_by_outcome(outcome);
    if contents.system != system {
        say!(
            "replay: the file was written for {}, where it {}; this replay ran {system} instead, to check a fix",
            contents.system,
            contents.expect
        );
    } else if met {
        // What the file expects, which the verdict line already says.
    } else if matches!(contents.expect, Expectation::Fails { .. }) && outcome.failure.is_none() {
        say!(
            "replay: the file expects \"{}\", and this run now passes every invariant; if the bug is fixed, keep the file as a regression test by setting its \"expect\" to {{\"outcome\": \"passes\"}}",
            contents.expect
        );
    } else {
        say!(
            "replay: the file expects \"{}\", and this run did otherwise; see the verdict above",
            contents.expect
        );
    }
}

fn run_shrink(args: &ShrinkArgs) -> Result<i32, UsageError> {
    let path = &args.file;
    let mut file = SeedFile::read(path).map_err(UsageError)?;
    let system = find_system(&file.system)?;
    let runs_max = usize::try_from(args.runs).unwrap_or(usize::MAX);
    // The original run, written down, is what the summary measures from; a file written before
    // schedules were recorded gets its schedule now.
    let recorded = crate::shrink::record(&system, file.seed, &file.config).map_err(UsageError)?;
    if recorded.failure.is_none() && file.expect == Expectation::DoesNotSettle {
        return Err(UsageError(format!(
            "{} holds a run that did not settle within its bounds; shrinking reduces invariant failures only, so replay it with --trace or --html to see what was still pending",
            path.display()
        )));
    }
    if recorded.failure.is_none() {
        return Err(UsageError(format!(
            "{} no longer fails on {}: nothing to shrink (if the bug is fixed, set its expect to passes to keep it as a regression)",
            path.display(),
            system.name()
        )));
    }
    let original = recorded
        .schedule
        .clone()
        .ok_or_else(|| UsageError("a recorded run has a schedule".to_owned()))?;
    if file.schedule.is_none() || file.trace_digest != recorded.digest {
        // Rewritten from the run as this build makes it; what the file promises stays.
        let (expect, earlier) = (file.expect.clone(), file.shrunk.take());
        file = SeedFile::from_outcome(&recorded, file.replay.clone());
        file.expect = expect;
        file.shrunk = earlier;
    }
    let progress = ProgressBar::new_spinner();
    if std::io::stderr().is_terminal() {
        progress.set_message(format!(
            "shrinking {} (at most {} runs)",
            path.display(),
            args.runs
        ));
        progress.enable_steady_tick(Duration::from_millis(200));
    }
    let shrunk = crate::shrink::shrink(&system, file.seed, &file.config, &original, runs_max);
    progress.finish_and_clear();
    let mut shrunk =
        shrunk.map_err(|why| UsageError(format!("{} cannot be shrunk: {why}", path.display())))?;
    // A second shrink starts again from the original; what an earlier one found stays if it is
    // still smaller and still fails the same way.
    if let Some(earlier) = &file.shrunk
        && (earlier.steps, earlier.faults) < (shrunk.shrunk.steps, shrunk.shrunk.faults())
        && earlier.failure.invariant == shrunk.shrunk.failure.invariant
        && let Ok(replayed) = crate::shrink::replay(&system, file.seed, &earlier.config, &earlier.schedule)
        && replayed.failure.as_ref().map(|failure| &failure.invariant) == Some(&earlier.failure.invariant)
        && let Some(schedule) = replayed.schedule
    {
        let failure = replayed.failure.expect("checked above");
        shrunk.shrunk = crate::shrink::Candidate {
            config: earlier.config.clone(),
            schedule,
            failure,
            steps: replayed.steps,
            digest: replayed.digest,
        };
    }
    file.shrunk = Some(ShrunkRun::from_shrunk(&shrunk));
    file.write_to(path).map_err(UsageError)?;
    say!("{}", shrunk.summary());
    say!("shrink: {}", shrunk.details());
    say!(
        "shrink: {} now holds the shrunk run beside the original; replay: {}",
        path.display(),
        replay_command(path)
    );
    Ok(0)
}

fn run_mutants(app: &App, args: &MutantsArgs) -> Result<i32, UsageError> {
    let backend = find_backend(&args.backend)?;
    let shape = resolve_shape(app, &args.shape)?;
    if app.planted_bugs().is_empty() && !args.sql {
        return Err(UsageError(format!(
            "{} has no planted bugs to measure; add them with App::planted, or mutate its SQL with --sql",
            app.name()
        )));
    }
    if args.first_seed.checked_add(args.budget - 1).is_none() {
        return Err(UsageError(format!(
            "--first-seed {} plus --budget {} runs past the largest seed; lower one of them",
            args.first_seed, args.budget
        )));
    }
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        |jobs| jobs as usize,
    );
    let options = crate::mutants::MutantsOptions {
        budget: args.budget,
        first_seed: args.first_seed,
        jobs,
        backend,
        shape: shape.clone(),
    };
    if args.sql {
        let system = system_or_first(app, args.system.as_deref())?;
        return say_sql_mutants(&system, &options, app.equivalent_sql_mutants());
    }
    if let Some(starts) = args.starts {
        return Ok(say_time_to_bug(app, &options, starts));
    }
    say!(
        "{:<28} {:<42} {:>6} {:>9} {:>7}",
        "planted bug",
        "caught by",
        "seeds",
        "wall",
        "steps"
    );
    let report = crate::mutants::run(
        &options,
        app.planted_bugs(),
        app.systems(),
        &|row| match &row.caught {
            Some(caught) => say!(
                "{:<28} {:<42} {:>6} {:>7.2} s {:>7}",
                row.system,
                caught.invariant,
                caught.seeds_to_failure,
                caught.wall_to_failure.as_secs_f64(),
                caught.steps
            ),
            None => say!("{:<28} {:<42} {:>6}", row.system, "SURVIVED", args.budget),
        },
    );
    say_systems_under_test(app, &report, &shape);
    let caught = report.rows.len() - report.survivors().len();
    let failed = report
        .references
        .iter()
        .filter(|reference| !reference.failures.is_empty())
        .count();
    say!(
        "mutants: {caught} of {} planted bugs caught within {} seeds each; {} of {} systems under test passed {} seeds",
        report.rows.len(),
        args.budget,
        report.references.len() - failed,
        report.references.len(),
        args.budget
    );
    if !report.survivors().is_empty() {
        say!("mutants: survived: {}", report.survivors().join(", "));
    }
    Ok(if report.all_caught_and_reference_passed() {
        0
    } else {
        1
    })
}

/// `mutants --sql`: every SQL mutant of `system`, a line each, then the tally. Exit 0 when every
/// mutant that is not listed as equivalent was caught.
fn say_sql_mutants(
    system: &Arc<dyn System>,
    options: &crate::mutants::MutantsOptions,
    equivalent: &[crate::sql_mutants::Equivalent],
) -> Result<i32, UsageError> {
    let sql_options = crate::sql_mutants::SqlMutantsOptions {
        budget: options.budget,
        first_seed: options.first_seed,
        jobs: options.jobs,
        backend: options.backend,
        shape: options.shape.clone(),
        learning_seeds: 200,
        equivalent: equivalent.to_vec(),
    };
    say!("{:>4}  {:<64} {:<28} caught by", "#", "statement", "rewrite");
    let results = crate::sql_mutants::run(system, &sql_options, &|result| {
        let verdict = match (&result.caught, result.equivalent) {
            (Some((invariant, seeds)), _) => format!("{invariant} after {seeds} seeds"),
            (None, Some(why)) => format!("equivalent: {why}"),
            (None, None) => format!("SURVIVED {} seeds", sql_options.budget),
        };
        say!(
            "{:>4}  {:<64} {:<28} {verdict}",
            result.number,
            result.mutant.short(64),
            result.mutant.rewrite.to_string()
        );
    })
    .map_err(UsageError)?;
    let caught = results.iter().filter(|result| result.caught.is_some()).count();
    let equivalent = results
        .iter()
        .filter(|result| result.equivalent.is_some())
        .count();
    say!(
        "sql mutants: {caught} of {} caught, {equivalent} equivalent ({}, {} seeds each at most)",
        results.len() - equivalent,
        system.name(),
        sql_options.budget
    );
    let survivors: Vec<String> = results
        .iter()
        .filter(|result| result.caught.is_none() && result.equivalent.is_none())
        .map(|result| format!("#{}", result.number))
        .collect();
    if survivors.is_empty() {
        return Ok(0);
    }
    say!(
        "sql mutants: survived: {}; each is a gap in what the simulation checks of {}, or an equivalent mutant (README, \"SQL mutants\")",
        survivors.join(", "),
        system.name()
    );
    Ok(1)
}

/// `mutants --starts K`: each planted bug searched from K first seeds, with the mean and worst
/// seeds to first failure. Exit 0 when every search caught its bug.
fn say_time_to_bug(app: &App, options: &crate::mutants::MutantsOptions, starts: u64) -> i32 {
    say!(
        "{:<28} {:>6} {:>6} {:>7}  caught by",
        "planted bug",
        "mean",
        "worst",
        "caught"
    );
    let rows = crate::mutants::time_to_bug(options, app.planted_bugs(), starts, &|row| {
        let caught = row.seeds_to_failure.iter().flatten().count();
        say!(
            "{:<28} {:>6} {:>6} {:>7}  {}",
            row.system,
            row.mean()
                .map_or_else(|| "-".to_owned(), |mean| format!("{mean:.1}")),
            row.worst()
                .map_or_else(|| "-".to_owned(), |worst| worst.to_string()),
            format!("{caught}/{starts}"),
            row.invariants.join(", ")
        );
    });
    let survived: Vec<&str> = rows
        .iter()
        .filter(|row| row.worst().is_none())
        .map(|row| row.system.as_str())
        .collect();
    let worst = rows
        .iter()
        .filter_map(crate::mutants::StartsRow::worst)
        .max()
        .unwrap_or(0);
    let mean_max = rows
        .iter()
        .filter_map(crate::mutants::StartsRow::mean)
        .fold(0.0, f64::max);
    say!(
        "mutants: {} of {} planted bugs caught from all {starts} starts within {} seeds each; highest mean {mean_max:.1}, worst {worst}",
        rows.len() - survived.len(),
        rows.len(),
        options.budget
    );
    if survived.is_empty() {
        0
    } else {
        say!("mutants: not caught from every start: {}", survived.join(", "));
        1
    }
}

/// The rows of the systems that must pass, each failure with its replay command.
fn say_systems_under_test(app: &App, report: &crate::mutants::MutantsReport, shape: &WorkloadShape) {
    for reference in &report.references {
        let verdict = if reference.failures.is_empty() {
            "passed"
        } else {
            "FAILED"
        };
        say!(
            "{:<28} {:<42} {:>6} {:>7.2} s",
            reference.system,
            format!("{verdict} {} seeds", reference.seeds),
            reference.seeds,
            reference.wall.as_secs_f64()
        );
        for (seed, invariant) in &reference.failures {
            say!(
                "  {} seed {seed} failed {invariant}; replay: {} replay --seed {seed} --system {}{}",
                reference.system,
                app.prefix(),
                reference.system,
                shape.as_flags()
            );
        }
    }
}

fn run_bench(app: &App, args: &BenchArgs) -> Result<i32, UsageError> {
    let backend = find_backend(&args.backend)?;
    if args.first_seed.checked_add(args.seeds - 1).is_none() {
        return Err(UsageError(format!(
            "--first-seed {} plus --seeds {} runs past the largest seed; lower one of them",
            args.first_seed, args.seeds
        )));
    }
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        |jobs| jobs as usize,
    );
    let system = system_or_first(app, args.system.as_deref())?;
    let options = crate::bench::BenchOptions {
        system: Arc::clone(&system),
        first_seed: args.first_seed,
        seeds: args.seeds,
        jobs,
        backend,
    };
    say!(
        "bench: system {}, seeds {}..{}, {jobs} jobs, backend {}: each seed simulated as a sweep runs it, then again with its statements recorded, then replayed on a bare database",
        system.name(),
        args.first_seed,
        u128::from(args.first_seed) + u128::from(args.seeds),
        backend.name()
    );
    let progress = ProgressDisplay::new("bench", args.seeds);
    let measured = crate::bench::bench(&options, &|state| progress.update(state));
    progress.finish();
    let report = measured.map_err(UsageError)?;
    let mut code = 0;
    for (seed, invariant) in &report.failures {
        say!(
            "FAIL seed {seed} ({}): {invariant}; replay: {} replay --seed {seed} --system {} --backend {}",
            system.name(),
            app.prefix(),
            system.name(),
            backend.name()
        );
        code = 1;
    }
    say!(
        "bench: simulation: {} seeds, {} steps, {:.2} s summed over jobs (set-up {:.2} s of it), as a sweep runs them ({} failures)",
        report.seeds,
        report.steps,
        report.simulated.as_secs_f64(),
        report.simulated_setup.as_secs_f64(),
        report.failures.len()
    );
    let fidelity = if report.differences_total == 0 {
        "every statement returned what it returned in the simulation".to_owned()
    } else {
        code = 1;
        format!(
            "{} statements returned something else than in the simulation, so sim/raw compares different work",
            report.differences_total
        )
    };
    say!(
        "bench: raw replay: set-up and {} statements, rollbacks and closes, {:.2} s summed over jobs (set-up {:.2} s of it); {fidelity}",
        report.operations,
        (report.replayed + report.replay_setup).as_secs_f64(),
        report.replay_setup.as_secs_f64()
    );
    for difference in &report.differences {
        say!("  {difference}");
    }
    say!(
        "bench: {:.1} s wall, simulation and replay together; without set-up on either side, sim/raw {:.2}",
        report.wall.as_secs_f64(),
        report.sim_over_raw_without_setup()
    );
    say!("{}", report.summary_line());
    Ok(code)
}

fn run_new(args: &NewArgs) -> Result<i32, UsageError> {
    let scaffold = crate::scaffold::Scaffold {
        directory: args.directory.clone(),
        path_dependency: args.path_dependency.clone(),
    };
    let written = scaffold.write().map_err(UsageError)?;
    for path in &written {
        say!("wrote {}", path.display());
    }
    say!(
        "next: cd {} && cargo run --release -- sweep --seeds 200 (then see its README.md)",
        args.directory.display()
    );
    Ok(0)
}

fn run_list(app: &App, args: &ListArgs) -> Result<i32, UsageError> {
    if !args.contract {
        list(app);
        return Ok(0);
    }
    let system = system_or_first(app, args.system.as_deref())?;
    let shape = WorkloadShape {
        invariants: args.invariants.as_deref().map(split_names),
        without_invariants: names_or_none(args.without_invariants.as_deref()),
        ..WorkloadShape::default()
    };
    check_invariant_names(app, &shape)?;
    let choice = crate::shape::InvariantChoice {
        only: shape.invariants.map(|names| names.into_iter().collect()),
        without: shape.without_invariants.into_iter().collect(),
    };
    let domain = system.domain();
    let (judging, left_out) =
        invariants::judging(&*domain, system.workflows(), &choice).map_err(UsageError)?;
    say!(
        "contract of {} ({} domain: {})",
        system.name(),
        domain.name(),
        domain.description()
    );
    for invariant in &judging {
        say!(
            "{:<8} {:<9} {:<42} {}",
            invariant.layer().name(),
            invariant.kind().name(),
            invariant.name(),
            invariant.description()
        );
    }
    for rule in domain.rules() {
        say!("{:<8} {:<9} {:<42} {rule}", "domain", "rule", domain.name());
    }
    for (name, why) in left_out {
        say!("not checked: {name}, since {why}");
    }
    Ok(0)
}

fn list(app: &App) {
    let mut domains: Vec<Arc<dyn crate::domain::Domain>> = Vec::new();
    for (role, systems) in [("system", app.systems()), ("planted", app.planted_bugs())] {
        for system in systems {
            let domain = system.domain();
            let lacking: Vec<&str> = system
                .workflows()
                .named()
                .iter()
                .filter(|(_, has)| !has)
                .map(|(workflow, _)| workflow.name())
                .collect();
            let lacking = if lacking.is_empty() {
                String::new()
            } else {
                format!(" (no {})", lacking.join(", no "))
            };
            say!(
                "{role:<10} {:<42} {} [{} domain{lacking}]",
                system.name(),
                system.description(),
                domain.name()
            );
            if !domains.iter().any(|known| known.name() == domain.name()) {
                domains.push(domain);
            }
        }
    }
    for domain in &domains {
        say!("domain     {:<42} {}", domain.name(), domain.description());
    }
    for kind in faults::registry() {
        say!("fault      {:<42} {}", kind.name, kind.description);
    }
    // Every invariant of every domain the program's systems serve, each once; a domain's own
    // rules name the domain they belong to.
    let mut listed = std::collections::BTreeSet::new();
    for domain in &domains {
        for invariant in invariants::registry(&**domain) {
            if !listed.insert(invariant.name().to_owned()) {
                continue;
            }
            say!(
                "invariant  {:<42} {} {}: {}",
                invariant.name(),
                invariant.layer().name(),
                invariant.kind().name(),
                invariant.description()
            );
        }
    }
    for situation in Situation::ALL {
        say!("situation  {:<42} {}", situation.name(), situation.description());
    }
}
