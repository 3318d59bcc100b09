//! The environment a served task runs on: one connection to the SQLite file, the wall clock,
//! blocking sleeps that a stop request interrupts, logs on standard error.
//!
//! Each connection is opened as production should open it: WAL (set once, when the database is
//! created), `synchronous = FULL` so that an acknowledged commit survives power loss, and the
//! system's own busy timeout (what [`System::busy_timeout_ms`] declares and the simulator waits
//! for in virtual time). This module must not retry, reorder or hide anything the system's code
//! asks for: a statement's error reaches the system as it came from SQLite.
//!
//! [`System::busy_timeout_ms`]: commitgap_sim::system::System::busy_timeout_ms

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, Row, Value};
use commitgap_sim::commitgap::provider::{CallError, ProviderCall, ProviderReply, ProviderRequest};
use commitgap_sim::commitgap::realtime::{ProviderClient, RealEnv};

/// A request to stop, shared by every task of a process. Workers stop at their next sleep, and
/// relay workers also before the first statement of their next transaction (see
/// [`ServiceEnv::stopping_between_transactions`]); the receiver stops accepting and finishes the
/// requests in flight.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A flag nobody has raised.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Asks every task that shares this flag to stop.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was asked for.
    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How a served process opens its connections.
#[derive(Debug, Clone)]
pub struct Connections {
    /// The SQLite file, created beforehand (see [`crate::workers::create_database`]).
    pub database: PathBuf,
    /// How long a statement waits for another connection's lock, in milliseconds: the system's
    /// [`busy_timeout_ms`](commitgap_sim::system::System::busy_timeout_ms).
    pub busy_timeout_ms: i64,
    /// The configuration every task reads through `Env::setting` (endpoint secrets, limits).
    pub settings: Vec<(String, String)>,
}

impl Connections {
    /// Opens one connection for the task named `process_id`, calling the provider through
    /// `provider`.
    pub fn open(
        &self,
        process_id: &str,
        provider: Box<dyn ProviderClient>,
        stop: &Stop,
    ) -> Result<ServiceEnv, DbError> {
        open_env(&self.database, process_id, self, provider, stop)
    }
}

fn open_env(
    path: &Path,
    process_id: &str,
    connections: &Connections,
    provider: Box<dyn ProviderClient>,
    stop: &Stop,
) -> Result<ServiceEnv, DbError> {
    let busy_timeout = Duration::from_millis(u64::try_from(connections.busy_timeout_ms).unwrap_or(0));
    let inner = RealEnv::open(path, process_id, busy_timeout, provider)?
        .with_settings(connections.settings.iter().cloned());
    let transaction =
        crate::connection_labels::label_connection(inner.connection(), process_id).map_err(DbError::Other)?;
    Ok(ServiceEnv {
        inner,
        stop: stop.clone(),
        stops_between_transactions: false,
        reply_unrecorded: std::cell::Cell::new(false),
        transaction,
    })
}

/// A client for processes that never call the provider (receivers): every call fails as
/// unavailable, so a receiver that called the provider would find out at once.
#[derive(Debug, Clone, Copy)]
pub struct NoProvider;

impl ProviderClient for NoProvider {
    fn call(&self, _request: &ProviderRequest, _timeout_ms: i64) -> Result<ProviderReply, CallError> {
        Err(CallError::Unavailable(
            "this process has no provider client (receivers call no provider)".to_owned(),
        ))
    }
}

/// An [`Env`] over one connection, with real time. See the module documentation.
pub struct ServiceEnv {
    inner: RealEnv,
    stop: Stop,
    /// Whether a stop also ends the task before a statement that would begin a transaction.
    stops_between_transactions: bool,
    /// Whether the provider has answered a call since the task's last statement: the answer is
    /// then recorded before the task may stop.
    reply_unrecorded: std::cell::Cell<bool>,
    /// The number of the connection's transaction, for a live check's commit journal.
    transaction: crate::connection_labels::TransactionNumber,
}

