//! A team's own webhook receiver and outbox relay, with a schema of its own, plugged into the
//! simulator through the public `System` interface.
//!
//! It follows the same rules as the reference (one transaction for inbox row, order transition
//! and job; a fenced claim; the call outside any transaction; a lookup before retrying past the
//! provider's key lifetime) but is written independently, in a different style and against
//! different tables, which is the situation of any team bringing its own code. `decode_row` is the
//! only simulator-specific part: it maps this schema's rows to the rows the invariants check.
//! With `receipt_in_own_transaction` set, the inbox row commits before the work, the classic bug,
//! so the simulator must catch it through this system's own decoder.

use std::rc::Rc;

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, Value, int, text};
use commitgap_sim::commitgap::provider::{FulfillmentPayload, ProviderCall, ProviderReply, ProviderRequest};
use commitgap_sim::commitgap::receiver::{
    Answer, CHARGE_REFUNDED, ORDER_CANCELLED, PAYMENT_SUCCEEDED, SuccessKind, WebhookDelivery, WebhookEvent,
    authenticate,
};
use commitgap_sim::commitgap::relay::RelaySettings;
use commitgap_sim::domain::payments::{self, OrderStatus};
use commitgap_sim::system::{
    Fixtures, ObligationRow, ObligationStatus, ObservedRow, OwnRow, ReceiptRow, System,
};

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

/// The team's system. See the module documentation.
pub struct ShopSystem {
    pub receipt_in_own_transaction: bool,
}

