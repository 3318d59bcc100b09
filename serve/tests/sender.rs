//! The real sender delivers to a served receiver and keeps the simulator's books: every stream
//! acknowledged when the receiver answers 2xx, and the preset's whole schedule of retries, in
//! compressed time, when nobody answers.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commitgap_serve::env::{Connections, Pool, Stop};
use commitgap_serve::receiver::Receiver;
use commitgap_serve::sender::{SenderPlan, deliver};
use commitgap_serve::workers::create_database;
use commitgap_sim::domain::payments::{AMOUNT, PAYMENT, Payments};
use commitgap_sim::peers::receiver_settings;
use commitgap_sim::peers::{EventState, SenderPreset};
use commitgap_sim::run::EventSpec;
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::system::{Fixtures, SubjectFixture, System};
use commitgap_sim::systems::ReferenceSystem;
use common::Server;

fn payments(orders: usize) -> Vec<EventSpec> {
    (0..orders)
        .map(|index| {
            let mut event = EventSpec::new("acct-a", "tenant-a", &format!("order-{index}"), PAYMENT, 0);
            event.event_id = format!("evt-{index}");
            event.deliver_at_ms = i64::try_from(index).unwrap() * 1_000;
            event.with(AMOUNT, 1250)
        })
        .collect()
}

#[test]
fn every_stream_is_acknowledged_by_a_served_receiver() {
    let directory = std::env::temp_dir().join(format!("commitgap-serve-sender-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    let database = directory.join("sender.db");
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::reference());
    let fixtures = Fixtures {
        accounts: vec![("acct-a".into(), "tenant-a".into())],
        subjects: (0..5)
            .map(|index| SubjectFixture::new("tenant-a", &format!("order-{index}")).with(AMOUNT, 1250))
            .collect(),
    };
    create_database(&database, &*system, &fixtures).unwrap();
    let settings: BTreeMap<String, String> = receiver_settings(["acct-a"]);
    let connections = Connections {
        database: database.clone(),
        busy_timeout_ms: system.busy_timeout_ms(),
        settings: settings.into_iter().collect(),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let receiver = Receiver::new(
        Arc::clone(&system),
        Pool::open(&connections, "receiver", 2, &Stop::new()).unwrap(),
    );
    let server = Server::start(&runtime, receiver.router());

    let plan = SenderPlan {
        preset: SenderPreset::StripeLike,
        compression: 100,
        receivers: vec![server.base.clone()],
        concurrency: 2,
        duplicate: commitgap_sim::rng::Ratio::new(0, 1),
        seed: 1,
        redeliver_from: None,
    };
    let events = payments(5);
    let run = deliver(
        &events,
        &Payments,
        |_| false,
        &plan,
        &Stop::new(),
        Instant::now() + Duration::from_secs(30),
    );
    server.stop(&runtime);

    assert_eq!(run.sender.unsettled(), 0, "{:?}", run.attempts);
    assert!(
        run.sender
            .streams()
            .iter()
            .all(|stream| stream.state == EventState::Acknowledged)
    );
    assert_eq!(run.attempts.len(), 5);
    assert!(run.attempts.iter().all(|attempt| attempt.outcome == Ok(200)));
    let receipts: i64 = Connection::open(&database)
        .unwrap()
        .query_row("SELECT count(*) FROM receipts", [], |row| row.get(0))
        .unwrap();
    assert_eq!(receipts, 5);
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn with_nobody_answering_the_sender_runs_its_whole_schedule_and_gives_up() {
    // A port that was free a moment ago: connections to it are refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let preset = SenderPreset::ShopifyLike;
    let plan = SenderPlan {
        preset,
        // Shopify's four hours in about 1.5 s.
        compression: 10_000,
        receivers: vec![base],
        concurrency: 2,
        duplicate: commitgap_sim::rng::Ratio::new(0, 1),
        seed: 1,
        redeliver_from: None,
    };
    let run = deliver(
        &payments(1),
        &Payments,
        |_| false,
        &plan,
        &Stop::new(),
        Instant::now() + Duration::from_secs(30),
    );
    assert_eq!(run.sender.stream(0).state, EventState::GaveUp);
    assert_eq!(run.sender.given_up(), vec![0]);
    assert!(run.attempts.iter().all(|attempt| attempt.outcome.is_err()));
    let scheduled = preset
        .retry_delays_ms()
        .iter()
        .scan(0, |elapsed, delay| {
            *elapsed += delay;
            Some(*elapsed)
        })
        .take_while(|elapsed| *elapsed <= preset.horizon_ms())
        .count();
    // The first attempt and every retry; compressed time stretches each attempt's few real
    // milliseconds into seconds, which may push the last retry past the horizon.
    assert!(
        (scheduled..=scheduled + 1).contains(&run.attempts.len()),
        "{} attempts for a schedule of {scheduled} retries",
        run.attempts.len()
    );
}
