//! A team's own webhook receiver and outbox relay, with a schema of its own, plugged into the
//! simulator through the public `System` interface.
//!
//! Its receiver follows the same rules as the reference (one transaction for inbox row, order
//! transition and job) but is written independently, in a different style and against different
//! tables, which is the situation of any team bringing its own code. Its job queue is declared
//! to the pattern's machinery ([`INBOX`], [`JOBS`]), so the relay (a fenced claim, the call
//! outside any transaction, a lookup before retrying past the provider's key lifetime), the
//! purge, the operator's requeue and the reading of those tables' rows are the pattern's,
//! written once. `decode_row` maps the shop's other tables to the rows the invariants check.
//! With `receipt_in_own_transaction` set, the inbox row commits before the work, the classic
//! bug, so the simulator must catch it through this system's own tables. With
//! `impatient_relay` set, the relay is the team's first try at handling its partner's throttling
//! ([`ImpatientRelay`]): a planted bug that the team's own fault model, `partner-throttle`, must
//! expose.

use std::rc::Rc;
use std::sync::LazyLock;

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, Value, int, text};
use commitgap_sim::commitgap::provider::{CallError, FulfillmentPayload, ProviderReply};
use commitgap_sim::commitgap::receiver::{
    Answer, CHARGE_REFUNDED, ORDER_CANCELLED, PAYMENT_SUCCEEDED, SuccessKind, WebhookDelivery, WebhookEvent,
    authenticate,
};
use commitgap_sim::commitgap::relay::{
    Claim, RelaySettings, RelaySteps, bury, fenced_write, run_worker_with,
};
use commitgap_sim::commitgap::tables::{OutboxTable, ReceiptTable, Tables};
use commitgap_sim::domain::payments::{self, OrderStatus};
use commitgap_sim::system::{Fixtures, ObservedRow, OwnRow, System};

const SCHEMA: &str = "
CREATE TABLE account_shops (sender_account TEXT PRIMARY KEY, shop TEXT NOT NULL);
CREATE TABLE inbox (
    sender_account TEXT NOT NULL, message_id TEXT NOT NULL, seen_ms INTEGER NOT NULL,
    PRIMARY KEY (sender_account, message_id));
CREATE TABLE shop_orders (
    shop TEXT NOT NULL, number TEXT NOT NULL, state TEXT NOT NULL, total_cents INTEGER NOT NULL,
    total_as_of INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (shop, number));
CREATE TABLE jobs (
    job_key TEXT PRIMARY KEY, body TEXT NOT NULL, state TEXT NOT NULL,
    fence INTEGER NOT NULL DEFAULT 0, holder TEXT, held_until INTEGER,
    due_at INTEGER NOT NULL, first_try_at INTEGER, error TEXT, shipment TEXT, tries INTEGER NOT NULL DEFAULT 0);
";

/// Where the shop's receipts live: its inbox, one row per `(sender account, message id)`, with no
/// body digest.
pub const INBOX: ReceiptTable = ReceiptTable {
    table: "inbox",
    account: "sender_account",
    event_id: "message_id",
    received_ms: "seen_ms",
    body_digest: None,
};

/// Where the shop's obligations live: its job queue, with its own names and states, one column
/// for the last error and the reason a job failed for good, and no creation or completion time.
pub const JOBS: OutboxTable = OutboxTable {
    table: "jobs",
    operation_key: "job_key",
    payload: "body",
    status: "state",
    owed: "queued",
    done: "sent",
    dead: "failed",
    attempts: "tries",
    lease_owner: "holder",
    lease_token: "fence",
    lease_expires_ms: "held_until",
    next_attempt_ms: "due_at",
    first_attempt_ms: "first_try_at",
    last_error: "error",
    dead_reason: "error",
    effect_id: "shipment",
    created_ms: None,
    completed_ms: None,
};

/// The pattern's statements over [`INBOX`] and [`JOBS`], written once.
pub fn tables() -> &'static Tables {
    static TABLES: LazyLock<Tables> = LazyLock::new(|| Tables::new(INBOX, JOBS));
    &TABLES
}

/// The team's system. See the module documentation.
pub struct ShopSystem {
    /// The inbox row commits on its own, before the work (a planted bug).
    pub receipt_in_own_transaction: bool,
    /// The relay is [`ImpatientRelay`] (a planted bug).
    pub impatient_relay: bool,
}

