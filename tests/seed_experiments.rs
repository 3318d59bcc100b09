//! The five results of the experiment this project grew from, as deterministic scenarios on the
//! reference system.
//!
//! The original experiment (a Node script against SQLite) showed five separate guarantees: a
//! failure before the outbox insert rolls everything back; 16 concurrent deliveries of one event
//! leave one receipt, one paid order and one obligation; a second event for a paid order adds no
//! obligation; a lost provider acknowledgment is retried with the persisted key and payload and
//! leaves one effect; and after receipts are deleted, the surviving order state keeps a replayed
//! event from creating a second obligation. Each test below scripts the same situation through
//! the simulator (real crashes instead of thrown errors, a real relay instead of a hand-written
//! retry) and also checks that no safety invariant failed along the way.

use std::sync::Arc;

use commitgap::provider::ProviderRequest;
use commitgap::receiver::{Answer, SuccessKind};
use commitgap::relay::RelaySettings;
#[allow(unused_imports)]
use commitgap_sim::domain::payments::{AMOUNT, CANCEL, PAYMENT, Payments, REFUND, UPDATE};
use commitgap_sim::run::EventSpec;
use commitgap_sim::run::{Scenario, ScenarioSetup};
use commitgap_sim::system::{Fixtures, SubjectFixture};
use commitgap_sim::systems::ReferenceSystem;

fn fixtures() -> Fixtures {
    Fixtures {
        accounts: vec![("account-a".to_owned(), "tenant-a".to_owned())],
        subjects: vec![SubjectFixture::new("tenant-a", "order-1").with(AMOUNT, 1250)],
    }
}

fn payment(event_id: &str) -> EventSpec {
    {
        let mut event = EventSpec::new("account-a", "tenant-a", "order-1", PAYMENT, 0);
        event.event_id = String::from(event_id);
        event.deliver_at_ms = 0;
        if commitgap_sim::domain::payments::carries_amount(&event.kind) {
            event = event.with(AMOUNT, 1250);
        }
        event
    }
}

fn scenario(setup: ScenarioSetup) -> Scenario {
    Scenario::new(
        Arc::new(ReferenceSystem::reference()),
        fixtures(),
        vec![payment("evt-17"), payment("evt-18")],
        setup,
    )
    .expect("the reference system sets up")
}

fn counts(scenario: &Scenario) -> (i64, i64, String) {
    let receipts = scenario.count("SELECT count(*) FROM receipts").unwrap();
    let obligations = scenario.count("SELECT count(*) FROM outbox").unwrap();
    let status = scenario
        .read("SELECT status FROM orders WHERE id = 'order-1'")
        .unwrap()[0]
        .text(0)
        .unwrap()
        .to_owned();
    (receipts, obligations, status)
}

#[test]
fn a_crash_before_the_outbox_insert_leaves_receipt_order_and_outbox_unchanged() {
    let mut scenario = scenario(ScenarioSetup::default());
    let delivery = scenario.deliver(1, "evt-17").unwrap();
    scenario.run_until_before(delivery, "INSERT INTO outbox").unwrap();
    // The receipt insert and the order update have run inside the open transaction.
    scenario.crash("receiver-1").unwrap();
    scenario.run_until_quiet().unwrap();

    assert_eq!(
        scenario.answer(delivery),
        None,
        "a crashed handler answers nothing"
    );
    assert_eq!(counts(&scenario), (0, 0, "awaiting_payment".to_owned()));
    assert!(scenario.failures().is_empty(), "{:?}", scenario.failures());
    assert!(
        scenario
            .trace()
            .iter()
            .any(|line| line.contains("1 open transaction rolled back")),
        "the crash interrupted the transaction"
    );
}

