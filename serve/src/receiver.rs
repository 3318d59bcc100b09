//! The HTTP receiver: `POST /webhooks/{endpoint}` runs the system's handler, `GET /healthz` says
//! the process is up, `GET /readyz` says it takes deliveries.
//!
//! A request becomes a `WebhookDelivery` with its raw body bytes (never re-encoded: the signature
//! covers them) and the three Standard Webhooks headers as they arrived; a missing header is
//! passed on empty, for the system's own verification to refuse. Bodies over the system's
//! declared limit ([`System::body_bytes_max`]) are refused with 413 without being kept, and one
//! whose `Content-Length` is over it is refused before any of it is kept (a client that sent
//! `Expect: 100-continue` gets the 413, not `100 Continue`). The rest of a refused body is read
//! and thrown away (up to a bound) before the connection closes, so that a client writing its
//! whole request before it reads is not reset midway and reads its 413.
//!
//! No client can hold the receiver ([`ConnectionLimits`]): a request head must arrive within the
//! header timeout, which is also how long a kept-alive connection may sit idle; a body within
//! the body timeout (408 otherwise); at the connection limit the connection silent longest makes
//! room for a new one, and when none is silent the new one is answered 503 at once and closed,
//! and the refusal is logged; and once a stop is asked, the requests in
//! flight have the shutdown grace to finish before every connection still open is closed, so a
//! client holding half a request cannot keep the process from exiting.
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
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use commitgap_sim::commitgap::env::Env;
use commitgap_sim::commitgap::realtime::block_on;
use commitgap_sim::commitgap::receiver::{Answer, WebhookDelivery};
use commitgap_sim::commitgap::signature::WebhookHeaders;
use commitgap_sim::system::System;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::env::{Pool, ServiceEnv};

/// How long a client may take and how many may be connected: what keeps one client, slow or
/// hostile, from holding the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// The longest a client may take to send a request's head, and the longest a kept-alive
    /// connection may sit idle before its next request; the connection is closed after it.
    pub header_read_ms: u64,
    /// The longest a client may take to send a request's body once its head has arrived; the
    /// request is answered 408 after it.
    pub body_read_ms: u64,
    /// The most connections served at once. When they are all open, the one open longest
    /// without sending a byte is closed to make room for a new one; when every one has sent
    /// something, the new one is answered 503 at once and closed, and the refusal is logged. A
    /// flood of silent connections costs the flood, not the descriptors genuine deliveries need.
    pub connections_max: usize,
    /// How long the requests in flight have to finish once a stop is asked; every connection
    /// still open after it is closed. A handler already running still runs to its end (its
    /// transaction commits or rolls back as the system's code says), but its answer may then
    /// never be written: the sender retries, as after any lost answer.
    pub shutdown_grace_ms: u64,
}

impl Default for ConnectionLimits {
    /// Ten seconds for a head or a body (a genuine sender writes a delivery in milliseconds;
    /// Stripe and Svix time out their own requests after 10 to 30 seconds), 512 connections
    /// (half of the 1,024 descriptors a process gets by default, so that the database, the
    /// relay and the log keep theirs), and five seconds of grace at shutdown.
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            header_read_ms: 10_000,
            body_read_ms: 10_000,
            connections_max: 512,
            shutdown_grace_ms: 5_000,
        }
    }
}

/// What the receiver's handlers share.
#[derive(Clone)]
pub struct Receiver {
    system: Arc<dyn System>,
    pool: Arc<Pool>,
    ready: Arc<AtomicBool>,
    limits: ConnectionLimits,
}

impl Receiver {
    /// A receiver for `system` on the connections of `pool`, with the default limits.
    pub fn new(system: Arc<dyn System>, pool: Pool) -> Receiver {
        Receiver {
            system,
            pool: Arc::new(pool),
            ready: Arc::new(AtomicBool::new(true)),
            limits: ConnectionLimits::default(),
        }
    }

    /// The same receiver with other limits.
    #[must_use]
    pub fn with_limits(mut self, limits: ConnectionLimits) -> Receiver {
        self.limits = limits;
        self
    }