impl ShopSystem {
    /// The shop as it runs in production.
    pub const CORRECT: ShopSystem = ShopSystem {
        receipt_in_own_transaction: false,
        impatient_relay: false,
    };
}

/// The relay as the team first wrote its handling of the partner's 429s: the pattern's relay
/// over the shop's job queue, except that a throttled send is tried again at once, and after three
/// the job is failed for good. A 429 performs nothing and says when to come back, so a job the
/// partner never refused ends failed.
pub struct ImpatientRelay;

impl RelaySteps for ImpatientRelay {
    fn relay_tables(&self) -> &Tables {
        tables()
    }

    async fn record_reply(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        claim: &Claim,
        reply: Result<ProviderReply, CallError>,
    ) -> Result<(), DbError> {
        let Ok(ProviderReply::RateLimited { .. }) = reply else {
            return tables().record_reply(env, settings, claim, reply).await;
        };
        if claim.attempts >= 3 {
            return bury(env, tables(), claim, "throttled three times").await;
        }
        let params = [
            int(env.now_ms()),
            text("throttled"),
            text(&claim.operation_key),
            int(claim.lease_token),
        ];
        fenced_write(env, claim, tables().retry_sql(), &params).await
    }
}

impl System for ShopSystem {
    fn name(&self) -> &str {
        match (self.receipt_in_own_transaction, self.impatient_relay) {
            (true, _) => "shop-inbox-first",
            (false, true) => "shop-impatient-relay",
            (false, false) => "shop",
        }
    }

    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        if !self.impatient_relay {
            let tables = tables();
            return Box::pin(async move { run_worker_with(tables, &*env, &settings).await });
        }
        Box::pin(async move { run_worker_with(&ImpatientRelay, &*env, &settings).await })
    }

    fn description(&self) -> &str {
        "a separately written receiver and relay with their own schema"
    }

    fn set_up(
        &self,
        connection: &commitgap_sim::rusqlite::Connection,
        fixtures: &Fixtures,
    ) -> Result<(), DbError> {
        connection.execute_batch(SCHEMA)?;
        for (account, tenant) in &fixtures.accounts {
            connection.execute("INSERT INTO account_shops VALUES (?1, ?2)", (account, tenant))?;
        }
        for order in &fixtures.subjects {
            connection.execute(
                "INSERT INTO shop_orders (shop, number, state, total_cents) VALUES (?1, ?2, 'open', ?3)",
                (
                    &order.tenant,
                    &order.subject,
                    order.number(payments::AMOUNT).unwrap_or(0),
                ),
            )?;
        }
        Ok(())
    }

    fn handle_delivery(
        &self,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        let inbox_first = self.receipt_in_own_transaction;
        Box::pin(async move {
            // The library's door check: size, signature against the endpoint's secrets from
            // the process's configuration, timestamp, a valid event for the endpoint's account.
            let event = match authenticate(&*env, &delivery) {
                Ok(event) => event,
                Err(refusal) => return refusal,
            };
            match accept(&*env, &event, inbox_first).await {
                Ok(answer) => answer,
                Err(error) => {
                    let _ = env.execute("ROLLBACK", &[]).await;
                    Answer::RetryLater(error.to_string())
                }
            }
        })
    }

    fn tables(&self) -> Option<Tables> {
        Some(tables().clone())
    }

    fn observed_tables(&self) -> &[&'static str] {
        &["account_shops", "shop_orders"]
    }

    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        let text_at = |index: usize| match values.get(index) {
            Some(Value::Text(value)) => Ok(value.clone()),
            other => Err(format!("{table} column {index}: expected text, found {other:?}")),
        };
        let int_at = |index: usize| match values.get(index) {
            Some(Value::Integer(value)) => Ok(*value),
            other => Err(format!(
                "{table} column {index}: expected an integer, found {other:?}"
            )),
        };
        match table {
            // The team's own table, for its own invariant (see `invariant.rs`).
            "account_shops" => Ok(ObservedRow::Own(OwnRow {
                table: table.to_owned(),
                key: text_at(0)?,
                fields: vec![("shop".to_owned(), text_at(1)?)],
            })),
            "shop_orders" => Ok(payments::order_row(
                &text_at(0)?,
                &text_at(1)?,
                match text_at(2)?.as_str() {
                    "open" => OrderStatus::AwaitingPayment,
                    "paid" => OrderStatus::Paid,
                    "refunded" => OrderStatus::Refunded,
                    _ => OrderStatus::Cancelled,
                },
                int_at(3)?,
            )),
            other => Err(format!("unexpected table {other}")),
        }
    }
}

