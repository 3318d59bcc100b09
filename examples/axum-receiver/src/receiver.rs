//! The HTTP receiver: `POST /webhooks/{account}` takes one signed delivery of one payment event,
//! `GET /healthz` says the process is up.
//!
//! A delivery passes the door before it touches the database: a body within the limit (413
//! otherwise, without reading the rest), a Standard Webhooks signature by one of the endpoint's
//! secrets within the timestamp tolerance (401), a body that is a payment event (422), and an event
//! that names the endpoint's own account (403). Then [`crate::inbox::take`] commits its receipt
//! and its work on a blocking thread, and the answer follows the commit: 200 once committed (or
//! taken before), 422 for what can never be taken, 503 when the database could not do it now.
//!
//! On SIGTERM the server stops accepting, finishes the requests in flight and returns. This
//! module must not answer 2xx before COMMIT returned, and must not call the provider.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use rusqlite::Connection;

use crate::db;
use crate::event::PaymentEvent;
use crate::inbox::{self, Outcome};
use crate::settings::ReceiverSettings;
use crate::signature::{self, SignedHeaders};

/// What every request shares: the settings, and idle connections to reuse.
struct Receiver {
    database: PathBuf,
    process: String,
    settings: ReceiverSettings,
    /// Connections not in use. A request takes one (or opens one) for its transaction and puts
    /// it back after, so a busy receiver holds as many as it has requests in flight.
    idle: Mutex<Vec<Connection>>,
}

/// An answer: a status and a short text saying why.
type Answer = (StatusCode, String);

/// Serves the receiver on `listen` until SIGTERM (or Ctrl-C), then finishes the requests in
/// flight and returns.
pub async fn serve(
    listen: SocketAddr,
    database: PathBuf,
    settings: ReceiverSettings,
    process: String,
) -> Result<(), String> {
    // Opening one connection at start finds a wrong path or schema before the first delivery.
    let first =
        db::open(&database, &process).map_err(|error| format!("cannot open the database: {error}"))?;
    let body_limit = settings.body_limit;
    let receiver = Arc::new(Receiver {
        database,
        process,
        settings,
        idle: Mutex::new(vec![first]),
    });
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/webhooks/{account}", post(deliver))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(Arc::clone(&receiver));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|error| format!("cannot listen on {listen}: {error}"))?;
    let shutdown = crate::shutdown_signal()?;
    eprintln!("{}: receiving on {listen}", receiver.process);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|error| format!("the server failed: {error}"))?;
    eprintln!(
        "{}: stopped after finishing the requests in flight",
        receiver.process
    );
    Ok(())
}

/// One delivery. The body arrives as bytes, already bounded by the body limit (axum answers 413
/// for a larger one), since the signature is over the bytes as sent.
async fn deliver(
    State(receiver): State<Arc<Receiver>>,
    Path(account): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let event = match receiver.door(&account, &headers, &body) {
        Ok(event) => event,
        Err(refused) => return refused,
    };
    let worker = Arc::clone(&receiver);
    let taken = tokio::task::spawn_blocking(move || worker.take(&event)).await;
    let answer = match taken {
        Ok(answer) => answer,
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the handler failed: {error}"),
        ),
    };
    if !answer.0.is_success() {
        eprintln!(
            "{}: {account}: {} {}",
            receiver.process,
            answer.0.as_u16(),
            answer.1
        );
    }
    answer
}

impl Receiver {
    /// Everything checked before the database: signature, timestamp, body, the event's account.
    fn door(&self, account: &str, headers: &HeaderMap, body: &[u8]) -> Result<PaymentEvent, Answer> {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("")
        };
        let signed = SignedHeaders {
            id: header("webhook-id"),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
        };
        let keys = self.settings.keys.get(account).map_or(&[][..], Vec::as_slice);
        let now_s = db::now_ms().div_euclid(1_000);
        signature::verify(keys, signed, body, now_s, self.settings.tolerance_s)
            .map_err(|why| (StatusCode::UNAUTHORIZED, why))?;
        let event = PaymentEvent::parse(body).map_err(|why| (StatusCode::UNPROCESSABLE_ENTITY, why))?;
        // The body is the sender's to write; only the endpoint's secret says who sent it.
        if event.account != account {
            let why = format!(
                "the event names account {:?} but came to {account:?}",
                event.account
            );
            return Err((StatusCode::FORBIDDEN, why));
        }
        Ok(event)
    }

    /// Commits the event's receipt and work, on this blocking thread, and answers.
    fn take(&self, event: &PaymentEvent) -> Answer {
        let mut connection = match self.connection() {
            Ok(connection) => connection,
            Err(error) => return (StatusCode::SERVICE_UNAVAILABLE, format!("no database: {error}")),
        };
        let answer = match inbox::take(&mut connection, event, db::now_ms()) {
            Ok(Outcome::Applied) => (StatusCode::OK, "applied".to_owned()),
            Ok(Outcome::Unchanged) => (StatusCode::OK, "taken; the order did not change".to_owned()),
            Ok(Outcome::Duplicate) => (StatusCode::OK, "already taken".to_owned()),
            Ok(Outcome::Refused(why)) => (StatusCode::UNPROCESSABLE_ENTITY, why),
            // Busy or failed: nothing committed (the transaction rolled back when it was dropped),
            // so the sender is asked to come back.
            Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("try again: {error}")),
        };
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(connection);
        answer
    }

    fn connection(&self) -> rusqlite::Result<Connection> {
        let reused = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        match reused {
            Some(connection) => Ok(connection),
            None => db::open(&self.database, &self.process),
        }
    }
}