impl ServiceEnv {
    /// Makes a stop end the task also before the first statement it runs outside a transaction,
    /// not only at its next sleep. A relay with a backlog never sleeps: it goes from one
    /// obligation to the next, and would run until the backlog is gone. With this it stops
    /// between two obligations, once the provider call in hand has answered or timed out. The
    /// task is dropped there as a process that exits is: a lease it holds runs out on its own.
    /// Only for tasks whose runner drops a pending future ([`crate::workers`]); a receiver's
    /// handler must run to its answer.
    pub fn stopping_between_transactions(mut self) -> ServiceEnv {
        self.stops_between_transactions = true;
        self
    }

    /// Whether the task should stop here: a stop was asked, this task stops between
    /// transactions, none is open, and no provider answer waits to be recorded (a relay that
    /// stopped between the provider's acceptance and its record would send the key again after
    /// its lease, which is safe but wasteful).
    fn stops_here(&self) -> bool {
        self.stops_between_transactions
            && self.stop.is_requested()
            && !self.reply_unrecorded.get()
            && self.inner.connection().is_autocommit()
    }
}

/// The longest one sleep blocks before it looks at the stop flag again, in milliseconds.
const SLEEP_SLICE_MS: u64 = 50;

impl Env for ServiceEnv {
    fn process_id(&self) -> &str {
        self.inner.process_id()
    }

    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }

    fn execute<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<usize, DbError>> {
        if self.stops_here() {
            return Box::pin(std::future::pending());
        }
        crash_point(self.process_id(), "before", sql);
        let result = self.inner.execute(sql, params);
        self.reply_unrecorded.set(false);
        self.transaction.after_statement(self.inner.connection());
        crash_point(self.process_id(), "after", sql);
        result
    }

    fn query<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<Vec<Row>, DbError>> {
        if self.stops_here() {
            return Box::pin(std::future::pending());
        }
        crash_point(self.process_id(), "before", sql);
        let result = self.inner.query(sql, params);
        self.reply_unrecorded.set(false);
        self.transaction.after_statement(self.inner.connection());
        crash_point(self.process_id(), "after", sql);
        result
    }

    /// Sleeps in slices, and never returns once a stop is requested: the runner then drops the
    /// task where it slept, as a process that exits between passes does. Nothing is released
    /// that the system's own code did not release (a lease runs out on its own).
    fn sleep_ms(&self, duration_ms: i64) -> LocalBoxFuture<'_, ()> {
        let mut left_ms = u64::try_from(duration_ms).unwrap_or(0);
        while left_ms > 0 && !self.stop.is_requested() {
            let slice_ms = left_ms.min(SLEEP_SLICE_MS);
            std::thread::sleep(Duration::from_millis(slice_ms));
            left_ms -= slice_ms;
        }
        if self.stop.is_requested() {
            return Box::pin(std::future::pending());
        }
        Box::pin(std::future::ready(()))
    }

    fn call_provider<'a>(
        &'a self,
        call: &'a ProviderCall,
    ) -> LocalBoxFuture<'a, Result<ProviderReply, CallError>> {
        let reply = self.inner.call_provider(call);
        self.reply_unrecorded.set(true);
        reply
    }

    /// Writes the line to standard error with the process's name: a long-running service must not
    /// keep its log in memory.
    fn log(&self, message: &str) {
        eprintln!("{} {message}", self.inner.process_id());
    }

    fn setting(&self, name: &str) -> Option<String> {
        self.inner.setting(name)
    }
}

/// Crash points, armed only by a live check (see [`arm_crash_points`]): the process kills
/// itself at a statement at a seeded rate.
struct CrashPoints {
    rng: commitgap_sim::rng::SimRng,
    chance: commitgap_sim::rng::Ratio,
}

static CRASH_POINTS: Mutex<Option<CrashPoints>> = Mutex::new(None);

