//! Opening the shop's SQLite file: one way for every command, so that each connection waits
//! for the write lock the same way, commits durably, and labels its commits for the commit
//! journal a checker may keep.
//!
//! Labelling means defining two SQL functions on every connection: `commitgap_journal_process()`,
//! the name this process was given, and `commitgap_journal_transaction()`, a number shared by
//! every statement of one transaction and different for every later one. They cost nothing unless
//! a trigger calls them, and the shop's own SQL never does. This module must not run any
//! statement of the business, and the functions must never fail a statement.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;
use rusqlite::functions::FunctionFlags;

/// How long a statement waits for another connection's write lock before it gives up as busy.
/// Longer than any pause a process may take while holding the lock, so that a stalled writer
/// delays the others instead of failing them.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The next transaction number to hand out, for the whole process. One counter for all the
/// process's connections, because the receiver writes through several and a journal groups rows
/// by (process, number): two connections that both counted from one would have their consecutive
/// commits read as one. It starts at the process id times 2^32, so that a restarted process that
/// keeps its name does not reuse its predecessor's numbers either.
static NEXT_TRANSACTION: AtomicI64 = AtomicI64::new(0);

/// The wall clock in milliseconds since the epoch: what every time in the database is counted in.
pub fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The name this process writes under: `COMMITGAP_PROCESS` when a supervisor gave one (it then
/// names the process the same way in everything it reads), else `fallback`.
pub fn process_name(fallback: &str) -> String {
    std::env::var("COMMITGAP_PROCESS")
        .ok()
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| fallback.to_owned())
}

/// Opens the database at `path` for `process`: a busy timeout, WAL (readers never block the
/// writer), `synchronous = FULL` (a commit the receiver acknowledged survives a power cut), and
/// the journal's labels.
pub fn open(path: &Path, process: &str) -> rusqlite::Result<Connection> {
    let mut connection = Connection::open(path)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = connection.query_row("PRAGMA journal_mode", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        connection.query_row("PRAGMA journal_mode = WAL", [], |row| row.get::<_, String>(0))?;
    }
    connection.pragma_update(None, "synchronous", "FULL")?;
    label(&mut connection, process)?;
    Ok(connection)
}

/// Takes the next transaction number.
fn next_transaction() -> i64 {
    // The first caller seeds the counter. Two first callers race only on the compare-exchange,
    // which one of them wins; neither takes a number before the seed is in.
    if NEXT_TRANSACTION.load(Ordering::Relaxed) == 0 {
        let seed = i64::from(std::process::id()) << 32;
        let _ = NEXT_TRANSACTION.compare_exchange(0, seed, Ordering::Relaxed, Ordering::Relaxed);
    }
    NEXT_TRANSACTION.fetch_add(1, Ordering::Relaxed)
}

/// Defines the journal's two functions on `connection`, and moves its transaction number on at
/// every commit and rollback, so that the statements of one transaction share a number and the
/// next transaction (an explicit one, or a single statement in autocommit) gets a new one.
fn label(connection: &mut Connection, process: &str) -> rusqlite::Result<()> {
    let name = process.to_owned();
    let current = Arc::new(AtomicI64::new(next_transaction()));
    let flags = FunctionFlags::SQLITE_UTF8;
    connection.create_scalar_function("commitgap_journal_process", 0, flags, move |_| Ok(name.clone()))?;
    let read = Arc::clone(&current);
    connection.create_scalar_function("commitgap_journal_transaction", 0, flags, move |_| {
        Ok(read.load(Ordering::Relaxed))
    })?;
    let after_commit = Arc::clone(&current);
    connection.commit_hook(Some(move || {
        after_commit.store(next_transaction(), Ordering::Relaxed);
        // false: let the commit go ahead.
        false
    }))?;
    connection.rollback_hook(Some(move || current.store(next_transaction(), Ordering::Relaxed)))?;
    Ok(())
}

/// Whether `error` is SQLite saying the database is locked by another connection: the one
/// failure that is worth trying again at once.
pub fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_transaction_shares_a_number_and_the_next_gets_another() {
        let mut connection = Connection::open_in_memory().unwrap();
        label(&mut connection, "relay-9").unwrap();
        connection.execute_batch("CREATE TABLE t (x)").unwrap();
        let number = |connection: &Connection| -> i64 {
            connection
                .query_row("SELECT commitgap_journal_transaction()", [], |row| row.get(0))
                .unwrap()
        };
        connection
            .execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (1)")
            .unwrap();
        let first = number(&connection);
        connection.execute("INSERT INTO t VALUES (2)", []).unwrap();
        assert_eq!(number(&connection), first);
        connection.execute_batch("COMMIT").unwrap();
        let second = number(&connection);
        assert_ne!(second, first);
        connection.execute("INSERT INTO t VALUES (3)", []).unwrap();
        assert_ne!(
            number(&connection),
            second,
            "an autocommit write is a transaction of its own"
        );
        let name: String = connection
            .query_row("SELECT commitgap_journal_process()", [], |row| row.get(0))
            .unwrap();
        assert_eq!(name, "relay-9");
    }
}
