//! The webhook receiver: turns one delivery of an upstream payment event into committed state.
//!
//! In one `BEGIN IMMEDIATE` transaction it records the receipt `(account, event_id)`; if the
//! receipt is new it moves the order `awaiting_payment -> paid`, and only if that transition
//! happened it inserts the fulfillment obligation, keyed by the business operation
//! (`<tenant>/<order>/fulfill/v1`) and never by the event. It answers success only after COMMIT
//! returned, answers success for duplicates, answers "retry later" when the database is busy or
//! anything fails before the commit, and rejects an event it can never apply (unknown account,
//! unknown order, unreadable body) without changing anything.
//!
//! The receiver must not call the provider (that is the relay's job, outside any transaction) and
//! must not answer success for work that has not committed.

use serde::Deserialize;

use crate::env::{DbError, Env, Value, int, text};
use crate::planted::PlantedBug;
use crate::provider::FulfillmentPayload;

/// The only event type the reference system applies.
pub const PAYMENT_SUCCEEDED: &str = "payment.succeeded";

/// One HTTP request from the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookDelivery {
    /// The `webhook-id` header: stable across every retry of one event to one subscription.
    pub webhook_id: String,
    /// The `webhook-timestamp` header, in seconds; refreshed on every attempt.
    pub timestamp_s: i64,
    /// The raw JSON body.
    pub body: String,
}

/// The event inside a delivery's body.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WebhookEvent {
    /// Unique within the account only.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub account: String,
    pub order: String,
}

impl WebhookEvent {
    pub fn parse(body: &str) -> Result<WebhookEvent, String> {
        serde_json::from_str(body).map_err(|error| format!("malformed event body: {error}"))
    }
}

/// The receiver's answer to one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: the event's effects are committed (now or by an earlier delivery).
    Success(SuccessKind),
    /// 503: nothing was committed; the sender should retry.
    RetryLater(String),
    /// 4xx: the event can never be applied; nothing was committed.
    Rejected(String),
}

/// Which kind of success, for the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuccessKind {
    /// Receipt, transition and obligation committed together.
    Applied,
    /// Receipt committed; the order had already left `awaiting_payment`, so nothing more is owed.
    NoTransition,
    /// The receipt already existed: an earlier delivery committed this event.
    Duplicate,
}

impl Answer {
    /// The HTTP status this answer is sent with.
    pub fn status(&self) -> u16 {
        match self {
            Answer::Success(_) => 200,
            Answer::RetryLater(_) => 503,
            Answer::Rejected(_) => 422,
        }
    }

    pub fn is_success(&self) -> bool {
        matches!(self, Answer::Success(_))
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Success(kind) => write!(f, "200 {kind:?}"),
            Answer::RetryLater(reason) => write!(f, "503 {reason}"),
            Answer::Rejected(reason) => write!(f, "422 {reason}"),
        }
    }
}

/// What the transaction decided, before COMMIT.
enum Decision {
    Commit(SuccessKind),
    Reject(String),
}

/// Handles one delivery. `planted_bug` is `None` in production.
pub async fn receive(env: &dyn Env, delivery: &WebhookDelivery, planted_bug: Option<PlantedBug>) -> Answer {
    let event = match WebhookEvent::parse(&delivery.body) {
        Ok(event) => event,
        Err(reason) => return Answer::Rejected(reason),
    };
    if event.kind != PAYMENT_SUCCEEDED {
        return Answer::Rejected(format!("unsupported event type {:?}", event.kind));
    }
    if planted_bug == Some(PlantedBug::ReceiptFirst) {
        return receive_receipt_first(env, &event).await;
    }
    if let Err(error) = env.execute("BEGIN IMMEDIATE", &[]).await {
        return Answer::RetryLater(format!("could not begin: {error}"));
    }
    let decision = apply_payment(env, &event, true).await;
    finish(env, decision).await
}

/// Commits or rolls back the open transaction according to `decision` and answers.
async fn finish(env: &dyn Env, decision: Result<Decision, DbError>) -> Answer {
    match decision {
        Ok(Decision::Commit(kind)) => match env.execute("COMMIT", &[]).await {
            Ok(_) => Answer::Success(kind),
            Err(error) => {
                rollback(env).await;
                Answer::RetryLater(format!("commit failed: {error}"))
            }
        },
        Ok(Decision::Reject(reason)) => {
            rollback(env).await;
            Answer::Rejected(reason)
        }
        Err(error) => {
            rollback(env).await;
            Answer::RetryLater(error.to_string())
        }
    }
}

