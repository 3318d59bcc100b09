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

/// A system under test. Implementations are plain configuration and are shared across sweep
/// threads, hence `Send + Sync`; the futures they return run on one thread and need not be `Send`.
pub trait System: Send + Sync {
    /// The name users pass to `--system`.
    fn name(&self) -> &str;

    /// One line saying what this system is.
    fn description(&self) -> &str;

    /// Creates the schema and inserts the fixtures (accounts and orders awaiting payment), on a
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

    /// Deletes receipts received before `older_than_ms`.
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

    /// The tables whose rows [`System::decode_row`] understands. Changes to other tables are not
    /// observed.
    fn observed_tables(&self) -> &[&'static str];

    /// Maps one row of `table`, with its column values in table order, to what the invariants
    /// check. An `Err` is a bug in the decoder or the schema and stops the run.
    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String>;
}

/// The data every run starts with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fixtures {
    /// `(account, tenant)`: which tenant each sender account belongs to.
    pub accounts: Vec<(String, String)>,
    /// Orders awaiting payment.
    pub orders: Vec<OrderFixture>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrderFixture {
    pub tenant: String,
    pub order: String,
    pub amount_cents: i64,
}

/// A row as the invariants see it, whatever the system's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObservedRow {
    Receipt(ReceiptRow),
    Order(OrderRow),
    Obligation(ObligationRow),
    /// A row of one of the system's own tables (a job queue, an audit log), kept as the decoder
    /// wrote it for the system's own invariants; the built-in invariants ignore it.
    Own(OwnRow),
}

/// A row of a system's own table, as its decoder describes it: the table, a key the decoder
/// chooses (unique within the table for a correct system) and named fields as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnRow {
    pub table: String,
    pub key: String,
    pub fields: Vec<(String, String)>,
}

impl OwnRow {
    /// The field called `name`, if the decoder wrote one.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }
}

/// "Upstream event `(account, event_id)` was processed."
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptRow {
    pub account: String,
    pub event_id: String,
}

/// The business state of one order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRow {
    pub tenant: String,
    pub order: String,
    pub status: OrderStatus,
    pub amount_cents: i64,
}

/// The states of an order. Refunded and cancelled are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OrderStatus {
    AwaitingPayment,
    Paid,
    Refunded,
    Cancelled,
}

impl OrderStatus {
    /// Whether an order may move from `self` to `next`: `awaiting_payment -> paid`,
    /// `awaiting_payment | paid -> refunded`, `awaiting_payment -> cancelled`, or stay.
    pub fn may_become(self, next: OrderStatus) -> bool {
        use OrderStatus::*;
        self == next
            || matches!(
                (self, next),
                (AwaitingPayment, Paid | Refunded | Cancelled) | (Paid, Refunded)
            )
    }
}

/// Work owed to the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObligationRow {
    /// The key the system stores the obligation under.
    pub operation_key: String,
    /// The persisted request body, sent as is on every attempt.
    pub payload: String,
    pub status: ObligationStatus,
    /// The fencing token of the current (or last) lease; it only grows.
    pub lease_token: i64,
    /// Who holds (or last held) the lease: an `Env::process_id`.
    pub lease_owner: Option<String>,
    /// When the current lease ends, by the clock of the worker that took it.
    pub lease_expires_ms: Option<i64>,
    /// The earliest time the obligation may be claimed again (a backoff after a failure, or the
    /// wait while an ambiguous request may still be at the provider), by the clock of the
    /// process that wrote it; `None` when the system records no such time.
    pub next_attempt_ms: Option<i64>,
    /// Why the obligation is dead, if it is.
    pub dead_reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObligationStatus {
    /// Not yet confirmed by the provider, leased or not.
    Owed,
    /// The provider confirmed the effect.
    Done,
    /// Given up on; waits for an operator.
    Dead,
}
