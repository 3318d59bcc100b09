//! Clients that would hold the served process: a request head or body sent by half, connections
//! that say nothing, a flood past the connection limit, a body announced too large; a stop asked
//! while they do; and relay workers asked to stop with a backlog. Each test serves the reference
//! on a free localhost port (in this process, or as the `reference-serve` program) and stops
//! every server, thread and process it starts.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use commitgap_serve::env::{Connections, Pool, Stop};
use commitgap_serve::receiver::{ConnectionLimits, Receiver};
use commitgap_serve::workers::create_database;
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::system::{Fixtures, System};
use commitgap_sim::systems::ReferenceSystem;
use common::Server;

const PROGRAM: &str = env!("CARGO_BIN_EXE_reference-serve");

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("commitgap-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

/// The reference's receiver served in this process with `limits`, until [`Served::stop`].
struct Served {
    address: SocketAddr,
    runtime: tokio::runtime::Runtime,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
    directory: PathBuf,
}

impl Served {
    fn start(name: &str, limits: ConnectionLimits) -> Served {
        let directory = scratch(name);
        let database = directory.join("service.db");
        let system: Arc<dyn System> = Arc::new(ReferenceSystem::reference());
        create_database(&database, &*system, &Fixtures::default()).unwrap();
        let connections = Connections {
            database,
            busy_timeout_ms: system.busy_timeout_ms(),
            settings: Vec::new(),
        };
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let pool = Pool::open(&connections, "receiver", 2, &Stop::new()).unwrap();
        let receiver = Receiver::new(system, pool).with_limits(limits);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stops) = tokio::sync::oneshot::channel::<()>();
        let served = runtime.spawn(async move {
            receiver
                .serve(listener, async {
                    let _ = stops.await;
                })
                .await
        });
        Served {
            address,
            runtime,
            stop,
            served,
            directory,
        }
    }

    /// A genuine request on a new connection: the status line it got and how long it took.
    fn health_check(&self) -> (String, Duration) {
        let started = Instant::now();
        let mut genuine = self.connect();
        genuine
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
            .unwrap();
        let (written, _) = read_to_close(&mut genuine);
        (status_line(&written).to_owned(), started.elapsed())
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream
    }

    /// Asks the receiver to stop and returns how long `serve` took to return (at most
    /// `within`; the test fails if it has not returned by then).
    fn stop(self, within: Duration) -> Duration {
        let asked = Instant::now();
        let _ = self.stop.send(());
        let returned = self
            .runtime
            .block_on(async { tokio::time::timeout(within, self.served).await });
        let took = asked.elapsed();
        let _ = std::fs::remove_dir_all(&self.directory);
        match returned {
            Ok(served) => served.unwrap().unwrap(),
            Err(_) => panic!("the receiver had not stopped {within:?} after it was asked to"),
        }
        // Closing what is left of the runtime does not wait for a connection still open.
        self.runtime.shutdown_background();
        took
    }
}

/// Limits long enough that no timeout ends a test's connection, with a short grace.
fn patient_limits() -> ConnectionLimits {
    ConnectionLimits {
        header_read_ms: 60_000,
        body_read_ms: 60_000,
        connections_max: 64,
        shutdown_grace_ms: 1_000,
    }
}

/// Everything the server writes until it closes the connection (or the read timeout passes),
/// and whether it closed.
fn read_to_close(stream: &mut TcpStream) -> (String, bool) {
    let mut text = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return (String::from_utf8_lossy(&text).into_owned(), true),
            Ok(read) => text.extend_from_slice(&buffer[..read]),
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (String::from_utf8_lossy(&text).into_owned(), false);
            }
            Err(_) => return (String::from_utf8_lossy(&text).into_owned(), true),
        }
    }
}

/// The status line of what the server wrote first.
fn status_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[test]
fn a_stop_ends_the_receiver_while_clients_hold_half_a_head_and_half_a_body() {
    let served = Served::start("half-sent", patient_limits());
    let mut half_head = served.connect();
    half_head
        .write_all(b"POST /webhooks/acct-a HTTP/1.1\r\nhost: localhost\r\ncontent-")
        .unwrap();
    let mut half_body = served.connect();
    half_body
        .write_all(
            b"POST /webhooks/acct-a HTTP/1.1\r\nhost: localhost\r\ncontent-length: 100\r\n\r\n{\"id\":",
        )
        .unwrap();
    // A genuine request on a kept-alive connection, answered before the stop.
    let mut idle = served.connect();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = [0_u8; 64];
    let read = idle.read(&mut answer).unwrap();
    assert!(String::from_utf8_lossy(&answer[..read]).starts_with("HTTP/1.1 200"));
    std::thread::sleep(Duration::from_millis(200));

    // A grace of 1 s; the bound leaves a slow machine room, and today's figure is well under.
    let took = served.stop(Duration::from_secs(10));
    assert!(
        took < Duration::from_secs(6),
        "the receiver took {took:?} to stop with a grace of 1 s"
    );
    for (name, stream) in [("half a head", &mut half_head), ("half a body", &mut half_body)] {
        let (_, closed) = read_to_close(stream);
        assert!(closed, "the connection holding {name} is closed");
    }
    let (_, closed) = read_to_close(&mut idle);
    assert!(closed, "the idle kept-alive connection is closed");
}

