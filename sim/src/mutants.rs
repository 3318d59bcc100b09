//! The simulator's power, measured: how fast each planted bug is caught.
//!
//! SQL mutants of any system, each statement rewritten and swept until caught, are here too
//! ([`run_sql_mutants`]).
//!
//! For every planted bug, seeds run from the first one onwards, a few per job at a time, until a
//! seed fails or the budget is spent; the row records the invariant that caught the bug, how many
//! seeds it took (the failing seed's position in the range), the wall time until that seed's batch
//! finished and the failing run's length in steps. The reference system then sweeps the same
//! budget and must pass it. A planted bug that survives its budget is a finding about the
//! simulator (a missing fault model or invariant), not about the bug. This module reads the wall
//! clock for the figures only, outside every run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::Backend;
use crate::shape::WorkloadShape;
use crate::sweep::{SweepOptions, sweep};
use crate::system::System;

// SQL mutants are the other measure of power, of any system rather than the planted bugs.
pub use crate::sql_mutants::*;

/// How a planted bug was caught.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caught {
    /// The first failing seed.
    pub seed: u64,
    /// The name of the invariant that caught the bug.
    pub invariant: String,
    /// The failing seed's position in the range, from 1.
    pub seeds_to_failure: u64,
    /// Wall time from the start of the sweep until the failing seed's result arrived.
    pub wall_to_failure: Duration,
    /// Steps of the failing run.
    pub steps: u64,
}

/// One planted bug's result.
#[derive(Debug, Clone)]
pub struct MutantRow {
    /// The name of the system with the planted bug.
    pub system: String,
    /// `None` when the bug survived the budget.
    pub caught: Option<Caught>,
}

/// A system under test's sweep over the same budget.
#[derive(Debug, Clone)]
pub struct ReferenceRow {
    /// The name of the system under test.
    pub system: String,
    /// How many seeds the sweep ran.
    pub seeds: u64,
    /// Failing seeds and their invariants, sorted by seed.
    pub failures: Vec<(u64, String)>,
    /// Wall time the sweep took.
    pub wall: Duration,
}

/// Every row of a `mutants` run.
#[derive(Debug, Clone)]
pub struct MutantsReport {
    /// How many seeds each planted bug and each system under test was given.
    pub budget: u64,
    /// One row per planted bug, in the order they ran.
    pub rows: Vec<MutantRow>,
    /// One row per system under test, each of which must pass.
    pub references: Vec<ReferenceRow>,
}

