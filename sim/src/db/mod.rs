//! The simulated database: one SQLite database shared by every simulated process, each process
//! with connections of its own, and a record of every committed row change.
//!
//! Every observed table carries triggers that pass the written row's values to a Rust function,
//! `commitgap_capture`, which each process connection defines for itself, so the simulator sees
//! every change as it happens and knows which connection made it. (SQLite's pre-update hook would
//! do the same, but needs a SQLite built with bindgen and libclang, which a fresh machine lacks;
//! its update hook misses the rows `REPLACE` deletes.) Changes wait on their connection until its
//! transaction ends: a commit hands them to the world, a rollback (explicit, by error, or by
//! closing the connection in a crash) discards them. The invariants therefore see exactly the
//! committed state without reading the database back, which would need a lock the processes may
//! be holding. `recursive_triggers` is on so that rows deleted by `INSERT OR REPLACE` are seen too.
//!
//! The triggers live in the shared schema, created once when set-up ends and named
//! `commitgap_capture_*`, so a system that lists `sqlite_master` sees them; nothing else of the
//! system's schema or rows changes. Created per connection as TEMP triggers they took a quarter of
//! a whole run, because a run opens dozens of connections. For the same reason a closed connection
//! is not thrown away: its transaction is rolled back, which is all a crash does to the database,
//! and it waits in a pool for the next process that needs one, under a new identity. A new
//! connection reads the shared schema before its first statement, which fails with `SQLITE_BUSY`
//! while another connection holds a lock that keeps readers out; every connection handed out,
//! new or pooled, reads it then, so opening fails exactly when a fresh connection's first read
//! would. The one difference a system could see is connection-local state it set up with SQL (TEMP
//! tables, per-connection PRAGMAs), which survives in the pool; the systems here set none.
//!
//! Sweep, shrink and bench threads go one step further (see [`reusing_databases`]): a run's
//! database outlives the run, pool and all, and the thread's next run of the same system gets it
//! back with its rows replaced by what the system's set-up wrote into a new bare database. The
//! schema, the capture triggers, the connections and their prepared statements stay; the rows,
//! rowids, sequences and header versions are the new set-up's. A system that sets up in two parts
//! (schema, then fixtures; see [`System::sets_up_in_two_parts`]) skips even the bare database:
//! its reused database goes back to the rows its schema step left, kept from when the database
//! was new, and only its fixtures are loaded again. A run alone (`replay`, a test) gets a new
//! database, and a test checks that both give every seed the same trace.
//!
//! [`System::sets_up_in_two_parts`]: crate::system::System::sets_up_in_two_parts
//!
//! Two backends: the `memdb` VFS (in memory, fast; its lock makes a writer block new readers) and
//! a WAL file on tmpfs (production locking, slower). An anchor connection keeps the database alive
//! while every process is crashed. Every connection has a busy timeout of zero: `SQLITE_BUSY` is a
//! result the code under test must handle, never a real wait. Nothing here may block, sleep or
//! read the clock.
//!
//! On request ([`Database::record_sql`]) the database also writes down everything the processes
//! did to SQLite, in order: each statement with its connection, parameters and result, each
//! rollback of a transaction a task left open, and each connection a crash closed. `bench` replays
//! that record on a bare database to measure what SQLite alone costs. The record is kept here,
//! where statements reach SQLite, so that nothing reaches SQLite unrecorded; statements a fault
//! failed with an injected `SQLITE_BUSY` never reach it and are not recorded. Recording is off
//! unless asked for and then costs one branch per statement.
//!
//! The reuse of databases across a thread's runs is in `reuse`, and how a reused database's rows
//! are put back to a new set-up's in `reset`.

use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use commitgap::env::{DbError, Row, Value};
use commitgap::realtime::query_rows;
use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

pub use crate::backend::Backend;

/// Identifies a connection within one run.
pub type ConnectionId = u64;

pub use crate::rows::RowChange;

mod reset;
mod reuse;

use reset::{ResetPlan, SchemaImage};
pub use reuse::reusing_databases;

/// What a statement returned.
#[derive(Debug, PartialEq)]
pub enum StatementOutput {
    /// Rows changed by an execute.
    Changed(usize),
    /// Rows returned by a query.
    Rows(Vec<Row>),
}

