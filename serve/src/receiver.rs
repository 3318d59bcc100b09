//! The HTTP receiver: `POST /webhooks/{endpoint}` runs the system's handler, `GET /healthz` says
//! the process is up, `GET /readyz` says it takes deliveries.
//!
//! A request becomes a `WebhookDelivery` with its raw body bytes (never re-encoded: the signature
//! covers them) and the three Standard Webhooks headers as they arrived; a missing header is
//! passed on empty, for the system's own verification to refuse. Bodies over the system's
//! declared limit ([`System::body_bytes_max`]) are refused with 413 before they are read whole.
//! The handler runs on a pooled connection in the blocking pool, since the system's code is
//! synchronous under a real `Env`, and its `Answer` becomes the status and a one-line body.
//!
//! A handler that returns with a transaction open is the system's bug (the simulator's
//! `task-closes-its-transaction` judges it); here the transaction is committed if the system says
//! its framework commits after the answer, and rolled back otherwise, before the connection is
//! reused. This module must not answer for the system: every status comes from the `Answer`,
//! except the size limit, a missing endpoint and a handler that panicked (500).
//!
//! [`System::body_bytes_max`]: commitgap_sim::system::System::body_bytes_max

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use commitgap_sim::commitgap::env::Env;
use commitgap_sim::commitgap::realtime::block_on;
use commitgap_sim::commitgap::receiver::{Answer, WebhookDelivery};
use commitgap_sim::commitgap::signature::WebhookHeaders;
use commitgap_sim::system::System;

use crate::env::{Pool, ServiceEnv};

/// What the receiver's handlers share.
#[derive(Clone)]
pub struct Receiver {
    system: Arc<dyn System>,
    pool: Arc<Pool>,
    ready: Arc<AtomicBool>,
}

impl Receiver {
    /// A receiver for `system` on the connections of `pool`.
    pub fn new(system: Arc<dyn System>, pool: Pool) -> Receiver {
        Receiver {
            system,
            pool: Arc::new(pool),
            ready: Arc::new(AtomicBool::new(true)),
        }
    }

    /// The routes, with the system's body limit.
    pub fn router(&self) -> Router {
        // One byte over the limit is enough for the system's own check to see the body is too
        // large; the rest is never read.
        let limit = self.system.body_bytes_max().saturating_add(1);
        Router::new()
            .route("/webhooks/{endpoint}", post(deliver))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(ready))
            .layer(DefaultBodyLimit::max(limit))
            .with_state(self.clone())
    }

    /// Serves on `listener` until `shutdown` completes, then stops accepting, answers
    /// `/readyz` with 503 and finishes the requests in flight before it returns.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let ready = Arc::clone(&self.ready);
        axum::serve(listener, self.router())
            .with_graceful_shutdown(async move {
                shutdown.await;
                ready.store(false, Ordering::SeqCst);
            })
            .await
    }
}

async fn ready(State(receiver): State<Receiver>) -> (StatusCode, &'static str) {
    if receiver.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    }
}

async fn deliver(
    State(receiver): State<Receiver>,
    Path(endpoint): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let delivery = WebhookDelivery {
        endpoint,
        headers: WebhookHeaders {
            id: header("webhook-id"),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
        },
        body: body.to_vec(),
    };
    let handled = tokio::task::spawn_blocking(move || handle(&receiver, delivery)).await;
    match handled {
        Ok(Ok(answer)) => {
            let status = StatusCode::from_u16(answer.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, answer.to_string())
        }
        Ok(Err(failed_commit)) => (StatusCode::INTERNAL_SERVER_ERROR, failed_commit),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the handler panicked; nothing it had not committed was kept".to_owned(),
        ),
    }
}

/// Runs the system's handler on a pooled connection and gives the connection back clean. A
/// handler that panics loses its connection (closed as it unwinds, which rolls back what it had
/// open); the pool opens another in its place, so that panics cannot drain it. `Err` when the
/// transaction the handler left for the framework to commit could not be committed: the answer
/// must not claim work that was not kept.
fn handle(receiver: &Receiver, delivery: WebhookDelivery) -> Result<Answer, String> {
    let mut lent = Lent {
        pool: &receiver.pool,
        given_back: false,
    };
    let env = Rc::new(receiver.pool.take());
    let answer = block_on(
        receiver
            .system
            .handle_delivery(Rc::clone(&env) as Rc<dyn Env>, delivery),
    );
    // The handler's future is finished and dropped, so this is the only reference left.
    let env: ServiceEnv =
        Rc::try_unwrap(env).unwrap_or_else(|_| unreachable!("the handler's future is dropped"));
    let closed = close_left_transaction(&env, receiver.system.commits_after_answer());
    receiver.pool.give_back(env);
    lent.given_back = true;
    closed.map(|()| answer)
}

/// A connection lent to one request: if the request unwinds before giving it back, the pool
/// replaces it.
struct Lent<'a> {
    pool: &'a Pool,
    given_back: bool,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if !self.given_back {
            self.pool.replace_lost();
        }
    }
}

/// Ends a transaction the handler left open: committed when the system's framework commits after
/// the answer, rolled back otherwise. Outside a transaction SQLite refuses both, which is the
/// ordinary case and is not logged.
///
/// A system whose framework commits after the answer is served more safely than that: the
/// commit comes before the answer leaves, and a commit that fails (a busy or full database)
/// turns the answer into a 500, so that the sender delivers again. `Err` carries that answer.
fn close_left_transaction(env: &ServiceEnv, commits_after_answer: bool) -> Result<(), String> {
    let statement = if commits_after_answer {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    match block_on(env.execute(statement, &[])) {
        Ok(_) => {
            env.log(&format!(
                "the handler left a transaction open; the adapter ran {statement}"
            ));
            Ok(())
        }
        Err(error) if commits_after_answer && !error.to_string().contains("no transaction is active") => {
            let _ = block_on(env.execute("ROLLBACK", &[]));
            env.log(&format!("the adapter's COMMIT after the handler failed: {error}"));
            Err(format!(
                "the work could not be committed ({error}); deliver again"
            ))
        }
        Err(_) => Ok(()),
    }
}

/// Completes on SIGTERM (what an orchestrator sends to stop a process) or Ctrl-C.
pub async fn shutdown_signal() {
    let interrupted = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminated = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminated = std::future::pending::<()>();
    tokio::select! {
        () = interrupted => {}
        () = terminated => {}
    }
}
