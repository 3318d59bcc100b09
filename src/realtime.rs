//! A real-time [`Env`]: the same receiver, relay and purge code, run against a SQLite file with
//! the wall clock and blocking sleeps.
//!
//! The database is opened in WAL mode with `synchronous = FULL`, so a commit the receiver has
//! acknowledged survives power loss, and with a busy timeout, so concurrent writers queue for the
//! write lock instead of failing at once. Every future this environment returns is ready the
//! first time it is polled, which is what lets [`block_on`] drive it without a runtime. This is
//! the only module of the crate that may read the wall clock or block the thread.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

use crate::env::{DbError, Env, LocalBoxFuture, Row, Value};
use crate::provider::{CallError, ProviderCall, ProviderReply, ProviderRequest};
use crate::schema::SCHEMA_SQL;

/// A client for the real provider (an HTTP client in production, a fake in tests).
pub trait ProviderClient: Send {
    fn call(&self, request: &ProviderRequest, timeout_ms: i64) -> Result<ProviderReply, CallError>;
}

/// An [`Env`] over one connection to a SQLite file.
pub struct RealEnv {
    connection: Connection,
    process_id: String,
    provider: Box<dyn ProviderClient>,
    log: RefCell<Vec<String>>,
    settings: BTreeMap<String, String>,
}

impl RealEnv {
    /// Opens `path` (which must already hold the schema, see [`create_database`]) for the process
    /// named `process_id`.
    pub fn open(
        path: &Path,
        process_id: &str,
        busy_timeout: Duration,
        provider: Box<dyn ProviderClient>,
    ) -> Result<RealEnv, DbError> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(busy_timeout)?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        Ok(RealEnv {
            connection,
            process_id: process_id.to_owned(),
            provider,
            log: RefCell::new(Vec::new()),
            settings: BTreeMap::new(),
        })
    }

    /// The same process with its configuration: each `(name, value)` answers [`Env::setting`].
    pub fn with_settings(mut self, settings: impl IntoIterator<Item = (String, String)>) -> RealEnv {
        self.settings.extend(settings);
        self
    }

    /// The connection itself, for what a service adds to every connection before its first
    /// statement (SQL functions a check's triggers call) and for what it asks between statements
    /// (whether a transaction is open). Statements meant as the system's go through [`Env`].
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// The lines this process logged, oldest first.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.borrow().clone()
    }
}

/// Creates a database file in WAL mode with the reference schema.
pub fn create_database(path: &Path) -> Result<(), DbError> {
    let connection = Connection::open(path)?;
    let mode: String = connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(DbError::Other(format!(
            "could not switch {} to WAL (got {mode})",
            path.display()
        )));
    }
    connection.execute_batch(SCHEMA_SQL)?;
    Ok(())
}

impl Env for RealEnv {
    fn process_id(&self) -> &str {
        &self.process_id
    }

    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64)
    }

    fn execute<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<usize, DbError>> {
        let result = self
            .connection
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute(rusqlite::params_from_iter(params)))
            .map_err(DbError::from);
        Box::pin(std::future::ready(result))
    }

    fn query<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<Vec<Row>, DbError>> {
        Box::pin(std::future::ready(query_rows(&self.connection, sql, params)))
    }

    fn sleep_ms(&self, duration_ms: i64) -> LocalBoxFuture<'_, ()> {
        std::thread::sleep(Duration::from_millis(duration_ms.max(0) as u64));
        Box::pin(std::future::ready(()))
    }

    fn call_provider<'a>(
        &'a self,
        call: &'a ProviderCall,
    ) -> LocalBoxFuture<'a, Result<ProviderReply, CallError>> {
        Box::pin(std::future::ready(
            self.provider.call(&call.request, call.timeout_ms),
        ))
    }

    fn log(&self, message: &str) {
        self.log.borrow_mut().push(message.to_owned());
    }

    fn setting(&self, name: &str) -> Option<String> {
        self.settings.get(name).cloned()
    }
}

/// Runs `sql` and collects every row, with each column as an owned [`Value`].
pub fn query_rows(connection: &Connection, sql: &str, params: &[Value]) -> Result<Vec<Row>, DbError> {
    let mut statement = connection.prepare_cached(sql)?;
    let column_count = statement.column_count();
    let mut rows = statement.query(rusqlite::params_from_iter(params))?;
    let mut collected = Vec::new();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(column_count);
        for index in 0..column_count {
            values.push(row.get::<_, Value>(index)?);
        }
        collected.push(Row(values));
    }
    Ok(collected)
}

/// Drives a future to completion on this thread. Meant for futures over [`RealEnv`], which never
/// stay pending; anything else is polled again after yielding the thread.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::yield_now();
    }
}
