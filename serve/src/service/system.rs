//! The [`System`] a service description stands for: its schema and fixtures, its domain, and its
//! tables read as the invariants' rows, column by column as the description maps them.
//!
//! It is what a live check needs of a system besides its processes: it sets up the database and
//! reads its rows. It must never stand in for the service's own code: its receiver refuses
//! every delivery (503) and its relay, purge and requeue do nothing, since the service's own
//! processes do that work and a simulated run of this system would judge nothing of the service.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, RwLock};

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, Value};
use commitgap_sim::commitgap::receiver::{Answer, WebhookDelivery};
use commitgap_sim::commitgap::relay::RelaySettings;
use commitgap_sim::domain::Domain;
use commitgap_sim::rusqlite::{self, Connection};
use commitgap_sim::system::{
    EntityRow, EntityState, Fixtures, ObligationRow, ObligationStatus, ObservedRow, ReceiptRow, System,
    Workflows, table_columns,
};

use super::{Role, ServiceDescription};

/// The invariants that read a column a service may declare absent, by the column's field.
pub const NEEDS_COLUMN: &[(&str, &[&str])] = &[
    (
        "lease_owner",
        &[
            "completion-by-lease-holder",
            "lease-outlives-call",
            "one-live-lease-per-obligation",
        ],
    ),
    (
        "lease_token",
        &[
            "claim-waits-for-retry-time",
            "completion-by-lease-holder",
            "lease-outlives-call",
            "one-live-lease-per-obligation",
        ],
    ),
    (
        "lease_expires_ms",
        &["lease-outlives-call", "one-live-lease-per-obligation"],
    ),
    ("next_attempt_ms", &["claim-waits-for-retry-time"]),
    (
        "dead_reason",
        &[
            "obligation-settles-with-effect-or-reason",
            "owed-operation-settles",
        ],
    ),
];

/// A described service as a system. See the module documentation.
#[derive(Debug)]
pub struct DescribedSystem {
    description: ServiceDescription,
    /// The three mapped tables, in the order the judging reads them.
    observed: Vec<&'static str>,
    /// Each mapped table's columns in table order, read when the database is set up.
    columns: RwLock<BTreeMap<String, Vec<String>>>,
}

impl DescribedSystem {
    pub(super) fn new(description: ServiceDescription) -> DescribedSystem {
        let tables = &description.tables;
        // The System trait hands out table names for the life of the program; a description is
        // read once per check, so its three names are kept for good.
        let observed = [
            &tables.receipts.table,
            &tables.obligations.table,
            &tables.entities.table,
        ]
        .map(|name| &*Box::leak(name.clone().into_boxed_str()))
        .to_vec();
        DescribedSystem {
            description,
            observed,
            columns: RwLock::new(BTreeMap::new()),
        }
    }

    /// The description it stands for.
    pub fn description(&self) -> &ServiceDescription {
        &self.description
    }

    /// The invariants the description's absent columns keep from judging, each with why.
    pub fn not_judged(&self) -> Vec<(String, String)> {
        let o = &self.description.tables.obligations;
        let declared = [
            ("lease_owner", &o.lease_owner),
            ("lease_token", &o.lease_token),
            ("lease_expires_ms", &o.lease_expires_ms),
            ("next_attempt_ms", &o.next_attempt_ms),
            ("dead_reason", &o.dead_reason),
        ];
        let mut not_judged: BTreeMap<String, String> = BTreeMap::new();
        for (field, column) in declared {
            if column.is_some() {
                continue;
            }
            let needers = NEEDS_COLUMN
                .iter()
                .find(|(needed, _)| *needed == field)
                .map_or(&[][..], |(_, invariants)| invariants);
            for invariant in needers {
                not_judged
                    .entry((*invariant).to_owned())
                    .or_insert_with(|| format!("the service declares no tables.obligations.{field} column"));
            }
        }
        not_judged.into_iter().collect()
    }

    /// Reads the mapped tables' columns from `connection` and checks that every mapped column
    /// is there; the error names the field and lists the table's columns.
    pub fn learn_columns(&self, connection: &Connection) -> Result<(), String> {
        let shown = self.description.path.display();
        let t = &self.description.tables;
        let mut learned = BTreeMap::new();
        for table in [&t.receipts.table, &t.obligations.table, &t.entities.table] {
            let columns = table_columns(connection, table)
                .map_err(|_| format!("{shown}: the schema has no table {table:?}, which [tables] maps"))?;
            learned.insert(table.clone(), columns);
        }
        for (field, table, column) in self.mapped_columns() {
            let columns = &learned[table];
            if !columns.iter().any(|known| known == column) {
                return Err(format!(
                    "{shown}: {field} = {column:?} is not a column of {table} (its columns: {})",
                    columns.join(", ")
                ));
            }
        }
        *self
            .columns
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = learned;
        Ok(())
    }

