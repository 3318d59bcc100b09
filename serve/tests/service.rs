//! The reference, served: a real HTTP receiver on localhost, a relay worker calling a provider
//! double over HTTP, and the rows they leave in a real SQLite file. Every server and thread a
//! test starts is stopped by the test.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use commitgap_serve::env::{Connections, Pool, Stop};
use commitgap_serve::provider::HttpProvider;
use commitgap_serve::receiver::Receiver;
use commitgap_serve::workers::{create_database, run_relay_worker};
use commitgap_sim::commitgap::env::Env;
use commitgap_sim::commitgap::provider::{CallError, ProviderRequest};
use commitgap_sim::commitgap::realtime::ProviderClient;
use commitgap_sim::commitgap::receiver::{Answer, ReceiverSteps, WebhookDelivery, WebhookEvent};
use commitgap_sim::commitgap::reference::Reference;
use commitgap_sim::commitgap::relay::RelaySettings;
use commitgap_sim::commitgap::relay::RelaySteps;
use commitgap_sim::domain::Domain;
use commitgap_sim::domain::payments::{AMOUNT, PAYMENT, Payments};
use commitgap_sim::peers::{CURRENT_GENERATION, receiver_settings, signed_delivery};
use commitgap_sim::run::EventSpec;
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::system::{Fixtures, SubjectFixture, System};
use commitgap_sim::systems::{ReferenceSystem, Variant};
use common::Server;

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("commitgap-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

fn fixtures() -> Fixtures {
    Fixtures {
        accounts: vec![("acct-a".into(), "tenant-a".into())],
        subjects: vec![SubjectFixture::new("tenant-a", "order-1").with(AMOUNT, 1250)],
    }
}

fn payment_body() -> Vec<u8> {
    let mut event = EventSpec::new("acct-a", "tenant-a", "order-1", PAYMENT, 0);
    event.event_id = "evt-1".to_owned();
    Payments.body(&event.with(AMOUNT, 1250)).into_bytes()
}

fn now_s() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Posts `body` to the receiver at `base` as a Standard Webhooks delivery signed now, with the
/// signature `tamper` may spoil; returns the status.
fn post_delivery(base: &str, body: Vec<u8>, tamper: bool) -> u16 {
    let delivery = signed_delivery("acct-a", "msg_evt-1", now_s(), body, CURRENT_GENERATION);
    let mut signature = delivery.headers.signature.clone();
    if tamper {
        signature = signature.replace("v1,", "v1,AAAA");
    }
    // A bound, so that a receiver that stopped answering fails the test rather than hanging it.
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10)).build();
    let answer = agent
        .post(&format!("{base}/webhooks/acct-a"))
        .set("webhook-id", &delivery.headers.id)
        .set("webhook-timestamp", &delivery.headers.timestamp)
        .set("webhook-signature", &signature)
        .send_bytes(&delivery.body);
    match answer {
        Ok(response) => response.status(),
        Err(ureq::Error::Status(status, _)) => status,
        Err(error) => panic!("the receiver did not answer: {error}"),
    }
}

