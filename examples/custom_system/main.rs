//! Sweeps a separately written receiver and relay (see `system.rs`) with the simulator's fault
//! models and invariants, the way a team tests its own code:
//!
//! ```text
//! cargo run --release --example custom_system -- [SEEDS]
//! ```
//!
//! It prints one line per failing seed and a summary, and exits 1 if any invariant failed.

mod system;

use std::sync::Arc;

use commitgap_sim::db::Backend;
use commitgap_sim::sweep::{SweepOptions, sweep};

fn main() {
    let seeds = match std::env::args().nth(1).map(|text| text.parse::<u64>()) {
        None => 500,
        Some(Ok(seeds)) if seeds > 0 => seeds,
        Some(_) => {
            eprintln!("error: SEEDS must be a positive number, for example `-- 500`");
            std::process::exit(2);
        }
    };
    let options = SweepOptions {
        system: Arc::new(system::ShopSystem {
            receipt_in_own_transaction: false,
        }),
        first_seed: 0,
        seeds,
        jobs: std::thread::available_parallelism().map_or(1, |cores| cores.get()),
        backend: Backend::Memdb,
        check_determinism: false,
        every_fault: false,
    };
    let report = sweep(&options, &|_, _| {});
    for result in &report.failures {
        if let Some(failure) = &result.outcome.failure {
            println!(
                "FAIL seed {}: {}: {}",
                result.outcome.seed, failure.invariant, failure.message
            );
        }
    }
    println!(
        "custom system: {} seeds, {} failures, {:.1} seeds/s",
        report.seeds_run,
        report.failures.len(),
        report.seeds_per_second()
    );
    std::process::exit(if report.failures.is_empty() && report.errors.is_empty() {
        0
    } else {
        1
    });
}