/// Whether crash points are armed: a served process that no live check started pays one atomic
/// load per statement, not a lock and an allocation.
static CRASH_POINTS_ARMED: AtomicBool = AtomicBool::new(false);

/// Makes this process kill itself with SIGKILL just before or just after a statement that
/// writes or ends a transaction, each with probability `chance`, drawn from `seed`: the crash at
/// any statement that the simulator models, in a real process. A kill from outside lands
/// between statements only by luck; the windows between two transactions of one handler last
/// microseconds. Reads outside a transaction are not crash points, so that idle polling does
/// not set the pace. Only `live` arms this, through a flag of its child processes; a service
/// run by hand never crashes on purpose.
pub fn arm_crash_points(seed: u64, process: &str, chance: commitgap_sim::rng::Ratio) {
    // Each start of a process draws its own points: the pid tells the starts apart.
    let label = format!("live/crash-points/{process}/{}", std::process::id());
    *CRASH_POINTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(CrashPoints {
        rng: commitgap_sim::rng::SimRng::stream(seed, &label),
        chance,
    });
    CRASH_POINTS_ARMED.store(true, Ordering::Relaxed);
}

fn crash_point(process_id: &str, when: &str, sql: &str) {
    if !CRASH_POINTS_ARMED.load(Ordering::Relaxed) {
        return;
    }
    let verb = sql
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase();
    if verb == "SELECT" || verb == "WITH" {
        return;
    }
    let mut points = CRASH_POINTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(points) = points.as_mut() else {
        return;
    };
    if points.rng.chance(points.chance) {
        let statement: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        eprintln!("{process_id} crash point: killed itself {when} {statement}");
        // SAFETY: kill and getpid have no memory effects; the signal ends this process at once,
        // with no unwinding and no destructor, as a crash does.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// The receiver's connections: a few, each used by one request at a time. A request waits for
/// a free one; SQLite admits one writer at a time anyway, so more connections than the blocking
/// pool has threads would only queue on the write lock instead.
pub struct Pool {
    free: Mutex<Vec<ServiceEnv>>,
    returned: std::sync::Condvar,
    connections: Connections,
    name: String,
    stop: Stop,
    opened: std::sync::atomic::AtomicUsize,
}

impl Pool {
    /// Opens `size` connections named `{name}-1`, `{name}-2`, ...
    pub fn open(connections: &Connections, name: &str, size: usize, stop: &Stop) -> Result<Pool, DbError> {
        let size = size.max(1);
        let free = (1..=size)
            .map(|index| connections.open(&format!("{name}-{index}"), Box::new(NoProvider), stop))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Pool {
            free: Mutex::new(free),
            returned: std::sync::Condvar::new(),
            connections: connections.clone(),
            name: name.to_owned(),
            stop: stop.clone(),
            opened: std::sync::atomic::AtomicUsize::new(size),
        })
    }

    /// Takes a free connection, waiting for one if every connection is in use.
    pub fn take(&self) -> ServiceEnv {
        let mut free = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(env) = free.pop() {
                return env;
            }
            free = self
                .returned
                .wait(free)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Gives a connection back.
    pub fn give_back(&self, env: ServiceEnv) {
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(env);
        self.returned.notify_one();
    }

    /// Opens a connection in place of one that was lost (a handler panicked with it, and it was
    /// closed, which rolled back whatever it had open), so that the pool keeps its size. A
    /// connection that cannot be opened is reported on standard error, and the pool runs smaller.
    pub fn replace_lost(&self) {
        let index = self.opened.fetch_add(1, Ordering::SeqCst) + 1;
        match self.connections.open(
            &format!("{}-{index}", self.name),
            Box::new(NoProvider),
            &self.stop,
        ) {
            Ok(env) => self.give_back(env),
            Err(error) => eprintln!("{}: could not replace a lost connection: {error}", self.name),
        }
    }
}
