//! Whether a domain declared in a file judges as the Rust domain it declares: every system of
//! the catalogue (the reference and each planted bug) swept with the payments domain in Rust and
//! with `examples/domains/payments.toml` in its place, side by side, the workload drawn by each
//! domain. The reference must pass both; each planted bug must fail both, and the table shows the
//! first failing seed and its invariant under each. docs/extending.md, "A domain in a file", has
//! the table and how it was made:
//! `cargo run --release -p commitgap-sim --example declared_domains -- [REFERENCE_SEEDS] [BUG_SEEDS]`.

use std::path::Path;
use std::sync::Arc;

use commitgap_sim::domain::declared::DeclaredDomain;
use commitgap_sim::run::{Backend, Registry};
use commitgap_sim::sweep::{SweepLimits, SweepOptions, SweepReport, sweep_with_limits};
use commitgap_sim::system::{System, WithDomain};
use commitgap_sim::systems;

/// Sweeps `system` over `seeds` seeds from 0, stopping at its first failure.
fn sweep(system: Arc<dyn System>, seeds: u64) -> SweepReport {
    let options = SweepOptions {
        system,
        first_seed: 0,
        seeds,
        jobs: 2,
        backend: Backend::Memdb,
        check_determinism: false,
        every_fault: false,
        shape: Default::default(),
        registry: Arc::new(Registry::default()),
    };
    let limits = SweepLimits {
        max_failures: std::num::NonZeroU64::new(1),
        ..SweepLimits::default()
    };
    sweep_with_limits(&options, &limits, &|_| {}, &|_| {})
}

/// A sweep's verdict in a table cell: pass over N seeds, or the first failing seed and invariant.
fn verdict(report: &SweepReport) -> String {
    if let Some((seed, error)) = report.errors.first() {
        return format!("error at seed {seed}: {error}");
    }
    match report.failures.first() {
        None => format!("pass ({} seeds)", report.seeds_run),
        Some(failed) => {
            let invariant = failed
                .outcome
                .failure
                .as_ref()
                .map_or_else(|| "unsettled".to_owned(), |failure| failure.invariant.clone());
            format!("seed {}: {invariant}", failed.outcome.seed)
        }
    }
}

fn main() {
    let arguments: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|argument| argument.parse().ok())
        .collect();
    let reference_seeds = arguments.first().copied().unwrap_or(2_000);
    let bug_seeds = arguments.get(1).copied().unwrap_or(500);
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/domains/payments.toml");
    let declared: Arc<DeclaredDomain> =
        Arc::new(DeclaredDomain::load(&file).unwrap_or_else(|error| panic!("{error}")));
    println!("| system | payments in Rust | payments declared | same verdict |");
    println!("|---|---|---|---|");
    let mut differing = 0;
    for system in systems::all() {
        let seeds = if system.name() == "reference" {
            reference_seeds
        } else {
            bug_seeds
        };
        let rust = sweep(Arc::clone(&system), seeds);
        let in_file: Arc<dyn System> = Arc::new(WithDomain::new(Arc::clone(&system), declared.clone()));
        let from_file = sweep(in_file, seeds);
        let same = rust.failures.is_empty() == from_file.failures.is_empty()
            && rust.errors.is_empty()
            && from_file.errors.is_empty();
        differing += usize::from(!same);
        println!(
            "| {} | {} | {} | {} |",
            system.name(),
            verdict(&rust),
            verdict(&from_file),
            if same { "yes" } else { "NO" }
        );
    }
    println!("{differing} systems judged differently");
}
