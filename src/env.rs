//! The runtime interface the system under test is written against.
//!
//! Everything the receiver, the relay and the purge job do to the outside world goes through
//! [`Env`]: SQL statements on the process's own database connection, sleeping, calls to the
//! downstream provider, the clock and logging. Under simulation, each awaited call is a
//! scheduling point: the scheduler may run another process there, or crash this one there. In
//! production, [`crate::realtime::RealEnv`] runs the same code against a file database with real
//! time.
//!
//! This module must not assume either implementation. In particular it must not promise that a
//! statement runs without interleaving, that time stands still between calls, or that a call
//! returns at all (a crash drops the future).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

pub use rusqlite::types::Value;

use crate::provider::{CallError, ProviderCall, ProviderReply};

/// A boxed future that need not be `Send`: the simulator runs every process on one thread.
pub type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// What a process can do to the world. See the module documentation.
///
/// `execute`, `query`, `sleep_ms` and `call_provider` are scheduling points. `now_ms`,
/// `process_id`, `log` and `setting` are not: they touch no shared state, so an interleaving there could
/// not be told apart from one at the next awaited call.
pub trait Env {
    /// The identity of this incarnation of the process, such as `relay-2#3` (the third start of
    /// the second relay worker). A restarted process gets a new identity, so it never mistakes a
    /// lease taken by its previous life for its own.
    fn process_id(&self) -> &str;

    /// Milliseconds since the epoch of this environment (virtual time under simulation).
    fn now_ms(&self) -> i64;

    /// Runs one SQL statement on this task's connection and returns the number of rows changed.
    fn execute<'a>(&'a self, sql: &'a str, params: &'a [Value])
    -> LocalBoxFuture<'a, Result<usize, DbError>>;

    /// Runs one SQL statement and returns every row it produced, in the order SQLite gave them.
    fn query<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<Vec<Row>, DbError>>;

    /// Suspends this task for at least `duration_ms`.
    fn sleep_ms(&self, duration_ms: i64) -> LocalBoxFuture<'_, ()>;

    /// Sends one request to the downstream provider and waits for its reply, at most
    /// `call.timeout_ms`. An `Err` is ambiguous: the provider may or may not have acted.
    fn call_provider<'a>(
        &'a self,
        call: &'a ProviderCall,
    ) -> LocalBoxFuture<'a, Result<ProviderReply, CallError>>;

    /// Records a line of the process's own log (it appears in the simulation trace).
    fn log(&self, message: &str);

    /// A value of the process's configuration, such as the secrets that verify one endpoint's
    /// webhooks (see [`crate::receiver::ReceiverSettings`]): what a deployment reads from its
    /// environment or a configuration file at start-up. Not a scheduling point: it is in memory.
    fn setting(&self, name: &str) -> Option<String>;
}

/// Why a statement failed, reduced to what the code under test must decide on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbError {
    /// `SQLITE_BUSY` or `SQLITE_LOCKED`: another connection holds a conflicting lock. Retry later.
    Busy,
    /// A constraint (unique, not null, check) rejected the statement.
    Constraint(String),
    /// `SQLITE_FULL`: the disk, or the database's size limit, is full. Nothing was written; a
    /// failed `COMMIT` may or may not have rolled the transaction back. Retry later.
    Full,
    /// `SQLITE_IOERR`: the operating system reported an I/O error. As for a full disk, a failed
    /// `COMMIT` may or may not have rolled back. Retry later.
    Io(String),
    /// Anything else: a bug in the SQL, a type mismatch.
    Other(String),
}

impl DbError {
    /// True when the database is busy: retrying the same statement shortly may succeed.
    pub fn is_busy(&self) -> bool {
        matches!(self, DbError::Busy)
    }

    /// True when the failure came from outside the statement (a lock, a full disk, an I/O
    /// error): the same work may succeed later, so the caller should roll back and retry rather
    /// than give up.
    pub fn is_transient(&self) -> bool {
        matches!(self, DbError::Busy | DbError::Full | DbError::Io(_))
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbError::Busy => write!(f, "database is busy"),
            DbError::Constraint(message) => write!(f, "constraint failed: {message}"),
            DbError::Full => write!(f, "database or disk is full"),
            DbError::Io(message) => write!(f, "disk I/O error: {message}"),
            DbError::Other(message) => write!(f, "database error: {message}"),
        }
    }
}

impl std::error::Error for DbError {}

impl From<rusqlite::Error> for DbError {
    fn from(error: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match error.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => DbError::Busy,
            Some(ErrorCode::ConstraintViolation) => DbError::Constraint(error.to_string()),
            Some(ErrorCode::DiskFull) => DbError::Full,
            Some(ErrorCode::SystemIoFailure) => DbError::Io(error.to_string()),
            _ => DbError::Other(error.to_string()),
        }
    }
}

/// One result row: the column values in select order.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<Value>);

impl Row {
    /// The integer in column `index`.
    pub fn int(&self, index: usize) -> Result<i64, DbError> {
        match self.0.get(index) {
            Some(Value::Integer(value)) => Ok(*value),
            other => Err(column_type_error(index, "an integer", other)),
        }
    }

    /// The integer in column `index`, or `None` for NULL.
    pub fn opt_int(&self, index: usize) -> Result<Option<i64>, DbError> {
        match self.0.get(index) {
            Some(Value::Null) => Ok(None),
            _ => self.int(index).map(Some),
        }
    }

    /// The text in column `index`.
    pub fn text(&self, index: usize) -> Result<&str, DbError> {
        match self.0.get(index) {
            Some(Value::Text(value)) => Ok(value),
            other => Err(column_type_error(index, "text", other)),
        }
    }

    /// The text in column `index`, or `None` for NULL.
    pub fn opt_text(&self, index: usize) -> Result<Option<&str>, DbError> {
        match self.0.get(index) {
            Some(Value::Null) => Ok(None),
            _ => self.text(index).map(Some),
        }
    }
}

fn column_type_error(index: usize, wanted: &str, found: Option<&Value>) -> DbError {
    DbError::Other(format!("column {index}: expected {wanted}, found {found:?}"))
}

/// Shorthand for a text parameter.
pub fn text(value: &str) -> Value {
    Value::Text(value.to_owned())
}

/// Shorthand for an integer parameter.
pub fn int(value: i64) -> Value {
    Value::Integer(value)
}

#[cfg(test)]
mod tests {
    use super::DbError;

    #[test]
    fn only_failures_from_outside_the_statement_are_transient() {
        let transient = [DbError::Busy, DbError::Full, DbError::Io("disk".to_owned())];
        let permanent = [
            DbError::Constraint("unique".to_owned()),
            DbError::Other("syntax".to_owned()),
        ];
        for error in &transient {
            assert!(error.is_transient(), "{error} is worth a retry");
        }
        for error in &permanent {
            assert!(!error.is_transient(), "{error} fails the same way again");
        }
        assert!(DbError::Busy.is_busy() && !DbError::Full.is_busy());
    }
}