/// A provider double that performs each key once and records every request's key.
fn provider_double(keys: Arc<Mutex<Vec<String>>>) -> Router {
    Router::new().route(
        "/effects",
        post(move |headers: HeaderMap, _body: String| {
            let keys = Arc::clone(&keys);
            async move {
                let key = headers
                    .get("Idempotency-Key")
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let mut keys = keys.lock().unwrap();
                let replayed = keys.contains(&key);
                keys.push(key);
                (
                    StatusCode::OK,
                    format!(r#"{{"effect_id":"shp-1","replayed":{replayed}}}"#),
                )
            }
        }),
    )
}

/// Runs one relay worker against the provider at `provider_url` until `done` holds (or ten
/// seconds pass), then stops it at its next sleep and waits for its thread.
fn ship_with_one_worker(
    system: &Arc<dyn System>,
    connections: &Connections,
    provider_url: &str,
    done: &dyn Fn() -> bool,
) {
    let stop = Stop::new();
    let worker = {
        let system = Arc::clone(system);
        let provider = HttpProvider::new(provider_url).unwrap();
        let env = connections.open("relay-1", Box::new(provider), &stop).unwrap();
        let stop = stop.clone();
        std::thread::spawn(move || run_relay_worker(&system, env, RelaySettings::default(), &stop))
    };
    for _ in 0..200 {
        if done() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.request();
    worker.join().unwrap();
}

#[test]
fn a_served_receiver_and_relay_deliver_one_effect_over_http() {
    let directory = scratch("end-to-end");
    let database = directory.join("service.db");
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::reference());
    create_database(&database, &*system, &fixtures()).unwrap();
    assert!(
        create_database(&database, &*system, &fixtures())
            .unwrap_err()
            .contains("exists already"),
        "an existing database is never overwritten"
    );
    let settings: BTreeMap<String, String> = receiver_settings(["acct-a"]);
    let connections = Connections {
        database: database.clone(),
        busy_timeout_ms: system.busy_timeout_ms(),
        settings: settings.into_iter().collect(),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // The receiver, through its own `serve`, which flips readiness at shutdown.
    let pool = Pool::open(&connections, "receiver", 2, &Stop::new()).unwrap();
    let receiver = Receiver::new(Arc::clone(&system), pool);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (shut_receiver, receiver_stops) = tokio::sync::oneshot::channel::<()>();
    let served = runtime.spawn(async move {
        receiver
            .serve(listener, async {
                let _ = receiver_stops.await;
            })
            .await
    });
    let keys = Arc::new(Mutex::new(Vec::new()));
    let provider = Server::start(&runtime, provider_double(Arc::clone(&keys)));

    assert_eq!(
        ureq::get(&format!("{base}/healthz")).call().unwrap().status(),
        200
    );
    assert_eq!(ureq::get(&format!("{base}/readyz")).call().unwrap().status(), 200);
    assert_eq!(post_delivery(&base, payment_body(), true), 401, "a bad signature");
    assert_eq!(post_delivery(&base, payment_body(), false), 200, "the payment");
    assert_eq!(
        post_delivery(&base, payment_body(), false),
        200,
        "its retry, a duplicate"
    );
    let mut oversized = payment_body();
    oversized.resize(system.body_bytes_max() + 1, b' ');
    assert_eq!(
        post_delivery(&base, oversized, false),
        413,
        "one byte over the limit"
    );

    let reader = Connection::open(&database).unwrap();
    let status = || -> String {
        reader
            .query_row("SELECT status FROM outbox", [], |row| row.get(0))
            .unwrap()
    };
    ship_with_one_worker(&system, &connections, &provider.base, &|| status() == "done");
    let _ = shut_receiver.send(());
    runtime.block_on(served).unwrap().unwrap();
    provider.stop(&runtime);

    assert_eq!(status(), "done");
    let receipts: i64 = reader
        .query_row("SELECT count(*) FROM receipts", [], |row| row.get(0))
        .unwrap();
    assert_eq!(receipts, 1, "one receipt for the payment and its retry");
    let operation_key: String = reader
        .query_row("SELECT operation_key FROM outbox", [], |row| row.get(0))
        .unwrap();
    assert_eq!(
        *keys.lock().unwrap(),
        vec![operation_key],
        "one request, with the persisted key as its header"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn a_provider_that_does_not_answer_in_time_is_an_ambiguous_timeout() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let slow = Router::new().route(
        "/effects",
        post(|| async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            "late"
        }),
    );
    let server = Server::start(&runtime, slow);
    let provider = HttpProvider::new(&server.base).unwrap();
    let send = ProviderRequest::Send {
        idempotency_key: "k-1".to_owned(),
        payload: "{}".to_owned(),
    };
    assert_eq!(provider.call(&send, 200), Err(CallError::Timeout));
    server.stop(&runtime);
    // Nobody listens any more: the connection is refused, which is unavailable, not a reply.
    assert!(matches!(
        provider.call(&send, 200),
        Err(CallError::Unavailable(_))
    ));
}

/// The reference, except that its door panics on a body that says "boom".
#[derive(Debug, Clone, Copy, Default)]
struct PanicsOnBoom;

impl ReceiverSteps for PanicsOnBoom {
    fn authenticate(&self, env: &dyn Env, delivery: &WebhookDelivery) -> Result<WebhookEvent, Answer> {
        assert!(
            !String::from_utf8_lossy(&delivery.body).contains("boom"),
            "a handler that panics"
        );
        Reference.authenticate(env, delivery)
    }
}

impl RelaySteps for PanicsOnBoom {}

impl Variant for PanicsOnBoom {
    fn name(&self) -> &'static str {
        "panics-on-boom"
    }

    fn description(&self) -> String {
        "the receiver panics on a body that says boom".to_owned()
    }
}

#[test]
fn a_handler_that_panics_gets_500_and_does_not_drain_the_pool() {
    let directory = scratch("panics");
    let database = directory.join("service.db");
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::new(PanicsOnBoom));
    create_database(&database, &*system, &fixtures()).unwrap();
    let connections = Connections {
        database,
        busy_timeout_ms: system.busy_timeout_ms(),
        settings: receiver_settings(["acct-a"]).into_iter().collect(),
    };
    // Not dropped if the test fails: a runtime waits for its blocked handlers when it is dropped,
    // and a drained pool would block one for ever, so the failure would hang instead of failing.
    let runtime = std::mem::ManuallyDrop::new(tokio::runtime::Runtime::new().unwrap());
    // One connection: without its replacement the first panic would leave none.
    let pool = Pool::open(&connections, "receiver", 1, &Stop::new()).unwrap();
    let server = Server::start(&runtime, Receiver::new(Arc::clone(&system), pool).router());
    for _ in 0..3 {
        assert_eq!(post_delivery(&server.base, b"{\"boom\":1}".to_vec(), false), 500);
    }
    assert_eq!(post_delivery(&server.base, payment_body(), false), 200);
    server.stop(&runtime);
    drop(std::mem::ManuallyDrop::into_inner(runtime));
    let _ = std::fs::remove_dir_all(&directory);
}