/// The body of the transaction. With `record_receipt` false the receipt is assumed to be
/// recorded already (only the planted `receipt-first` bug does that).
async fn apply_payment(
    env: &dyn Env,
    event: &WebhookEvent,
    record_receipt: bool,
) -> Result<Decision, DbError> {
    let now_ms = env.now_ms();
    let tenants = env
        .query(
            "SELECT tenant FROM accounts WHERE account = ?1",
            &[text(&event.account)],
        )
        .await?;
    let Some(tenant_row) = tenants.first() else {
        return Ok(Decision::Reject(format!("unknown account {:?}", event.account)));
    };
    let tenant = tenant_row.text(0)?.to_owned();
    if record_receipt {
        let inserted = env
            .execute(
                "INSERT INTO receipts (account, event_id, received_ms) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (account, event_id) DO NOTHING",
                &[text(&event.account), text(&event.id), int(now_ms)],
            )
            .await?;
        if inserted == 0 {
            return Ok(Decision::Commit(SuccessKind::Duplicate));
        }
    }
    let transitioned = env
        .query(
            "UPDATE orders SET status = 'paid', updated_ms = ?1 \
             WHERE tenant = ?2 AND id = ?3 AND status = 'awaiting_payment' \
             RETURNING amount_cents",
            &[int(now_ms), text(&tenant), text(&event.order)],
        )
        .await?;
    let Some(order_row) = transitioned.first() else {
        let existing = env
            .query(
                "SELECT status FROM orders WHERE tenant = ?1 AND id = ?2",
                &[text(&tenant), text(&event.order)],
            )
            .await?;
        if existing.is_empty() {
            return Ok(Decision::Reject(format!(
                "unknown order {:?} for tenant {tenant:?}",
                event.order
            )));
        }
        return Ok(Decision::Commit(SuccessKind::NoTransition));
    };
    let payload = FulfillmentPayload {
        tenant,
        order: event.order.clone(),
        operation: "fulfill".to_owned(),
        version: 1,
        amount_cents: order_row.int(0)?,
    };
    insert_obligation(env, &payload, now_ms).await?;
    Ok(Decision::Commit(SuccessKind::Applied))
}

/// Inserts the obligation for `payload`, keyed by its business operation. A conflict means the
/// obligation already exists, which the order guard should have made impossible; keeping the
/// first row is still the right outcome.
async fn insert_obligation(env: &dyn Env, payload: &FulfillmentPayload, now_ms: i64) -> Result<(), DbError> {
    let params: [Value; 3] = [
        text(&payload.operation_key()),
        text(&payload.to_json()),
        int(now_ms),
    ];
    env.execute(
        "INSERT INTO outbox (operation_key, payload, status, next_attempt_ms, created_ms) \
         VALUES (?1, ?2, 'pending', ?3, ?3) ON CONFLICT (operation_key) DO NOTHING",
        &params,
    )
    .await?;
    Ok(())
}

/// Rolls back the open transaction, if any. A failure here means there was nothing to roll back
/// or the connection is gone; either way no state of ours survives.
async fn rollback(env: &dyn Env) {
    let _ = env.execute("ROLLBACK", &[]).await;
}

/// The planted `receipt-first` bug: the receipt commits on its own, then the work runs in a
/// second transaction. A crash between the two leaves a receipt that turns every redelivery into
/// a "duplicate" while the work was never done.
async fn receive_receipt_first(env: &dyn Env, event: &WebhookEvent) -> Answer {
    let now_ms = env.now_ms();
    let inserted = env
        .execute(
            "INSERT INTO receipts (account, event_id, received_ms) VALUES (?1, ?2, ?3) \
             ON CONFLICT (account, event_id) DO NOTHING",
            &[text(&event.account), text(&event.id), int(now_ms)],
        )
        .await;
    match inserted {
        Ok(0) => return Answer::Success(SuccessKind::Duplicate),
        Ok(_) => {}
        Err(error) => return Answer::RetryLater(error.to_string()),
    }
    if let Err(error) = env.execute("BEGIN IMMEDIATE", &[]).await {
        return Answer::RetryLater(format!("could not begin: {error}"));
    }
    let decision = apply_payment(env, event, false).await;
    finish(env, decision).await
}
