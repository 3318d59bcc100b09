//! Runners for the system's background work: relay workers, the purge job, the operator's
//! requeue; and the database's creation from the system's own set-up.
//!
//! Each runner drives the system's future on the calling thread over its own connection. A
//! relay worker runs until a stop is requested; it then stops at its next sleep or before the
//! first statement of its next transaction (between two obligations, even with a backlog), and
//! its future is dropped there.
//! Nothing is released on its behalf: a lease it held runs out as after a crash, which is what
//! the system's own code was tested against. This module must not touch the system's tables.

use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use commitgap_sim::commitgap::env::Env;
use commitgap_sim::commitgap::relay::RelaySettings;
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::system::{Fixtures, System};

use crate::env::{ServiceEnv, Stop};

/// Creates the database at `path` in WAL mode and runs the system's set-up on it (its schema,
/// and `fixtures`) in one transaction: one commit instead of one per fixture, and a set-up that
/// fails leaves no database behind (the file is removed, as it did not exist before), so `init`
/// can simply be run again. Refuses a file that exists already, so that no data is ever
/// overwritten. A set-up that ends the transaction itself is committed as it left things.
pub fn create_database(path: &Path, system: &dyn System, fixtures: &Fixtures) -> Result<(), String> {
    if path.exists() {
        return Err(format!(
            "{} exists already; remove it or choose another path",
            path.display()
        ));
    }
    let connection = Connection::open(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let mode: String = connection
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|error| format!("{}: {error}", path.display()))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!("{} could not switch to WAL (got {mode})", path.display()));
    }
    let set_up = connection
        .execute_batch("BEGIN IMMEDIATE")
        .map_err(|error| error.to_string())
        .and_then(|()| {
            system
                .set_up(&connection, fixtures)
                .map_err(|error| error.to_string())
        })
        .and_then(|()| {
            if connection.is_autocommit() {
                return Ok(());
            }
            connection
                .execute_batch("COMMIT")
                .map_err(|error| error.to_string())
        });
    if let Err(error) = set_up {
        drop(connection);
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut file = path.as_os_str().to_owned();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
        return Err(format!(
            "{}: the system's set-up failed, and the file was removed: {error}",
            path.display()
        ));
    }
    Ok(())
}

/// Runs one relay worker on `env` until `stop` is requested: it stops at its next sleep or
/// before its next transaction, whichever comes first, so a backlog does not keep it running.
pub fn run_relay_worker(system: &Arc<dyn System>, env: ServiceEnv, settings: RelaySettings, stop: &Stop) {
    let env: Rc<dyn Env> = Rc::new(env.stopping_between_transactions());
    drive(system.run_relay_worker(env, settings), stop);
}

/// Runs the purge job once: receipts received before `older_than_ms` (wall-clock milliseconds)
/// are the system's to delete. Returns whether it ran to its end.
pub fn run_purge(system: &Arc<dyn System>, env: ServiceEnv, older_than_ms: i64, stop: &Stop) -> bool {
    let env: Rc<dyn Env> = Rc::new(env);
    drive(system.purge_receipts(env, older_than_ms), stop).is_some()
}

/// Runs the operator's requeue of dead obligations once. Returns whether it ran to its end.
pub fn run_requeue(system: &Arc<dyn System>, env: ServiceEnv, stop: &Stop) -> bool {
    let env: Rc<dyn Env> = Rc::new(env);
    drive(system.requeue_dead_obligations(env), stop).is_some()
}

/// Drives `future` on this thread. A real `Env`'s futures are ready when first polled, except a
/// sleep that a stop interrupted, which stays pending: the future is then dropped and `None`
/// returned.
fn drive<F: Future>(future: F, stop: &Stop) -> Option<F::Output> {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return Some(output);
        }
        if stop.is_requested() {
            return None;
        }
        std::thread::yield_now();
    }
}
