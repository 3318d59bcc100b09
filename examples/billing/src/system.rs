//! The billing service as the simulator runs it: its schema, where its receipts and its
//! provisioning jobs live, its fixtures, and how its subscription rows read as the invariants see
//! them.
//!
//! The receipt table (`webhook_log`) and the outbox (`provisioning_jobs`) are declared to the
//! framework ([`tables`]), so the relay to the provisioning API, the receipt purge, the
//! operator's requeue and the reading of those rows are the pattern's, over these names. This
//! crate writes only the business step (`crate::business`), the domain (`crate::domain`) and the
//! decoder of its one own table, `subscriptions`.
//!
//! A [`BillingService`] is plain configuration shared by sweep threads: it must keep no state
//! between calls, and do every I/O through the `Env` it is handed.

use std::rc::Rc;
use std::sync::{Arc, LazyLock};

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, Value};
use commitgap_sim::commitgap::receiver::{Answer, WebhookDelivery};
use commitgap_sim::commitgap::tables::{OutboxTable, ReceiptTable, Tables};
use commitgap_sim::domain::{Domain, EntityState};
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::system::NamedRow;
use commitgap_sim::system::{EntityRow, Fixtures, ObservedRow, System};

use crate::business::Rules;
use crate::domain::{self, ACTIVE, CANCELED, PAST_DUE, Subscriptions};

/// The schema. The receipt table's unique `(sender, provider_event)` and the outbox's primary
/// key on `job_key` are what the pattern's inserts resolve conflicts on; `first_failed_ms`,
/// `last_paid_ms` and `invoice_rank` are what lets a late invoice event be judged by creation
/// time after the fact.
pub const SCHEMA: &str = "
CREATE TABLE customers (
    sender_account TEXT PRIMARY KEY,
    customer TEXT NOT NULL
);
CREATE TABLE webhook_log (
    sender TEXT NOT NULL,
    provider_event TEXT NOT NULL,
    logged_at_ms INTEGER NOT NULL,
    body_hash TEXT NOT NULL,
    UNIQUE (sender, provider_event)
);
CREATE INDEX webhook_log_by_age ON webhook_log (logged_at_ms);
CREATE TABLE subscriptions (
    customer TEXT NOT NULL,
    sub_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active', 'past_due', 'canceled')),
    plan_version INTEGER NOT NULL,
    seats INTEGER NOT NULL,
    invoice_rank INTEGER NOT NULL DEFAULT -1,
    first_failed_ms INTEGER,
    last_paid_ms INTEGER,
    PRIMARY KEY (customer, sub_id)
);
CREATE TABLE provisioning_jobs (
    job_key TEXT PRIMARY KEY,
    request_body TEXT NOT NULL,
    phase TEXT NOT NULL CHECK (phase IN ('waiting', 'acknowledged', 'parked')),
    tries INTEGER NOT NULL DEFAULT 0,
    held_by TEXT,
    fence INTEGER NOT NULL DEFAULT 0,
    held_until_ms INTEGER,
    not_before_ms INTEGER NOT NULL,
    first_sent_ms INTEGER,
    last_failure TEXT,
    parked_because TEXT,
    provider_ref TEXT,
    queued_ms INTEGER NOT NULL,
    finished_ms INTEGER
);
CREATE INDEX provisioning_jobs_due ON provisioning_jobs (phase, not_before_ms);
";

/// The columns of `subscriptions`, in table order, as the decoder reads them.
const SUBSCRIPTION_COLUMNS: [&str; 8] = [
    "customer",
    "sub_id",
    "status",
    "plan_version",
    "seats",
    "invoice_rank",
    "first_failed_ms",
    "last_paid_ms",
];

/// Where the receipts and the provisioning jobs live, declared once and shared.
pub fn tables() -> &'static Tables {
    static TABLES: LazyLock<Tables> = LazyLock::new(|| {
        let webhook_log = ReceiptTable {
            table: "webhook_log",
            account: "sender",
            event_id: "provider_event",
            received_ms: "logged_at_ms",
            body_digest: Some("body_hash"),
        };
        let provisioning_jobs = OutboxTable {
            table: "provisioning_jobs",
            operation_key: "job_key",
            payload: "request_body",
            status: "phase",
            owed: "waiting",
            done: "acknowledged",
            dead: "parked",
            attempts: "tries",
            lease_owner: "held_by",
            lease_token: "fence",
            lease_expires_ms: "held_until_ms",
            next_attempt_ms: "not_before_ms",
            first_attempt_ms: "first_sent_ms",
            last_error: "last_failure",
            dead_reason: "parked_because",
            effect_id: "provider_ref",
            created_ms: Some("queued_ms"),
            completed_ms: Some("finished_ms"),
        };
        Tables::new(webhook_log, provisioning_jobs)
    });
    &TABLES
}

/// The billing service with the decisions of `R`: the correct one is
/// `BillingService<Correct>`, each planted bug another `R`.
#[derive(Debug)]
pub struct BillingService<R> {
    rules: Arc<R>,
}

impl<R: Rules> BillingService<R> {
    /// The service making `rules`' decisions.
    pub fn new(rules: R) -> BillingService<R> {
        BillingService {
            rules: Arc::new(rules),
        }
    }
}

/// The correct decisions: every default of [`Rules`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Correct;

impl Rules for Correct {
    fn name(&self) -> &'static str {
        "billing"
    }

    fn description(&self) -> &'static str {
        "the billing webhook receiver and its provisioning relay, every rule kept"
    }
}

impl<R: Rules> System for BillingService<R> {
    fn name(&self) -> &str {
        self.rules.name()
    }

    fn description(&self) -> &str {
        self.rules.description()
    }

    fn domain(&self) -> Arc<dyn Domain> {
        Arc::new(Subscriptions)
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
        connection.execute_batch(SCHEMA)?;
        Ok(())
    }

    fn load_fixtures(&self, connection: &Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        for (account, customer) in &fixtures.accounts {
            connection.execute("INSERT INTO customers VALUES (?1, ?2)", (account, customer))?;
        }
        for fixture in &fixtures.subjects {
            // Every subscription starts active on its initial plan, version 0.
            let seats = fixture
                .number("seats")
                .ok_or_else(|| DbError::Other(format!("subscription {} has no seats", fixture.subject)))?;
            connection.execute(
                "INSERT INTO subscriptions (customer, sub_id, status, plan_version, seats) VALUES (?1, ?2, ?3, 0, ?4)",
                (&fixture.tenant, &fixture.subject, ACTIVE, seats),
            )?;
        }
        Ok(())
    }

    fn handle_delivery(
        &self,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        Rules::receive(Arc::clone(&self.rules), env, delivery)
    }

    fn observed_tables(&self) -> &[&'static str] {
        &["subscriptions"]
    }

    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        if table != "subscriptions" {
            return Err(format!("billing observes no table {table}"));
        }
        let row = NamedRow {
            table,
            columns: &SUBSCRIPTION_COLUMNS,
            values,
        };
        // Only an active subscription's plan is judged: past_due and canceled keep the plan in
        // the row for later, but it is not what the customer has now.
        let state = match row.text("status")?.as_str() {
            ACTIVE => domain::active(row.int("plan_version")?, row.int("seats")?),
            status @ (PAST_DUE | CANCELED) => EntityState::named(status),
            other => return Err(format!("unknown status {other:?}")),
        };
        Ok(ObservedRow::Entity(EntityRow {
            tenant: row.text("customer")?,
            subject: row.text("sub_id")?,
            state,
        }))
    }
}