    /// Every mapped column: its field in the description, its table and its name.
    fn mapped_columns(&self) -> Vec<(String, &String, &String)> {
        let t = &self.description.tables;
        let (r, o, e) = (&t.receipts, &t.obligations, &t.entities);
        let mut mapped = vec![
            ("tables.receipts.account".to_owned(), &r.table, &r.account),
            ("tables.receipts.event_id".to_owned(), &r.table, &r.event_id),
            (
                "tables.obligations.operation_key".to_owned(),
                &o.table,
                &o.operation_key,
            ),
            ("tables.obligations.payload".to_owned(), &o.table, &o.payload),
            ("tables.obligations.status".to_owned(), &o.table, &o.status),
            ("tables.entities.tenant".to_owned(), &e.table, &e.tenant),
            ("tables.entities.subject".to_owned(), &e.table, &e.subject),
            ("tables.entities.state".to_owned(), &e.table, &e.state),
        ];
        let optional = [
            ("tables.receipts.received_ms", &r.table, &r.received_ms),
            ("tables.obligations.lease_owner", &o.table, &o.lease_owner),
            ("tables.obligations.lease_token", &o.table, &o.lease_token),
            (
                "tables.obligations.lease_expires_ms",
                &o.table,
                &o.lease_expires_ms,
            ),
            ("tables.obligations.next_attempt_ms", &o.table, &o.next_attempt_ms),
            ("tables.obligations.dead_reason", &o.table, &o.dead_reason),
        ];
        for (field, table, column) in optional {
            if let Some(column) = column {
                mapped.push((field.to_owned(), table, column));
            }
        }
        for (field, column) in &e.fields {
            mapped.push((format!("tables.entities.fields.{field}"), &e.table, column));
        }
        mapped
    }

    /// Runs one fixture statement with the named values it asks for.
    fn load(
        &self,
        connection: &Connection,
        field: &str,
        sql: &str,
        values: &BTreeMap<String, Value>,
    ) -> Result<(), DbError> {
        let shown = self.description.path.display();
        let failed = |error: rusqlite::Error| DbError::Other(format!("{shown}: database.{field}: {error}"));
        let mut statement = connection.prepare_cached(sql).map_err(failed)?;
        for index in 1..=statement.parameter_count() {
            let Some(name) = statement.parameter_name(index) else {
                return Err(DbError::Other(format!(
                    "{shown}: database.{field}: parameter {index} has no name; name it, such as :tenant"
                )));
            };
            let bare = name.trim_start_matches([':', '@', '$']);
            let value = values.get(bare).ok_or_else(|| {
                let known: Vec<String> = values.keys().map(|known| format!(":{known}")).collect();
                DbError::Other(format!(
                    "{shown}: database.{field}: no value for {name}; the values are {}",
                    known.join(", ")
                ))
            })?;
            statement.raw_bind_parameter(index, value).map_err(failed)?;
        }
        statement.raw_execute().map_err(failed)?;
        Ok(())
    }

    fn columns_of(&self, table: &str) -> Result<Vec<String>, String> {
        self.columns
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(table)
            .cloned()
            .ok_or_else(|| format!("{table}: its columns were not read before its rows"))
    }
}

impl System for DescribedSystem {
    fn name(&self) -> &str {
        &self.description.name
    }

    fn description(&self) -> &str {
        "a service run from its description"
    }

    fn domain(&self) -> Arc<dyn Domain> {
        self.description.domain()
    }

    fn workflows(&self) -> Workflows {
        Workflows {
            operator_requeue: self.description.has(Role::Requeue),
        }
    }

    fn set_up(&self, connection: &Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        let shown = self.description.path.display();
        connection
            .execute_batch(&self.description.schema_sql)
            .map_err(|error| DbError::Other(format!("{shown}: database.schema: {error}")))?;
        self.learn_columns(connection).map_err(DbError::Other)?;
        if let Some(sql) = &self.description.account_sql {
            for (account, tenant) in &fixtures.accounts {
                let values = BTreeMap::from([
                    ("account".to_owned(), Value::Text(account.clone())),
                    ("tenant".to_owned(), Value::Text(tenant.clone())),
                ]);
                self.load(connection, "account", sql, &values)?;
            }
        }
        if let Some(sql) = &self.description.subject_sql {
            for subject in &fixtures.subjects {
                let mut values = BTreeMap::from([
                    ("tenant".to_owned(), Value::Text(subject.tenant.clone())),
                    ("subject".to_owned(), Value::Text(subject.subject.clone())),
                ]);
                for (name, value) in &subject.fields {
                    values.insert(name.clone(), json_value(value));
                }
                self.load(connection, "subject", sql, &values)?;
            }
        }
        Ok(())
    }

