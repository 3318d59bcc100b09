//! What the simulator needs from a system under test.
//!
//! The rows a system's tables read as, what the invariants judge, are here too ([`ObservedRow`]
//! and its parts).
//!
//! A [`System`] supplies its schema and fixtures, its receiver, relay worker and receipt purge as
//! futures over an [`Env`], and a decoder that maps its own rows to the simulator's canonical
//! [`ObservedRow`]s, which is all the invariants look at. The reference system and every planted
//! bug implement it in `systems/`; a team's own receiver and relay implement it in their crate.
//!
//! A system that declares where its receipts and obligations live ([`System::tables`]) gets the
//! pattern's machinery over them: the simulator reads those tables' rows itself
//! ([`RowReader`]), and the relay worker, the purge and the operator's requeue default to the
//! reference's over them, so the team writes its business step, its decoder for its own tables
//! and its domain.
//!
//! An implementation must do all its I/O through the `Env` it is given (anything else escapes
//! the scheduler and breaks determinism), must not keep state between calls outside the database
//! (a crash would not clear it), and must identify lease owners by `Env::process_id`.

use std::rc::Rc;

use commitgap::env::{DbError, Env, LocalBoxFuture, Value};
use commitgap::receiver::{Answer, WebhookDelivery};
use commitgap::relay::RelaySettings;
use commitgap::tables::Tables;

use crate::domain::Domain;

// The rows a system's tables read as: what `RowReader` returns and the invariants judge.
pub use crate::rows::*;

/// rusqlite's busy timeout for a connection it opens, in milliseconds: what a system that never
/// sets one runs with in production, and so what [`System::busy_timeout_ms`] says by default.
pub const DEFAULT_BUSY_TIMEOUT_MS: i64 = 5_000;

/// A system under test. Implementations are plain configuration and are shared across sweep
/// threads, hence `Send + Sync`; the futures they return run on one thread and need not be `Send`.
pub trait System: Send + Sync {
    /// The name users pass to `--system`.
    fn name(&self) -> &str;

    /// One line saying what this system is.
    fn description(&self) -> &str;

    /// The business the system serves: what its events mean, what they owe, which it refuses.
    /// The default is the reference's, [`crate::domain::payments()`].
    fn domain(&self) -> std::sync::Arc<dyn Domain> {
        crate::domain::payments()
    }

    /// The workflows the system has besides receiving and relaying. An invariant that assumes a
    /// workflow the system does not have is not checked against it (a coverage note says so).
    fn workflows(&self) -> Workflows {
        Workflows::default()
    }

    /// Creates the schema and inserts the fixtures (its domain's accounts and entities), on a
    /// connection whose writes the simulator observes like any other.
    fn set_up(&self, connection: &rusqlite::Connection, fixtures: &Fixtures) -> Result<(), DbError>;

    /// True when [`System::set_up`] is [`System::set_up_schema`] followed by
    /// [`System::load_fixtures`], and both may be called apart. A sweep then creates the schema
    /// once per database and, for each later seed its thread runs on that database, puts back
    /// the rows `set_up_schema` left and calls only `load_fixtures`, which saves a schema parse
    /// and a throwaway database per seed. The default is false: `set_up` runs every time.
    fn sets_up_in_two_parts(&self) -> bool {
        false
    }

    /// The part of [`System::set_up`] that does not depend on the fixtures: tables, indexes,
    /// triggers, header versions and any rows every run starts with. Called only when
    /// [`System::sets_up_in_two_parts`] is true; it must give the same result on every call.
    fn set_up_schema(&self, connection: &rusqlite::Connection) -> Result<(), DbError> {
        let _ = connection;
        Ok(())
    }

    /// The rest of [`System::set_up`]: inserts the fixtures into a database
    /// [`System::set_up_schema`] prepared, and changes no schema. Called only when
    /// [`System::sets_up_in_two_parts`] is true.
    fn load_fixtures(&self, connection: &rusqlite::Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        let _ = (connection, fixtures);
        Err(DbError::Other(format!(
            "system {} says it sets up in two parts but has no load_fixtures",
            self.name()
        )))
    }

