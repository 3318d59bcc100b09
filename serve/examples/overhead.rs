//! The adapter's overhead, measured: requests per second through the served reference receiver,
//! beside a bare axum handler that writes the same receipt row on the same kind of connection.
//! Run `cargo run --release -p commitgap-serve --example overhead -- [REQUESTS] [CLIENTS]`.
//!
//! Both servers run in this process on localhost with four SQLite connections each (WAL,
//! `synchronous = FULL`, 5 s busy timeout), in a fresh temporary directory, and `CLIENTS` threads
//! post `REQUESTS` signed payments in all. The served receiver does what the reference does per
//! delivery (verify the signature, parse the event, insert the receipt, move the order, insert the
//! obligation, in one transaction); the bare handler inserts the receipt alone, in one transaction.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use commitgap_serve::env::{Connections, Pool, Stop};
use commitgap_serve::receiver::Receiver;
use commitgap_serve::workers::create_database;
use commitgap_sim::domain::Domain;
use commitgap_sim::domain::payments::{AMOUNT, PAYMENT, Payments};
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::signing::{CURRENT_GENERATION, receiver_settings, signed_delivery};
use commitgap_sim::system::{Fixtures, SubjectFixture, System};
use commitgap_sim::systems::ReferenceSystem;
use commitgap_sim::workload::EventSpec;

const CONNECTIONS: usize = 4;

fn main() {
    let mut arguments = std::env::args().skip(1);
    let requests: usize = arguments
        .next()
        .and_then(|text| text.parse().ok())
        .unwrap_or(4_000);
    let clients: usize = arguments.next().and_then(|text| text.parse().ok()).unwrap_or(8);
    let directory = std::env::temp_dir().join(format!("commitgap-overhead-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("a temporary directory");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");

    let served_database = directory.join("served.db");
    let system: Arc<dyn System> = Arc::new(ReferenceSystem::reference());
    let fixtures = Fixtures {
        accounts: vec![("acct-a".to_owned(), "tenant-a".to_owned())],
        subjects: (0..requests)
            .map(|index| SubjectFixture::new("tenant-a", &format!("order-{index}")).with(AMOUNT, 1250))
            .collect(),
    };
    create_database(&served_database, &*system, &fixtures).expect("the served database");
    let settings: BTreeMap<String, String> = receiver_settings(["acct-a"]);
    let connections = Connections {
        database: served_database,
        busy_timeout_ms: system.busy_timeout_ms(),
        settings: settings.into_iter().collect(),
    };
    let pool = Pool::open(&connections, "receiver", CONNECTIONS, &Stop::new()).expect("connections");
    let served = Receiver::new(Arc::clone(&system), pool).router();
    let served_rate = measure(&runtime, served, "webhooks/acct-a", requests, clients);

    let bare_database = directory.join("bare.db");
    create_database(&bare_database, &*system, &fixtures).expect("the bare database");
    let bare = bare_router(&bare_database);
    let bare_rate = measure(&runtime, bare, "bare/acct-a", requests, clients);

    println!("served reference receiver: {served_rate:.0} requests/s");
    println!("bare axum handler writing the receipt row: {bare_rate:.0} requests/s");
    println!(
        "the served receiver takes {:.2}x the bare handler's time per request ({requests} requests, {clients} clients, {CONNECTIONS} connections each)",
        bare_rate / served_rate
    );
    let _ = std::fs::remove_dir_all(&directory);
}

type Connections4 = Arc<Mutex<Vec<Connection>>>;

fn bare_router(database: &std::path::Path) -> Router {
    let pool: Vec<Connection> = (0..CONNECTIONS)
        .map(|_| {
            let connection = Connection::open(database).expect("a connection");
            connection
                .busy_timeout(std::time::Duration::from_millis(5_000))
                .expect("busy timeout");
            connection
                .pragma_update(None, "synchronous", "FULL")
                .expect("synchronous");
            connection
        })
        .collect();
    Router::new()
        .route("/bare/{endpoint}", post(bare_insert))
        .with_state(Arc::new(Mutex::new(pool)))
}

async fn bare_insert(
    State(pool): State<Connections4>,
    Path(endpoint): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let event_id = headers
        .get("webhook-id")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let inserted = tokio::task::spawn_blocking(move || {
        let connection = loop {
            if let Some(connection) = pool.lock().expect("the pool").pop() {
                break connection;
            }
            std::thread::yield_now();
        };
        let digest = commitgap_sim::commitgap::receiver::body_digest(&body);
        let inserted = connection
            .execute_batch("BEGIN IMMEDIATE")
            .and_then(|()| {
                connection.execute(
                    "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES (?1, ?2, ?3, ?4)",
                    (&endpoint, &event_id, 0_i64, &digest),
                )
            })
            .and_then(|_| connection.execute_batch("COMMIT"));
        pool.lock().expect("the pool").push(connection);
        inserted.is_ok()
    })
    .await;
    match inserted {
        Ok(true) => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// Serves `router` on a free port and posts `requests` signed payments at `path` from `clients`
/// threads; returns requests per second.
fn measure(
    runtime: &tokio::runtime::Runtime,
    router: Router,
    path: &str,
    requests: usize,
    clients: usize,
) -> f64 {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a port");
    let base = format!("http://{}/{path}", listener.local_addr().expect("an address"));
    let (stop, stops) = tokio::sync::oneshot::channel::<()>();
    let served = runtime.spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = stops.await;
            })
            .await
    });
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock")
        .as_secs() as i64;
    let deliveries: Vec<_> = (0..requests)
        .map(|index| {
            let mut event = EventSpec::new("acct-a", "tenant-a", &format!("order-{index}"), PAYMENT, 0);
            event.event_id = format!("evt-{index}");
            let body = Payments.body(&event.with(AMOUNT, 1250)).into_bytes();
            signed_delivery("acct-a", &format!("msg_{index}"), now_s, body, CURRENT_GENERATION)
        })
        .collect();
    let deliveries = Arc::new(deliveries);
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|client| {
            let (deliveries, base) = (Arc::clone(&deliveries), base.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().build();
                for delivery in deliveries.iter().skip(client).step_by(clients) {
                    let answer = agent
                        .post(&base)
                        .set("webhook-id", &delivery.headers.id)
                        .set("webhook-timestamp", &delivery.headers.timestamp)
                        .set("webhook-signature", &delivery.headers.signature)
                        .send_bytes(&delivery.body);
                    assert!(answer.is_ok(), "{base}: {answer:?}");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a client");
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let _ = stop.send(());
    let _ = runtime.block_on(served);
    requests as f64 / elapsed_s
}
