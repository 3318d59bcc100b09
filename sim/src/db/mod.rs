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

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use commitgap::env::{DbError, Row, Value};
use commitgap::realtime::query_rows;
use rusqlite::config::DbConfig;
use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use crate::system::{Fixtures, System};

pub use crate::backend::Backend;

/// Identifies a connection within one run.
pub type ConnectionId = u64;

pub use crate::rows::RowChange;

/// What a statement returned.
#[derive(Debug, PartialEq)]
pub enum StatementOutput {
    Changed(usize),
    Rows(Vec<Row>),
}

/// One thing a simulated process did to SQLite, as recorded for a replay on a bare database.
/// A connection opens at its first statement, as in the run.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlOp {
    Statement(RecordedStatement),
    /// A task ended with a transaction open and its connection rolled it back.
    RollBack(ConnectionId),
    /// A crash closed the connection, rolling back whatever it had open.
    Close(ConnectionId),
}

/// One statement as a process ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedStatement {
    pub connection: ConnectionId,
    pub sql: String,
    pub params: Vec<Value>,
    /// Whether the caller read rows (a query) or a change count (an execute).
    pub wants_rows: bool,
    pub result: StatementResult,
}

/// What a statement returned, reduced to what a faithful replay must reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementResult {
    Changed(usize),
    Rows(usize),
    Busy,
    Failed,
}