    /// Where the system keeps its receipts and its obligations, if it declares them
    /// ([`Tables`]: the tables' and columns' names and the outbox's status values). The
    /// simulator then reads those tables' rows itself, so [`System::decode_row`] and
    /// [`System::observed_tables`] need cover only the system's other tables, and
    /// [`System::run_relay_worker`], [`System::purge_receipts`] and
    /// [`System::requeue_dead_obligations`] default to the pattern's over them. Before the
    /// first run, every statement the pattern needs is prepared against the schema, and a
    /// declaration that does not fit it stops the run with SQLite's reason. `None`, the default:
    /// the system decodes every row it observes itself.
    fn tables(&self) -> Option<Tables> {
        None
    }

    /// Handles one webhook delivery and answers it. A system with its own business and declared
    /// tables usually hands the delivery to
    /// [`commitgap::receiver::receive_business`] with its business step.
    fn handle_delivery(&self, env: Rc<dyn Env>, delivery: WebhookDelivery)
    -> LocalBoxFuture<'static, Answer>;

    /// Runs one relay worker until the process stops (the future is then dropped). The default
    /// is the reference's relay ([`commitgap::relay::run_worker_with`]) over the declared
    /// [`System::tables`], or over the reference's `outbox` when none are declared.
    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        let tables = self.tables().unwrap_or_else(|| Tables::reference().clone());
        Box::pin(async move { commitgap::relay::run_worker_with(&tables, &*env, &settings).await })
    }

    /// Deletes the receipts received before `older_than_ms`, and no others. The receipt rows'
    /// own received time ([`crate::rows::ReceiptRow::received_ms`]) is what
    /// `purge-keeps-retention` compares with the cutoff; a purge whose statement fails may leave
    /// receipts for its next run. The default deletes from the declared receipt table, or from
    /// the reference's `receipts` when none is declared.
    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()> {
        let tables = self.tables().unwrap_or_else(|| Tables::reference().clone());
        Box::pin(async move {
            if let Err(error) = tables.purge_receipts(&*env, older_than_ms).await {
                env.log(&format!("purge failed: {error}"));
            }
        })
    }

    /// The operator's recovery after an incident: moves every dead obligation back to owed. The
    /// simulator runs it once after heal, when [`System::workflows`] says the system has the
    /// workflow (by default it does). The default requeues the dead obligations of the declared
    /// outbox ([`Tables::requeue_all_dead`]); without declared tables it does nothing, and a
    /// system without the workflow says so in [`System::workflows`].
    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        let tables = self.tables();
        Box::pin(async move {
            let Some(tables) = tables else { return };
            match tables.requeue_all_dead(&*env).await {
                Ok(count) => env.log(&format!("operator requeued {count} dead obligations")),
                Err(error) => env.log(&format!("operator requeue failed: {error}")),
            }
        })
    }

    /// True when the web framework commits a transaction the handler left open after the answer
    /// is written, rather than rolling it back. The simulator then runs that COMMIT as a
    /// scheduling point of its own, after the answer.
    fn commits_after_answer(&self) -> bool {
        false
    }

    /// The busy timeout the system's processes open their SQLite connections with, in
    /// milliseconds: how long a statement waits for another connection's lock before SQLite
    /// answers busy. The simulator waits that long in virtual time (a scheduling point, until
    /// the lock is free or the time has passed), as SQLite's busy handler does in production.
    /// rusqlite's default, 5,000 ms, unless the system says otherwise; 0 answers busy at once.
    /// A `PRAGMA busy_timeout = N` the system runs through its Env changes it for that
    /// connection, as in SQLite.
    fn busy_timeout_ms(&self) -> i64 {
        DEFAULT_BUSY_TIMEOUT_MS
    }

    /// The largest webhook body, in bytes, the system's receiver accepts: a larger one it should
    /// answer 413. In a seed with edge values one genuine event arrives padded to exactly this
    /// size, and the `attacker` model's oversized body is one byte over it. The reference reads
    /// it from the `webhook-body-bytes-max` setting, which the simulator sets to this value.
    /// 64 KiB unless the system says otherwise.
    fn body_bytes_max(&self) -> usize {
        commitgap::receiver::DEFAULT_BODY_BYTES_MAX
    }

    /// The tables whose rows [`System::decode_row`] understands. Changes to other tables are not
    /// observed. The declared [`System::tables`] are observed without being listed here.
    fn observed_tables(&self) -> &[&'static str];

    /// Maps one row of `table`, with its column values in table order, to what the invariants
    /// check. An `Err` is a bug in the decoder or the schema and stops the run. It is never
    /// asked about the declared [`System::tables`], whose rows the simulator reads itself.
    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String>;
}

