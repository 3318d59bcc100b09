//! The CI service as a system under test: its schema, its receipts and check-run outbox declared
//! to the pattern's machinery, its business step ([`crate::receiver`]), and the decoder of its one
//! table of its own.
//!
//! The tables: `accounts` (the sender account of each organisation), `deliveries` (receipts,
//! one per `(account, event id)`, the only table the purge deletes from), `branches` (each
//! branch's head commit and the creation time of the event that set it) and `builds` (the outbox:
//! one check run owed per operation key, `<org>/<repository>/check-run/<commit>`, with its
//! immutable payload, a fenced lease, the next attempt and a dead reason). `deliveries` and
//! `builds` are declared ([`DELIVERIES`], [`BUILDS`]), so the receipt step, the relay, the purge,
//! the operator's requeue and the reading of their rows are the pattern's, written once.
//!
//! With `last_arrival_wins`, the same system keeps the planted flaw described in
//! [`crate::receiver`]. Everything here goes through the `Env` it is given and keeps no state
//! outside the database; the decoder must not interpret anything the domain decides.

use std::rc::Rc;
use std::sync::{Arc, LazyLock};

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, Value};
use commitgap_sim::commitgap::receiver::{Answer, WebhookDelivery, receive_business};
use commitgap_sim::commitgap::tables::{OutboxTable, ReceiptTable, Tables};
use commitgap_sim::domain::Domain;
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::system::NamedRow;
use commitgap_sim::system::{EntityRow, Fixtures, ObservedRow, System};

use crate::domain::{Ci, branch_state};
use crate::receiver::Branches;

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
    operation_key    TEXT    NOT NULL UNIQUE,
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
    created_ms       INTEGER NOT NULL
);
CREATE INDEX builds_due ON builds (status, next_attempt_ms);
";

/// Where the receipts live: one row per delivery's `(account, event id)`, no body digest (a known
/// id is a duplicate, whatever its body).
pub const DELIVERIES: ReceiptTable = ReceiptTable {
    table: "deliveries",
    account: "account",
    event_id: "event_id",
    received_ms: "received_ms",
    body_digest: None,
};

/// Where the check runs owed live.
pub const BUILDS: OutboxTable = OutboxTable {
    table: "builds",
    operation_key: "operation_key",
    payload: "payload",
    status: "status",
    owed: "owed",
    done: "done",
    dead: "dead",
    attempts: "attempts",
    lease_owner: "lease_owner",
    lease_token: "lease_token",
    lease_expires_ms: "lease_expires_ms",
    next_attempt_ms: "next_attempt_ms",
    first_attempt_ms: "first_attempt_ms",
    last_error: "last_error",
    dead_reason: "dead_reason",
    effect_id: "check_run_id",
    created_ms: Some("created_ms"),
    completed_ms: None,
};

/// The pattern's statements over [`DELIVERIES`] and [`BUILDS`], written once.
pub fn tables() -> &'static Tables {
    static TABLES: LazyLock<Tables> = LazyLock::new(|| Tables::new(DELIVERIES, BUILDS));
    &TABLES
}

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

    fn tables(&self) -> Option<Tables> {
        Some(tables().clone())
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
        let branches = Branches {
            last_arrival_wins: self.last_arrival_wins,
        };
        Box::pin(async move { receive_business(&branches, tables(), &*env, &delivery).await })
    }

    fn observed_tables(&self) -> &[&'static str] {
        &["branches"]
    }

    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        const BRANCH_COLUMNS: [&str; 4] = ["org", "branch", "head_sha", "head_created_ms"];
        let row = NamedRow {
            table,
            columns: &BRANCH_COLUMNS,
            values,
        };
        match table {
            "branches" => Ok(ObservedRow::Entity(EntityRow {
                tenant: row.text("org")?,
                subject: row.text("branch")?,
                state: branch_state(row.opt_text("head_sha")?.as_deref()),
            })),
            other => Err(format!("table {other:?} is not observed")),
        }
    }
}