/// One thing a simulated process did to SQLite, as recorded for a replay on a bare database.
/// A connection opens at its first statement, as in the run.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlOp {
    /// A statement ran.
    Statement(RecordedStatement),
    /// A task ended with a transaction open and its connection rolled it back.
    RollBack(ConnectionId),
    /// A crash closed the connection, rolling back whatever it had open.
    Close(ConnectionId),
}

/// One statement as a process ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedStatement {
    /// The connection the statement ran on.
    pub connection: ConnectionId,
    /// The statement's SQL text.
    pub sql: String,
    /// The values bound to its parameters.
    pub params: Vec<Value>,
    /// Whether the caller read rows (a query) or a change count (an execute).
    pub wants_rows: bool,
    /// What the statement returned.
    pub result: StatementResult,
}

/// What a statement returned, reduced to what a faithful replay must reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementResult {
    /// An execute changed this many rows.
    Changed(usize),
    /// A query returned this many rows.
    Rows(usize),
    /// Another connection held a conflicting lock (`SQLITE_BUSY` or `SQLITE_LOCKED`).
    Busy,
    /// Any other error.
    Failed,
}

impl StatementResult {
    /// Reduces a statement's output or error to what a replay must reproduce.
    pub fn of(result: &Result<StatementOutput, DbError>) -> StatementResult {
        match result {
            Ok(StatementOutput::Changed(count)) => StatementResult::Changed(*count),
            Ok(StatementOutput::Rows(rows)) => StatementResult::Rows(rows.len()),
            Err(DbError::Busy) => StatementResult::Busy,
            Err(_) => StatementResult::Failed,
        }
    }
}

/// Changes captured by a connection's hooks, waiting for the end of the transaction.
#[derive(Default)]
struct Capture {
    changes: Vec<RowChange>,
    /// Set by the commit hook during the statement that commits.
    committed: bool,
}

struct SimConnection {
    connection: Connection,
    capture: Arc<Mutex<Capture>>,
    /// Whether the connection's TEMP table for [`retire`] exists yet.
    has_reset_table: bool,
}

/// Gives each database in this OS process a unique name. It never reaches a trace.
static DATABASE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Turns off SQLite's memory statistics before SQLite initializes. They are on by default and
/// take one process-wide mutex on every allocation, which serialized parallel sweep threads
/// (`--jobs 2` ran no faster than `--jobs 1`, with a second of futex time per 600 seeds).
fn configure_sqlite_once() {
    static CONFIGURED: std::sync::Once = std::sync::Once::new();
    CONFIGURED.call_once(|| {
        // SAFETY: sqlite3_config may only be called before sqlite3_initialize and while no other
        // thread uses SQLite; `Once` runs this before the first connection of this process opens
        // and blocks every other caller until it returns. If SQLite was initialized already (a
        // host program opened a connection first), the call returns SQLITE_MISUSE and changes
        // nothing, which only costs speed.
        unsafe {
            rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, 0 as std::ffi::c_int);
        }
    });
}
// Written by hand: it holds connections, futures or closures that cannot print themselves.
impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").finish_non_exhaustive()
    }
}

/// The database of one run.
pub struct Database {
    connections: BTreeMap<ConnectionId, SimConnection>,
    next_connection: ConnectionId,
    /// Everything done to SQLite on process connections, while recording (see [`SqlOp`]).
    sql_log: Option<Vec<SqlOp>>,
    /// Whether the store may serve another run of this thread when this one ends (see
    /// [`reusing_databases`]): set by [`Database::allow_reuse`] and [`Database::reuse`], so a
    /// database a test or `bench`'s bare replay made is never reused.
    reusable: bool,
    /// How many times a process connection's transaction that held a lock has ended (committed,
    /// rolled back, or closed with it): each one may free a lock that statements wait for. A
    /// `BEGIN` that has read nothing holds none, and its end wakes nobody.
    transactions_ended: u64,
    /// Taken out only by `drop`, which either keeps it for the next run or drops it.
    store: ManuallyDrop<Store>,
}

/// What outlives a run when its database is reused: the SQLite database itself, its anchor and
/// its idle connections.
struct Store {
    backend: Backend,
    uri: String,
    file: Option<PathBuf>,
    observed_tables: Vec<String>,
    /// Closed connections, rolled back and ready to be handed out again (last closed first).
    pool: Vec<SimConnection>,
    /// How to put back the rows of a new run, once worked out (see [`Store::reset_from`]).
    reset_plan: Option<ResetPlan>,
    /// What a two-part set-up's schema step left, for [`Database::reuse_schema`].
    schema_image: Option<SchemaImage>,
    // Declared last so it closes last: the memdb store lives as long as one connection does.
    anchor: Connection,
}

