//! The adapter's overhead, measured: requests per second through the served reference receiver,
//! beside a bare axum handler that writes the same receipt row on the same kind of connection.
//! Run `cargo run --release -p commitgap-serve --example overhead -- [REQUESTS] [CLIENTS] [ROUNDS]`.
//!
//! Both servers run in this process on localhost with four SQLite connections each (WAL,
//! `synchronous = FULL`, 5 s busy timeout), in a fresh temporary directory, and `CLIENTS` threads
//! post `REQUESTS` signed payments to each. The served receiver does what the reference does per
//! delivery (verify the signature, parse the event, insert the receipt, move the order, insert the
//! obligation, in one transaction); the bare handler inserts the receipt alone, in one transaction,
//! and rolls back and answers 503 when a statement fails, as the served one does.
//!
//! The two are measured in `ROUNDS` interleaved rounds (served then bare, then bare then served),
//! so that a machine whose load changes during the run slows both alike; the ratio is what to
//! quote, with the date, the machine and its load. A request that is not answered 2xx is counted
//! and reported, never a reason to stop.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
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
use commitgap_sim::peers::{CURRENT_GENERATION, receiver_settings, signed_delivery};
use commitgap_sim::run::EventSpec;
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::system::{Fixtures, SubjectFixture, System};
use commitgap_sim::systems::ReferenceSystem;

const CONNECTIONS: usize = 4;

fn main() {
    let mut arguments = std::env::args().skip(1);
    let mut number = |default: usize| {
        arguments
            .next()
            .and_then(|text| text.parse::<usize>().ok())
            .unwrap_or(default)
            .max(1)
    };
    let (requests, clients, rounds) = (number(4_000), number(8), number(4));
    let directory = std::env::temp_dir().join(format!("commitgap-overhead-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("a temporary directory");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");

    let system: Arc<dyn System> = Arc::new(ReferenceSystem::reference());
    let fixtures = Fixtures {
        accounts: vec![("acct-a".to_owned(), "tenant-a".to_owned())],
        subjects: (0..requests)
            .map(|index| SubjectFixture::new("tenant-a", &format!("order-{index}")).with(AMOUNT, 1250))
            .collect(),
    };
    let served_database = directory.join("served.db");
    create_database(&served_database, &*system, &fixtures).expect("the served database");
    let settings: BTreeMap<String, String> = receiver_settings(["acct-a"]);
    let connections = Connections {
        database: served_database,
        busy_timeout_ms: system.busy_timeout_ms(),
        settings: settings.into_iter().collect(),
    };
    let pool = Pool::open(&connections, "receiver", CONNECTIONS, &Stop::new()).expect("connections");
    let receiver = Receiver::new(Arc::clone(&system), pool);
    let served = Listening::start(&runtime, "webhooks/acct-a", move |listener, stops| async move {
        receiver.serve(listener, stops).await
    });
    let bare_database = directory.join("bare.db");
    create_database(&bare_database, &*system, &fixtures).expect("the bare database");
    let bare_router = bare_router(&bare_database);
    let bare = Listening::start(&runtime, "bare/acct-a", move |listener, stops| async move {
        axum::serve(listener, bare_router)
            .with_graceful_shutdown(stops)
            .await
    });

    let deliveries = deliveries(requests);
    let (mut served_tally, mut bare_tally) = (Tally::default(), Tally::default());
    for (round, chunk) in deliveries.chunks(requests.div_ceil(rounds)).enumerate() {
        if round % 2 == 0 {
            served_tally.add(post_all(&served.base, chunk, clients));
            bare_tally.add(post_all(&bare.base, chunk, clients));
        } else {
            bare_tally.add(post_all(&bare.base, chunk, clients));
            served_tally.add(post_all(&served.base, chunk, clients));
        }
    }
    served.stop(&runtime);
    bare.stop(&runtime);

    println!("served reference receiver: {served_tally}");
    println!("bare axum handler writing the receipt row: {bare_tally}");
    println!(
        "the served receiver's throughput is {:.2}x the bare handler's ({requests} requests each, {clients} clients, {CONNECTIONS} connections each, {rounds} interleaved rounds)",
        served_tally.per_second() / bare_tally.per_second()
    );
    let _ = std::fs::remove_dir_all(&directory);
}

/// What one server answered, and how long it took, over every round.
#[derive(Default)]
struct Tally {
    answered_2xx: usize,
    failed: usize,
    elapsed_s: f64,
}

impl Tally {
    fn add(&mut self, (answered_2xx, failed, elapsed_s): (usize, usize, f64)) {
        self.answered_2xx += answered_2xx;
        self.failed += failed;
        self.elapsed_s += elapsed_s;
    }

    fn per_second(&self) -> f64 {
        (self.answered_2xx + self.failed) as f64 / self.elapsed_s.max(f64::EPSILON)
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "{:.0} requests/s, {} answered 2xx, {} not",
            self.per_second(),
            self.answered_2xx,
            self.failed
        )
    }
}

