//! Coverage of the paths worth testing: a default sweep of the reference reaches every
//! interesting situation, and each one is counted exactly when the world observes it, shown with
//! scripted scenarios that produce one situation on purpose and nothing else.

use std::collections::BTreeMap;
use std::sync::Arc;

use commitgap::receiver::{Answer, SuccessKind};
#[allow(unused_imports)]
use commitgap_sim::domain::payments::{AMOUNT, CANCEL, PAYMENT, Payments, REFUND, UPDATE};
use commitgap_sim::run::Backend;
use commitgap_sim::run::EventSpec;
use commitgap_sim::run::{Scenario, ScenarioSetup};
use commitgap_sim::sweep::Situation;
use commitgap_sim::sweep::{SweepOptions, sweep};
use commitgap_sim::system::{Fixtures, SubjectFixture};
use commitgap_sim::systems::{self, ReferenceSystem};

/// Seeds of the reference sweep below: the rarest situation was reached in about one seed in
/// ten when this was measured, so a few hundred leave a wide margin.
const REFERENCE_SEEDS: u64 = 300;

#[test]
fn a_default_sweep_of_the_reference_reaches_every_situation() {
    let options = SweepOptions {
        system: systems::by_name("reference").unwrap(),
        first_seed: 0,
        seeds: REFERENCE_SEEDS,
        jobs: 2,
        backend: Backend::Memdb,
        check_determinism: false,
        every_fault: false,
        shape: Default::default(),
        registry: Default::default(),
    };
    let report = sweep(&options, &|_, _| {});
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.coverage.seeds, REFERENCE_SEEDS);
    let named = [
        Situation::LostAckThenRetry,
        Situation::KeyExpiredWhileOwed,
        Situation::StaleWorkerFencedOut,
        Situation::PurgeThenRedelivery,
        Situation::CrashInsideTransaction,
    ];
    for situation in named.into_iter().chain(Situation::ALL) {
        let tally = report.coverage.situations[situation.name()];
        assert!(
            tally.count > 0 && tally.seeds > 0,
            "seeds 0..{REFERENCE_SEEDS} never reached {}: {:#?}",
            situation.name(),
            report.coverage.lines()
        );
    }
    assert_eq!(
        report.coverage.never_reached(),
        Vec::<&str>::new(),
        "{:#?}",
        report.coverage.lines()
    );
    // Every registered fault model is listed, fired or not.
    for kind in commitgap_sim::faults::built_in() {
        assert!(
            report.coverage.faults_fired.contains_key(kind.name),
            "{}",
            kind.name
        );
    }
    assert!(report.coverage.faults_fired["crash"].count > 0);
}

fn fixtures() -> Fixtures {
    Fixtures {
        accounts: vec![("account-a".to_owned(), "tenant-a".to_owned())],
        subjects: vec![SubjectFixture::new("tenant-a", "order-1").with(AMOUNT, 1250)],
    }
}

fn scenario() -> Scenario {
    let payment = {
        let mut event = EventSpec::new("account-a", "tenant-a", "order-1", PAYMENT, 0);
        event.event_id = String::from("evt-1");
        event.deliver_at_ms = 0;
        if commitgap_sim::domain::payments::carries_amount(&event.kind) {
            event = event.with(AMOUNT, 1250);
        }
        event
    };
    Scenario::new(
        Arc::new(ReferenceSystem::reference()),
        fixtures(),
        vec![payment],
        ScenarioSetup::default(),
    )
    .expect("the reference system sets up")
}

/// Delivers `evt-1` once at receiver 1 and runs everything to quiet.
fn deliver(scenario: &mut Scenario) -> Answer {
    let task = scenario.deliver(1, "evt-1").unwrap();
    scenario.run_until_quiet().unwrap();
    scenario.answer(task).expect("the handler answered")
}

#[test]
fn a_redelivery_after_its_receipt_was_purged_is_counted_once() {
    let mut scenario = scenario();
    assert_eq!(deliver(&mut scenario), Answer::Success(SuccessKind::Applied));
    assert_eq!(deliver(&mut scenario), Answer::Success(SuccessKind::Duplicate));
    assert_eq!(
        scenario.situation_count(Situation::PurgeThenRedelivery),
        0,
        "a redelivery while the receipt exists is no such thing"
    );

    scenario.purge_receipts(scenario.now_ms() + 1).unwrap();
    assert_eq!(scenario.count("SELECT count(*) FROM receipts").unwrap(), 0);
    assert_eq!(
        scenario.situation_count(Situation::PurgeThenRedelivery),
        0,
        "the purge alone is half of it"
    );
    // The order guard, not the receipt, keeps this from paying twice.
    assert_eq!(deliver(&mut scenario), Answer::Success(SuccessKind::NoTransition));
    assert_eq!(scenario.situation_count(Situation::PurgeThenRedelivery), 1);
    // A receipt exists again, so the next delivery is an ordinary duplicate.
    assert_eq!(deliver(&mut scenario), Answer::Success(SuccessKind::Duplicate));
    assert_eq!(
        scenario.situations(),
        BTreeMap::from([("purge-then-redelivery".to_owned(), 1)]),
        "nothing else was reached"
    );
    assert!(scenario.failures().is_empty(), "{:?}", scenario.failures());
}

#[test]
fn a_crash_counts_only_when_a_transaction_was_open() {
    let mut scenario = scenario();
    // Idle, with no transaction open: not the situation.
    scenario.crash("receiver-1").unwrap();
    scenario.run_until_quiet().unwrap();
    assert_eq!(scenario.situation_count(Situation::CrashInsideTransaction), 0);

    let task = scenario.deliver(1, "evt-1").unwrap();
    scenario.run_until_before(task, "COMMIT").unwrap();
    scenario.crash("receiver-1").unwrap();
    assert_eq!(scenario.situation_count(Situation::CrashInsideTransaction), 1);
    scenario.run_until_quiet().unwrap();
    assert_eq!(scenario.answer(task), None, "a crashed handler answers nothing");
    assert_eq!(scenario.count("SELECT count(*) FROM receipts").unwrap(), 0);
    assert!(scenario.failures().is_empty(), "{:?}", scenario.failures());
}