#[test]
fn sixteen_concurrent_deliveries_give_one_receipt_one_paid_order_one_obligation() {
    let setup = ScenarioSetup {
        receivers: 16,
        seed: 7,
        ..ScenarioSetup::default()
    };
    let mut scenario = scenario(setup);
    // Like a sender, deliver again wherever the answer was "retry later", until all 16 succeed.
    let deliveries: Vec<(u32, &str)> = (1..=16).map(|receiver| (receiver, "evt-17")).collect();
    let (answers, rounds) = scenario.deliver_until_answered(&deliveries, 50).unwrap();
    assert!(answers.iter().all(Answer::is_success), "{answers:?}");
    assert_eq!(
        answers
            .iter()
            .filter(|answer| **answer == Answer::Success(SuccessKind::Applied))
            .count(),
        1
    );
    // Each connection waits out its busy timeout for the write lock, as rusqlite's do, so the
    // sixteen transactions queue for it and none has to be delivered again.
    assert_eq!(rounds, 1, "no delivery was answered 'retry later'");
    let waits = scenario
        .trace()
        .iter()
        .filter(|line| line.contains("waits for the lock"))
        .count();
    assert!(
        waits >= 15,
        "the 16 transactions contended for the write lock: {waits} waits"
    );
    assert_eq!(counts(&scenario), (1, 1, "paid".to_owned()));
    assert!(scenario.failures().is_empty(), "{:?}", scenario.failures());
}

#[test]
fn a_distinct_event_for_the_paid_order_creates_no_second_obligation() {
    let mut scenario = scenario(ScenarioSetup::default());
    let first = scenario.deliver(1, "evt-17").unwrap();
    scenario.run_until_quiet().unwrap();
    let second = scenario.deliver(1, "evt-18").unwrap();
    scenario.run_until_quiet().unwrap();

    assert_eq!(
        scenario.answer(first),
        Some(Answer::Success(SuccessKind::Applied))
    );
    assert_eq!(
        scenario.answer(second),
        Some(Answer::Success(SuccessKind::NoTransition))
    );
    assert_eq!(counts(&scenario), (2, 1, "paid".to_owned()));
    assert!(scenario.failures().is_empty(), "{:?}", scenario.failures());
}

#[test]
fn a_lost_provider_acknowledgment_is_retried_with_the_persisted_key_and_payload() {
    let setup = ScenarioSetup {
        relay_workers: 1,
        relay: RelaySettings::default(),
        ..ScenarioSetup::default()
    };
    let mut scenario = scenario(setup);
    scenario.drop_provider_replies(1);
    scenario.deliver(1, "evt-17").unwrap();
    scenario.run_until_quiet().unwrap();

    let sends: Vec<(String, String)> = scenario
        .provider_requests()
        .into_iter()
        .filter_map(|request| match request {
            ProviderRequest::Send {
                idempotency_key,
                payload,
            } => Some((idempotency_key, payload)),
            ProviderRequest::Lookup { .. } => None,
        })
        .collect();
    assert_eq!(
        sends.len(),
        2,
        "one send whose reply was lost, one retry: {sends:?}"
    );
    assert_eq!(
        sends[0], sends[1],
        "the retry reuses the persisted key and payload"
    );
    assert_eq!(sends[0].0, "tenant-a/order-1/fulfill/v1");
    let persisted = scenario.read("SELECT payload, status FROM outbox").unwrap();
    assert_eq!(persisted[0].text(0).unwrap(), sends[0].1);
    assert_eq!(persisted[0].text(1).unwrap(), "done");
    assert_eq!(scenario.effects().len(), 1, "the provider deduplicated the retry");
    assert!(scenario.failures().is_empty(), "{:?}", scenario.failures());
    assert_eq!(scenario.check_liveness(), None);
}

#[test]
fn after_receipts_are_deleted_the_order_state_keeps_a_replay_from_owing_twice() {
    let mut scenario = scenario(ScenarioSetup::default());
    scenario.deliver(1, "evt-17").unwrap();
    scenario.run_until_quiet().unwrap();
    scenario.purge_receipts(scenario.now_ms() + 1).unwrap();
    assert_eq!(counts(&scenario), (0, 1, "paid".to_owned()));

    let replay = scenario.deliver(1, "evt-17").unwrap();
    scenario.run_until_quiet().unwrap();
    assert_eq!(
        scenario.answer(replay),
        Some(Answer::Success(SuccessKind::NoTransition)),
        "the receipt is gone, so the event is processed again, but the order guard holds"
    );
    assert_eq!(counts(&scenario), (1, 1, "paid".to_owned()));
    assert!(scenario.failures().is_empty(), "{:?}", scenario.failures());
}