/// Leaves its transaction for the framework to commit after the answer, with a row that breaks a
/// deferred foreign key: the COMMIT the adapter runs for it fails.
struct CommitFails;

const ORPHANS_SQL: &str = "CREATE TABLE parents (id INTEGER PRIMARY KEY);
CREATE TABLE orphans (parent_id INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED);";

impl ReceiverSteps for CommitFails {
    async fn commit_and_answer(
        &self,
        env: &dyn Env,
        _incoming: &commitgap_sim::commitgap::receiver::Incoming<'_>,
        outcome: Result<commitgap_sim::commitgap::receiver::Outcome, commitgap_sim::commitgap::env::DbError>,
    ) -> Answer {
        if let Err(error) = outcome {
            return Answer::RetryLater(error.to_string());
        }
        if let Err(error) = env
            .execute("INSERT INTO orphans (parent_id) VALUES (42)", &[])
            .await
        {
            return Answer::RetryLater(error.to_string());
        }
        Answer::Success(commitgap_sim::commitgap::receiver::SuccessKind::Applied)
    }
}

impl RelaySteps for CommitFails {}

impl Variant for CommitFails {
    fn name(&self) -> &'static str {
        "commit-fails"
    }

    fn description(&self) -> String {
        "the framework commits after the answer, and that commit fails".to_owned()
    }

    fn schema_sql(&self) -> String {
        format!("{}\n{ORPHANS_SQL}", commitgap_sim::commitgap::schema::SCHEMA_SQL)
    }

    fn commits_after_answer(&self) -> bool {
        true
    }
}

#[test]
fn a_commit_after_the_answer_that_fails_is_answered_500_and_keeps_nothing() {
    let directory = scratch("commit-fails");
    let database = directory.join("service.db");
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::new(CommitFails));
    create_database(&database, &*system, &fixtures()).unwrap();
    let connections = Connections {
        database: database.clone(),
        busy_timeout_ms: system.busy_timeout_ms(),
        settings: receiver_settings(["acct-a"]).into_iter().collect(),
    };
    let runtime = std::mem::ManuallyDrop::new(tokio::runtime::Runtime::new().unwrap());
    let pool = Pool::open(&connections, "receiver", 1, &Stop::new()).unwrap();
    // Foreign keys are enforced per connection; the deferred one makes the COMMIT fail.
    let env = pool.take();
    commitgap_sim::commitgap::realtime::block_on(env.execute("PRAGMA foreign_keys = ON", &[])).unwrap();
    pool.give_back(env);
    let server = Server::start(&runtime, Receiver::new(Arc::clone(&system), pool).router());
    // The system answered success; the work was not kept, so the sender must deliver again.
    assert_eq!(post_delivery(&server.base, payment_body(), false), 500);
    assert_eq!(post_delivery(&server.base, payment_body(), false), 500);
    server.stop(&runtime);
    drop(std::mem::ManuallyDrop::into_inner(runtime));
    let connection = Connection::open(&database).unwrap();
    let count = |table: &str| -> i64 {
        connection
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| row.get(0))
            .unwrap()
    };
    assert_eq!((count("receipts"), count("orphans")), (0, 0), "nothing was kept");
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn a_set_up_that_fails_leaves_no_database_and_init_runs_again() {
    let directory = scratch("failed-set-up");
    let database = directory.join("service.db");
    let system = ReferenceSystem::reference();
    // The second order has the first one's key: the set-up fails after writing the schema, the
    // account and the first order, all in the one transaction it runs in.
    let mut twice = fixtures();
    twice.subjects.push(twice.subjects[0].clone());
    let error = create_database(&database, &system, &twice).unwrap_err();
    assert!(
        error.contains("set-up failed") && error.contains("UNIQUE"),
        "{error}"
    );
    assert!(
        !database.exists(),
        "a failed set-up leaves no half-made database behind"
    );
    create_database(&database, &system, &fixtures()).unwrap();
    let orders: i64 = Connection::open(&database)
        .unwrap()
        .query_row("SELECT count(*) FROM orders", [], |row| row.get(0))
        .unwrap();
    assert_eq!(orders, 1);
    let _ = std::fs::remove_dir_all(&directory);
}