impl System for ShopSystem {
    fn name(&self) -> &str {
        if self.receipt_in_own_transaction {
            "shop-inbox-first"
        } else {
            "shop"
        }
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

    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            loop {
                match ship_next(&*env, &settings).await {
                    Ok(true) => {}
                    Ok(false) => env.sleep_ms(30_000).await,
                    Err(_) => env.sleep_ms(1_000).await,
                }
            }
        })
    }

    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            for _ in 0..20 {
                let requeued = env
                    .execute(
                        "UPDATE jobs SET state = 'queued', tries = 0, due_at = ?1 WHERE state = 'failed'",
                        &[int(env.now_ms())],
                    )
                    .await;
                if requeued.is_ok() {
                    return;
                }
                env.sleep_ms(100).await;
            }
        })
    }

    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = env
                .execute("DELETE FROM inbox WHERE seen_ms < ?1", &[int(older_than_ms)])
                .await;
        })
    }

    fn observed_tables(&self) -> &[&'static str] {
        &["account_shops", "inbox", "shop_orders", "jobs"]
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
            "inbox" => Ok(ObservedRow::Receipt(ReceiptRow {
                account: text_at(0)?,
                event_id: text_at(1)?,
                received_ms: Some(int_at(2)?),
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
            "jobs" => {
                let status = match text_at(2)?.as_str() {
                    "queued" => ObligationStatus::Owed,
                    "sent" => ObligationStatus::Done,
                    _ => ObligationStatus::Dead,
                };
                Ok(ObservedRow::Obligation(ObligationRow {
                    operation_key: text_at(0)?,
                    payload: text_at(1)?,
                    status,
                    lease_token: int_at(3)?,
                    lease_owner: text_at(4).ok(),
                    lease_expires_ms: int_at(5).ok(),
                    next_attempt_ms: int_at(6).ok(),
                    dead_reason: if status == ObligationStatus::Dead {
                        text_at(8).ok()
                    } else {
                        None
                    },
                }))
            }
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

/// The relay: one job per call. Returns whether there was a job to work on.
// One function on purpose: claim, call and complete read as the one pass they are.
#[allow(clippy::too_many_lines)]
async fn ship_next(env: &dyn Env, settings: &RelaySettings) -> Result<bool, DbError> {
    let now = env.now_ms();
    let due = env
        .query(
            "SELECT job_key FROM jobs WHERE state = 'queued' AND due_at <= ?1 \
             AND coalesce(held_until, 0) <= ?1 ORDER BY due_at, job_key LIMIT 1",
            &[int(now)],
        )
        .await?;
    let Some(key) = due
        .first()
        .map(|row| row.text(0).map(str::to_owned))
        .transpose()?
    else {
        return Ok(false);
    };
    // The claim checks the due time again: between the select and the claim, the job's holder
    // may have recorded a failure and a later due time.
    // The hold outlasts what the provider may take over a request, so a worker that dies mid-call
    // leaves its request time to finish before another worker sends the key: a provider that
    // executes concurrent requests twice would perform the job twice.
    let lease_ms = settings.lease_held_ms();
    let claimed = env
        .query(
            "UPDATE jobs SET fence = fence + 1, holder = ?1, held_until = ?2, \
             first_try_at = coalesce(first_try_at, ?3), tries = tries + 1 \
             WHERE job_key = ?4 AND state = 'queued' AND due_at <= ?3 AND coalesce(held_until, 0) <= ?3 \
             RETURNING fence, body, first_try_at, tries",
            &[text(env.process_id()), int(now + lease_ms), int(now), text(&key)],
        )
        .await?;
    let Some(claim) = claimed.first() else {
        return Ok(true);
    };
    let (fence, body, first_try_at, tries) = (
        claim.int(0)?,
        claim.text(1)?.to_owned(),
        claim.int(2)?,
        claim.int(3)?,
    );
    let call = |request| ProviderCall {
        request,
        timeout_ms: settings.call_timeout_ms,
    };
    // Stalls, the call itself and clock skew all eat into the provider's key lifetime.
    let margin = settings.stall_ms_max + settings.call_timeout_ms + settings.clock_skew_ms_max;
    if env.now_ms() + margin >= first_try_at + settings.key_lifetime_ms {
        let lookup = call(ProviderRequest::Lookup {
            idempotency_key: key.clone(),
        });
        match env.call_provider(&lookup).await {
            Ok(ProviderReply::Found { effect_id }) => {
                return finish(env, &key, fence, "sent", &effect_id).await;
            }
            Ok(ProviderReply::NotFound) => {
                // A heartbeat: the lookup used part of the lease.
                let renewed = env
                    .execute(
                        "UPDATE jobs SET held_until = ?1 WHERE job_key = ?2 AND fence = ?3 AND state = 'queued'",
                        &[int(env.now_ms() + lease_ms), text(&key), int(fence)],
                    )
                    .await?;
                if renewed == 0 {
                    return Ok(true);
                }
            }
            _ => return postpone(env, &key, fence, tries, settings, 0).await,
        }
    }
    let send = call(ProviderRequest::Send {
        idempotency_key: key.clone(),
        payload: body,
    });
    match env.call_provider(&send).await {
        Ok(ProviderReply::Accepted { effect_id, .. }) => finish(env, &key, fence, "sent", &effect_id).await,
        Ok(ProviderReply::Rejected { status, reason }) => {
            finish(env, &key, fence, "failed", &format!("{status} {reason}")).await
        }
        // The provider may still be working on a request that timed out or met another with
        // its key: leave the key alone until it must have finished.
        _ => postpone(env, &key, fence, tries, settings, settings.provider_act_ms_max).await,
    }
}

/// Records the outcome if this worker still holds the job.
async fn finish(env: &dyn Env, key: &str, fence: i64, state: &str, detail: &str) -> Result<bool, DbError> {
    let (shipment, error) = if state == "sent" {
        (text(detail), Value::Null)
    } else {
        (Value::Null, text(detail))
    };
    env.execute(
        "UPDATE jobs SET state = ?1, shipment = ?2, error = ?3, held_until = NULL \
         WHERE job_key = ?4 AND fence = ?5 AND state = 'queued'",
        &[text(state), shipment, error, text(key), int(fence)],
    )
    .await?;
    Ok(true)
}

/// Gives the job back for a retry in a minute, or after `wait_ms_min` if that is longer; or, once
/// `tries` reached the limit, gives it up. It gives up only after a try that failed: a job that
/// reached the limit during an outage and was requeued by the operator gets its try.
async fn postpone(
    env: &dyn Env,
    key: &str,
    fence: i64,
    tries: i64,
    settings: &RelaySettings,
    wait_ms_min: i64,
) -> Result<bool, DbError> {
    if tries >= settings.attempts_max {
        return finish(env, key, fence, "failed", "gave up: too many tries").await;
    }
    env.execute(
        "UPDATE jobs SET due_at = ?1, held_until = NULL WHERE job_key = ?2 AND fence = ?3 AND state = 'queued'",
        &[int(env.now_ms() + wait_ms_min.max(60_000)), text(key), int(fence)],
    )
    .await?;
    Ok(true)
}