impl StatementResult {
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

/// How many databases one thread keeps for reuse: one per system and backend it sweeps, and a
/// sweep has one of each.
const SPARE_STORES_KEPT: usize = 4;

thread_local! {
    /// Databases this thread's finished runs left for its next ones, while [`reusing_databases`]
    /// runs; `None` outside it, and then every run's database is dropped with the run.
    static SPARE_STORES: RefCell<Option<Vec<Store>>> = const { RefCell::new(None) };
}

/// Runs `work` with database reuse on for this thread: a run's database, once the run is over,
/// waits with its idle connections for the next run of the same system and backend, which
/// [`Database::reuse`] or [`Database::reuse_schema`] sets up again as new. A new database costs a
/// schema parse per connection and a statement cache filled again per connection, which was a
/// quarter of a sweep's time.
/// What a run sees is the same either way: the same rows, rowids, sequences and schema, and
/// connections that look new (see [`Database::open`]). When `work` returns or panics, the
/// databases kept are dropped, which removes their files.
pub fn reusing_databases<R>(work: impl FnOnce() -> R) -> R {
    struct Kept {
        outermost: bool,
    }
    impl Drop for Kept {
        fn drop(&mut self) {
            if self.outermost {
                let spares = SPARE_STORES.with(|spares| spares.borrow_mut().take());
                drop(spares);
            }
        }
    }
    let outermost = SPARE_STORES.with(|spares| {
        let mut spares = spares.borrow_mut();
        let outermost = spares.is_none();
        spares.get_or_insert_with(Vec::new);
        outermost
    });
    let _kept = Kept { outermost };
    work()
}

/// Takes out of this thread's spares a database of `backend` observing `observed_tables` for
/// which `fits` holds; `None` when there is none, or the thread does not reuse databases.
fn take_spare(backend: Backend, observed_tables: &[&str], fits: impl Fn(&Store) -> bool) -> Option<Store> {
    SPARE_STORES.with(|spares| {
        let mut spares = spares.borrow_mut();
        let spares = spares.as_mut()?;
        let position = spares.iter().position(|store| {
            store.backend == backend
                && store
                    .observed_tables
                    .iter()
                    .map(String::as_str)
                    .eq(observed_tables.iter().copied())
                && fits(store)
        })?;
        Some(spares.remove(position))
    })
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
            store: ManuallyDrop::new(store),
        }
    }

    /// A database this thread used for an earlier run, set up again by `set_up` as if new, if
    /// this thread reuses databases (see [`reusing_databases`]) and one fits: same backend, same
    /// observed tables, and after `set_up` the same schema. Returns it with every row its
    /// observed tables hold, as [`Database::finish_setup`] does. `None` means: create one.
    ///
    /// `set_up` runs on a new, bare in-memory database, whose rows then replace the reused
    /// database's rows table by table, rowids and `sqlite_sequence` included (see
    /// `Store::reset_from`). If `set_up` fails there, or writes another schema, the caller sets
    /// up a new database, which runs `set_up` a second time and reports a failure as usual.
    pub fn reuse(
        backend: Backend,
        observed_tables: &[&str],
        set_up: &dyn Fn(&Connection) -> Result<(), DbError>,
    ) -> Option<(Database, Vec<RowChange>)> {
        let mut store = take_spare(backend, observed_tables, |_| true)?;
        let scratch = Connection::open_in_memory().ok()?;
        set_up(&scratch).ok()?;
        store.reset_from(&scratch).ok()?.then_some(())?;
        drop(scratch);
        Database::reused(store)
    }

    /// A database over `store`, set up again for a new run, with every row its observed tables
    /// hold, as [`Database::finish_setup`] returns them.
    fn reused(store: Store) -> Option<(Database, Vec<RowChange>)> {
        let mut database = Database::over(store);
        let rows = database.observed_rows().ok()?;
        database.reusable = true;
        Some((database, rows))
    }

    /// Lets this database serve a later run of this thread once this run drops it, when the
    /// thread reuses databases (see [`reusing_databases`]).
    pub fn allow_reuse(&mut self) {
        self.reusable = true;
    }

    /// A database this thread used for an earlier run of `system`, which sets up in two parts
    /// (see [`System::sets_up_in_two_parts`]), set up again for `fixtures` as if new: its rows go
    /// back to what `system`'s schema step left (kept by [`Database::keep_schema_image`] when the
    /// database was new), then [`System::load_fixtures`] runs on it. Returns it with every row its
    /// observed tables hold, as [`Database::finish_setup`] does. `None` means: create one. Only a
    /// database set up by this very `system` value qualifies, so a schema step runs once per
    /// database; the schema must still be the one the image was taken with, or the database is
    /// dropped. If `load_fixtures` fails here, the caller sets up a new database, which reports
    /// the failure as usual.
    pub fn reuse_schema(
        backend: Backend,
        observed_tables: &[&str],
        system: &Arc<dyn System>,
        fixtures: &Fixtures,
    ) -> Option<(Database, Vec<RowChange>)> {
        let store = take_spare(backend, observed_tables, |store| {
            store
                .schema_image
                .as_ref()
                .is_some_and(|image| Arc::ptr_eq(&image.system, system))
        })?;
        store.reset_to_image().ok()?.then_some(())?;
        system.load_fixtures(&store.anchor, fixtures).ok()?;
        if !store.anchor.is_autocommit() {
            return None;
        }
        Database::reused(store)
    }

    /// What the set-up has written so far, for [`Database::keep_schema_image`]: call it right
    /// after a two-part set-up's schema step. `None` when the schema holds a table whose rows
    /// cannot be copied with plain SQL (a virtual table); such a database is not reused.
    pub fn schema_snapshot(&self) -> Result<Option<SchemaSnapshot>, DbError> {
        let Some(plan) = reset_plan(&self.store.anchor)? else {
            return Ok(None);
        };
        let mut tables = BTreeMap::new();
        for table in &plan.tables {
            tables.insert(table.name.clone(), read_copyable_rows(&self.store.anchor, table)?);
        }
        Ok(Some(SchemaSnapshot {
            schema: plan.schema,
            tables,
            user_version: header_value(&self.store.anchor, "user_version")?,
            application_id: header_value(&self.store.anchor, "application_id")?,
        }))
    }

    /// Keeps `snapshot` (taken after `system`'s schema step) with this database once its set-up
    /// is over, so that [`Database::reuse_schema`] can go back to it. Nothing is kept if the
    /// fixtures changed the schema, which [`System::load_fixtures`] must not do.
    pub fn keep_schema_image(
        &mut self,
        system: &Arc<dyn System>,
        snapshot: SchemaSnapshot,
    ) -> Result<(), DbError> {
        let Some(plan) = reset_plan(&self.store.anchor)? else {
            return Ok(());
        };
        let SchemaSnapshot {
            schema,
            mut tables,
            user_version,
            application_id,
        } = snapshot;
        // The same schema has the same tables, so every snapshot table has its place in the plan.
        if schema != plan.schema {
            return Ok(());
        }
        let rows = plan
            .tables
            .iter()
            .map(|table| tables.remove(&table.name).unwrap_or_default())
            .collect();
        self.store.reset_plan = Some(plan);
        self.store.schema_image = Some(SchemaImage {
            system: Arc::clone(system),
            rows,
            user_version,
            application_id,
        });
        Ok(())
    }

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
        let mut rows = Vec::new();
        for (index, table) in self.store.observed_tables.iter().enumerate() {
            for row in query_rows(
                &self.store.anchor,
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
        let committed = self.take_committed_after(id, result.is_ok());
        (result, committed)
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

    /// Rolls back whatever transaction `id` has open (used when a task ends without closing it).
    pub fn roll_back(&mut self, id: ConnectionId) {
        let slot = &self.connections[&id];
        if !slot.connection.is_autocommit() {
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

impl Drop for Database {
    fn drop(&mut self) {
        let connections = std::mem::take(&mut self.connections);
        // SAFETY: `drop` runs once and is the only place that takes the store; nothing reads
        // `self.store` after this line.
        let mut store = unsafe { ManuallyDrop::take(&mut self.store) };
        let keep = self.reusable
            && store.anchor.is_autocommit()
            && SPARE_STORES.with(|spares| spares.borrow().is_some());
        if !keep {
            // Connections close before the store, whose drop removes the files.
            drop(connections);
            return;
        }
        // In id order, so that the pool's order depends on the run alone.
        for slot in connections.into_values() {
            if let Some(slot) = retire(slot) {
                store.pool.push(slot);
            }
        }
        SPARE_STORES.with(|spares| {
            if let Some(spares) = spares.borrow_mut().as_mut() {
                spares.push(store);
                if spares.len() > SPARE_STORES_KEPT {
                    spares.remove(0);
                }
            }
        });
    }
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

/// How to copy a new set-up's rows into a reused database, worked out once per database.
struct ResetPlan {
    /// The schema the plan was made for, capture triggers left out; a set-up that writes another
    /// gets a new database.
    schema: Vec<Row>,
    auto_vacuum: i64,
    /// Every table of the schema, `sqlite_sequence` last: copying rows with their rowids moves it.
    tables: Vec<TableCopy>,
    /// Whether the schema has triggers of the system's own, which the copy must not fire.
    own_triggers: bool,
}

struct TableCopy {
    name: String,
    delete_sql: String,
    select_sql: String,
    insert_sql: String,
}

/// The schema as [`ResetPlan::schema`] holds it.
const SCHEMA_SQL: &str = "SELECT type, name, tbl_name, sql FROM main.sqlite_master \
                          WHERE name NOT LIKE 'commitgap\\_capture\\_%' ESCAPE '\\' ORDER BY rowid";

impl Store {
    /// Replaces every row of this database with the rows of `scratch`, a bare database a system
    /// has just set up: the same rowids, `sqlite_sequence` and header versions. `Ok(false)`, with
    /// nothing changed, when the two schemas differ (leaving aside the capture triggers) or the
    /// schema holds a table whose rows cannot be copied this way (a virtual table).
    ///
    /// Rows go through Rust rather than through `ATTACH`, and triggers and foreign keys are
    /// switched off only when the schema has any: both change the anchor's schema or flags, and
    /// either makes SQLite prepare every cached statement of the anchor again.
    fn reset_from(&mut self, scratch: &Connection) -> Result<bool, DbError> {
        if self.reset_plan.is_none() {
            self.reset_plan = reset_plan(&self.anchor)?;
        }
        let Some(plan) = &self.reset_plan else {
            return Ok(false);
        };
        if query_rows(scratch, SCHEMA_SQL, &[])? != plan.schema
            || header_value(scratch, "auto_vacuum")? != plan.auto_vacuum
        {
            return Ok(false);
        }
        self.replace_rows(plan, RowSource::Scratch(scratch))
    }

    /// Replaces every row of this database with the rows of its schema image (see
    /// [`Database::reuse_schema`]). `Ok(false)`, with nothing changed, when there is no image.
    fn reset_to_image(&self) -> Result<bool, DbError> {
        let (Some(plan), Some(image)) = (&self.reset_plan, &self.schema_image) else {
            return Ok(false);
        };
        self.replace_rows(plan, RowSource::Image(image))
    }

    /// Deletes every row of every table and inserts `source`'s instead, with its header versions.
    /// `Ok(false)`, with nothing changed, if a run changed this database's schema: the plan no
    /// longer fits it.
    fn replace_rows(&self, plan: &ResetPlan, source: RowSource<'_>) -> Result<bool, DbError> {
        let anchor = &self.anchor;
        if query_rows(anchor, SCHEMA_SQL, &[])? != plan.schema {
            return Ok(false);
        }
        let headers = match source {
            RowSource::Scratch(scratch) => [
                header_value(scratch, "user_version")?,
                header_value(scratch, "application_id")?,
            ],
            RowSource::Image(image) => [image.user_version, image.application_id],
        };
        let foreign_keys = anchor.db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_FKEY)?;
        if foreign_keys {
            anchor.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_FKEY, false)?;
        }
        if plan.own_triggers {
            anchor.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)?;
        }
        let run = |sql: &str| -> Result<(), DbError> {
            anchor.prepare_cached(sql)?.execute([])?;
            Ok(())
        };
        let copied = (|| -> Result<(), DbError> {
            run("BEGIN IMMEDIATE")?;
            for (index, table) in plan.tables.iter().enumerate() {
                run(&table.delete_sql)?;
                let mut insert = anchor.prepare_cached(&table.insert_sql)?;
                match source {
                    RowSource::Scratch(scratch) => {
                        for values in read_copyable_rows(scratch, table)? {
                            insert.execute(rusqlite::params_from_iter(values))?;
                        }
                    }
                    RowSource::Image(image) => {
                        for values in &image.rows[index] {
                            insert.execute(rusqlite::params_from_iter(values))?;
                        }
                    }
                }
            }
            for (name, wanted) in ["user_version", "application_id"].into_iter().zip(headers) {
                if header_value(anchor, name)? != wanted {
                    anchor.execute_batch(&format!("PRAGMA main.{name} = {wanted}"))?;
                }
            }
            run("COMMIT")
        })();
        if copied.is_err() && !anchor.is_autocommit() {
            let _ = anchor.execute_batch("ROLLBACK");
        }
        if foreign_keys {
            anchor.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_FKEY, true)?;
        }
        if plan.own_triggers {
            anchor.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, true)?;
        }
        copied?;
        Ok(true)
    }
}

