//! The simulated database's unit tests: change capture and its transactions, the connection pool,
//! and databases reused across runs holding exactly what new ones hold, for hand-made schemas and
//! for every built-in system.
//!
//! They drive the database directly, statement by statement, and run no simulation.

use super::reset::{header_value, read_copyable_rows, reset_plan};
use super::*;
use crate::system::{Fixtures, System};

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
                crate::domain::draw_workload(&*system.domain(), seed, &config.workload_settings()).fixtures
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
                crate::domain::draw_workload(&*system.domain(), seed, &config.workload_settings()).fixtures
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