    fn handle_delivery(
        &self,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        let _ = (env, delivery);
        Box::pin(async { Answer::RetryLater("a described service receives in its own process".to_owned()) })
    }

    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        let _ = (env, settings);
        Box::pin(async {})
    }

    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()> {
        let _ = (env, older_than_ms);
        Box::pin(async {})
    }

    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        let _ = env;
        Box::pin(async {})
    }

    fn observed_tables(&self) -> &[&'static str] {
        &self.observed
    }

    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        let columns = self.columns_of(table)?;
        let row = Row {
            table,
            columns: &columns,
            values,
        };
        let t = &self.description.tables;
        if table == t.receipts.table {
            let r = &t.receipts;
            return Ok(ObservedRow::Receipt(ReceiptRow {
                account: row.text(&r.account)?,
                event_id: row.text(&r.event_id)?,
                received_ms: row.opt_int(r.received_ms.as_deref())?,
            }));
        }
        if table == t.obligations.table {
            let o = &t.obligations;
            let status = row.text(&o.status)?;
            let status = if status == o.owed {
                ObligationStatus::Owed
            } else if status == o.done {
                ObligationStatus::Done
            } else if status == o.dead {
                ObligationStatus::Dead
            } else {
                return Err(format!(
                    "{table}.{}: {status:?} is none of the statuses the description names ({:?}, {:?}, {:?})",
                    o.status, o.owed, o.done, o.dead
                ));
            };
            return Ok(ObservedRow::Obligation(ObligationRow {
                operation_key: row.text(&o.operation_key)?,
                payload: row.text(&o.payload)?,
                status,
                lease_token: row.opt_int(o.lease_token.as_deref())?.unwrap_or(0),
                lease_owner: row.opt_text(o.lease_owner.as_deref())?,
                lease_expires_ms: row.opt_int(o.lease_expires_ms.as_deref())?,
                next_attempt_ms: row.opt_int(o.next_attempt_ms.as_deref())?,
                dead_reason: row.opt_text(o.dead_reason.as_deref())?,
            }));
        }
        let e = &t.entities;
        let mut state = EntityState::named(row.text(&e.state)?);
        for (field, column) in &e.fields {
            if let Some(value) = row.opt_text(Some(column))? {
                state = state.with(field, value);
            }
        }
        Ok(ObservedRow::Entity(EntityRow {
            tenant: row.text(&e.tenant)?,
            subject: row.text(&e.subject)?,
            state,
        }))
    }
}

/// A fixture's value as SQLite takes it.
fn json_value(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(flag) => Value::Integer(i64::from(*flag)),
        serde_json::Value::Number(number) => number
            .as_i64()
            .map(Value::Integer)
            .or_else(|| number.as_f64().map(Value::Real))
            .unwrap_or(Value::Null),
        serde_json::Value::String(text) => Value::Text(text.clone()),
        other => Value::Text(other.to_string()),
    }
}

/// One row beside its table's columns, read by column name, with any stored type read as the
/// text or integer the invariants compare (a service in another language may store a number as
/// text, or a name as a number).
struct Row<'a> {
    table: &'a str,
    columns: &'a [String],
    values: &'a [Value],
}

impl Row<'_> {
    fn value(&self, column: &str) -> Result<&Value, String> {
        self.columns
            .iter()
            .position(|known| known == column)
            .and_then(|index| self.values.get(index))
            .ok_or_else(|| format!("{}: row has no column {column}", self.table))
    }

    fn text(&self, column: &str) -> Result<String, String> {
        self.opt_text(Some(column))?
            .ok_or_else(|| format!("{}.{column}: expected a value, found NULL", self.table))
    }

    fn opt_text(&self, column: Option<&str>) -> Result<Option<String>, String> {
        let Some(column) = column else { return Ok(None) };
        Ok(match self.value(column)? {
            Value::Null => None,
            Value::Integer(number) => Some(number.to_string()),
            Value::Real(number) => Some(number.to_string()),
            Value::Text(text) => Some(text.clone()),
            Value::Blob(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        })
    }

    fn opt_int(&self, column: Option<&str>) -> Result<Option<i64>, String> {
        let Some(column) = column else { return Ok(None) };
        match self.value(column)? {
            Value::Null => Ok(None),
            Value::Integer(number) => Ok(Some(*number)),
            // Whole numbers only: a time or a token stored as 12.0 is still exact.
            #[allow(clippy::cast_possible_truncation)]
            Value::Real(number) if number.fract() == 0.0 => Ok(Some(*number as i64)),
            Value::Text(text) => text
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("{}.{column}: expected an integer, found {text:?}", self.table)),
            other => Err(format!(
                "{}.{column}: expected an integer, found {other:?}",
                self.table
            )),
        }
    }
}
