//! How `explore` compares with sampling, per planted bug: runs to the first failure over ten
//! explorer seeds against seeds to the first failure over ten sampled starts, with the wall time
//! of each. docs/power.md, "Exploring against sampling", has the table this prints and how it was
//! made: `cargo run --release -p commitgap-sim --example explore_power -- [RUNS_MAX] [STARTS]
//! [MARGIN_SECONDS]`.
//!
//! Besides the catalogue's bugs it measures two of its own: a relay that reads the provider's
//! 409 as done, which sampling catches in about one seed in 250; and the reference's
//! reconciliation margin narrowed by its clock-skew term, which no sampled sweep has caught
//! (explored and swept for MARGIN_SECONDS each, both on two threads).

use std::sync::Arc;
use std::time::Instant;

use commitgap_sim::commitgap::env::{DbError, Env};
use commitgap_sim::commitgap::provider::{CallError, ProviderReply};
use commitgap_sim::commitgap::receiver::ReceiverSteps;
use commitgap_sim::commitgap::reference::Reference;
use commitgap_sim::commitgap::relay::{Claim, Reconciled, RelaySettings, RelaySteps};
use commitgap_sim::explore::{ExploreOptions, explore};
use commitgap_sim::run::{Backend, Registry, RunOptions, run_seed};
use commitgap_sim::sweep::{StopFlag, SweepLimits, SweepOptions, sweep_with_limits};
use commitgap_sim::system::System;
use commitgap_sim::systems::{self, ReferenceSystem, Variant};

/// A relay written as a new user would: a 409 ("a request with this key is in progress")
/// read as "the provider has it", so the obligation is marked done. But the request in
/// progress may still fail, and then the obligation is done with nothing behind it.
struct ConflictReadAsDone;

impl ReceiverSteps for ConflictReadAsDone {}

impl RelaySteps for ConflictReadAsDone {
    async fn record_reply(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        claim: &Claim,
        reply: Result<ProviderReply, CallError>,
    ) -> Result<(), DbError> {
        match reply {
            Ok(ProviderReply::Conflict) => self.complete(env, claim, "in-progress").await,
            other => Reference.record_reply(env, settings, claim, other).await,
        }
    }
}

impl Variant for ConflictReadAsDone {
    fn name(&self) -> &'static str {
        "conflict-read-as-done"
    }
    fn description(&self) -> String {
        "reads the provider's 409 as done".to_owned()
    }
}

/// The reference with its reconciliation margin narrowed by its whole clock-skew term: a worker
/// whose clock runs behind the one that stamped the first attempt may send again, without a
/// lookup, a key the provider has already forgotten.
struct MarginWithoutSkew;

impl ReceiverSteps for MarginWithoutSkew {}

impl RelaySteps for MarginWithoutSkew {
    async fn reconcile(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        claim: &Claim,
        idempotency_key: &str,
    ) -> Result<Reconciled, DbError> {
        let narrowed = RelaySettings {
            clock_skew_ms_max: 0,
            ..settings.clone()
        };
        Reference.reconcile(env, &narrowed, claim, idempotency_key).await
    }
}

impl Variant for MarginWithoutSkew {
    fn name(&self) -> &'static str {
        "margin-without-skew"
    }
    fn description(&self) -> String {
        "the reconciliation margin narrowed by its clock-skew term".to_owned()
    }
}

/// Runs to the first failure of `system` under `explore` with explorer seed `seed`, or `None`
/// within `runs_max`.
fn explored(system: &Arc<dyn System>, seed: u64, runs_max: u64) -> Option<u64> {
    let report = explore(&options(system, seed, Some(runs_max), None), &mut |_| {});
    report.failures.first().map(|failure| failure.after_runs)
}

/// A search of `system` from explorer seed `seed`, on two threads, until its first failure or
/// its budget.
fn options(
    system: &Arc<dyn System>,
    seed: u64,
    runs: Option<u64>,
    time: Option<std::time::Duration>,
) -> ExploreOptions {
    ExploreOptions {
        system: Arc::clone(system),
        seed,
        runs,
        time,
        jobs: 2,
        backend: Backend::Memdb,
        every_fault: false,
        shape: Default::default(),
        registry: Arc::new(Registry::default()),
        steering: Default::default(),
        corpus_dir: None,
        seeds_dir: None,
        max_failures: Some(1),
        stop: StopFlag::new(),
    }
}