/// A server on a free localhost port until [`Listening::stop`].
struct Listening {
    base: String,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Listening {
    fn start<F, S>(runtime: &tokio::runtime::Runtime, path: &str, serve: S) -> Listening
    where
        S: FnOnce(tokio::net::TcpListener, std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> F,
        F: Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a port");
        let base = format!("http://{}/{path}", listener.local_addr().expect("an address"));
        let (stop, stops) = tokio::sync::oneshot::channel::<()>();
        let stops: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async {
            let _ = stops.await;
        });
        let served = runtime.spawn(serve(listener, stops));
        Listening { base, stop, served }
    }

    fn stop(self, runtime: &tokio::runtime::Runtime) {
        let _ = self.stop.send(());
        if let Ok(Err(error)) = runtime.block_on(self.served) {
            eprintln!("{}: {error}", self.base);
        }
    }
}

/// The bare handler's connections, lent as the served receiver's pool lends its own: a handler
/// with none free waits on the condition variable, it does not spin.
type Connections4 = Arc<(Mutex<Vec<Connection>>, Condvar)>;

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
        .with_state(Arc::new((Mutex::new(pool), Condvar::new())))
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
        let (free, returned) = &*pool;
        let mut connections = free.lock().unwrap_or_else(PoisonError::into_inner);
        let connection = loop {
            if let Some(connection) = connections.pop() {
                break connection;
            }
            connections = returned
                .wait(connections)
                .unwrap_or_else(PoisonError::into_inner);
        };
        drop(connections);
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
        // A connection goes back clean, as the served receiver gives its own back.
        if !connection.is_autocommit() {
            let _ = connection.execute_batch("ROLLBACK");
        }
        free.lock().unwrap_or_else(PoisonError::into_inner).push(connection);
        returned.notify_one();
        inserted.is_ok()
    })
    .await;
    match inserted {
        Ok(true) => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// `requests` signed payments, one per order.
fn deliveries(requests: usize) -> Vec<commitgap_sim::commitgap::receiver::WebhookDelivery> {
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock")
        .as_secs() as i64;
    (0..requests)
        .map(|index| {
            let mut event = EventSpec::new("acct-a", "tenant-a", &format!("order-{index}"), PAYMENT, 0);
            event.event_id = format!("evt-{index}");
            let body = Payments.body(&event.with(AMOUNT, 1250)).into_bytes();
            signed_delivery("acct-a", &format!("msg_{index}"), now_s, body, CURRENT_GENERATION)
        })
        .collect()
}

/// Posts `deliveries` to `base` from `clients` threads; returns how many were answered 2xx, how
/// many were not (or got no answer), and the seconds it took.
fn post_all(
    base: &str,
    deliveries: &[commitgap_sim::commitgap::receiver::WebhookDelivery],
    clients: usize,
) -> (usize, usize, f64) {
    let answered_2xx = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for client in 0..clients {
            let (answered_2xx, failed) = (&answered_2xx, &failed);
            scope.spawn(move || {
                let agent = ureq::AgentBuilder::new().build();
                for delivery in deliveries.iter().skip(client).step_by(clients) {
                    let answer = agent
                        .post(base)
                        .set("webhook-id", &delivery.headers.id)
                        .set("webhook-timestamp", &delivery.headers.timestamp)
                        .set("webhook-signature", &delivery.headers.signature)
                        .send_bytes(&delivery.body);
                    let counter = if answer.is_ok() { answered_2xx } else { failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    (
        answered_2xx.into_inner(),
        failed.into_inner(),
        started.elapsed().as_secs_f64(),
    )
}
