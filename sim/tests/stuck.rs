//! Stuck is a verdict: a system that will never finish after heal fails
//! `work-progresses-after-heal` with what is stuck, at the step the world can tell, instead of
//! running to the liveness bound and ending "did not settle"; and its failure shrinks like any
//! other. A correct system never trips it (the sweeps of every preset in the test suite, and the
//! false-alarm sweeps whose figures docs/guide.md gives).

use std::sync::Arc;

use commitgap_sim::commitgap::env::{DbError, Env};
use commitgap_sim::commitgap::receiver::{Incoming, ReceiverSteps, Recorded, begin, insert_receipt};
use commitgap_sim::commitgap::relay::{Claim, RelaySettings, RelaySteps};
use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::system::System;
use commitgap_sim::systems::{ReferenceSystem, Variant};

/// A relay that performs every request but never records the outcome: the provider remembers the
/// key, so nothing is done twice, but the obligation is owed for ever and taken up again at every
/// lease's end.
#[derive(Debug, Clone, Copy, Default)]
struct NeverCompletes;

impl ReceiverSteps for NeverCompletes {}

impl RelaySteps for NeverCompletes {
    async fn complete(&self, _env: &dyn Env, _claim: &Claim, _effect_id: &str) -> Result<(), DbError> {
        Ok(())
    }
}

impl Variant for NeverCompletes {
    fn name(&self) -> &'static str {
        "never-completes"
    }

    fn description(&self) -> String {
        "the relay never records a completed request".to_owned()
    }
}

/// A relay whose claim never takes anything: every obligation stays owed, untouched.
#[derive(Debug, Clone, Copy, Default)]
struct NeverClaims;

impl ReceiverSteps for NeverClaims {}

impl RelaySteps for NeverClaims {
    async fn claim(
        &self,
        _env: &dyn Env,
        _settings: &RelaySettings,
        _operation_key: &str,
    ) -> Result<Option<Claim>, DbError> {
        Ok(None)
    }
}

impl Variant for NeverClaims {
    fn name(&self) -> &'static str {
        "never-claims"
    }

    fn description(&self) -> String {
        "the relay's claim never takes an obligation".to_owned()
    }
}

/// A receiver whose receipt insert fails on a redelivery, as one without `ON CONFLICT` does: the
/// first delivery of each event is applied, and every later one is answered 503 the same way.
#[derive(Debug, Clone, Copy, Default)]
struct RefusesRedeliveries;

impl ReceiverSteps for RefusesRedeliveries {
    async fn record_receipt(&self, env: &dyn Env, incoming: &Incoming<'_>) -> Result<Recorded, DbError> {
        if let Err(answer) = begin(env).await {
            return Ok(Recorded::Answered(answer));
        }
        if insert_receipt(env, incoming).await? {
            return Ok(Recorded::New);
        }
        Err(DbError::Constraint(
            "UNIQUE constraint failed: receipts.account, receipts.event_id".to_owned(),
        ))
    }
}

impl RelaySteps for RefusesRedeliveries {}

impl Variant for RefusesRedeliveries {
    fn name(&self) -> &'static str {
        "refuses-redeliveries"
    }

    fn description(&self) -> String {
        "the receiver fails every redelivery of an event it has a receipt for".to_owned()
    }
}

#[test]
fn a_delivery_refused_the_same_way_after_heal_is_stuck_and_named() {
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::new(RefusesRedeliveries));
    let mut stuck = 0;
    for seed in 0..20 {
        let outcome = run_seed(&system, seed, &RunOptions::default()).unwrap();
        assert!(
            outcome.unsettled.is_none(),
            "seed {seed}: {:?}",
            outcome.unsettled
        );
        let Some(failure) = outcome.failure else {
            continue;
        };
        if failure.invariant == "work-progresses-after-heal" {
            assert!(
                failure.message.contains("times since heal") && failure.message.contains("each time"),
                "seed {seed}: {}",
                failure.message
            );
            stuck += 1;
        }
    }
    assert!(stuck >= 3, "{stuck} of 20 seeds were judged stuck");
}

