//! `bench`: measures the simulator's speed, peak memory and cost against SQLite alone, and
//! prints the figures with the line scripts read last.
//!
//! The measuring is `crate::bench`'s; this file prints what it measured and fails when a seed
//! failed or a replayed statement returned something else.

use std::sync::Arc;

use clap::Args;

use super::{ProgressDisplay, UsageError, find_backend, say, system_or_first};
use crate::app::App;

#[derive(Args)]
pub(super) struct BenchArgs {
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

pub(super) fn run_bench(app: &App, args: &BenchArgs) -> Result<i32, UsageError> {
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
