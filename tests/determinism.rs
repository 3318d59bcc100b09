//! Determinism is the product: a seed gives the same trace on every run, whatever the number of
//! sweep threads, for the reference and for a failing system alike, and `--check-determinism`
//! finds no divergence.

use std::sync::Arc;

use commitgap_sim::db::Backend;
use commitgap_sim::sweep::{SweepOptions, sweep};
use commitgap_sim::systems;

fn digests(system: &str, jobs: usize, check_determinism: bool) -> Vec<(u64, String)> {
    let options = SweepOptions {
        system: Arc::clone(&systems::by_name(system).unwrap()),
        first_seed: 500,
        seeds: 40,
        jobs,
        backend: Backend::Memdb,
        check_determinism,
        every_fault: false,
    };
    let report = sweep(&options, &|_, _| {});
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    for result in &report.failures {
        assert_eq!(result.divergence, None, "seed {} diverged", result.outcome.seed);
    }
    report.digests
}

#[test]
fn same_seeds_give_same_digests_across_runs_and_job_counts() {
    for system in ["reference", "key-per-attempt"] {
        let one_job = digests(system, 1, false);
        let two_jobs = digests(system, 2, true);
        assert_eq!(one_job.len(), 40);
        assert_eq!(one_job, two_jobs, "{system}");
        let distinct: std::collections::BTreeSet<_> = one_job.iter().map(|(_, digest)| digest).collect();
        assert_eq!(distinct.len(), 40, "different seeds give different runs");
    }
}
