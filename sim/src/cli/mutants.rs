//! `mutants`: measures the simulator's power, by how fast each planted bug is caught (once, or
//! from several first seeds with `--starts`) or, with `--sql`, which rewrites of the system's own
//! SQL are caught.
//!
//! The searches are `crate::mutants`' and `crate::sql_mutants`'; this file prints their tables
//! and chooses the exit code. It must not change what a search runs.

use std::sync::Arc;

use clap::Args;

use super::{ShapeArgs, UsageError, find_backend, resolve_shape, say, system_or_first};
use crate::app::App;
use crate::shape::WorkloadShape;
use crate::system::System;

#[derive(Args)]
pub(super) struct MutantsArgs {
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

pub(super) fn run_mutants(app: &App, args: &MutantsArgs) -> Result<i32, UsageError> {
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
        registry: Arc::new(app.registry().clone()),
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
        registry: Arc::clone(&options.registry),
    };
    say!("{:>4}  {:<64} {:<28} caught by", "#", "statement", "rewrite");
    let results = crate::sql_mutants::run_sql_mutants(system, &sql_options, &|result| {
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
        "sql mutants: survived: {}; each is a gap in what the simulation checks of {}, or an equivalent mutant (docs/power.md, \"SQL mutants\")",
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
            // A search that ran out of budget took more seeds than any that found the bug.
            row.worst()
                .map_or_else(|| format!(">{}", options.budget), |worst| worst.to_string()),
            format!("{caught}/{starts}"),
            row.invariants.join(", ")
        );
    });
    let survived: Vec<&str> = rows
        .iter()
        .filter(|row| row.worst().is_none())
        .map(|row| row.system.as_str())
        .collect();
    // Over every search: one that ran out of budget makes the worst "more than the budget".
    let worst = if survived.is_empty() {
        rows.iter()
            .filter_map(crate::mutants::StartsRow::worst)
            .max()
            .unwrap_or(0)
            .to_string()
    } else {
        format!("more than {}", options.budget)
    };
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
