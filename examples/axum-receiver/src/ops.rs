//! The two one-shot jobs: the receipt purge a scheduler runs, and the operator's requeue of
//! abandoned fulfillment requests.
//!
//! The purge deletes receipts older than the retention and nothing else: once a receipt is gone
//! a redelivery of its event is taken as new, and it is the orders' state guards, not the
//! receipts, that keep it from owing a second shipment. The requeue moves every abandoned request
//! back to owed with a fresh budget of attempts, keeping its key, its body, its lease token and
//! when it was first tried (so the relay still looks an old key up before sending it again).
//! Neither job may touch an order or call the provider.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, params};

use crate::db;

/// Deletes the receipts received more than `older_than_ms` ago. Returns how many went.
pub fn purge(database: &Path, process: &str, older_than_ms: i64) -> Result<usize, String> {
    let connection = open(database, process)?;
    let cutoff_ms = db::now_ms().saturating_sub(older_than_ms);
    patiently(|| {
        connection.execute(
            "DELETE FROM payment_inbox WHERE received_ms < ?1",
            params![cutoff_ms],
        )
    })
}

/// Moves every abandoned request back to owed, due now. Returns how many moved.
pub fn requeue(database: &Path, process: &str) -> Result<usize, String> {
    let connection = open(database, process)?;
    patiently(|| {
        connection.execute(
            "UPDATE fulfillment_requests SET delivery_state = 'owed', attempt_count = 0, \
             retry_at_ms = ?1, last_error = 'requeued by an operator; it had been abandoned: ' \
             || coalesce(abandon_reason, 'no reason given'), abandon_reason = NULL \
             WHERE delivery_state = 'abandoned'",
            params![db::now_ms()],
        )
    })
}

fn open(database: &Path, process: &str) -> Result<Connection, String> {
    db::open(database, &db::process_name(process))
        .map_err(|error| format!("cannot open the database: {error}"))
}

/// Runs a job's one statement, trying again a few times while the database is busy: an operator's
/// tool has nobody to hand a busy error to but the operator.
fn patiently(mut statement: impl FnMut() -> rusqlite::Result<usize>) -> Result<usize, String> {
    let mut tries = 0;
    loop {
        tries += 1;
        match statement() {
            Ok(rows) => return Ok(rows),
            Err(error) if db::is_busy(&error) && tries < 5 => std::thread::sleep(Duration::from_millis(200)),
            Err(error) => return Err(error.to_string()),
        }
    }
}