impl Drop for Store {
    fn drop(&mut self) {
        self.pool.clear();
        if let Some(path) = &self.file {
            remove_database_files(path);
        }
    }
}

impl Database {
    /// Creates an empty database.
    pub fn create(backend: Backend, observed_tables: &[&str]) -> Result<Database, DbError> {
        configure_sqlite_once();
        let number = DATABASE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let (uri, file) = match backend {
            Backend::Memdb => (
                format!("file:/commitgap-{}-{number}?vfs=memdb", std::process::id()),
                None,
            ),
            Backend::WalFile => {
                let directory = if std::path::Path::new("/dev/shm").is_dir() {
                    PathBuf::from("/dev/shm")
                } else {
                    std::env::temp_dir()
                };
                let path = directory.join(format!("commitgap-{}-{number}.sqlite", std::process::id()));
                remove_database_files(&path);
                (path.to_string_lossy().into_owned(), Some(path))
            }
        };
        let anchor = open_raw(&uri)?;
        if backend == Backend::WalFile {
            anchor.pragma_update(None, "journal_mode", "WAL")?;
            anchor.pragma_update(None, "synchronous", "NORMAL")?;
        }
        Ok(Database::over(Store {
            backend,
            uri,
            file,
            observed_tables: observed_tables.iter().map(|name| (*name).to_owned()).collect(),
            pool: Vec::new(),
            reset_plan: None,
            schema_image: None,
            anchor,
        }))
    }

    fn over(store: Store) -> Database {
        Database {
            connections: BTreeMap::new(),
            next_connection: 0,
            sql_log: None,
            reusable: false,
            transactions_ended: 0,
            store: ManuallyDrop::new(store),
        }
    }

    /// Where this database lives.
    pub fn backend(&self) -> Backend {
        self.store.backend
    }

    /// The connection the system sets up its schema and fixtures on, before any process runs.
    pub fn setup_connection(&self) -> &Connection {
        &self.store.anchor
    }

    /// Ends set-up: prepares change capture for the observed tables (which must exist now) and
    /// returns every row they hold, as inserts.
    pub fn finish_setup(&mut self) -> Result<Vec<RowChange>, DbError> {
        let mut capture_sql = String::new();
        for (index, table) in self.store.observed_tables.iter().enumerate() {
            let columns = query_rows(
                &self.store.anchor,
                "SELECT name FROM pragma_table_info(?1) ORDER BY cid",
                &[Value::Text(table.clone())],
            )?;
            if columns.is_empty() {
                return Err(DbError::Other(format!(
                    "observed table {table:?} does not exist after set-up"
                )));
            }
            let mut new_values = String::new();
            for column in &columns {
                new_values.push_str(&format!(", NEW.\"{}\"", column.text(0)?));
            }
            capture_sql.push_str(&format!(
                "CREATE TRIGGER main.commitgap_capture_{index}_insert AFTER INSERT ON \"{table}\" \
                 BEGIN SELECT commitgap_capture({index}, NULL, NEW.rowid{new_values}); END;\n\
                 CREATE TRIGGER main.commitgap_capture_{index}_update AFTER UPDATE ON \"{table}\" \
                 BEGIN SELECT commitgap_capture({index}, OLD.rowid, NEW.rowid{new_values}); END;\n\
                 CREATE TRIGGER main.commitgap_capture_{index}_delete AFTER DELETE ON \"{table}\" \
                 BEGIN SELECT commitgap_capture({index}, OLD.rowid, NULL); END;\n"
            ));
        }
        let rows = self.observed_rows()?;
        // The anchor writes nothing once processes run, but a write through a connection that
        // lacks the function the triggers call would fail; one that ignores what it is told keeps
        // the anchor usable for tests that edit rows between steps.
        self.store.anchor.create_scalar_function(
            "commitgap_capture",
            -1,
            FunctionFlags::SQLITE_UTF8,
            |_| Ok(Value::Null),
        )?;
        self.store
            .anchor
            .execute_batch(&format!("BEGIN;\n{capture_sql}COMMIT;"))?;
        Ok(rows)
    }

