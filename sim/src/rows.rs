//! Rows as the simulator sees them, whatever a system's schema: a committed change to a row, and
//! the canonical rows a system's decoder maps its own to (receipts, business entities,
//! obligations, its own tables). Plain data shared by the database layer, the view, the
//! invariants and the domains; it must depend on no other module of the simulator.

use std::collections::BTreeMap;

use commitgap::env::Value;

/// One committed change to a row of an observed table.
#[derive(Debug, Clone, PartialEq)]
pub struct RowChange {
    /// Index into the observed tables.
    pub table: usize,
    /// SQLite rowid of the changed row.
    pub rowid: i64,
    /// The row's values after the change, or `None` if it was deleted.
    pub values: Option<Vec<Value>>,
}

/// The state of one business entity, in the domain's own words: what transitions are judged on
/// (`state`) and the other values the model predicts (`fields`, as text).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EntityState {
    /// Name of the state transitions are judged on.
    pub state: String,
    /// Other values the model predicts, by name, as text.
    pub fields: BTreeMap<String, String>,
}

impl EntityState {
    /// A state with no fields.
    pub fn named(state: impl Into<String>) -> EntityState {
        EntityState {
            state: state.into(),
            fields: BTreeMap::new(),
        }
    }

    /// This state with field `name` set to `value`.
    pub fn with(mut self, name: &str, value: impl ToString) -> EntityState {
        self.fields.insert(name.to_owned(), value.to_string());
        self
    }

    /// The field called `name`, if there is one.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

impl std::fmt::Display for EntityState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.state)?;
        for (name, value) in &self.fields {
            write!(f, " {name}={value}")?;
        }
        Ok(())
    }
}

/// A row as the invariants see it, whatever the system's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObservedRow {
    /// A receipt recording that an upstream event was processed.
    Receipt(ReceiptRow),
    /// A business entity's row, in its domain's words.
    Entity(EntityRow),
    /// Work owed to the provider.
    Obligation(ObligationRow),
    /// A row of one of the system's own tables (a job queue, an audit log), kept as the decoder
    /// wrote it for the system's own invariants; the built-in invariants ignore it.
    Own(OwnRow),
}

/// A row of a system's own table, as its decoder describes it: the table, a key the decoder
/// chooses (unique within the table for a correct system) and named fields as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnRow {
    /// Name of the system's own table the row belongs to.
    pub table: String,
    /// Key the decoder chose, unique within the table for a correct system.
    pub key: String,
    /// Named fields as `(name, value)` pairs, as text.
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
    /// Account the upstream event came from.
    pub account: String,
    /// Upstream event id, unique within the account.
    pub event_id: String,
    /// When the receipt says the event was received, as the receiver's clock read then, in
    /// milliseconds: what a purge compares with its cutoff. `None` when the system does not say,
    /// and then `purge-keeps-retention` does not judge the row.
    pub received_ms: Option<i64>,
}

/// The business state of one entity, decoded into its domain's words (see
/// [`crate::domain::Domain`]): the payments domain's order, a CI domain's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityRow {
    /// Tenant the entity belongs to.
    pub tenant: String,
    /// Entity's identifier within its tenant (an order, a branch).
    pub subject: String,
    /// Entity's current state, in its domain's words.
    pub state: EntityState,
}

/// Work owed to the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObligationRow {
    /// The key the system stores the obligation under.
    pub operation_key: String,
    /// The persisted request body, sent as is on every attempt.
    pub payload: String,
    /// Where the obligation stands: owed, done or dead.
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

/// Where an obligation to the provider stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObligationStatus {
    /// Not yet confirmed by the provider, leased or not.
    Owed,
    /// The provider confirmed the effect.
    Done,
    /// Given up on; waits for an operator.
    Dead,
}

/// A row given in table order beside its table's column names, read by name: how the rows of
/// the tables a system declares ([`commitgap::tables`]) are read, whatever order their columns
/// stand in.
#[derive(Debug, Clone, Copy)]
pub struct NamedRow<'a, C: AsRef<str>> {
    /// The table the row belongs to.
    pub table: &'a str,
    /// The table's column names, in table order.
    pub columns: &'a [C],
    /// The row's values, in table order.
    pub values: &'a [Value],
}

impl<C: AsRef<str>> NamedRow<'_, C> {
    fn value(&self, name: &str) -> Result<&Value, String> {
        self.columns
            .iter()
            .position(|column| column.as_ref() == name)
            .and_then(|index| self.values.get(index))
            .ok_or_else(|| format!("{}: row has no column {name}", self.table))
    }

    /// The text in column `name`.
    pub fn text(&self, name: &str) -> Result<String, String> {
        match self.value(name)? {
            Value::Text(text) => Ok(text.clone()),
            other => Err(format!("{}.{name}: expected text, found {other:?}", self.table)),
        }
    }

    /// The text in column `name`, or `None` for `NULL`.
    pub fn opt_text(&self, name: &str) -> Result<Option<String>, String> {
        match self.value(name)? {
            Value::Null => Ok(None),
            _ => self.text(name).map(Some),
        }
    }

    /// The integer in column `name`.
    pub fn int(&self, name: &str) -> Result<i64, String> {
        match self.value(name)? {
            Value::Integer(value) => Ok(*value),
            other => Err(format!(
                "{}.{name}: expected an integer, found {other:?}",
                self.table
            )),
        }
    }

    /// The integer in column `name`, or `None` for `NULL`.
    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, String> {
        match self.value(name)? {
            Value::Null => Ok(None),
            _ => self.int(name).map(Some),
        }
    }
}

impl ReceiptRow {
    /// A row of the receipt table `declared`, read by its declared column names.
    pub fn read<C: AsRef<str>>(
        declared: &commitgap::tables::ReceiptTable,
        row: &NamedRow<'_, C>,
    ) -> Result<ReceiptRow, String> {
        Ok(ReceiptRow {
            account: row.text(declared.account)?,
            event_id: row.text(declared.event_id)?,
            received_ms: Some(row.int(declared.received_ms)?),
        })
    }
}

impl ObligationRow {
    /// A row of the outbox `declared`, read by its declared column names and status values. A
    /// dead reason kept in the last error's column is read only from a dead obligation.
    pub fn read<C: AsRef<str>>(
        declared: &commitgap::tables::OutboxTable,
        row: &NamedRow<'_, C>,
    ) -> Result<ObligationRow, String> {
        let status = row.text(declared.status)?;
        let status = match status.as_str() {
            owed if owed == declared.owed => ObligationStatus::Owed,
            done if done == declared.done => ObligationStatus::Done,
            dead if dead == declared.dead => ObligationStatus::Dead,
            other => return Err(format!("{}: unknown status {other:?}", row.table)),
        };
        let shares_a_column = declared.dead_reason == declared.last_error;
        let dead_reason = if shares_a_column && status != ObligationStatus::Dead {
            None
        } else {
            row.opt_text(declared.dead_reason)?
        };
        Ok(ObligationRow {
            operation_key: row.text(declared.operation_key)?,
            payload: row.text(declared.payload)?,
            status,
            lease_token: row.int(declared.lease_token)?,
            lease_owner: row.opt_text(declared.lease_owner)?,
            lease_expires_ms: row.opt_int(declared.lease_expires_ms)?,
            next_attempt_ms: row.opt_int(declared.next_attempt_ms)?,
            dead_reason,
        })
    }
}
