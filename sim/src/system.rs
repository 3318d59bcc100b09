//! What the simulator needs from a system under test.
//!
//! A [`System`] supplies its schema and fixtures, its receiver, relay worker and receipt purge as
//! futures over an [`Env`], and a decoder that maps its own rows to the simulator's canonical
//! [`ObservedRow`]s, which is all the invariants look at. The reference system and every planted
//! bug implement it in `systems/`; a team's own receiver and relay implement it in their crate.
//!
//! An implementation must do all its I/O through the `Env` it is given (anything else escapes
//! the scheduler and breaks determinism), must not keep state between calls outside the database
//! (a crash would not clear it), and must identify lease owners by `Env::process_id`.

use std::rc::Rc;

use commitgap::env::{DbError, Env, LocalBoxFuture, Value};
use commitgap::receiver::{Answer, WebhookDelivery};
use commitgap::relay::RelaySettings;

use crate::domain::Domain;

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

    /// Handles one webhook delivery and answers it.
    fn handle_delivery(&self, env: Rc<dyn Env>, delivery: WebhookDelivery)
    -> LocalBoxFuture<'static, Answer>;

    /// Runs one relay worker until the process stops (the future is then dropped).
    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()>;

    /// Deletes the receipts received before `older_than_ms`, and no others. The receipt rows'
    /// own received time ([`crate::rows::ReceiptRow::received_ms`]) is what
    /// `purge-keeps-retention` compares with the cutoff; a purge whose statement fails may leave
    /// receipts for its next run.
    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()>;

    /// The operator's recovery after an incident: moves every dead obligation back to owed. The
    /// simulator runs it once after heal. The default does nothing (a system without a requeue
    /// workflow).
    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        let _ = env;
        Box::pin(async {})
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
    /// observed.
    fn observed_tables(&self) -> &[&'static str];

    /// Maps one row of `table`, with its column values in table order, to what the invariants
    /// check. An `Err` is a bug in the decoder or the schema and stops the run.
    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String>;
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