impl MutantsReport {
    /// The planted bugs that survived their budget.
    pub fn survivors(&self) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|row| row.caught.is_none())
            .map(|row| row.system.as_str())
            .collect()
    }

    /// True when every planted bug was caught and every system under test passed.
    pub fn all_caught_and_reference_passed(&self) -> bool {
        self.survivors().is_empty()
            && self
                .references
                .iter()
                .all(|reference| reference.failures.is_empty())
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct MutantsOptions {
    /// How many seeds each planted bug is given before it counts as surviving.
    pub budget: u64,
    /// The first seed of each sweep's range.
    pub first_seed: u64,
    /// How many seeds run at once.
    pub jobs: usize,
    /// The database backend every seed runs against.
    pub backend: Backend,
    /// The workload every seed is drawn within.
    pub shape: WorkloadShape,
    /// The fault models, added invariants and replay command of the program.
    pub registry: Arc<crate::registry::Registry>,
}

/// Runs every planted bug, then sweeps each system under test (`correct`) over the same budget.
/// `on_row` is called as each planted bug finishes.
pub fn run(
    options: &MutantsOptions,
    planted: &[Arc<dyn System>],
    correct: &[Arc<dyn System>],
    on_row: &dyn Fn(&MutantRow),
) -> MutantsReport {
    let mut rows = Vec::new();
    for system in planted {
        let row = hunt(system, options);
        on_row(&row);
        rows.push(row);
    }
    let references = correct
        .iter()
        .map(|system| sweep_correct(system, options))
        .collect();
    MutantsReport {
        budget: options.budget,
        rows,
        references,
    }
}

/// How far apart the first seeds of [`time_to_bug`]'s searches are: far enough that no two
/// searches share a seed within any budget this module is run with.
pub const START_STRIDE: u64 = 1_000_000;

/// One planted bug's searches from several first seeds.
#[derive(Debug, Clone)]
pub struct StartsRow {
    /// The name of the system with the planted bug.
    pub system: String,
    /// Seeds to first failure from each start (`None` where the budget ran out).
    pub seeds_to_failure: Vec<Option<u64>>,
    /// The invariants that caught it, each once, in the order first seen.
    pub invariants: Vec<String>,
}

impl StartsRow {
    /// The mean seeds to first failure over the searches that found one.
    pub fn mean(&self) -> Option<f64> {
        let found: Vec<u64> = self.seeds_to_failure.iter().flatten().copied().collect();
        (!found.is_empty()).then(|| found.iter().sum::<u64>() as f64 / found.len() as f64)
    }

    /// The most seeds any search took, or `None` when a search ran out of budget.
    pub fn worst(&self) -> Option<u64> {
        self.seeds_to_failure
            .iter()
            .try_fold(0, |worst, seeds| seeds.map(|seeds| worst.max(seeds)))
    }
}

/// Time to bug from anywhere: searches each planted bug from `starts` first seeds
/// (`first_seed`, `first_seed + START_STRIDE`, ...), each within the budget. `on_row` is called as
/// each bug finishes.
pub fn time_to_bug(
    options: &MutantsOptions,
    planted: &[Arc<dyn System>],
    starts: u64,
    on_row: &dyn Fn(&StartsRow),
) -> Vec<StartsRow> {
    let mut rows = Vec::new();
    for system in planted {
        let mut row = StartsRow {
            system: system.name().to_owned(),
            seeds_to_failure: Vec::new(),
            invariants: Vec::new(),
        };
        for start in 0..starts {
            let from = MutantsOptions {
                first_seed: options.first_seed.wrapping_add(start.wrapping_mul(START_STRIDE)),
                ..options.clone()
            };
            let caught = hunt(system, &from).caught;
            if let Some(caught) = &caught
                && !row.invariants.contains(&caught.invariant)
            {
                row.invariants.push(caught.invariant.clone());
            }
            row.seeds_to_failure
                .push(caught.map(|caught| caught.seeds_to_failure));
        }
        on_row(&row);
        rows.push(row);
    }
    rows
}

/// Sweeps a system that must pass over the whole budget.
fn sweep_correct(reference: &Arc<dyn System>, options: &MutantsOptions) -> ReferenceRow {
    let started = Instant::now();
    let report = sweep(
        &sweep_options(reference, options, options.first_seed, options.budget),
        &|_, _| {},
    );
    let failures = report
        .failures
        .iter()
        .map(|result| (result.outcome.seed, verdict_of(&result.outcome).to_owned()))
        .chain(
            report
                .errors
                .iter()
                .map(|(seed, error)| (*seed, format!("error: {error}"))),
        )
        .collect();
    ReferenceRow {
        system: reference.name().to_owned(),
        seeds: options.budget,
        failures,
        wall: started.elapsed(),
    }
}

/// The verdict of a run that did not pass, as the tables name it: the invariant that failed, or
/// `did-not-settle`, or `nondeterminism` for a seed whose two runs differed.
fn verdict_of(outcome: &crate::run::RunOutcome) -> &str {
    match (&outcome.failure, &outcome.unsettled) {
        (Some(failure), _) => &failure.invariant,
        (None, Some(_)) => "did-not-settle",
        (None, None) => "nondeterminism",
    }
}

/// Sweeps `system` batch by batch until a seed fails or the budget is spent.
fn hunt(system: &Arc<dyn System>, options: &MutantsOptions) -> MutantRow {
    let started = Instant::now();
    // A few seeds per job keep both cores busy while wasting little work past the first failure.
    let batch = (options.jobs.max(1) as u64) * 2;
    let mut offset = 0;
    while offset < options.budget {
        let seeds = batch.min(options.budget - offset);
        let first_seed = options.first_seed.wrapping_add(offset);
        let report = sweep(&sweep_options(system, options, first_seed, seeds), &|_, _| {});
        // Every verdict but a pass counts, as in `mutants --sql` and the harness: an invariant's
        // failure, or a run that did not settle (a sweep does not pass it either). The first in
        // seed order, whatever the number of jobs.
        if let Some(result) = report
            .failures
            .iter()
            .filter(|result| result.outcome.failure.is_some() || result.outcome.unsettled.is_some())
            .min_by_key(|result| result.outcome.seed)
        {
            let outcome = &result.outcome;
            return MutantRow {
                system: system.name().to_owned(),
                caught: Some(Caught {
                    seed: outcome.seed,
                    invariant: verdict_of(outcome).to_owned(),
                    seeds_to_failure: outcome.seed.wrapping_sub(options.first_seed) + 1,
                    wall_to_failure: started.elapsed(),
                    steps: outcome.steps,
                }),
            };
        }
        offset += seeds;
    }
    MutantRow {
        system: system.name().to_owned(),
        caught: None,
    }
}

fn sweep_options(
    system: &Arc<dyn System>,
    options: &MutantsOptions,
    first_seed: u64,
    seeds: u64,
) -> SweepOptions {
    SweepOptions {
        system: Arc::clone(system),
        first_seed,
        seeds,
        jobs: options.jobs,
        backend: options.backend,
        check_determinism: false,
        every_fault: false,
        shape: options.shape.clone(),
        registry: Arc::clone(&options.registry),
    }
}
