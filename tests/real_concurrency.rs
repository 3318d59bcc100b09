//! The concurrency claim checked for real, outside the simulator: 16 OS threads, each with its own
//! connection to one WAL file, deliver the same event through the real-time `Env` at the same
//! moment. SQLite admits one writer at a time; `BEGIN IMMEDIATE` with a busy timeout queues the
//! others, and the receipt's unique key turns every later transaction into a duplicate. The result
//! must be one receipt, one paid order and one obligation, with every delivery answered 2xx.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use commitgap::env::{Env, int, text};
use commitgap::provider::{CallError, ProviderReply, ProviderRequest};
use commitgap::realtime::{ProviderClient, RealEnv, block_on, create_database};
use commitgap::receiver::{Answer, SuccessKind, WebhookDelivery, receive, secrets_setting};
use commitgap::schema::{INSERT_ACCOUNT_SQL, INSERT_ORDER_SQL};
use commitgap::signature::{SigningSecret, WebhookHeaders, sign};

/// The receiver never calls the provider; this client proves it.
struct NoProvider;

impl ProviderClient for NoProvider {
    fn call(&self, request: &ProviderRequest, _timeout_ms: i64) -> Result<ProviderReply, CallError> {
        panic!("the receiver called the provider: {request:?}")
    }
}

/// A database file in a directory of its own, removed when dropped.
struct TempDatabase {
    directory: PathBuf,
}

impl TempDatabase {
    fn new(name: &str) -> TempDatabase {
        let directory = std::env::temp_dir().join(format!("commitgap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        TempDatabase { directory }
    }

    fn path(&self) -> PathBuf {
        self.directory.join("receiver.sqlite")
    }
}

impl Drop for TempDatabase {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

/// The endpoint secret of `account-a`, as a deployment would configure it.
fn secret() -> SigningSecret {
    SigningSecret::from_bytes(b"the endpoint secret of account-a, 32b")
}

fn open(path: &Path, process_id: &str) -> RealEnv {
    RealEnv::open(path, process_id, Duration::from_secs(10), Box::new(NoProvider))
        .unwrap()
        .with_settings([(secrets_setting("account-a"), secret().to_string())])
}

fn count(env: &RealEnv, sql: &str) -> i64 {
    block_on(env.query(sql, &[])).unwrap()[0].int(0).unwrap()
}

#[test]
fn sixteen_threads_delivering_one_event_leave_one_receipt_and_one_obligation() {
    let database = TempDatabase::new("real-concurrency");
    let path = database.path();
    create_database(&path).unwrap();
    let setup = open(&path, "setup");
    block_on(setup.execute(INSERT_ACCOUNT_SQL, &[text("account-a"), text("tenant-a")])).unwrap();
    block_on(setup.execute(
        INSERT_ORDER_SQL,
        &[text("tenant-a"), text("order-1"), int(1250), int(0)],
    ))
    .unwrap();

    let body = br#"{"id":"evt-17","type":"payment.succeeded","account":"account-a","order":"order-1","amount_cents":1250,"created_ms":0}"#.to_vec();
    // Signed now by the wall clock, as the real receiver checks it against its own.
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let delivery = WebhookDelivery {
        endpoint: "account-a".into(),
        headers: WebhookHeaders {
            id: "msg_evt-17".into(),
            timestamp: now_s.to_string(),
            signature: sign(&secret(), "msg_evt-17", now_s, &body),
        },
        body,
    };
    let start = Arc::new(Barrier::new(16));
    let threads: Vec<_> = (0..16)
        .map(|index| {
            let (path, delivery, start) = (path.clone(), delivery.clone(), Arc::clone(&start));
            std::thread::spawn(move || {
                let env = open(&path, &format!("receiver-{index}"));
                start.wait();
                // A sender would retry a 503; with a 10 s busy timeout one attempt should do.
                (0..5)
                    .map(|_| block_on(receive(&env, &delivery)))
                    .find(Answer::is_success)
                    .expect("a delivery succeeds within five attempts")
            })
        })
        .collect();
    let answers: Vec<Answer> = threads.into_iter().map(|thread| thread.join().unwrap()).collect();

    let applied = answers
        .iter()
        .filter(|answer| **answer == Answer::Success(SuccessKind::Applied))
        .count();
    let duplicates = answers
        .iter()
        .filter(|answer| **answer == Answer::Success(SuccessKind::Duplicate))
        .count();
    assert_eq!((applied, duplicates), (1, 15), "{answers:?}");
    assert_eq!(count(&setup, "SELECT count(*) FROM receipts"), 1);
    assert_eq!(count(&setup, "SELECT count(*) FROM outbox"), 1);
    assert_eq!(
        count(&setup, "SELECT count(*) FROM orders WHERE status = 'paid'"),
        1
    );
}
