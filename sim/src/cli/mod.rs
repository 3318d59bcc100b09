//! The command-line program: `sweep`, `explore`, `replay`, `shrink`, `list`, `new`, `mutants` and
//! `bench`.
//!
//! Exit codes: 0 when every invariant held, 1 when one failed (or two runs of a seed disagreed),
//! 2 for bad usage or bad input, with one line on standard error that says what is wrong and how
//! to fix it. Every failure printed carries the command that replays it. Results go to standard
//! output; progress and errors go to standard error.
//!
//! Each command lives in a file of its own, with its arguments; this module holds what they
//! share: the argument parser and the dispatcher, the workload-shape flags, the error that ends a
//! command with exit code 2, the lookups of systems and backends by name, and progress display.
//! It does not carry out any command itself.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::app::App;
use crate::db::Backend;
use crate::files;
use crate::sender::SenderPreset;
use crate::shape::{CountRange, WorkloadShape};
use crate::sweep::Progress;
use crate::system::System;

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

// Declared after `say!`, so that every command's file can use the macro.
mod bench;
mod explore;
mod list;
mod mutants;
mod new;
mod replay;
mod shrink;
mod sweep;

use bench::{BenchArgs, run_bench};
use explore::{ExploreArgs, run_explore};
use list::{ListArgs, run_list};
use mutants::{MutantsArgs, run_mutants};
use new::{NewArgs, run_new};
use replay::{ReplayArgs, run_replay};
use shrink::{ShrinkArgs, run_shrink};
use sweep::{SweepArgs, run_sweep};

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
    /// Search for failures by building on runs that reached something new, and write every
    /// failing run to a file.
    #[command(
        long_about = "Search for failures by building on runs that reached something new, and write every failing run to a file.\n\n\
        Starts from sampled seeds, as a sweep does, and keeps each run that reached something no earlier run had \
        (a new stretch of an obligation's story, a new interleaving of statements on a table, a crash in a new place, \
        a situation) or came closer to a rule's edge than any before; new runs branch off kept ones after what they \
        reached first, or edit their decisions (move, copy or drop a fault, push a number to its bound, swap two steps). \
        Deterministic given --seed and the corpus it starts from; --time ends it between batches. \
        The last line reads: explore: <runs> runs, corpus <size>, first failure after <K> runs (or no failure).\n\n\
        Exit status: 0 no run failed, 1 a run failed an invariant or did not settle, 2 bad usage or input."
    )]
    Explore(ExploreArgs),
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

/// The workload's shape (see docs/guide.md, "Shaping the workload"): each flag narrows what a seed may
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
    /// Business entities per tenant, the subjects events are about: N or MIN..MAX. `--orders` is the same flag.
    #[arg(long, value_name = "RANGE", alias = "orders")]
    subjects: Option<CountRange>,
    /// Receiver processes: N or MIN..MAX.
    #[arg(long, value_name = "RANGE")]
    receivers: Option<CountRange>,
    /// Relay worker processes: N or MIN..MAX.
    #[arg(long, value_name = "RANGE")]
    relay_workers: Option<CountRange>,
    /// Update events per entity, on top of its story: N or MIN..MAX, at most 3.
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
    /// Never put values at the receiver's limits (a 128-character name, an event created at time 0, a body at the configured limit, and the domain's own), for a receiver with stricter limits.
    #[arg(long)]
    no_edge_values: bool,
}

/// A failure to carry out a command, reported with exit code 2.
struct UsageError(String);

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

impl App {
    /// Runs the command line and returns its exit code: 0 every invariant held, 1 one failed,
    /// 2 bad usage or input. Checks the program first (see [`App::validate`]).
    pub fn run(self) -> i32 {
        if let Err(error) = self.validate() {
            eprintln!("error: {error}");
            return 2;
        }
        for notice in self.registry().notices() {
            eprintln!("note: {notice}");
        }
        run(&self)
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
    let command = in_domain_words(
        Cli::command()
            .name(app.name().to_owned())
            .bin_name(app.name().to_owned()),
        app,
    );
    let cli = match command
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches))
    {
        Ok(cli) => cli,
        Err(error) => return clap_error(&error),
    };
    let result = match cli.command {
        Command::Sweep(args) => run_sweep(app, &args),
        Command::Explore(args) => run_explore(app, &args),
        Command::Replay(args) => run_replay(app, &args),
        Command::Shrink(args) => run_shrink(app, &args),
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

/// `command` with the workload flags' help in the words of the domain of the program's first
/// system, so a team's `--help` speaks of its own business.
fn in_domain_words(command: clap::Command, app: &App) -> clap::Command {
    let words = app.systems()[0].domain().words();
    let helps = [
        (
            "subjects",
            format!(
                "Subjects per tenant: {}. N or MIN..MAX (`--orders` is the same flag)",
                words.subjects
            ),
        ),
        (
            "updates",
            format!("Updates: {}. N or MIN..MAX, at most 3", words.updates),
        ),
        (
            "no_edge_values",
            format!(
                "Never put values at the receiver's limits ({}), for a receiver with stricter limits",
                words.edge_values
            ),
        ),
    ];
    command.mut_subcommands(|subcommand| {
        helps.iter().fold(subcommand, |subcommand, (id, help)| {
            if subcommand.get_arguments().any(|arg| arg.get_id() == id) {
                subcommand.mut_arg(id, |arg| arg.help(help.clone()))
            } else {
                subcommand
            }
        })
    })
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

fn find_system(app: &App, name: &str) -> Result<Arc<dyn System>, UsageError> {
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
        Some(name) => find_system(app, name),
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
                    "--shape {} is not a workload shape: {}; see docs/guide.md, \"Shaping the workload\"",
                    path.display(),
                    files::clip(&error.to_string(), 120)
                ))
            })?;
        shape = overlay(shape, from_file);
    }
    let from_flags = WorkloadShape {
        tenants: args.tenants,
        subjects: args.subjects,
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
    let known: Vec<String> = app
        .registry()
        .faults()
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
        for invariant in app.registry().invariants(&*system.domain()) {
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
        subjects: top.subjects.or(base.subjects),
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

fn report_path_error(flag: &str, path: &Path, why: &str) -> UsageError {
    UsageError(format!(
        "{flag} {} cannot be written: {why}; choose a file in a writable directory",
        path.display()
    ))
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