/// Where [`Store::replace_rows`] takes its rows from.
#[derive(Clone, Copy)]
enum RowSource<'a> {
    /// A bare database a system has just set up.
    Scratch(&'a Connection),
    /// What a two-part set-up's schema step left.
    Image(&'a SchemaImage),
}

/// The rows a two-part set-up's schema step left (see [`System::sets_up_in_two_parts`]).
struct SchemaImage {
    /// The system whose schema step this is: only its own runs reuse the database this way. Held
    /// so that no other system can be allocated at its address while the image lives.
    system: Arc<dyn System>,
    /// Every table's rows, in the order of the reset plan's tables, as [`TableCopy::select_sql`]
    /// reads them.
    rows: Vec<Vec<Vec<Value>>>,
    user_version: i64,
    application_id: i64,
}

/// What a set-up had written when [`Database::schema_snapshot`] looked.
pub struct SchemaSnapshot {
    schema: Vec<Row>,
    /// Every table's rows, by table name.
    tables: BTreeMap<String, Vec<Vec<Value>>>,
    user_version: i64,
    application_id: i64,
}

/// Every row of `table`, as its copy inserts them.
fn read_copyable_rows(connection: &Connection, table: &TableCopy) -> Result<Vec<Vec<Value>>, DbError> {
    let mut select = connection.prepare(&table.select_sql)?;
    let column_count = select.column_count();
    let mut rows = select.query([])?;
    let mut copied = Vec::new();
    while let Some(row) = rows.next()? {
        copied.push(
            (0..column_count)
                .map(|index| row.get::<_, Value>(index))
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    Ok(copied)
}

/// A header value of the main database (`user_version`, `application_id`, `auto_vacuum`).
fn header_value(connection: &Connection, name: &'static str) -> Result<i64, DbError> {
    let sql = match name {
        "user_version" => "PRAGMA main.user_version",
        "application_id" => "PRAGMA main.application_id",
        "auto_vacuum" => "PRAGMA main.auto_vacuum",
        other => return Err(DbError::Other(format!("no header value {other}"))),
    };
    Ok(connection.prepare_cached(sql)?.query_row([], |row| row.get(0))?)
}

/// Works out how to copy rows into every table of `anchor`'s main schema; `None` if a table
/// cannot be copied with plain SQL.
fn reset_plan(anchor: &Connection) -> Result<Option<ResetPlan>, DbError> {
    let schema = query_rows(anchor, SCHEMA_SQL, &[])?;
    let mut own_triggers = false;
    for entry in &schema {
        own_triggers |= entry.text(0)? == "trigger";
    }
    let auto_vacuum = anchor.query_row("PRAGMA main.auto_vacuum", [], |row| row.get(0))?;
    let tables = query_rows(
        anchor,
        "SELECT name, type, wr FROM pragma_table_list WHERE schema = 'main' \
         AND name NOT IN ('sqlite_schema', 'sqlite_master') ORDER BY name = 'sqlite_sequence', name",
        &[],
    )?;
    let mut copies = Vec::new();
    for table in tables {
        let name = table.text(0)?;
        match table.text(1)? {
            "table" => {}
            "view" => continue,
            _ => return Ok(None),
        }
        let without_rowid = table.int(2)? != 0;
        let columns = query_rows(
            anchor,
            "SELECT name FROM pragma_table_xinfo(?1, 'main') WHERE hidden = 0 ORDER BY cid",
            &[Value::Text(name.to_owned())],
        )?;
        let mut column_list: Vec<String> = if without_rowid {
            Vec::new()
        } else {
            vec!["rowid".to_owned()]
        };
        for column in &columns {
            column_list.push(format!("\"{}\"", column.text(0)?.replace('"', "\"\"")));
        }
        let placeholders = vec!["?"; column_list.len()].join(", ");
        let columns = column_list.join(", ");
        let quoted = name.replace('"', "\"\"");
        copies.push(TableCopy {
            name: name.to_owned(),
            delete_sql: format!("DELETE FROM main.\"{quoted}\""),
            select_sql: format!("SELECT {columns} FROM main.\"{quoted}\""),
            insert_sql: format!("INSERT INTO main.\"{quoted}\" ({columns}) VALUES ({placeholders})"),
        });
    }
    Ok(Some(ResetPlan {
        schema,
        auto_vacuum,
        tables: copies,
        own_triggers,
    }))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn database(backend: Backend) -> (Database, ConnectionId, ConnectionId) {
        let mut database = Database::create(backend, &["t"]).unwrap();
        database
            .setup_connection()
            .execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER); INSERT INTO t VALUES ('z', 0)")
            .unwrap();
        let existing = database.finish_setup().unwrap();
        assert_eq!(existing.len(), 1);
        run_raw(&mut database, "DELETE FROM t");
        let first = database.open().unwrap();
        let second = database.open().unwrap();
        (database, first, second)
    }

    fn run_raw(database: &mut Database, sql: &str) {
        database.setup_connection().execute_batch(sql).unwrap();
    }

    fn run(database: &mut Database, id: ConnectionId, sql: &str) -> (bool, Vec<RowChange>) {
        let (result, committed) = database.run(id, sql, &[], false);
        (result.is_ok(), committed)
    }

    #[test]
    fn changes_surface_only_when_their_transaction_commits() {
        for backend in [Backend::Memdb, Backend::WalFile] {
            let (mut database, first, _) = database(backend);
            assert!(run(&mut database, first, "BEGIN IMMEDIATE").1.is_empty());
            assert!(
                run(&mut database, first, "INSERT INTO t VALUES ('a', 1)")
                    .1
                    .is_empty()
            );
            assert!(
                run(&mut database, first, "UPDATE t SET v = 2 WHERE k = 'a'")
                    .1
                    .is_empty()
            );
            let (ok, committed) = run(&mut database, first, "COMMIT");
            assert!(ok);
            assert_eq!(committed.len(), 2, "{backend:?}");
            assert_eq!(
                committed[1].values,
                Some(vec![Value::Text("a".into()), Value::Integer(2)])
            );

            let (_, autocommitted) = run(&mut database, first, "DELETE FROM t WHERE k = 'a'");
            assert_eq!(
                autocommitted,
                vec![RowChange {
                    table: 0,
                    rowid: 1,
                    values: None
                }]
            );
        }
    }

    #[test]
    fn rollback_and_crash_discard_changes() {
        let (mut database, first, second) = database(Backend::Memdb);
        run(&mut database, first, "BEGIN IMMEDIATE");
        run(&mut database, first, "INSERT INTO t VALUES ('a', 1)");
        let (ok, committed) = run(&mut database, first, "ROLLBACK");
        assert!(ok && committed.is_empty());

        run(&mut database, second, "BEGIN IMMEDIATE");
        run(&mut database, second, "INSERT INTO t VALUES ('b', 1)");
        assert!(
            database.close(second),
            "the crash interrupted an open transaction"
        );
        let rows = database.read("SELECT count(*) FROM t", &[]).unwrap();
        assert_eq!(rows[0].int(0).unwrap(), 0);
    }

    #[test]
    fn a_failed_statement_inside_a_transaction_keeps_earlier_changes_only() {
        let (mut database, first, second) = database(Backend::Memdb);
        run(&mut database, first, "INSERT INTO t VALUES ('a', 1)");
        run(&mut database, second, "BEGIN IMMEDIATE");
        run(&mut database, second, "INSERT INTO t VALUES ('b', 1)");
        let (ok, _) = run(&mut database, second, "INSERT INTO t VALUES ('a', 2)");
        assert!(!ok, "duplicate key");
        let (_, committed) = run(&mut database, second, "COMMIT");
        assert_eq!(committed.len(), 1);
        assert_eq!(committed[0].values.as_ref().unwrap()[0], Value::Text("b".into()));
    }

    #[test]
    fn a_closed_connection_comes_back_from_the_pool_like_a_new_one() {
        for backend in [Backend::Memdb, Backend::WalFile] {
            let (mut database, first, _) = database(backend);
            run(&mut database, first, "BEGIN IMMEDIATE");
            run(&mut database, first, "INSERT INTO t VALUES ('a', 1)");
            assert!(database.close(first));
            let reused = database.open().unwrap();
            assert_ne!(reused, first, "a pooled connection gets a new identity");
            let (begin, _) = database.run(reused, "BEGIN IMMEDIATE", &[], false);
            assert_eq!(
                begin.unwrap(),
                StatementOutput::Changed(0),
                "{backend:?}: BEGIN reports no changed rows, as on a new connection"
            );
            run(&mut database, reused, "INSERT INTO t VALUES ('b', 1)");
            let (_, committed) = run(&mut database, reused, "COMMIT");
            let keys: Vec<&Value> = committed
                .iter()
                .map(|change| &change.values.as_ref().unwrap()[0])
                .collect();
            assert_eq!(
                keys,
                vec![&Value::Text("b".into())],
                "{backend:?}: the crashed transaction's row is neither in the database nor captured"
            );
        }
    }

    #[test]
    fn opening_a_pooled_connection_fails_when_opening_a_new_one_would() {
        let (mut database, first, second) = database(Backend::Memdb);
        database.close(first);
        run(&mut database, second, "BEGIN EXCLUSIVE");
        run(&mut database, second, "INSERT INTO t VALUES ('a', 1)");
        let pooled = database.open().map(|_| ());
        database.store.pool.clear();
        let fresh = database.open().map(|_| ());
        assert_eq!(
            pooled,
            Err(DbError::Busy),
            "an exclusive writer keeps readers out"
        );
        assert_eq!(pooled, fresh);
        run(&mut database, second, "COMMIT");
        assert!(database.open().is_ok());
    }

    /// A schema with what a row copy could get wrong: an AUTOINCREMENT key, a rowid that is not
    /// dense, a table without rowid and a trigger of the system's own that must not fire.
    fn set_up_tricky(connection: &Connection, fixture: i64) -> Result<(), DbError> {
        connection.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, v INTEGER);\n\
             CREATE TABLE plain (v TEXT);\n\
             CREATE TABLE keyed (k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID;\n\
             CREATE TABLE audit (what TEXT);\n\
             CREATE TRIGGER audit_t AFTER INSERT ON t BEGIN INSERT INTO audit VALUES ('t'); END;\n\
             PRAGMA user_version = 7;",
        )?;
        for value in 0..fixture {
            connection.execute("INSERT INTO t (v) VALUES (?1)", [value])?;
            connection.execute("INSERT INTO plain (rowid, v) VALUES (?1, 'x')", [value * 10 + 5])?;
            connection.execute("INSERT INTO keyed VALUES (?1, ?2)", (format!("k{value}"), value))?;
        }
        connection.execute("DELETE FROM t WHERE id = 1", [])?;
        Ok(())
    }

    fn everything(database: &Database) -> Vec<Row> {
        let mut rows = Vec::new();
        for sql in [
            "SELECT rowid, * FROM t",
            "SELECT rowid, * FROM plain",
            "SELECT * FROM keyed",
            "SELECT rowid, * FROM audit",
            "SELECT * FROM sqlite_sequence",
            "PRAGMA user_version",
        ] {
            rows.push(Row(vec![Value::Text(sql.to_owned())]));
            rows.extend(database.read(sql, &[]).unwrap());
        }
        rows
    }

    fn new_database(fixture: i64) -> Database {
        let mut database = Database::create(Backend::Memdb, &["t"]).unwrap();
        set_up_tricky(database.setup_connection(), fixture).unwrap();
        database.finish_setup().unwrap();
        database.allow_reuse();
        database
    }

    #[test]
    fn a_reused_database_holds_what_a_new_one_holds() {
        reusing_databases(|| {
            let mut first = new_database(4);
            let id = first.open().unwrap();
            run(&mut first, id, "INSERT INTO t (v) VALUES (100)");
            run(&mut first, id, "INSERT INTO keyed VALUES ('late', 1)");
            run(&mut first, id, "BEGIN IMMEDIATE");
            run(&mut first, id, "DELETE FROM plain");
            drop(first);

            let (mut reused, rows) =
                Database::reuse(Backend::Memdb, &["t"], &|connection| set_up_tricky(connection, 3))
                    .expect("the same schema is reused");
            let fresh = {
                let mut fresh = Database::create(Backend::Memdb, &["t"]).unwrap();
                set_up_tricky(fresh.setup_connection(), 3).unwrap();
                let fresh_rows = fresh.finish_setup().unwrap();
                assert_eq!(rows, fresh_rows);
                fresh
            };
            assert_eq!(everything(&reused), everything(&fresh));
            assert_eq!(
                reused.store.pool.len(),
                1,
                "the first run's connection waits in the pool"
            );
            let id = reused.open().unwrap();
            assert_eq!(id, 0, "connection ids start again");
            let (result, committed) = reused.run(id, "INSERT INTO t (v) VALUES (9)", &[], false);
            assert_eq!(result.unwrap(), StatementOutput::Changed(1));
            assert_eq!(committed.len(), 1, "capture works on the reused database");
            assert_eq!(
                committed[0].rowid, 4,
                "AUTOINCREMENT continues from the new set-up"
            );
            drop(reused);

            let other_schema = |connection: &Connection| -> Result<(), DbError> {
                connection.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, w TEXT);")?;
                Ok(())
            };
            assert!(
                Database::reuse(Backend::Memdb, &["t"], &other_schema).is_none(),
                "another schema needs a new database"
            );
            assert!(
                Database::reuse(Backend::Memdb, &["t"], &|connection| set_up_tricky(connection, 2)).is_none(),
                "the mismatch dropped the spare"
            );
        });
        assert!(
            Database::reuse(Backend::Memdb, &["t"], &|connection| set_up_tricky(connection, 2)).is_none(),
            "outside reusing_databases nothing is kept"
        );
    }

    #[test]
    fn every_built_in_system_gets_a_reused_database() {
        for system in crate::systems::all() {
            for backend in [Backend::Memdb, Backend::WalFile] {
                let config = crate::config::SimConfig::draw(1, backend);
                let fixtures = |seed| {
                    crate::domain::draw_workload(&*system.domain(), seed, &config.workload_settings())
                        .fixtures
                };
                reusing_databases(|| {
                    let mut database = Database::create(backend, system.observed_tables()).unwrap();
                    system.set_up(database.setup_connection(), &fixtures(1)).unwrap();
                    database.finish_setup().unwrap();
                    database.allow_reuse();
                    drop(database);
                    let second = fixtures(2);
                    let reused = Database::reuse(backend, system.observed_tables(), &|connection| {
                        system.set_up(connection, &second)
                    });
                    assert!(reused.is_some(), "{} on {backend:?}", system.name());
                });
            }
        }
    }

    /// Every table's rows, the schema and the header versions, as the reset plan sees them.
    fn dump(database: &Database) -> Vec<Vec<Value>> {
        let anchor = &database.store.anchor;
        let plan = reset_plan(anchor).unwrap().unwrap();
        let mut dump: Vec<Vec<Value>> = plan.schema.into_iter().map(|row| row.0).collect();
        for table in &plan.tables {
            dump.push(vec![Value::Text(table.name.clone())]);
            dump.extend(read_copyable_rows(anchor, table).unwrap());
        }
        for name in ["user_version", "application_id"] {
            dump.push(vec![Value::Integer(header_value(anchor, name).unwrap())]);
        }
        dump
    }

    /// Sets up `system` on a new database the way a run does when it sets up in two parts.
    fn new_in_two_parts(
        system: &Arc<dyn System>,
        backend: Backend,
        fixtures: &Fixtures,
    ) -> (Database, Vec<RowChange>) {
        let mut database = Database::create(backend, system.observed_tables()).unwrap();
        system.set_up_schema(database.setup_connection()).unwrap();
        let snapshot = database.schema_snapshot().unwrap().unwrap();
        system
            .load_fixtures(database.setup_connection(), fixtures)
            .unwrap();
        let rows = database.finish_setup().unwrap();
        database.keep_schema_image(system, snapshot).unwrap();
        database.allow_reuse();
        (database, rows)
    }

    #[test]
    fn every_built_in_system_set_up_in_two_parts_gets_what_set_up_writes() {
        for system in crate::systems::all() {
            assert!(system.sets_up_in_two_parts(), "{}", system.name());
            for backend in [Backend::Memdb, Backend::WalFile] {
                let config = crate::config::SimConfig::draw(1, backend);
                let fixtures = |seed| {
                    crate::domain::draw_workload(&*system.domain(), seed, &config.workload_settings())
                        .fixtures
                };
                reusing_databases(|| {
                    let (first, _) = new_in_two_parts(&system, backend, &fixtures(1));
                    drop(first);
                    let second = fixtures(2);
                    let (reused, rows) =
                        Database::reuse_schema(backend, system.observed_tables(), &system, &second)
                            .unwrap_or_else(|| panic!("{} on {backend:?} is reused", system.name()));
                    let mut fresh = Database::create(backend, system.observed_tables()).unwrap();
                    system.set_up(fresh.setup_connection(), &second).unwrap();
                    assert_eq!(rows, fresh.finish_setup().unwrap(), "{}", system.name());
                    assert_eq!(dump(&reused), dump(&fresh), "{} on {backend:?}", system.name());
                });
            }
        }
    }

    /// A system whose only purpose is its tricky set-up: its processes never run.
    struct TrickySystem;

    impl System for TrickySystem {
        fn name(&self) -> &str {
            "tricky"
        }
        fn description(&self) -> &str {
            "AUTOINCREMENT, WITHOUT ROWID, a trigger of its own and rows from the schema step"
        }
        fn set_up(&self, connection: &Connection, fixtures: &Fixtures) -> Result<(), DbError> {
            self.set_up_schema(connection)?;
            self.load_fixtures(connection, fixtures)
        }
        fn sets_up_in_two_parts(&self) -> bool {
            true
        }
        fn set_up_schema(&self, connection: &Connection) -> Result<(), DbError> {
            set_up_tricky(connection, 0)?;
            connection.execute_batch(
                "INSERT INTO plain (rowid, v) VALUES (40, 'from the schema step');\n\
                 INSERT INTO t (v) VALUES (-1);\n\
                 PRAGMA application_id = 11;",
            )?;
            Ok(())
        }
        fn load_fixtures(&self, connection: &Connection, fixtures: &Fixtures) -> Result<(), DbError> {
            for (index, (account, _)) in fixtures.accounts.iter().enumerate() {
                connection.execute("INSERT INTO t (v) VALUES (?1)", [index as i64])?;
                connection.execute("INSERT INTO keyed VALUES (?1, ?2)", (account, index as i64))?;
            }
            Ok(())
        }
        fn handle_delivery(
            &self,
            _env: std::rc::Rc<dyn commitgap::env::Env>,
            _delivery: commitgap::receiver::WebhookDelivery,
        ) -> commitgap::env::LocalBoxFuture<'static, commitgap::receiver::Answer> {
            Box::pin(std::future::pending())
        }
        fn run_relay_worker(
            &self,
            _env: std::rc::Rc<dyn commitgap::env::Env>,
            _settings: commitgap::relay::RelaySettings,
        ) -> commitgap::env::LocalBoxFuture<'static, ()> {
            Box::pin(std::future::pending())
        }
        fn purge_receipts(
            &self,
            _env: std::rc::Rc<dyn commitgap::env::Env>,
            _older_than_ms: i64,
        ) -> commitgap::env::LocalBoxFuture<'static, ()> {
            Box::pin(std::future::pending())
        }
        fn observed_tables(&self) -> &[&'static str] {
            &["t"]
        }
        fn decode_row(&self, _table: &str, _values: &[Value]) -> Result<crate::system::ObservedRow, String> {
            Err("the tricky system's rows are not decoded".to_owned())
        }
    }

    fn accounts(count: usize) -> Fixtures {
        Fixtures {
            accounts: (0..count)
                .map(|index| (format!("acct-{index}"), "tenant".to_owned()))
                .collect(),
            subjects: Vec::new(),
        }
    }

    #[test]
    fn a_database_reused_in_two_parts_holds_what_a_new_one_holds() {
        let system: Arc<dyn System> = Arc::new(TrickySystem);
        reusing_databases(|| {
            let (mut first, _) = new_in_two_parts(&system, Backend::Memdb, &accounts(4));
            let id = first.open().unwrap();
            run(&mut first, id, "INSERT INTO t (v) VALUES (100)");
            run(&mut first, id, "UPDATE plain SET v = 'changed by the run'");
            run(&mut first, id, "PRAGMA user_version = 99");
            run(&mut first, id, "BEGIN IMMEDIATE");
            run(&mut first, id, "DELETE FROM keyed");
            drop(first);

            let (mut reused, rows) =
                Database::reuse_schema(Backend::Memdb, &["t"], &system, &accounts(2)).expect("reused");
            let mut fresh = Database::create(Backend::Memdb, &["t"]).unwrap();
            system.set_up(fresh.setup_connection(), &accounts(2)).unwrap();
            assert_eq!(rows, fresh.finish_setup().unwrap());
            assert_eq!(everything(&reused), everything(&fresh));
            assert_eq!(dump(&reused), dump(&fresh));
            let id = reused.open().unwrap();
            let (result, committed) = reused.run(id, "INSERT INTO t (v) VALUES (9)", &[], false);
            assert_eq!(result.unwrap(), StatementOutput::Changed(1));
            assert_eq!(
                committed[0].rowid, 4,
                "AUTOINCREMENT continues from the new set-up"
            );
            drop(reused);

            let other: Arc<dyn System> = Arc::new(TrickySystem);
            assert!(
                Database::reuse_schema(Backend::Memdb, &["t"], &other, &accounts(2)).is_none(),
                "another system value sets up its own database"
            );
            let (mut changed, _) =
                Database::reuse_schema(Backend::Memdb, &["t"], &system, &accounts(1)).expect("still kept");
            let id = changed.open().unwrap();
            run(&mut changed, id, "CREATE TABLE added_by_the_run (x)");
            drop(changed);
            assert!(
                Database::reuse_schema(Backend::Memdb, &["t"], &system, &accounts(1)).is_none(),
                "a schema the run changed is not reused"
            );
        });
    }

    #[test]
    fn memdb_writer_makes_a_second_writer_busy() {
        let (mut database, first, second) = database(Backend::Memdb);
        run(&mut database, first, "BEGIN IMMEDIATE");
        let (result, _) = database.run(second, "BEGIN IMMEDIATE", &[], false);
        assert_eq!(result.unwrap_err(), DbError::Busy);
    }
}
