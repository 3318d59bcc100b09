//! What every served connection tells the triggers of a live check's commit journal
//! ([`crate::live`]): the name of its process and the number of its current transaction, as two
//! SQL functions, and on a journaled database, recursive triggers as the simulator has them.
//!
//! The functions are defined on every connection, whether or not the database keeps a journal,
//! since a served process cannot know that a check will add one; they cost nothing until a
//! trigger calls them. This module must not change what a statement does on a database without
//! a journal, and the functions must not fail a statement.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use commitgap_sim::rusqlite::Connection;
use commitgap_sim::rusqlite::functions::FunctionFlags;

/// The journal's index of rows, one per change, in commit order: a database with this table
/// keeps a journal.
pub(crate) const INDEX_TABLE: &str = "live_journal";

/// The SQL function that names the committing process.
pub(crate) const PROCESS_FUNCTION: &str = "commitgap_journal_process";

/// The SQL function that numbers the connection's transaction.
pub(crate) const TRANSACTION_FUNCTION: &str = "commitgap_journal_transaction";

/// The number of one connection's current transaction, shared between the connection's SQL
/// function and the environment that moves it on.
#[derive(Debug, Clone, Default)]
pub struct TransactionNumber(Arc<AtomicI64>);

impl TransactionNumber {
    /// Moves on to the next transaction when `connection` has none open: called after every
    /// statement, so that one transaction's rows share a number and the next one's do not.
    pub fn after_statement(&self, connection: &Connection) {
        if connection.is_autocommit() {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Gives `connection` the two functions the journal's triggers call: the process's name,
/// `process_id` with the operating system's process id (so that two incarnations of one relay
/// worker are two processes, as in the simulator), and the number of its current transaction.
///
/// On a database that keeps a journal it also turns `recursive_triggers` on, as the simulator
/// does on its own connections: a `REPLACE` that deletes a conflicting row fires delete triggers
/// only then, and the journal would otherwise miss the row. A database without a journal (one
/// served in production) keeps SQLite's default.
pub fn label_connection(connection: &Connection, process_id: &str) -> Result<TransactionNumber, String> {
    let name = format!("{process_id}#{}", std::process::id());
    let number = TransactionNumber::default();
    let shared = Arc::clone(&number.0);
    let flags = FunctionFlags::SQLITE_UTF8;
    connection
        .create_scalar_function(PROCESS_FUNCTION, 0, flags, move |_| Ok(name.clone()))
        .and_then(|()| {
            connection.create_scalar_function(TRANSACTION_FUNCTION, 0, flags, move |_| {
                Ok(shared.load(Ordering::Relaxed))
            })
        })
        .map_err(|error| format!("cannot label the connection for the commit journal: {error}"))?;
    let journaled = connection
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [INDEX_TABLE],
            |row| row.get::<_, i64>(0),
        )
        .map_err(|error| format!("cannot look for the commit journal: {error}"))?;
    if journaled > 0 {
        connection
            .pragma_update(None, "recursive_triggers", true)
            .map_err(|error| format!("cannot turn recursive triggers on: {error}"))?;
    }
    Ok(number)
}
