//! A small TCP proxy in front of one receiver, through which the live sender posts: it passes
//! connections through, or, while a fault window is open, resets them before the request reaches
//! the receiver, or lets the request through and drops the answer (the receiver did its work; the
//! sender never hears of it, as with a load balancer that times out or a connection cut after
//! the commit).
//!
//! It counts what it did, for the summary. This module must not read or change the bytes it
//! passes: it only decides, per connection, whether they flow.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// Reset it at once: the request never reaches the receiver.
    Reset,
    /// Forward the request, and close the connection when the answer starts coming back.
    DropAnswer,
}

#[derive(Default)]
struct State {
    window: Mutex<Option<(Window, Instant)>>,
    resets: AtomicU64,
    dropped_answers: AtomicU64,
    connections: AtomicU64,
}

/// One proxy. Cloning shares it.
#[derive(Clone)]
pub struct Proxy {
    state: Arc<State>,
    /// The address the sender posts to.
    pub address: std::net::SocketAddr,
}

impl Proxy {
    /// Listens on a free localhost port and forwards to `upstream` (the receiver's address), on
    /// the current tokio runtime, until the runtime ends.
    pub async fn start(upstream: std::net::SocketAddr) -> Result<Proxy, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("cannot start a proxy: {error}"))?;
        let address = listener
            .local_addr()
            .map_err(|error| format!("cannot read the proxy's address: {error}"))?;
        let proxy = Proxy {
            state: Arc::new(State::default()),
            address,
        };
        let serving = proxy.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let window = serving.current();
                serving.state.connections.fetch_add(1, Ordering::Relaxed);
                let state = Arc::clone(&serving.state);
                tokio::spawn(async move {
                    handle(client, upstream, window, &state).await;
                });
            }
        });
        Ok(proxy)
    }

    /// Opens a window: until `length` has passed, every new connection is treated as `window`
    /// says.
    pub fn open_window(&self, window: Window, length: Duration) {
        *self.lock() = Some((window, Instant::now() + length));
    }

    /// Closes any open window: every connection passes from now on.
    pub fn heal(&self) {
        *self.lock() = None;
    }

    /// Connections reset so far.
    pub fn resets(&self) -> u64 {
        self.state.resets.load(Ordering::Relaxed)
    }

    /// Answers dropped so far.
    pub fn dropped_answers(&self) -> u64 {
        self.state.dropped_answers.load(Ordering::Relaxed)
    }

    fn current(&self) -> Option<Window> {
        let mut window = self.lock();
        match *window {
            Some((kind, until)) if Instant::now() < until => Some(kind),
            _ => {
                *window = None;
                None
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Window, Instant)>> {
        self.state
            .window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn handle(client: TcpStream, upstream: std::net::SocketAddr, window: Option<Window>, state: &State) {
    if window == Some(Window::Reset) {
        // A linger of zero makes the close a reset (RST), as a crashed peer's kernel sends.
        let _ = client.set_zero_linger();
        drop(client);
        state.resets.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        // The receiver is down (killed, restarting): the sender sees the connection refused, as
        // it would without the proxy.
        let _ = client.set_zero_linger();
        return;
    };
    if window == Some(Window::DropAnswer) {
        drop_answer(client, server, state).await;
        return;
    }
    let (mut client, mut server) = (client, server);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// Forwards the request and waits for the first byte of the answer, which means the receiver
/// finished its work; then closes both sides without passing the answer on.
async fn drop_answer(client: TcpStream, server: TcpStream, state: &State) {
    let (mut client_read, client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let forward = async {
        let mut buffer = [0_u8; 16 * 1024];
        loop {
            match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => {
                    if server_write.write_all(&buffer[..read]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let answered = async {
        let mut first = [0_u8; 1];
        matches!(server_read.read(&mut first).await, Ok(1))
    };
    let answered = tokio::select! {
        answered = answered => answered,
        () = forward => false,
    };
    if answered {
        state.dropped_answers.fetch_add(1, Ordering::Relaxed);
    }
    drop(client_write);
}