    /// Every row the observed tables hold, as inserts, table by table in rowid order.
    fn observed_rows(&self) -> Result<Vec<RowChange>, DbError> {
        rows_of(&self.store.anchor, &self.store.observed_tables)
    }

    /// Starts writing down every statement, rollback and close on process connections.
    pub fn record_sql(&mut self) {
        self.sql_log.get_or_insert_with(Vec::new);
    }

    /// What was recorded since [`Database::record_sql`], or `None` if nothing was.
    pub fn take_sql_log(&mut self) -> Option<Vec<SqlOp>> {
        self.sql_log.take()
    }

    /// A new connection to this database without change capture: no triggers, no hooks, the
    /// same flags and busy timeout as a process connection. For a replay on a bare database.
    pub fn open_bare(&self) -> Result<Connection, DbError> {
        open_raw(&self.store.uri)
    }

    /// Opens a new connection with change capture, or hands out a pooled one (see the module
    /// doc).
    pub fn open(&mut self) -> Result<ConnectionId, DbError> {
        if let Some(slot) = self.store.pool.pop() {
            // What a new connection's first schema read would meet: a shared lock on main. Between
            // statements only a connection with a transaction open holds a lock, so with none
            // open the read cannot fail and is skipped.
            let lock_held = !self.store.anchor.is_autocommit()
                || self
                    .connections
                    .values()
                    .any(|other| !other.connection.is_autocommit());
            if lock_held && let Err(error) = read_schema(&slot.connection) {
                self.store.pool.push(slot);
                return Err(DbError::from(error));
            }
            return Ok(self.register(slot));
        }
        let mut connection = open_raw(&self.store.uri)?;
        let capture = Arc::new(Mutex::new(Capture::default()));
        let function_capture = Arc::clone(&capture);
        connection.create_scalar_function(
            "commitgap_capture",
            -1,
            FunctionFlags::SQLITE_UTF8,
            move |context| {
                let mut capture = function_capture.lock().expect("capture lock is never poisoned");
                record_change(&mut capture.changes, context);
                Ok(Value::Null)
            },
        )?;
        // A commit hook rather than a rollback hook: SQLite rolls back inside sqlite3_close, after
        // rusqlite has freed the hook's closure, so a rollback hook would run freed code.
        let commit_capture = Arc::clone(&capture);
        connection.commit_hook(Some(move || {
            commit_capture
                .lock()
                .expect("capture lock is never poisoned")
                .committed = true;
            false
        }))?;
        connection.pragma_update(None, "recursive_triggers", true)?;
        read_schema(&connection)?;
        Ok(self.register(SimConnection {
            connection,
            capture,
            has_reset_table: false,
        }))
    }

    fn register(&mut self, slot: SimConnection) -> ConnectionId {
        let id = self.next_connection;
        self.next_connection += 1;
        self.connections.insert(id, slot);
        id
    }

    /// A process connection, for tests that drive statements by hand.
    pub fn connection(&self, id: ConnectionId) -> &Connection {
        &self.connections[&id].connection
    }

    /// Runs one statement on connection `id`. Returns what it produced and, if the statement
    /// ended a transaction with a commit, the row changes that committed.
    pub fn run(
        &mut self,
        id: ConnectionId,
        sql: &str,
        params: &[Value],
        wants_rows: bool,
    ) -> (Result<StatementOutput, DbError>, Vec<RowChange>) {
        let slot = &self.connections[&id];
        let held_lock = holds_lock(&slot.connection);
        let mark = {
            let mut capture = slot.capture.lock().expect("capture lock");
            capture.committed = false;
            capture.changes.len()
        };
        let result = if wants_rows {
            query_rows(&slot.connection, sql, params).map(StatementOutput::Rows)
        } else {
            slot.connection
                .prepare_cached(sql)
                .and_then(|mut statement| statement.execute(rusqlite::params_from_iter(params)))
                .map(StatementOutput::Changed)
                .map_err(DbError::from)
        };
        if result.is_err() {
            // A failed statement undoes its own changes (the default ON CONFLICT ABORT).
            slot.capture.lock().expect("capture lock").changes.truncate(mark);
        }
        if let Some(log) = &mut self.sql_log {
            log.push(SqlOp::Statement(RecordedStatement {
                connection: id,
                sql: sql.to_owned(),
                params: params.to_vec(),
                wants_rows,
                result: StatementResult::of(&result),
            }));
        }
        if held_lock && self.connections[&id].connection.is_autocommit() {
            self.transactions_ended += 1;
        }
        let committed = self.take_committed_after(id, result.is_ok());
        (result, committed)
    }

