//! The reference receiver and relay from the `commitgap` crate, as a [`System`], run with the
//! steps of the reference or of a variant that overrides some of them (a planted bug).
//!
//! This adapter only wires the library's functions to the simulator and decodes the reference
//! schema's rows; it must not change their behaviour, or the simulator would be testing something
//! other than the code users run.

use std::rc::Rc;
use std::sync::Arc;

use commitgap::env::{DbError, Env, LocalBoxFuture, Value};
use commitgap::receiver::{Answer, ReceiverSteps, WebhookDelivery, receive_with};
use commitgap::reference::Reference;
use commitgap::relay::{RelaySettings, RelaySteps, run_worker_with};
use commitgap::schema::{
    self, INSERT_ACCOUNT_SQL, INSERT_ORDER_SQL, ORDER_COLUMNS, OUTBOX_COLUMNS, RECEIPT_COLUMNS, SCHEMA_SQL,
};
use commitgap::tables::{OutboxTable, ReceiptTable};

use crate::domain::payments::{self, OrderStatus};
use crate::rows::NamedRow;
use crate::system::{Fixtures, ObligationRow, ObservedRow, ReceiptRow, System};

/// A set of receiver and relay steps the adapter can run, with what the simulator needs to know
/// about it besides them.
pub trait Variant: ReceiverSteps + RelaySteps + Send + Sync + 'static {
    /// The name users pass to `--system`.
    fn name(&self) -> &'static str;

    /// One line saying what this variant is.
    fn description(&self) -> String;

    /// The statements that create its tables: the reference schema unless it needs another.
    fn schema_sql(&self) -> String {
        SCHEMA_SQL.to_owned()
    }

    /// See [`System::commits_after_answer`].
    fn commits_after_answer(&self) -> bool {
        false
    }

    /// True only for [`Reference`], whose deliveries and workers then go through the entry points
    /// a deployment calls (`receiver::receive`, `relay::run_worker`) rather than their `_with`
    /// forms, so a sweep of the reference checks those too.
    fn is_reference(&self) -> bool {
        false
    }
}

impl Variant for Reference {
    fn is_reference(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "reference"
    }

    fn description(&self) -> String {
        "the reference receiver and relay, every design rule kept".to_owned()
    }
}

/// The reference system, or a variant of it.
#[derive(Debug, Clone)]
pub struct ReferenceSystem<V: Variant = Reference> {
    variant: Arc<V>,
    description: String,
}

impl ReferenceSystem {
    /// The reference, every step as `src/` defines it.
    pub fn reference() -> ReferenceSystem {
        ReferenceSystem::new(Reference)
    }
}

impl<V: Variant> ReferenceSystem<V> {
    /// The reference with the steps `variant` overrides.
    pub fn new(variant: V) -> ReferenceSystem<V> {
        ReferenceSystem {
            description: variant.description(),
            variant: Arc::new(variant),
        }
    }
}

impl<V: Variant> System for ReferenceSystem<V> {
    fn name(&self) -> &str {
        self.variant.name()
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn set_up(&self, connection: &rusqlite::Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        self.set_up_schema(connection)?;
        self.load_fixtures(connection, fixtures)
    }

    fn sets_up_in_two_parts(&self) -> bool {
        true
    }

    fn set_up_schema(&self, connection: &rusqlite::Connection) -> Result<(), DbError> {
        connection.execute_batch(&self.variant.schema_sql())?;
        Ok(())
    }

    fn load_fixtures(&self, connection: &rusqlite::Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        // Cached: on a database a sweep reuses, the same connection loads every seed's fixtures.
        let mut insert_account = connection.prepare_cached(INSERT_ACCOUNT_SQL)?;
        for (account, tenant) in &fixtures.accounts {
            insert_account.execute((account, tenant))?;
        }
        let mut insert_order = connection.prepare_cached(INSERT_ORDER_SQL)?;
        for order in &fixtures.subjects {
            let amount_cents = order.number(payments::AMOUNT).unwrap_or(0);
            insert_order.execute((&order.tenant, &order.subject, amount_cents, 0))?;
        }
        Ok(())
    }

    fn handle_delivery(
        &self,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        let variant = Arc::clone(&self.variant);
        Box::pin(async move {
            if variant.is_reference() {
                commitgap::receiver::receive(&*env, &delivery).await
            } else {
                receive_with(&*variant, &*env, &delivery).await
            }
        })
    }

    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        let variant = Arc::clone(&self.variant);
        Box::pin(async move {
            if variant.is_reference() {
                commitgap::relay::run_worker(&*env, &settings).await
            } else {
                run_worker_with(&*variant, &*env, &settings).await
            }
        })
    }

    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            if let Err(error) = commitgap::purge::purge_receipts(&*env, older_than_ms).await {
                env.log(&format!("purge failed: {error}"));
            }
        })
    }

    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            match commitgap::relay::requeue_all_dead(&*env).await {
                Ok(count) => env.log(&format!("operator requeued {count} dead obligations")),
                Err(error) => env.log(&format!("operator requeue failed: {error}")),
            }
        })
    }

    fn commits_after_answer(&self) -> bool {
        self.variant.commits_after_answer()
    }

    fn observed_tables(&self) -> &[&'static str] {
        &["receipts", "orders", "outbox"]
    }

    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        decode_reference_row(table, values)
    }
}

/// Decodes a row of the reference schema. Public so that a system reusing the reference schema
/// can reuse its decoder; a system that declares its receipt and outbox tables
/// (`System::tables`) needs none for them.
pub fn decode_reference_row(table: &str, values: &[Value]) -> Result<ObservedRow, String> {
    match table {
        "receipts" => {
            let row = NamedRow {
                table,
                columns: &RECEIPT_COLUMNS,
                values,
            };
            ReceiptRow::read(&ReceiptTable::REFERENCE, &row).map(ObservedRow::Receipt)
        }
        "orders" => {
            let row = NamedRow {
                table,
                columns: &ORDER_COLUMNS,
                values,
            };
            let status = match row.text("status")?.as_str() {
                schema::AWAITING_PAYMENT => OrderStatus::AwaitingPayment,
                schema::PAID => OrderStatus::Paid,
                schema::REFUNDED => OrderStatus::Refunded,
                schema::CANCELLED => OrderStatus::Cancelled,
                other => return Err(format!("orders: unknown status {other:?}")),
            };
            Ok(payments::order_row(
                &row.text("tenant")?,
                &row.text("id")?,
                status,
                row.int("amount_cents")?,
            ))
        }
        "outbox" => {
            let row = NamedRow {
                table,
                columns: &OUTBOX_COLUMNS,
                values,
            };
            ObligationRow::read(&OutboxTable::REFERENCE, &row).map(ObservedRow::Obligation)
        }
        other => Err(format!("table {other:?} is not observed")),
    }
}