/// The receiver: inbox row, order transition and job in one transaction (unless the flaw is on).
// One function on purpose: a team's handler reads top to bottom as the transaction it is.
#[allow(clippy::too_many_lines)]
async fn accept(env: &dyn Env, event: &WebhookEvent, inbox_first: bool) -> Result<Answer, DbError> {
    let now = env.now_ms();
    let inbox_row = [text(&event.account), text(&event.id), int(now)];
    if inbox_first
        && env
            .execute("INSERT OR IGNORE INTO inbox VALUES (?1, ?2, ?3)", &inbox_row)
            .await?
            == 0
    {
        return Ok(Answer::Success(SuccessKind::Duplicate));
    }
    env.execute("BEGIN IMMEDIATE", &[]).await?;
    if !inbox_first
        && env
            .execute("INSERT OR IGNORE INTO inbox VALUES (?1, ?2, ?3)", &inbox_row)
            .await?
            == 0
    {
        env.execute("COMMIT", &[]).await?;
        return Ok(Answer::Success(SuccessKind::Duplicate));
    }
    let shops = env
        .query(
            "SELECT shop FROM account_shops WHERE sender_account = ?1",
            &[text(&event.account)],
        )
        .await?;
    let Some(shop) = shops
        .first()
        .map(|row| row.text(0).map(str::to_owned))
        .transpose()?
    else {
        env.execute("ROLLBACK", &[]).await?;
        return Ok(Answer::Rejected(format!("unknown account {}", event.account)));
    };
    let order = [text(&shop), text(&event.order)];
    let (sql, extra) = match event.kind.as_str() {
        PAYMENT_SUCCEEDED => (
            "UPDATE shop_orders SET state = 'paid' WHERE shop = ?1 AND number = ?2 AND state = 'open' RETURNING 1",
            vec![],
        ),
        CHARGE_REFUNDED => (
            "UPDATE shop_orders SET state = 'refunded' WHERE shop = ?1 AND number = ?2 AND state IN ('open', 'paid') RETURNING 1",
            vec![],
        ),
        ORDER_CANCELLED => (
            "UPDATE shop_orders SET state = 'cancelled' WHERE shop = ?1 AND number = ?2 AND state = 'open' RETURNING 1",
            vec![],
        ),
        _ => (
            "UPDATE shop_orders SET total_cents = ?3, total_as_of = ?4 WHERE shop = ?1 AND number = ?2 AND total_as_of < ?4 RETURNING 1",
            vec![int(event.amount_cents.unwrap_or(0)), int(event.created_ms)],
        ),
    };
    let params: Vec<Value> = order.iter().cloned().chain(extra).collect();
    let changed = env.query(sql, &params).await?;
    if changed.is_empty()
        && env
            .query(
                "SELECT 1 FROM shop_orders WHERE shop = ?1 AND number = ?2",
                &order,
            )
            .await?
            .is_empty()
    {
        env.execute("ROLLBACK", &[]).await?;
        return Ok(Answer::Rejected(format!(
            "no order {} in shop {shop}",
            event.order
        )));
    }
    let kind = match changed.first() {
        Some(_) if event.kind == PAYMENT_SUCCEEDED => {
            let body = FulfillmentPayload {
                tenant: shop,
                order: event.order.clone(),
                operation: "fulfill".into(),
                version: 1,
                amount_cents: event.amount_cents.unwrap_or(0),
            };
            env.execute(
                "INSERT OR IGNORE INTO jobs (job_key, body, state, due_at) VALUES (?1, ?2, 'queued', ?3)",
                &[text(&body.operation_key()), text(&body.to_json()), int(now)],
            )
            .await?;
            SuccessKind::Applied
        }
        Some(_) => SuccessKind::Applied,
        None => SuccessKind::NoTransition,
    };
    env.execute("COMMIT", &[]).await?;
    Ok(Answer::Success(kind))
}