    /// The routes, with the system's body limit and the body timeout.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/webhooks/{endpoint}", post(deliver))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(ready))
            // The body is read by `deliver`, against the system's own limit.
            .layer(DefaultBodyLimit::disable())
            .with_state(self.clone())
    }

    /// The most body bytes read: one byte over the system's limit is enough for the system's
    /// own check to see the body is too large; the rest is never read.
    fn body_read_max(&self) -> usize {
        self.system.body_bytes_max().saturating_add(1)
    }

    /// Serves on `listener` until `shutdown` completes, within the [`ConnectionLimits`]; then
    /// stops accepting, answers `/readyz` with 503, lets the requests in flight finish within
    /// the shutdown grace, and closes every connection still open before it returns.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let limits = self.limits;
        let service = hyper_util::service::TowerToHyperService::new(self.router());
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(Duration::from_millis(limits.header_read_ms));
        let slots = Arc::new(Semaphore::new(limits.connections_max.max(1)));
        let (stopping, stop_seen) = tokio::sync::watch::channel(false);
        let mut connections = JoinSet::new();
        let mut refused: u64 = 0;
        let mut silent = SilentConnections::default();
        let mut shutdown = pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => {
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        Err(error) => {
                            // Out of descriptors, or a connection reset before it was accepted:
                            // the listener is still good, so wait a moment and go on.
                            eprintln!("receiver: could not accept a connection: {error}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let Some(slot) = silent.take_slot(&slots).await else {
                        refused += 1;
                        if refused.is_power_of_two() || refused % 1_000 == 0 {
                            eprintln!(
                                "receiver: {refused} connections refused with 503 so far: {} are open, the limit, and every one has sent something",
                                limits.connections_max
                            );
                        }
                        connections.spawn(refuse(stream));
                        continue;
                    };
                    let (watched, evicted) = silent.watch(stream, limits.connections_max);
                    let connection = http.serve_connection(hyper_util::rt::TokioIo::new(watched), service.clone());
                    let mut stop_seen = stop_seen.clone();
                    connections.spawn(async move {
                        let _slot = slot;
                        let mut connection = pin!(connection);
                        tokio::select! {
                            _ = connection.as_mut() => {}
                            () = evicted.notified() => {}
                            () = async { drop(stop_seen.wait_for(|stopping| *stopping).await) } => {
                                // Finish the request in flight, take no other.
                                connection.as_mut().graceful_shutdown();
                                let _ = connection.await;
                            }
                        }
                    });
                }
            }
        }
        self.ready.store(false, Ordering::SeqCst);
        drop(listener);
        let _ = stopping.send(true);
        let finished = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_millis(limits.shutdown_grace_ms), finished)
            .await
            .is_err()
        {
            eprintln!(
                "receiver: {} connections still open {} ms after the stop; closing them",
                connections.len(),
                limits.shutdown_grace_ms
            );
            connections.shutdown().await;
        }
        Ok(())
    }
}

/// The connections served, in the order they were accepted, with whether each has sent a byte:
/// when the limit is reached, the one open longest without a word is closed to make room, so a
/// flood of silent connections cannot keep a genuine delivery out. A connection that has sent
/// anything is never closed this way.
#[derive(Default)]
struct SilentConnections {
    accepted: std::collections::VecDeque<(Arc<AtomicBool>, std::sync::Weak<tokio::sync::Notify>)>,
}

impl SilentConnections {
    /// Wraps `stream` so that its first byte is noticed; returns it and what tells its task it was
    /// evicted.
    fn watch(
        &mut self,
        stream: tokio::net::TcpStream,
        connections_max: usize,
    ) -> (Watched, Arc<tokio::sync::Notify>) {
        // Forget the connections that spoke or ended, now and then, so the list stays short.
        if self.accepted.len() > connections_max.saturating_mul(2) {
            self.accepted
                .retain(|(spoke, evict)| !spoke.load(Ordering::Relaxed) && evict.strong_count() > 0);
        }
        let spoke = Arc::new(AtomicBool::new(false));
        let evict = Arc::new(tokio::sync::Notify::new());
        self.accepted
            .push_back((Arc::clone(&spoke), Arc::downgrade(&evict)));
        (Watched { stream, spoke }, evict)
    }