/// The run of a receiver stuck on one event shrinks to that event's deliveries.
#[test]
fn a_receiver_stuck_on_one_event_shrinks_to_a_few_hundred_steps() {
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::new(RefusesRedeliveries));
    let options = RunOptions {
        record_schedule: true,
        ..RunOptions::default()
    };
    let (seed, outcome) = (0..20)
        .map(|seed| (seed, run_seed(&system, seed, &options).unwrap()))
        .find(|(_, outcome)| {
            outcome
                .failure
                .as_ref()
                .is_some_and(|failure| failure.invariant == "work-progresses-after-heal")
        })
        .expect("a seed is stuck");
    let schedule = outcome.schedule.expect("the run was written down");
    let shrunk = commitgap_sim::sweep::shrink(&system, seed, &outcome.config, &schedule, 1000).unwrap();
    assert_eq!(shrunk.shrunk.failure.invariant, "work-progresses-after-heal");
    println!("seed {seed}: {} -> {} steps", outcome.steps, shrunk.shrunk.steps);
    assert!(shrunk.shrunk.steps <= 600, "{}", shrunk.summary());
}

#[test]
fn an_obligation_no_worker_takes_up_is_stuck_and_named() {
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::new(NeverClaims));
    let mut stuck = 0;
    for seed in 0..10 {
        let outcome = run_seed(&system, seed, &RunOptions::default()).unwrap();
        assert!(
            outcome.unsettled.is_none(),
            "seed {seed}: {:?}",
            outcome.unsettled
        );
        if let Some(failure) = outcome.failure
            && failure.invariant == "work-progresses-after-heal"
        {
            // Judged as soon as the wait outlasts the relay's own, or at the bound when the
            // workers spin through the steps faster than virtual time moves.
            assert!(
                failure.message.contains("no worker has taken it up")
                    || failure.message.contains("no worker took it up"),
                "{}",
                failure.message
            );
            stuck += 1;
        }
    }
    assert!(stuck >= 3, "{stuck} of 10 seeds were judged stuck");
}

#[test]
fn a_relay_that_never_completes_is_stuck_not_unsettled() {
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::new(NeverCompletes));
    let mut stuck = 0;
    for seed in 0..20 {
        let outcome = run_seed(&system, seed, &RunOptions::default()).unwrap();
        assert!(
            outcome.unsettled.is_none(),
            "seed {seed}: {:?}",
            outcome.unsettled
        );
        // A workload in which no order is paid owes nothing, and passes.
        let Some(failure) = outcome.failure else {
            continue;
        };
        if failure.invariant == "work-progresses-after-heal" {
            stuck += 1;
            assert!(
                failure.message.contains("still owed"),
                "seed {seed}: {}",
                failure.message
            );
            println!("seed {seed}: step {} {}", failure.step, failure.message);
        }
    }
    assert!(stuck >= 5, "{stuck} of 20 seeds were judged stuck");
}

/// The stuck run shrinks to the one obligation that is stuck: a few hundred steps, where the run
/// from its seed took thousands.
#[test]
fn a_stuck_run_shrinks_to_a_few_hundred_steps() {
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::new(NeverCompletes));
    let options = RunOptions {
        record_schedule: true,
        ..RunOptions::default()
    };
    let outcome = run_seed(&system, 9, &options).unwrap();
    let failure = outcome.failure.expect("seed 9 is stuck");
    assert_eq!(failure.invariant, "work-progresses-after-heal");
    let schedule = outcome.schedule.expect("the run was written down");
    let shrunk = commitgap_sim::sweep::shrink(&system, 9, &outcome.config, &schedule, 400).unwrap();
    assert_eq!(shrunk.shrunk.failure.invariant, "work-progresses-after-heal");
    println!("{} -> {} steps", outcome.steps, shrunk.shrunk.steps);
    assert!(shrunk.shrunk.steps <= 400, "{}", shrunk.summary());
}

/// With the invariant turned off, the same stuck run goes on to its bound and ends unsettled, as
/// every stuck run did before: the verdict is the invariant's, never the bound's.
#[test]
fn without_the_invariant_a_stuck_run_reaches_its_bound() {
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::new(NeverCompletes));
    let options = RunOptions {
        shape: commitgap_sim::run::WorkloadShape {
            without_invariants: vec!["work-progresses-after-heal".to_owned()],
            ..Default::default()
        },
        ..RunOptions::default()
    };
    let outcome = run_seed(&system, 9, &options).unwrap();
    assert!(outcome.failure.is_none(), "{:?}", outcome.failure);
    let unsettled = outcome.unsettled.expect("the run reaches its bound");
    assert!(unsettled.pending.contains("owed obligation"), "{unsettled}");
    assert!(outcome.steps > 375, "{} steps", outcome.steps);
}