    /// How many times a process connection's transaction that held a lock has ended so far: when it changes, a
    /// lock may have been freed.
    pub fn transactions_ended(&self) -> u64 {
        self.transactions_ended
    }

    /// Whether a statement of connection `id` that SQLite just refused as busy is one SQLite's
    /// busy handler would wait for. It is not when the connection holds a read transaction and
    /// asked to write: SQLite returns `SQLITE_BUSY` (or `SQLITE_BUSY_SNAPSHOT` in WAL) at once,
    /// whatever the timeout, because waiting could deadlock with the writer, who waits for the
    /// reader to go. Every other lock (a first read, a `BEGIN IMMEDIATE`, a `COMMIT` waiting
    /// for readers) is waited for.
    pub fn busy_is_waited_for(&self, id: ConnectionId) -> bool {
        !matches!(
            self.connections[&id]
                .connection
                .transaction_state(Some(rusqlite::MAIN_DB)),
            Ok(rusqlite::TransactionState::Read)
        )
    }

    fn take_committed_after(&mut self, id: ConnectionId, statement_succeeded: bool) -> Vec<RowChange> {
        let slot = &self.connections[&id];
        if !slot.connection.is_autocommit() {
            return Vec::new();
        }
        // The transaction is over: it committed if the commit hook fired during this statement
        // and the statement succeeded; otherwise it rolled back.
        let mut capture = slot.capture.lock().expect("capture lock");
        let committed = std::mem::take(&mut capture.committed);
        let changes = std::mem::take(&mut capture.changes);
        if committed && statement_succeeded {
            changes
        } else {
            Vec::new()
        }
    }

    /// True while connection `id` has a transaction open.
    pub fn in_transaction(&self, id: ConnectionId) -> bool {
        !self.connections[&id].connection.is_autocommit()
    }