#[test]
fn a_silent_or_idle_connection_is_closed_after_the_header_timeout() {
    let served = Served::start(
        "silent",
        ConnectionLimits {
            header_read_ms: 300,
            ..patient_limits()
        },
    );
    let started = Instant::now();
    let mut silent = served.connect();
    let (written, closed) = read_to_close(&mut silent);
    assert!(closed, "a connection that sends nothing is closed");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "closed after {:?}",
        started.elapsed()
    );
    assert!(
        !written.contains("200"),
        "nothing was asked, so nothing is answered: {written:?}"
    );

    let mut kept_alive = served.connect();
    kept_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .unwrap();
    let started = Instant::now();
    let (written, closed) = read_to_close(&mut kept_alive);
    assert!(status_line(&written).starts_with("HTTP/1.1 200"), "{written:?}");
    assert!(closed, "a kept-alive connection idle past the timeout is closed");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "closed after {:?}",
        started.elapsed()
    );
    served.stop(Duration::from_secs(10));
}

#[test]
fn a_body_that_does_not_arrive_in_time_is_answered_408() {
    let served = Served::start(
        "slow-body",
        ConnectionLimits {
            body_read_ms: 300,
            ..patient_limits()
        },
    );
    let mut stream = served.connect();
    stream
        .write_all(
            b"POST /webhooks/acct-a HTTP/1.1\r\nhost: localhost\r\ncontent-length: 100\r\n\r\n{\"id\":",
        )
        .unwrap();
    let (written, _) = read_to_close(&mut stream);
    assert!(status_line(&written).starts_with("HTTP/1.1 408"), "{written:?}");
    served.stop(Duration::from_secs(10));
}

#[test]
fn at_the_limit_a_silent_connection_makes_room_and_past_it_a_new_one_is_answered_503() {
    let served = Served::start(
        "flood",
        ConnectionLimits {
            connections_max: 4,
            ..patient_limits()
        },
    );
    // Four connections that say nothing fill the limit; a genuine request still gets in, and
    // the one silent longest is closed to make room for it.
    let mut silent: Vec<TcpStream> = (0..4).map(|_| served.connect()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let (status, took) = served.health_check();
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    // At once: no timeout (60 s here) had to pass. The bound leaves a slow machine room.
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    let (_, closed) = read_to_close(&mut silent[0]);
    assert!(closed, "the connection silent longest was closed");

    // Connections that have each sent part of a request are never closed for room: one more is
    // answered 503 at once.
    drop(silent);
    std::thread::sleep(Duration::from_millis(200));
    let mut talking: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut stream = served.connect();
            stream.write_all(b"POST /webhooks/acct-a HTTP/1.1\r\n").unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let mut over = served.connect();
    let (written, closed) = read_to_close(&mut over);
    assert!(status_line(&written).starts_with("HTTP/1.1 503"), "{written:?}");
    assert!(closed, "the refused connection is closed");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused after {:?}",
        started.elapsed()
    );
    talking[0]
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (_, closed) = read_to_close(&mut talking[0]);
    assert!(!closed, "a connection that spoke is left alone");
    served.stop(Duration::from_secs(10));
}

/// A flood of silent connections, far more than the limit: a genuine request after them all is
/// still answered.
#[test]
fn a_flood_of_silent_connections_does_not_keep_a_genuine_request_out() {
    let served = Served::start(
        "silent-flood",
        ConnectionLimits {
            connections_max: 64,
            ..patient_limits()
        },
    );
    let flood: Vec<TcpStream> = (0..500).map(|_| served.connect()).collect();
    std::thread::sleep(Duration::from_millis(300));
    for round in 0..5 {
        let (status, took) = served.health_check();
        assert!(status.starts_with("HTTP/1.1 200"), "round {round}: {status:?}");
        assert!(
            took < Duration::from_secs(5),
            "round {round}: answered after {took:?}"
        );
    }
    drop(flood);
    served.stop(Duration::from_secs(10));
}

#[test]
fn a_body_announced_over_the_limit_is_refused_before_it_is_sent() {
    let served = Served::start("expect-continue", patient_limits());
    let mut stream = served.connect();
    stream
        .write_all(
            b"POST /webhooks/acct-a HTTP/1.1\r\nhost: localhost\r\ncontent-length: 10000000\r\nexpect: 100-continue\r\n\r\n",
        )
        .unwrap();
    let mut answer = [0_u8; 256];
    let read = stream.read(&mut answer).unwrap();
    let written = String::from_utf8_lossy(&answer[..read]).into_owned();
    assert!(
        status_line(&written).starts_with("HTTP/1.1 413"),
        "the first answer is the 413, not `100 Continue`: {written:?}"
    );
    served.stop(Duration::from_secs(10));
}