/// Every table the simulator observes of `system`: its declared receipt and outbox tables
/// ([`System::tables`]), then the ones it lists itself, each once.
pub fn observed_tables(system: &dyn System) -> Vec<&'static str> {
    let declared = system
        .tables()
        .map(|tables| [tables.receipts.table, tables.outbox.table]);
    let mut observed: Vec<&'static str> = declared.into_iter().flatten().collect();
    for table in system.observed_tables() {
        if !observed.contains(table) {
            observed.push(table);
        }
    }
    observed
}

/// How the rows of a system's observed tables read as the invariants see them: the declared
/// receipt and outbox tables ([`System::tables`]) by their column names, every other table
/// through the system's own [`System::decode_row`].
#[derive(Debug, Clone, Default)]
pub struct RowReader {
    /// The declared tables, with each one's column names in table order.
    declared: Option<(Tables, Vec<String>, Vec<String>)>,
}

impl RowReader {
    /// The reader of `system`'s rows, where `columns_of` gives a table's column names in table
    /// order (as SQLite's `pragma_table_info` lists them).
    pub fn new(
        system: &dyn System,
        columns_of: &dyn Fn(&str) -> Result<Vec<String>, String>,
    ) -> Result<RowReader, String> {
        let Some(tables) = system.tables() else {
            return Ok(RowReader::default());
        };
        let receipts = columns_of(tables.receipts.table)?;
        let outbox = columns_of(tables.outbox.table)?;
        Ok(RowReader {
            declared: Some((tables, receipts, outbox)),
        })
    }

    /// The reader of `system`'s rows in the database `connection` opens, after checking that
    /// the declared tables fit its schema (every statement the pattern runs on them prepares).
    pub fn of_database(system: &dyn System, connection: &rusqlite::Connection) -> Result<RowReader, String> {
        if let Some(tables) = system.tables() {
            tables
                .check_schema(connection)
                .map_err(|error| format!("system {}: {error}", system.name()))?;
        }
        RowReader::new(system, &|table| table_columns(connection, table))
    }

    /// One row of `table`, with its values in table order, as the invariants see it.
    pub fn read(&self, system: &dyn System, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        match &self.declared {
            Some((tables, columns, _)) if table == tables.receipts.table => {
                let row = crate::rows::NamedRow {
                    table,
                    columns,
                    values,
                };
                ReceiptRow::read(&tables.receipts, &row).map(ObservedRow::Receipt)
            }
            Some((tables, _, columns)) if table == tables.outbox.table => {
                let row = crate::rows::NamedRow {
                    table,
                    columns,
                    values,
                };
                ObligationRow::read(&tables.outbox, &row).map(ObservedRow::Obligation)
            }
            _ => system.decode_row(table, values),
        }
    }
}