    /// The connections that hold a write transaction now, in order. While another connection
    /// holds one, a statement waiting to write cannot get its lock, so it need not be woken.
    pub fn writers(&self) -> Vec<ConnectionId> {
        self.connections
            .iter()
            .filter(|(_, slot)| {
                matches!(
                    slot.connection.transaction_state(Some(rusqlite::MAIN_DB)),
                    Ok(rusqlite::TransactionState::Write)
                )
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// Rolls back whatever transaction `id` has open (used when a task ends without closing it).
    pub fn roll_back(&mut self, id: ConnectionId) {
        let slot = &self.connections[&id];
        if !slot.connection.is_autocommit() {
            self.transactions_ended += u64::from(holds_lock(&slot.connection));
            // ROLLBACK cannot fail on an open transaction we own; if it did, closing the
            // connection later rolls back anyway.
            let _ = slot.connection.execute_batch("ROLLBACK");
            if let Some(log) = &mut self.sql_log {
                log.push(SqlOp::RollBack(id));
            }
        }
        let mut capture = slot.capture.lock().expect("capture lock");
        capture.changes.clear();
        capture.committed = false;
    }

    /// Closes connection `id`, as a crash does: SQLite rolls back its open transaction. Returns
    /// whether a transaction was open.
    pub fn close(&mut self, id: ConnectionId) -> bool {
        let Some(slot) = self.connections.remove(&id) else {
            return false;
        };
        let was_open = !slot.connection.is_autocommit();
        self.transactions_ended += u64::from(holds_lock(&slot.connection));
        if let Some(slot) = retire(slot) {
            self.store.pool.push(slot);
        }
        if let Some(log) = &mut self.sql_log {
            log.push(SqlOp::Close(id));
        }
        was_open
    }

    /// Closes every process connection, as if every process crashed at once: SQLite rolls back
    /// whatever they had open, and only committed rows remain.
    pub fn close_all(&mut self) {
        let ids: Vec<ConnectionId> = self.connections.keys().copied().collect();
        for id in ids {
            self.close(id);
        }
    }

    /// Reads through the anchor connection, outside every simulated process (for tests and
    /// reports, between steps only).
    pub fn read(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>, DbError> {
        query_rows(&self.store.anchor, sql, params)
    }
}

/// Every row `tables` hold on `connection`, as inserts, table by table in rowid order, each with
/// its values in table order (as the capture triggers pass them): the rows set-up left, or the
/// final rows of a real database ([`crate::final_state::read_final_rows`]).
pub(crate) fn rows_of(
    connection: &Connection,
    tables: &[impl AsRef<str>],
) -> Result<Vec<RowChange>, DbError> {
    let mut rows = Vec::new();
    for (index, table) in tables.iter().enumerate() {
        let table = table.as_ref();
        for row in query_rows(
            connection,
            &format!("SELECT rowid, * FROM main.\"{table}\" ORDER BY rowid"),
            &[],
        )? {
            let mut values = row.0;
            let rowid = match values.remove(0) {
                Value::Integer(rowid) => rowid,
                other => {
                    return Err(DbError::Other(format!(
                        "{table}: rowid {other:?} is not an integer"
                    )));
                }
            };
            rows.push(RowChange {
                table: index,
                rowid,
                values: Some(values),
            });
        }
    }
    Ok(rows)
}

/// Rolls back what `slot` has open, as closing it would, and makes it look new again; `None` if
/// it cannot, and then dropping it closes it for real, which rolls back all the same.
fn retire(mut slot: SimConnection) -> Option<SimConnection> {
    let connection = &slot.connection;
    let run = |sql: &str| {
        connection
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute([]))
    };
    let rolled_back = connection.is_autocommit() || run("ROLLBACK").is_ok();
    // A delete of nothing, so that the count of changed rows SQLite reports for statements that
    // change none, such as BEGIN, is 0 as on a new connection. The empty table is TEMP: it lives
    // in the connection's own database and takes no lock on the shared one.
    let has_table = slot.has_reset_table
        || (rolled_back
            && connection
                .execute_batch("CREATE TEMP TABLE IF NOT EXISTS commitgap_pool_reset (unused)")
                .is_ok());
    let reset = rolled_back && has_table && run("DELETE FROM temp.commitgap_pool_reset").is_ok();
    if !reset || !connection.is_autocommit() {
        return None;
    }
    slot.has_reset_table = true;
    let mut capture = slot.capture.lock().expect("capture lock");
    capture.changes.clear();
    capture.committed = false;
    drop(capture);
    Some(slot)
}

/// Reads the shared schema, as a new connection's first statement does: needs a shared lock.
fn read_schema(connection: &Connection) -> rusqlite::Result<()> {
    connection
        .prepare_cached("SELECT count(*) FROM main.sqlite_master")?
        .query_row([], |_| Ok(()))
}

fn open_raw(uri: &str) -> Result<Connection, DbError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(uri, flags)?;
    connection.busy_timeout(std::time::Duration::ZERO)?;
    connection.set_prepared_statement_cache_capacity(64);
    Ok(connection)
}

fn remove_database_files(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
}

/// Records one row change reported by a capture trigger:
/// `(table index, old rowid or NULL, new rowid or NULL, new column values...)`.
fn record_change(changes: &mut Vec<RowChange>, context: &rusqlite::functions::Context<'_>) {
    let integer = |index: usize| match context.get_raw(index) {
        ValueRef::Integer(value) => Some(value),
        _ => None,
    };
    let (Some(table), old_rowid, new_rowid) = (integer(0), integer(1), integer(2)) else {
        return;
    };
    let table = table as usize;
    if let Some(old_rowid) = old_rowid
        && new_rowid != Some(old_rowid)
    {
        changes.push(RowChange {
            table,
            rowid: old_rowid,
            values: None,
        });
    }
    if let Some(rowid) = new_rowid {
        let values = (3..context.len())
            .map(|index| Value::try_from(context.get_raw(index)).unwrap_or(Value::Null))
            .collect();
        changes.push(RowChange {
            table,
            rowid,
            values: Some(values),
        });
    }
}

/// Whether `connection` holds a lock on the main database: a read or a write transaction that
/// has started, not a `BEGIN` that has touched nothing yet.
fn holds_lock(connection: &rusqlite::Connection) -> bool {
    !matches!(
        connection.transaction_state(Some(rusqlite::MAIN_DB)),
        Ok(rusqlite::TransactionState::None)
    )
}

#[cfg(test)]
mod tests;