/// A client that writes its whole request before it reads the answer (as most HTTP clients do)
/// must get the 413 for a body over the limit. Answered at once and closed with the body unread,
/// the connection is reset under the client, and the reset throws away the answer already
/// sent: the sender sees a network error and retries the same request.
#[test]
fn a_client_that_sends_a_body_over_the_limit_whole_reads_the_413() {
    let served = Served::start("over-limit-whole", patient_limits());
    let body = vec![b' '; 160 * (commitgap_sim::commitgap::receiver::DEFAULT_BODY_BYTES_MAX + 1)];
    for declared in [true, false] {
        let mut stream = served.connect();
        stream.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut request = b"POST /webhooks/acct-a HTTP/1.1\r\nhost: localhost\r\n".to_vec();
        if declared {
            request.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
            request.extend_from_slice(&body);
        } else {
            request.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
            for chunk in body.chunks(8192) {
                request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                request.extend_from_slice(chunk);
                request.extend_from_slice(b"\r\n");
            }
            request.extend_from_slice(b"0\r\n\r\n");
        }
        let how = if declared {
            "with content-length"
        } else {
            "chunked"
        };
        if let Err(error) = stream.write_all(&request) {
            panic!("{how}: writing the request failed ({error}): the receiver reset the connection");
        }
        let (written, _) = read_to_close(&mut stream);
        assert!(
            status_line(&written).starts_with("HTTP/1.1 413"),
            "{how}: the client read {written:?}, not the 413"
        );
    }
    served.stop(Duration::from_secs(10));
}

/// Kills the child if the test ends before it exits.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Stopped {
    /// Sends SIGTERM and returns how long the process took to exit, failing past `within`.
    fn terminate(&mut self, within: Duration) -> Duration {
        let asked = Instant::now();
        // SAFETY: kill has no memory effects; the pid is this test's own child.
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM);
        }
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                assert!(status.success(), "it exited with {status}");
                return asked.elapsed();
            }
            assert!(asked.elapsed() < within, "still running {within:?} after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn init(database: &Path) {
    let output = Command::new(PROGRAM)
        .arg("init")
        .arg("--database")
        .arg(database)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn sigterm_stops_the_served_process_while_a_client_holds_half_a_request() {
    let directory = scratch("sigterm-receiver");
    let database = directory.join("service.db");
    init(&database);
    let mut child = Stopped(
        Command::new(PROGRAM)
            .arg("run")
            .arg("--database")
            .arg(&database)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--relay-workers",
                "0",
                "--purge-every-s",
                "0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let mut held = TcpStream::connect(&address).unwrap();
    held.write_all(b"POST /webhooks/acct-a HTTP/1.1\r\nhost: localhost\r\ncontent-length: 100\r\n\r\n{")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let took = child.terminate(Duration::from_secs(10));
    assert!(took < Duration::from_secs(10), "exited {took:?} after SIGTERM");
    drop(held);
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn sigterm_stops_relay_workers_with_a_backlog_between_two_obligations() {
    const BACKLOG: usize = 300;
    let directory = scratch("sigterm-relay");
    let database = directory.join("service.db");
    init(&database);
    {
        let connection = Connection::open(&database).unwrap();
        let mut insert = connection
            .prepare(
                "INSERT INTO outbox (operation_key, payload, status, next_attempt_ms, created_ms) \
                 VALUES (?1, '{}', 'pending', 0, 0)",
            )
            .unwrap();
        for index in 0..BACKLOG {
            insert.execute([format!("op-{index}")]).unwrap();
        }
    }
    // A provider that takes half a second over each request.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&requests);
    let provider = Server::start(
        &runtime,
        Router::new().route(
            "/effects",
            post(move || {
                let counted = Arc::clone(&counted);
                async move {
                    let number = counted.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    (
                        StatusCode::OK,
                        format!(r#"{{"effect_id":"eff-{number}","replayed":false}}"#),
                    )
                }
            }),
        ),
    );
    let mut child = Stopped(
        Command::new(PROGRAM)
            .arg("relay")
            .arg("--database")
            .arg(&database)
            .args(["--provider-url", &provider.base, "--workers", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while requests.load(Ordering::SeqCst) < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the relay sent nothing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The relay's default call timeout is 10 s; it must stop within one call and 5 s more.
    let took = child.terminate(Duration::from_secs(15));
    provider.stop(&runtime);
    let pending: i64 = Connection::open(&database)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM outbox WHERE status = 'pending'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(
        pending > 100,
        "it stopped with the backlog still there ({pending} pending), not after draining it"
    );
    assert!(took < Duration::from_secs(15), "exited {took:?} after SIGTERM");
    let _ = std::fs::remove_dir_all(&directory);
}