/// The column names of `table` in `connection`'s schema, in table order.
pub fn table_columns(connection: &rusqlite::Connection, table: &str) -> Result<Vec<String>, String> {
    let columns = connection
        .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
        .and_then(|mut statement| {
            statement
                .query_map([table], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(|error| format!("cannot read the columns of {table}: {error}"))?;
    if columns.is_empty() {
        return Err(format!("table {table:?} does not exist"));
    }
    Ok(columns)
}

pub use crate::workload::{Fixtures, SubjectFixture};

pub use crate::rows::{EntityRow, ObligationRow, ObligationStatus, ObservedRow, OwnRow, ReceiptRow};

/// The workflows a system has besides receiving deliveries and relaying obligations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workflows {
    /// An operator's requeue of dead obligations after an incident
    /// ([`System::requeue_dead_obligations`]).
    pub operator_requeue: bool,
}

impl Default for Workflows {
    fn default() -> Self {
        Workflows {
            operator_requeue: true,
        }
    }
}

impl Workflows {
    /// Every workflow this simulator knows, with its name as `list` shows it.
    pub fn named(self) -> [(Workflow, bool); 1] {
        [(Workflow::OperatorRequeue, self.operator_requeue)]
    }

    /// Whether the system has `workflow`.
    pub fn has(self, workflow: Workflow) -> bool {
        match workflow {
            Workflow::OperatorRequeue => self.operator_requeue,
        }
    }
}

/// A workflow an invariant may assume a system has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workflow {
    /// The operator requeues dead obligations after an incident.
    OperatorRequeue,
}

impl Workflow {
    /// Its name, as `list` and coverage notes write it.
    pub fn name(self) -> &'static str {
        match self {
            Workflow::OperatorRequeue => "operator-requeue",
        }
    }
}

/// A system judged in another domain than its own: every method is the system's, but
/// [`System::domain`]. A team puts a domain declared in a file
/// ([`crate::domain::declared::DeclaredDomain`]) in place of a Rust one this way, to check
/// that both judge its system alike, or runs a catalogue system under its own business.
pub struct WithDomain {
    system: std::sync::Arc<dyn System>,
    domain: std::sync::Arc<dyn Domain>,
}

impl std::fmt::Debug for WithDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithDomain")
            .field("system", &self.system.name())
            .field("domain", &self.domain.name())
            .finish()
    }
}

impl WithDomain {
    /// `system`, judged in `domain`.
    pub fn new(system: std::sync::Arc<dyn System>, domain: std::sync::Arc<dyn Domain>) -> WithDomain {
        WithDomain { system, domain }
    }
}

impl System for WithDomain {
    fn name(&self) -> &str {
        self.system.name()
    }
    fn description(&self) -> &str {
        self.system.description()
    }
    fn domain(&self) -> std::sync::Arc<dyn Domain> {
        std::sync::Arc::clone(&self.domain)
    }
    fn workflows(&self) -> Workflows {
        self.system.workflows()
    }
    fn set_up(&self, connection: &rusqlite::Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        self.system.set_up(connection, fixtures)
    }
    fn sets_up_in_two_parts(&self) -> bool {
        self.system.sets_up_in_two_parts()
    }
    fn set_up_schema(&self, connection: &rusqlite::Connection) -> Result<(), DbError> {
        self.system.set_up_schema(connection)
    }
    fn load_fixtures(&self, connection: &rusqlite::Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        self.system.load_fixtures(connection, fixtures)
    }
    fn tables(&self) -> Option<Tables> {
        self.system.tables()
    }
    fn handle_delivery(
        &self,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        self.system.handle_delivery(env, delivery)
    }
    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        self.system.run_relay_worker(env, settings)
    }
    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()> {
        self.system.purge_receipts(env, older_than_ms)
    }
    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        self.system.requeue_dead_obligations(env)
    }
    fn commits_after_answer(&self) -> bool {
        self.system.commits_after_answer()
    }
    fn busy_timeout_ms(&self) -> i64 {
        self.system.busy_timeout_ms()
    }
    fn body_bytes_max(&self) -> usize {
        self.system.body_bytes_max()
    }
    fn observed_tables(&self) -> &[&'static str] {
        self.system.observed_tables()
    }
    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        self.system.decode_row(table, values)
    }
}
