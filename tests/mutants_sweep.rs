//! The test cargo-mutants judges each mutant of the reference by (see `.cargo/mutants.toml`): a
//! short sweep of the reference, once with a random subset of fault models per seed and once with
//! every fault model on, which must pass. It is also an ordinary test: on the unmutated reference
//! it passes, in a few seconds of a release build.

use std::sync::Arc;

use commitgap_sim::run::Backend;
use commitgap_sim::sweep::{SweepOptions, sweep};
use commitgap_sim::systems;

/// Seeds per half: enough to catch every planted bug's kind of flaw within the budgets in
/// tests/planted_bugs.rs, few enough that one mutant is judged in seconds.
const SEEDS: u64 = 400;

#[test]
fn the_reference_passes_a_short_sweep() {
    let reference = systems::by_name("reference").unwrap();
    for every_fault in [false, true] {
        let report = sweep(
            &SweepOptions {
                system: Arc::clone(&reference),
                first_seed: 0,
                seeds: SEEDS,
                jobs: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
                backend: Backend::Memdb,
                check_determinism: false,
                every_fault,
                shape: Default::default(),
                registry: Default::default(),
            },
            &|_, _| {},
        );
        let failures: Vec<String> = report
            .failures
            .iter()
            .map(|result| {
                let verdict = result.outcome.failure.as_ref().map_or_else(
                    || "did not settle".to_owned(),
                    |failure| failure.invariant.clone(),
                );
                format!("seed {}: {verdict}", result.outcome.seed)
            })
            .chain(
                report
                    .errors
                    .iter()
                    .map(|(seed, error)| format!("seed {seed}: {error}")),
            )
            .collect();
        assert!(
            failures.is_empty(),
            "every_fault {every_fault}: {}",
            failures.join("; ")
        );
    }
}
