//! `replay`: runs one seed again, from its seed file (its seed, its recorded schedule or its
//! shrunk schedule) or by number, prints the verdict and, if asked, the trace or an HTML
//! timeline, and compares the run with what the file recorded and expects.
//!
//! It reads seed files and never writes them; the one file it may write is the timeline page.

use std::path::{Path, PathBuf};

use clap::Args;

use super::{
    ShapeArgs, UsageError, find_backend, find_system, report_path_error, resolve_shape, same_file, say,
    system_or_first,
};
use crate::app::App;
use crate::db::Backend;
use crate::run::{RunOptions, run_seed};
use crate::sweep::report;
use crate::sweep::seed_file::{Expectation, SeedFile};
use crate::trace::format_time_ms;

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
pub(super) struct ReplayArgs {
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

pub(super) fn run_replay(app: &App, args: &ReplayArgs) -> Result<i32, UsageError> {
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
        (Some(path), _) => ReplayPlan::from_file(app, args, path)?,
        (None, Some(seed)) => ReplayPlan {
            seed,
            system: system_or_first(app, args.system.as_deref())?.name().to_owned(),
            options: RunOptions {
                registry: std::sync::Arc::new(app.registry().clone()),
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
    let system = find_system(app, &plan.system)?;
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
    fn from_file(app: &App, args: &ReplayArgs, path: &Path) -> Result<ReplayPlan, UsageError> {
        let file = SeedFile::read_with(path, app.registry()).map_err(UsageError)?;
        let system = args.system.clone().unwrap_or_else(|| file.system.clone());
        let from = args.from.unwrap_or(match (&file.shrunk, &file.schedule) {
            (Some(_), _) => ReplayFrom::Shrunk,
            (None, Some(_)) => ReplayFrom::Schedule,
            (None, None) => ReplayFrom::Seed,
        });
        let (mut config, schedule, digest, what) = match from {
            ReplayFrom::Seed if file.explored => {
                return Err(UsageError(format!(
                    "{} holds a run explore made from another run: its seed, run as drawn, is a different run; replay it without --from, or with --from schedule",
                    path.display()
                )));
            }
            ReplayFrom::Seed => (file.config.clone(), None, file.trace_digest.clone(), "its seed"),
            ReplayFrom::Schedule => {
                let schedule = file.schedule.clone().ok_or_else(|| {
                    UsageError(format!(
                        "{} holds no schedule (it was written before schedules were recorded, or as found by a sweep); replay it with --from seed, or record one with `{} shrink {}`",
                        path.display(),
                        app.prefix(),
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
                        app.prefix(),
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
            registry: std::sync::Arc::new(app.registry().clone()),
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
    let old_digest = contents.format_version < crate::sweep::seed_file::DIGEST_VERSION;
    if old_digest {
        say!(
            "replay: the file is of format version {}, whose trace digests this build does not compute, so its digest is not compared; `shrink` rewrites it in version {}",
            contents.format_version,
            crate::sweep::seed_file::FORMAT_VERSION
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
