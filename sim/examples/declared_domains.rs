//! Whether a domain declared in a file judges as the Rust domain it declares: every system of
//! the catalogue judged with the payments domain in Rust and with `examples/domains/payments.toml`
//! in its place, side by side, the workload drawn by each domain. The reference is swept, with
//! sampled fault models and with every one on (the attacker's too), and must pass all four; each planted bug is searched from ten starts as `mutants --starts 10` does, and
//! must be caught from every start under both (the table gives the mean seeds to the first
//! failure and the invariants that caught it). docs/extending.md, "A domain in a file", has the
//! table and how it was made: `cargo run --release -p commitgap-sim --example declared_domains --
//! [REFERENCE_SEEDS] [BUDGET] [STARTS]`.

use std::path::Path;
use std::sync::Arc;

use commitgap_sim::domain::declared::DeclaredDomain;
use commitgap_sim::mutants::{self, MutantsOptions};
use commitgap_sim::run::{Backend, Registry};
use commitgap_sim::sweep::{SweepLimits, SweepOptions, SweepReport, sweep_with_limits};
use commitgap_sim::system::{System, WithDomain};
use commitgap_sim::systems;

/// Sweeps `system` over `seeds` seeds from 0, stopping at its first failure; with
/// `every_fault`, every fault model (the attacker's among them) is on in every seed.
fn sweep(system: Arc<dyn System>, seeds: u64, every_fault: bool) -> SweepReport {
    let options = SweepOptions {
        system,
        first_seed: 0,
        seeds,
        jobs: 2,
        backend: Backend::Memdb,
        check_determinism: false,
        every_fault,
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

/// Mean seeds to the first failure over `starts` searches of `budget` seeds each, as
/// `mutants --starts` measures them, with the invariants that caught the bug.
fn time_to_bug(system: Arc<dyn System>, starts: u64, budget: u64) -> String {
    let options = MutantsOptions {
        budget,
        first_seed: 0,
        jobs: 2,
        backend: Backend::Memdb,
        shape: Default::default(),
        registry: Arc::new(Registry::default()),
    };
    let rows = mutants::time_to_bug(&options, &[system], starts, &|_| {});
    let row = &rows[0];
    let caught = row.seeds_to_failure.iter().flatten().count();
    match row.mean() {
        Some(mean) => format!("{mean:.1} ({caught}/{starts}; {})", row.invariants.join(", ")),
        None => format!("not caught (0/{starts})"),
    }
}

fn main() {
    let arguments: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|argument| argument.parse().ok())
        .collect();
    let reference_seeds = arguments.first().copied().unwrap_or(2_000);
    let budget = arguments.get(1).copied().unwrap_or(500);
    let starts = arguments.get(2).copied().unwrap_or(10);
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/domains/payments.toml");
    let declared: Arc<DeclaredDomain> =
        Arc::new(DeclaredDomain::load(&file).unwrap_or_else(|error| panic!("{error}")));
    println!("| system | payments in Rust | payments declared |");
    println!("|---|---|---|");
    let mut differing = 0;
    for system in systems::all() {
        let in_file: Arc<dyn System> = Arc::new(WithDomain::new(Arc::clone(&system), declared.clone()));
        let (rust, from_file, same) = if system.name() == "reference" {
            let (rust, from_file) = (
                sweep(Arc::clone(&system), reference_seeds, false),
                sweep(Arc::clone(&in_file), reference_seeds, false),
            );
            let (rust_all, from_file_all) = (
                sweep(Arc::clone(&system), reference_seeds, true),
                sweep(in_file, reference_seeds, true),
            );
            let same = [&rust, &from_file, &rust_all, &from_file_all]
                .iter()
                .all(|report| report.failures.is_empty() && report.errors.is_empty());
            let both = |sampled: &SweepReport, every: &SweepReport| {
                format!("{}; every fault on: {}", verdict(sampled), verdict(every))
            };
            (both(&rust, &rust_all), both(&from_file, &from_file_all), same)
        } else {
            let (rust, from_file) = (
                time_to_bug(Arc::clone(&system), starts, budget),
                time_to_bug(in_file, starts, budget),
            );
            let caught_by_all = |text: &str| text.contains(&format!("({starts}/{starts};"));
            let same = caught_by_all(&rust) == caught_by_all(&from_file);
            (rust, from_file, same)
        };
        differing += usize::from(!same);
        println!("| {} | {rust} | {from_file} |", system.name());
    }
    println!("{differing} systems judged differently");
}
