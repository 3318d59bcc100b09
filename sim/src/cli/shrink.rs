//! `shrink`: reduces a seed file's failing run to the fewest steps and faults that still fail it
//! the same way, and writes the shrunk run into the file beside the original.
//!
//! The search itself is `crate::shrink`'s; this file only reads and writes the file and says
//! what became of it. It must not change what the file expects.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use indicatif::ProgressBar;

use std::sync::Arc;

use super::{UsageError, find_system, say};
use crate::App;
use crate::sweep::seed_file::{Expectation, SeedFile, ShrunkRun, replay_command};
use crate::sweep::shrink::DEFAULT_SHRINK_RUNS;

#[derive(Args)]
pub(super) struct ShrinkArgs {
    /// A seed file written by `sweep`; the shrunk run is written back into it.
    file: PathBuf,
    /// The most candidate runs to try.
    #[arg(long, default_value_t = DEFAULT_SHRINK_RUNS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    runs: u64,
}

/// The file's run written down: an explored run is held by its schedule alone; any other is
/// recorded again from its seed.
fn record(
    system: &Arc<dyn crate::system::System>,
    file: &SeedFile,
    registry: &Arc<crate::run::Registry>,
) -> Result<crate::run::RunOutcome, UsageError> {
    match (&file.schedule, file.explored) {
        (Some(schedule), true) => {
            crate::sweep::shrink::replay(system, file.seed, &file.config, schedule, registry)
        }
        _ => crate::sweep::shrink::record_schedule(system, file.seed, &file.config, registry),
    }
    .map_err(UsageError)
}

pub(super) fn run_shrink(app: &App, args: &ShrinkArgs) -> Result<i32, UsageError> {
    let path = &args.file;
    let mut file = SeedFile::read_with(path, app.registry()).map_err(UsageError)?;
    let system = find_system(app, &file.system)?;
    let runs_max = usize::try_from(args.runs).unwrap_or(usize::MAX);
    // The original run, written down, is what the summary measures from; a file written before
    // schedules were recorded gets its schedule now.
    let registry = Arc::new(app.registry().clone());
    let recorded = record(&system, &file, &registry)?;
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
        let (expect, earlier, explored) = (file.expect.clone(), file.shrunk.take(), file.explored);
        file = SeedFile::from_outcome(&recorded, file.replay.clone());
        file.expect = expect;
        file.shrunk = earlier;
        file.explored = explored;
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
    let shrunk = crate::sweep::shrink::shrink_until(
        &system,
        file.seed,
        &file.config,
        &original,
        runs_max,
        &crate::sweep::StopFlag::new(),
        &registry,
    );
    progress.finish_and_clear();
    let mut shrunk =
        shrunk.map_err(|why| UsageError(format!("{} cannot be shrunk: {why}", path.display())))?;
    // A second shrink starts again from the original; what an earlier one found stays if it is
    // still smaller and still fails the same way.
    if let Some(earlier) = &file.shrunk
        && (earlier.steps, earlier.faults) < (shrunk.shrunk.steps, shrunk.shrunk.faults())
        && earlier.failure.invariant == shrunk.shrunk.failure.invariant
        && let Ok(replayed) =
            crate::sweep::shrink::replay(&system, file.seed, &earlier.config, &earlier.schedule, &registry)
        && replayed.failure.as_ref().map(|failure| &failure.invariant) == Some(&earlier.failure.invariant)
        && let Some(schedule) = replayed.schedule
    {
        let failure = replayed.failure.expect("checked above");
        shrunk.shrunk = crate::sweep::shrink::Candidate {
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
        replay_command(app.prefix(), path)
    );
    Ok(0)
}