/// Seeds to the first failure of `system` sampling from `first_seed` on, or `None` within
/// `seeds_max`.
fn sampled(system: &Arc<dyn System>, first_seed: u64, seeds_max: u64) -> Option<u64> {
    (0..seeds_max).find_map(|offset| {
        let outcome = run_seed(system, first_seed + offset, &RunOptions::default()).ok()?;
        outcome.failure.map(|_| offset + 1)
    })
}

fn describe(found: &[Option<u64>], seconds: f64) -> String {
    let caught: Vec<u64> = found.iter().flatten().copied().collect();
    if caught.is_empty() {
        return format!("none caught ({seconds:.0} s)");
    }
    let mean = caught.iter().sum::<u64>() as f64 / caught.len() as f64;
    format!(
        "mean {mean:.1}, worst {}, caught {}/{} ({seconds:.0} s)",
        caught.iter().max().unwrap_or(&0),
        caught.len(),
        found.len()
    )
}

/// Explores and sweeps `system` for `seconds` each, both on two threads: runs or seeds made, and
/// whether (and after how many) a run failed.
fn margin(system: &Arc<dyn System>, seconds: u64) {
    let options = options(system, 1, None, Some(std::time::Duration::from_secs(seconds)));
    let report = explore(&options, &mut |_| {});
    println!(
        "{}: {} ({:.0} s)",
        system.name(),
        report.summary(),
        report.wall.as_secs_f64()
    );
    // A catch is the bug's only if the reference passes the very same run.
    if let Some(failure) = report.failures.first() {
        let reference = systems::by_name("reference").expect("the reference");
        let same_run = RunOptions {
            config: Some(failure.outcome.config.clone()),
            schedule: failure.outcome.schedule.clone(),
            ..RunOptions::default()
        };
        let verdict = run_seed(&reference, failure.outcome.seed, &same_run)
            .map(|outcome| format!("{:?}", outcome.failure.map(|failure| failure.invariant)));
        println!(
            "{}: failed {:?} in {} steps; the reference on the same run: {verdict:?}",
            system.name(),
            failure.outcome.failure.as_ref().map(|failure| &failure.invariant),
            failure.outcome.steps
        );
    }
    let sweep = SweepOptions {
        system: Arc::clone(system),
        first_seed: 0,
        seeds: u64::MAX / 2,
        jobs: 2,
        backend: Backend::Memdb,
        check_determinism: false,
        every_fault: false,
        shape: Default::default(),
        registry: Arc::new(Registry::default()),
    };
    let limits = SweepLimits {
        time_budget: Some(std::time::Duration::from_secs(seconds)),
        max_failures: std::num::NonZeroU64::new(1),
        ..SweepLimits::default()
    };
    let swept = sweep_with_limits(&sweep, &limits, &|_| {}, &|_| {});
    println!(
        "{}: sweep {} seeds, {} failing ({:.0} s)",
        system.name(),
        swept.seeds_run,
        swept.failures.len(),
        swept.wall.as_secs_f64()
    );
}

fn main() {
    let arguments: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|argument| argument.parse().ok())
        .collect();
    let runs_max = arguments.first().copied().unwrap_or(3_000);
    let starts = arguments.get(1).copied().unwrap_or(10);
    let margin_seconds = arguments.get(2).copied().unwrap_or(600);
    let bugs: Vec<Arc<dyn System>> = vec![
        systems::by_name("blind-retry-after-expiry").expect("a planted bug"),
        systems::by_name("unfenced-completion").expect("a planted bug"),
        Arc::new(ReferenceSystem::new(ConflictReadAsDone)),
    ];
    for bug in &bugs {
        let started = Instant::now();
        let explored: Vec<Option<u64>> = (1..=starts).map(|seed| explored(bug, seed, runs_max)).collect();
        let explore_seconds = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let sampled: Vec<Option<u64>> = (0..starts)
            .map(|start| sampled(bug, start * 1_000_000, runs_max))
            .collect();
        let sample_seconds = started.elapsed().as_secs_f64();
        println!(
            "{}: explore {:?} {}; sampling {:?} {}",
            bug.name(),
            explored,
            describe(&explored, explore_seconds),
            sampled,
            describe(&sampled, sample_seconds)
        );
    }
    margin(
        &(Arc::new(ReferenceSystem::new(MarginWithoutSkew)) as Arc<dyn System>),
        margin_seconds,
    );
}
