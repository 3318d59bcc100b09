//! Determinism is the product: a seed gives the same trace on every run, whatever the number of
//! sweep threads, for the reference and for a failing system alike, and `--check-determinism`
//! finds no divergence.

use std::sync::Arc;

use commitgap_sim::run::Backend;
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
        shape: Default::default(),
        registry: Default::default(),
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

/// The reference system with a planted nondeterminism: every other run, across the whole
/// process, its relay workers sleep one extra millisecond before they start, as a system that
/// read a global counter or the wall clock would.
struct FlakySystem {
    inner: Arc<dyn commitgap_sim::system::System>,
    runs: std::sync::atomic::AtomicU64,
}

impl commitgap_sim::system::System for FlakySystem {
    fn name(&self) -> &str {
        "flaky"
    }
    fn description(&self) -> &str {
        "the reference, with relay start-up that depends on how many runs came before"
    }
    fn set_up(
        &self,
        connection: &rusqlite::Connection,
        fixtures: &commitgap_sim::system::Fixtures,
    ) -> Result<(), commitgap::env::DbError> {
        self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.set_up(connection, fixtures)
    }
    fn handle_delivery(
        &self,
        env: std::rc::Rc<dyn commitgap::env::Env>,
        delivery: commitgap::receiver::WebhookDelivery,
    ) -> commitgap::env::LocalBoxFuture<'static, commitgap::receiver::Answer> {
        self.inner.handle_delivery(env, delivery)
    }
    fn run_relay_worker(
        &self,
        env: std::rc::Rc<dyn commitgap::env::Env>,
        settings: commitgap::relay::RelaySettings,
    ) -> commitgap::env::LocalBoxFuture<'static, ()> {
        let odd = self.runs.load(std::sync::atomic::Ordering::Relaxed) % 2 == 1;
        let worker = self.inner.run_relay_worker(env.clone(), settings);
        Box::pin(async move {
            if odd {
                env.sleep_ms(1).await;
            }
            worker.await;
        })
    }
    fn purge_receipts(
        &self,
        env: std::rc::Rc<dyn commitgap::env::Env>,
        older_than_ms: i64,
    ) -> commitgap::env::LocalBoxFuture<'static, ()> {
        self.inner.purge_receipts(env, older_than_ms)
    }
    fn requeue_dead_obligations(
        &self,
        env: std::rc::Rc<dyn commitgap::env::Env>,
    ) -> commitgap::env::LocalBoxFuture<'static, ()> {
        self.inner.requeue_dead_obligations(env)
    }
    fn observed_tables(&self) -> &[&'static str] {
        self.inner.observed_tables()
    }
    fn decode_row(
        &self,
        table: &str,
        values: &[rusqlite::types::Value],
    ) -> Result<commitgap_sim::system::ObservedRow, String> {
        self.inner.decode_row(table, values)
    }
}

#[test]
fn a_nondeterministic_system_is_caught_and_shown_side_by_side() {
    let system: Arc<dyn commitgap_sim::system::System> = Arc::new(FlakySystem {
        inner: systems::by_name("reference").unwrap(),
        runs: std::sync::atomic::AtomicU64::new(0),
    });
    let options = SweepOptions {
        system,
        first_seed: 0,
        seeds: 3,
        jobs: 1,
        backend: Backend::Memdb,
        check_determinism: true,
        every_fault: false,
        shape: Default::default(),
        registry: Default::default(),
    };
    let report = sweep(&options, &|_, _| {});
    let divergence = report
        .failures
        .iter()
        .find_map(|result| result.divergence.clone())
        .expect("the check finds the planted nondeterminism");
    assert_ne!(divergence.first.first(), divergence.second.first());
    let rows = divergence.side_by_side(60);
    assert!(rows.len() > 2, "a window of lines, not one: {rows:#?}");
    assert!(rows[1].starts_with('*'), "the first row shown differs: {rows:#?}");
    assert!(rows[1].contains(" | "), "two columns: {rows:#?}");
}

/// A sweep thread reuses its databases from seed to seed (set up again as new each time); a run
/// on its own gets a new database. Both must give the same trace, on both backends, for a system
/// whose runs commit and for one that fails.
#[test]
fn a_reused_database_gives_the_same_trace_as_a_new_one() {
    use commitgap_sim::run::{RunOptions, run_seed};
    for (system_name, backend) in [
        ("reference", Backend::Memdb),
        ("reference", Backend::WalFile),
        ("unfenced-completion", Backend::Memdb),
        ("check-then-insert", Backend::Memdb),
    ] {
        let system = systems::by_name(system_name).unwrap();
        let options = SweepOptions {
            system: Arc::clone(&system),
            first_seed: 7_000,
            seeds: 16,
            jobs: 1,
            backend,
            check_determinism: false,
            every_fault: true,
            shape: Default::default(),
            registry: Default::default(),
        };
        let swept = sweep(&options, &|_, _| {}).digests;
        assert_eq!(swept.len(), 16);
        for (seed, digest) in swept {
            let alone = run_seed(
                &system,
                seed,
                &RunOptions {
                    backend,
                    every_fault: true,
                    ..RunOptions::default()
                },
            )
            .unwrap();
            assert_eq!(
                alone.digest, digest,
                "{system_name} on {backend:?}, seed {seed}: a reused database changed the run"
            );
        }
    }
}