    /// A slot for a new connection: a free one, or the one a silent connection gives up when it is
    /// closed to make room; `None` when every open connection has sent something.
    async fn take_slot(&mut self, slots: &Arc<Semaphore>) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if let Ok(slot) = Arc::clone(slots).try_acquire_owned() {
            return Some(slot);
        }
        if !self.evict_one() {
            return None;
        }
        // The evicted connection's task gives its slot back as it ends, at once.
        tokio::time::timeout(Duration::from_secs(1), Arc::clone(slots).acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// Closes the connection open longest without sending a byte; false when there is none.
    fn evict_one(&mut self) -> bool {
        while let Some((spoke, evict)) = self.accepted.pop_front() {
            if spoke.load(Ordering::Relaxed) {
                continue;
            }
            if let Some(evict) = evict.upgrade() {
                evict.notify_one();
                return true;
            }
        }
        false
    }
}

/// A connection's stream that notes when the client first sends something.
struct Watched {
    stream: tokio::net::TcpStream,
    spoke: Arc<AtomicBool>,
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buffer.filled().len();
        let polled = std::pin::Pin::new(&mut self.stream).poll_read(context, buffer);
        if buffer.filled().len() > before {
            self.spoke.store(true, Ordering::Relaxed);
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(context, buffer)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffers: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(context, buffers)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(context)
    }
}

/// How much more of a body over the limit is read and thrown away before the connection is
/// closed. A client that writes its whole request before reading the answer (most do) would
/// otherwise have its connection reset under it while it writes, and a reset throws away the 413
/// already sent: the sender sees a network error and retries the same body. Past this much, or
/// past the body timeout, the connection is closed anyway, so a client cannot keep the receiver
/// reading for long.
const DISCARDED_BYTES_MAX: usize = 16 * 1024 * 1024;

/// What reading a request's body came to.
enum BodyRead {
    /// The body, at most the limit.
    Whole(Vec<u8>),
    /// Over the limit: announced so or found so, and read on and thrown away (up to
    /// [`DISCARDED_BYTES_MAX`] more) so that the client reads the 413.
    TooLarge,
    /// The client's body could not be read (a malformed chunk, a connection closed midway).
    Failed(axum::Error),
    /// The body did not arrive by the deadline.
    TimedOut,
}

/// Reads `body` whole when it is at most `limit` bytes and `keep` is true; with `keep` false the
/// body is already known to be too large, and is only read on and thrown away.
async fn read_body(mut body: Body, limit: usize, keep: bool, deadline: tokio::time::Instant) -> BodyRead {
    use http_body_util::BodyExt;
    let mut kept = Vec::new();
    let mut total: usize = 0;
    let mut too_large = !keep;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(None) => break,
            // A client that stops sending a body already refused still gets its 413.
            Ok(Some(Err(_))) | Err(_) if too_large => return BodyRead::TooLarge,
            Ok(Some(Err(error))) => return BodyRead::Failed(error),
            Err(_) => return BodyRead::TimedOut,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if !too_large && total > limit {
            too_large = true;
            kept = Vec::new();
        }
        if too_large {
            if total > limit.saturating_add(DISCARDED_BYTES_MAX) {
                return BodyRead::TooLarge;
            }
        } else {
            kept.extend_from_slice(&data);
        }
    }
    if too_large {
        BodyRead::TooLarge
    } else {
        BodyRead::Whole(kept)
    }
}

/// Answers a connection over the limit with 503 and closes it, giving the client a second to
/// take the answer.
async fn refuse(mut stream: tokio::net::TcpStream) {
    const ANSWER: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 38\r\nretry-after: 1\r\n\r\ntoo many connections; try again later\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(ANSWER).await;
        let _ = stream.shutdown().await;
    })
    .await;
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
    body: Body,
) -> (StatusCode, String) {
    let limit = receiver.body_read_max();
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {} bytes", limit - 1),
        )
    };
    // Before any of the body is read, so that a client waiting on `Expect: 100-continue` is
    // answered 413 instead of being asked to send it.
    let declared_length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let announced_too_large = declared_length.is_some_and(|length| length > limit as u64);
    let expects_continue = headers
        .get(header::EXPECT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.eq_ignore_ascii_case("100-continue"));
    if announced_too_large && expects_continue {
        return too_large();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(receiver.limits.body_read_ms);
    let body = match read_body(body, limit, !announced_too_large, deadline).await {
        BodyRead::Whole(body) => body,
        BodyRead::TooLarge => return too_large(),
        BodyRead::Failed(error) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("the body could not be read: {error}"),
            );
        }
        BodyRead::TimedOut => {
            return (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within {} ms",
                    receiver.limits.body_read_ms
                ),
            );
        }
    };
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
        body,
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
