//! The CI service as a system under test: its schema, its receiver ([`crate::receiver`]), relay
//! ([`crate::relay`]), receipt purge and operator requeue, and the decoder that maps its rows to
//! the rows the invariants read.
//!
//! The tables: `accounts` (the sender account of each organisation), `deliveries` (receipts,
//! one per `(account, event id)`, the only table the purge deletes from), `branches` (each
//! branch's head commit and the creation time of the event that set it) and `builds` (the outbox:
//! one check run owed per `(repository, commit)`, with its immutable payload, a fenced lease, the
//! next attempt and a dead reason).
//!
//! With `last_arrival_wins`, the same system keeps the planted flaw described in
//! [`crate::receiver`]. Everything here goes through the `Env` it is given and keeps no state
//! outside the database; the decoder must not interpret anything the domain decides.

use std::rc::Rc;
use std::sync::Arc;

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, Value, int};
use commitgap_sim::commitgap::receiver::{Answer, WebhookDelivery};
use commitgap_sim::commitgap::relay::RelaySettings;
use commitgap_sim::domain::Domain;
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::system::{
    EntityRow, Fixtures, ObligationRow, ObligationStatus, ObservedRow, ReceiptRow, System,
};

use crate::domain::{Ci, branch_state};

const SCHEMA_SQL: &str = "
CREATE TABLE accounts (account TEXT PRIMARY KEY, org TEXT NOT NULL);
CREATE TABLE deliveries (
    account     TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    received_ms INTEGER NOT NULL,
    PRIMARY KEY (account, event_id)
);
CREATE INDEX deliveries_by_age ON deliveries (received_ms);
CREATE TABLE branches (
    org             TEXT NOT NULL,
    branch          TEXT NOT NULL,
    head_sha        TEXT,
    head_created_ms INTEGER,
    PRIMARY KEY (org, branch)
);
CREATE TABLE builds (
    operation_key    TEXT    NOT NULL,
    repository       TEXT    NOT NULL,
    head_sha         TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('owed', 'done', 'dead')),
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_ms INTEGER,
    next_attempt_ms  INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    first_attempt_ms INTEGER,
    last_error       TEXT,
    dead_reason      TEXT,
    check_run_id     TEXT,
    created_ms       INTEGER NOT NULL,
    UNIQUE (repository, head_sha)
);
CREATE INDEX builds_by_key ON builds (operation_key);
CREATE INDEX builds_due ON builds (status, next_attempt_ms);
";

/// The CI service. See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct CiSystem {
    /// The planted flaw: the branch head is whatever event arrived last.
    pub last_arrival_wins: bool,
}

impl System for CiSystem {
    fn name(&self) -> &str {
        if self.last_arrival_wins {
            "ci-last-arrival-wins"
        } else {
            "ci"
        }
    }

    fn description(&self) -> &str {
        if self.last_arrival_wins {
            "the CI service, but a branch's head is whichever event arrived last, not the newest"
        } else {
            "a CI service's GitHub receiver and check-run relay, with a schema of their own"
        }
    }

    fn domain(&self) -> Arc<dyn Domain> {
        Arc::new(Ci)
    }

    fn set_up(&self, connection: &Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        self.set_up_schema(connection)?;
        self.load_fixtures(connection, fixtures)
    }

    fn sets_up_in_two_parts(&self) -> bool {
        true
    }

    fn set_up_schema(&self, connection: &Connection) -> Result<(), DbError> {
        connection.execute_batch(SCHEMA_SQL)?;
        Ok(())
    }

    fn load_fixtures(&self, connection: &Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        let mut account = connection.prepare_cached("INSERT INTO accounts (account, org) VALUES (?1, ?2)")?;
        for (name, org) in &fixtures.accounts {
            account.execute((name, org))?;
        }
        let mut branch = connection.prepare_cached("INSERT INTO branches (org, branch) VALUES (?1, ?2)")?;
        for fixture in &fixtures.subjects {
            branch.execute((&fixture.tenant, &fixture.subject))?;
        }
        Ok(())
    }

    fn handle_delivery(
        &self,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        let last_arrival_wins = self.last_arrival_wins;
        Box::pin(async move { crate::receiver::receive(&*env, &delivery, last_arrival_wins).await })
    }

    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move { crate::relay::run_worker(&*env, &settings).await })
    }

    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            // Receipts only; a branch's head and its builds are what keep a redelivery whose
            // receipt is gone from moving the head back or owing a second check run.
            let purged = env
                .execute(
                    "DELETE FROM deliveries WHERE received_ms < ?1",
                    &[int(older_than_ms)],
                )
                .await;
            if let Err(error) = purged {
                env.log(&format!("purge failed: {error}"));
            }
        })
    }

    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            match crate::relay::requeue_dead(&*env).await {
                Ok(count) => env.log(&format!("operator requeued {count} dead builds")),
                Err(error) => env.log(&format!("operator requeue failed: {error}")),
            }
        })
    }

    fn observed_tables(&self) -> &[&'static str] {
        &["deliveries", "branches", "builds"]
    }

    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        let row = Columns { table, values };
        match table {
            "deliveries" => Ok(ObservedRow::Receipt(ReceiptRow {
                account: row.text(0)?,
                event_id: row.text(1)?,
                received_ms: Some(row.int(2)?),
            })),
            "branches" => Ok(ObservedRow::Entity(EntityRow {
                tenant: row.text(0)?,
                subject: row.text(1)?,
                state: branch_state(row.opt_text(2)?.as_deref()),
            })),
            "builds" => Ok(ObservedRow::Obligation(ObligationRow {
                operation_key: row.text(0)?,
                payload: row.text(3)?,
                status: match row.text(4)?.as_str() {
                    "owed" => ObligationStatus::Owed,
                    "done" => ObligationStatus::Done,
                    "dead" => ObligationStatus::Dead,
                    other => return Err(format!("builds: unknown status {other:?}")),
                },
                lease_token: row.int(5)?,
                lease_owner: row.opt_text(6)?,
                lease_expires_ms: row.opt_int(7)?,
                next_attempt_ms: row.opt_int(8)?,
                dead_reason: row.opt_text(12)?,
            })),
            other => Err(format!("table {other:?} is not observed")),
        }
    }
}

/// A row's values in table order, read by position as the schema above lays them out.
struct Columns<'a> {
    table: &'a str,
    values: &'a [Value],
}

impl Columns<'_> {
    fn value(&self, index: usize) -> Result<&Value, String> {
        self.values
            .get(index)
            .ok_or_else(|| format!("{}: no column {index}", self.table))
    }

    fn text(&self, index: usize) -> Result<String, String> {
        match self.value(index)? {
            Value::Text(text) => Ok(text.clone()),
            other => Err(format!(
                "{} column {index}: expected text, found {other:?}",
                self.table
            )),
        }
    }

    fn opt_text(&self, index: usize) -> Result<Option<String>, String> {
        match self.value(index)? {
            Value::Null => Ok(None),
            _ => self.text(index).map(Some),
        }
    }

    fn int(&self, index: usize) -> Result<i64, String> {
        match self.value(index)? {
            Value::Integer(value) => Ok(*value),
            other => Err(format!(
                "{} column {index}: expected an integer, found {other:?}",
                self.table
            )),
        }
    }

    fn opt_int(&self, index: usize) -> Result<Option<i64>, String> {
        match self.value(index)? {
            Value::Null => Ok(None),
            _ => self.int(index).map(Some),
        }
    }
}
