//! The webhook receiver: turns one delivery of an upstream event into committed state.
//!
//! In one `BEGIN IMMEDIATE` transaction it looks up the account's tenant, records the receipt
//! `(account, event_id)` with a digest of the body, and, if the receipt is new, applies the event
//! to the order through a guarded transition:
//! - `payment.succeeded`: `awaiting_payment -> paid`, and only if that transition happened, the
//!   fulfillment obligation keyed by the business operation (`<tenant>/<order>/fulfill/v1`), never
//!   by the event, with the amount the payment event carries as its immutable payload;
//! - `charge.refunded`: `awaiting_payment | paid -> refunded` (a refund that arrives before its
//!   payment leaves the order refunded, so the late payment finds nothing to fulfil);
//! - `order.cancelled`: `awaiting_payment -> cancelled`;
//! - `order.updated`: the amount, only if the update was created after the one that set it.
//!
//! Before any of that, and before it touches the database, it authenticates the delivery
//! ([`authenticate`]): the body must fit the size limit, carry a Standard Webhooks signature made
//! with one of the secrets configured for the endpoint it was posted to, within the timestamp
//! tolerance, parse as a valid event, and name the endpoint's own account. What fails is refused
//! with a permanent answer (401, 403, 413 or 422) and leaves no trace in the database.
//!
//! It answers success only after COMMIT returned, answers success for duplicates, answers "retry
//! later" when the database is busy or anything fails before the commit, and rejects what it can
//! never apply (unknown account or order, unreadable or invalid body, an event id reused with a
//! different body) without changing anything.
//!
//! The receiver must not call the provider (that is the relay's job, outside any transaction) and
//! must not answer success for work that has not committed. The planted bugs below are marked
//! where they deviate; with `planted_bug == None` none of them runs.

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::env::{DbError, Env, Value, int, text};
use crate::planted::PlantedBug;
use crate::provider::{FulfillmentPayload, ProviderCall, ProviderReply, ProviderRequest};
use crate::signature::{self, SigningSecret, VerifyError, WebhookHeaders};

/// A payment captured: the order is paid and a shipment is owed.
pub const PAYMENT_SUCCEEDED: &str = "payment.succeeded";
/// The payment was refunded in full: nothing is to ship.
pub const CHARGE_REFUNDED: &str = "charge.refunded";
/// The merchant cancelled an unpaid order.
pub const ORDER_CANCELLED: &str = "order.cancelled";
/// The merchant changed the order's amount.
pub const ORDER_UPDATED: &str = "order.updated";

/// One HTTP request from the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookDelivery {
    /// The account whose endpoint the request was posted to (`/webhooks/<account>`). It picks the
    /// secrets that verify the request, and a verified event must name this account: the body is
    /// the sender's to write, the endpoint's secret is not.
    pub endpoint: String,
    /// The Standard Webhooks headers as they arrived: `webhook-id` (stable across every retry of
    /// one event to one subscription), `webhook-timestamp` (refreshed on every attempt) and
    /// `webhook-signature`.
    pub headers: WebhookHeaders,
    /// The raw body, byte for byte: the signature is over these bytes, not over a re-encoding.
    pub body: Vec<u8>,
}

/// The configuration value naming the secrets of one endpoint: this prefix and the account, with
/// the `whsec_` secrets separated by spaces (several during a rotation).
pub const SECRETS_SETTING_PREFIX: &str = "webhook-secrets/";
/// The configuration value with the timestamp tolerance in seconds.
pub const TOLERANCE_SETTING: &str = "webhook-tolerance-s";
/// The configuration value with the largest body accepted, in bytes.
pub const BODY_BYTES_MAX_SETTING: &str = "webhook-body-bytes-max";
/// The largest body accepted unless configured otherwise: events here are a few hundred bytes, and
/// a bound keeps a hostile sender from making the receiver hash or parse megabytes.
pub const DEFAULT_BODY_BYTES_MAX: usize = 64 * 1024;
/// The longest id, account or order name an event may carry.
pub const NAME_CHARS_MAX: usize = 128;
/// The largest amount an event may carry: ten billion in minor units.
pub const AMOUNT_CENTS_MAX: i64 = 1_000_000_000_000;

/// The name of the setting that holds `account`'s endpoint secrets.
pub fn secrets_setting(account: &str) -> String {
    format!("{SECRETS_SETTING_PREFIX}{account}")
}

/// How one endpoint verifies deliveries, read from the process's configuration.
#[derive(Debug, Clone)]
pub struct ReceiverSettings {
    /// Every secret that may sign a delivery to this endpoint; empty for an unknown endpoint.
    pub secrets: Vec<SigningSecret>,
    pub tolerance_s: i64,
    pub body_bytes_max: usize,
}

impl ReceiverSettings {
    /// Reads the settings of the endpoint of `account`. An `Err` is a configuration mistake (a
    /// secret that does not parse, a tolerance that is not a number): the receiver cannot tell
    /// genuine deliveries from forged ones until it is fixed.
    pub fn for_endpoint(env: &dyn Env, account: &str) -> Result<ReceiverSettings, String> {
        let secrets = match env.setting(&secrets_setting(account)) {
            Some(text) => text
                .split_whitespace()
                .map(|secret| {
                    SigningSecret::parse(secret)
                        .map_err(|error| format!("{}: {error}", secrets_setting(account)))
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let number = |name: &str, default: i64| -> Result<i64, String> {
            match env.setting(name) {
                Some(text) => text
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|value| *value >= 0)
                    .ok_or_else(|| format!("{name} is {text:?}; it must be a whole number, zero or more")),
                None => Ok(default),
            }
        };
        Ok(ReceiverSettings {
            secrets,
            tolerance_s: number(TOLERANCE_SETTING, signature::DEFAULT_TOLERANCE_S)?,
            body_bytes_max: usize::try_from(number(BODY_BYTES_MAX_SETTING, DEFAULT_BODY_BYTES_MAX as i64)?)
                .unwrap_or(DEFAULT_BODY_BYTES_MAX),
        })
    }
}

/// Decides whether a delivery may touch the database at all, before it does: the body fits, the
/// signature verifies against the endpoint's secrets within the tolerance, the body is a valid
/// event, and the event names the endpoint's account. Returns the event, or the answer refusing
/// the delivery. Runs no statement, so a refused delivery changes nothing whatever happens.
pub fn authenticate(env: &dyn Env, delivery: &WebhookDelivery) -> Result<WebhookEvent, Answer> {
    authenticate_planted(env, delivery, None)
}

/// [`authenticate`], with the planted bugs that break it.
fn authenticate_planted(
    env: &dyn Env,
    delivery: &WebhookDelivery,
    planted_bug: Option<PlantedBug>,
) -> Result<WebhookEvent, Answer> {
    if planted_bug == Some(PlantedBug::UnverifiedSignature) {
        // PLANTED BUG unverified-signature: the body is parsed and trusted as it is.
        return WebhookEvent::parse_bytes(&delivery.body).map_err(Answer::Rejected);
    }
    let settings = ReceiverSettings::for_endpoint(env, &delivery.endpoint)
        .map_err(|why| Answer::RetryLater(format!("receiver misconfigured: {why}")))?;
    if delivery.body.len() > settings.body_bytes_max {
        return Err(Answer::TooLarge(format!(
            "body of {} bytes exceeds the limit of {} bytes",
            delivery.body.len(),
            settings.body_bytes_max
        )));
    }
    let now_s = env.now_ms().div_euclid(1_000);
    signature::verify(
        &settings.secrets,
        &delivery.headers,
        &delivery.body,
        now_s,
        settings.tolerance_s,
    )
    .map_err(|error| match error {
        VerifyError::NoSecrets => Answer::Unauthorized(format!(
            "no signing secret is configured for the endpoint of account {:?}",
            delivery.endpoint
        )),
        other => Answer::Unauthorized(other.to_string()),
    })?;
    if planted_bug == Some(PlantedBug::FutureTimestampRejected)
        && delivery
            .headers
            .timestamp
            .parse::<i64>()
            .is_ok_and(|timestamp_s| timestamp_s > now_s)
    {
        // PLANTED BUG future-timestamp-rejected: "a message from the future is forged", which
        // forgets that the sender's clock may run a little ahead of this one.
        return Err(Answer::Unauthorized(
            "message timestamp is in the future".to_owned(),
        ));
    }
    let event = WebhookEvent::parse_bytes(&delivery.body).map_err(Answer::Rejected)?;
    if event.account != delivery.endpoint {
        return Err(Answer::Forbidden(format!(
            "event names account {:?} but was posted to the endpoint of account {:?}",
            event.account, delivery.endpoint
        )));
    }
    Ok(event)
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
    /// The amount paid (`payment.succeeded`) or the new amount (`order.updated`).
    #[serde(default)]
    pub amount_cents: Option<i64>,
    /// When the sender created the event; orders updates by it.
    pub created_ms: i64,
}

impl WebhookEvent {
    /// Parses and validates a body: known type, non-empty ids, an amount where one is needed.
    pub fn parse(body: &str) -> Result<WebhookEvent, String> {
        WebhookEvent::parse_bytes(body.as_bytes())
    }

    /// Parses and validates a raw body: JSON in UTF-8, a known type, ids and names that are
    /// neither empty nor longer than [`NAME_CHARS_MAX`] nor hold control characters, a positive
    /// amount no larger than [`AMOUNT_CENTS_MAX`] where one is needed, a creation time not before
    /// the epoch.
    pub fn parse_bytes(body: &[u8]) -> Result<WebhookEvent, String> {
        let event: WebhookEvent =
            serde_json::from_slice(body).map_err(|error| format!("malformed event body: {error}"))?;
        if event.id.is_empty() || event.account.is_empty() || event.order.is_empty() {
            return Err("event id, account and order must not be empty".to_owned());
        }
        for (field, value) in [
            ("id", &event.id),
            ("account", &event.account),
            ("order", &event.order),
        ] {
            if value.chars().count() > NAME_CHARS_MAX {
                return Err(format!(
                    "event {field} is longer than {NAME_CHARS_MAX} characters"
                ));
            }
            if value.chars().any(char::is_control) {
                return Err(format!("event {field} holds a control character"));
            }
        }
        if event.created_ms < 0 {
            return Err("event created_ms is before the epoch".to_owned());
        }
        if event.amount_cents.is_some_and(|amount| amount > AMOUNT_CENTS_MAX) {
            return Err(format!("amount_cents is above {AMOUNT_CENTS_MAX}"));
        }
        let needs_amount = event.kind == PAYMENT_SUCCEEDED || event.kind == ORDER_UPDATED;
        match event.kind.as_str() {
            PAYMENT_SUCCEEDED | CHARGE_REFUNDED | ORDER_CANCELLED | ORDER_UPDATED => {}
            other => return Err(format!("unsupported event type {other:?}")),
        }
        if needs_amount && event.amount_cents.is_none_or(|amount| amount <= 0) {
            return Err(format!("{} needs a positive amount_cents", event.kind));
        }
        Ok(event)
    }
}

/// The receiver's answer to one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: the event's effects are committed (now or by an earlier delivery).
    Success(SuccessKind),
    /// 503: nothing was committed; the sender should retry.
    RetryLater(String),
    /// 422: the event can never be applied; nothing was committed.
    Rejected(String),
    /// 401: the delivery is not verifiably from the sender (signature, timestamp, headers, or no
    /// secret for its endpoint); the database was not touched.
    Unauthorized(String),
    /// 403: verified, but the event names another account than the endpoint's; the database was
    /// not touched.
    Forbidden(String),
    /// 413: the body is over the size limit; it was neither verified nor read.
    TooLarge(String),
}

/// Which kind of success, for the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuccessKind {
    /// Receipt and the event's effect committed together.
    Applied,
    /// Receipt committed; the order's state made the event a no-op.
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
            Answer::Unauthorized(_) => 401,
            Answer::Forbidden(_) => 403,
            Answer::TooLarge(_) => 413,
        }
    }

    pub fn is_success(&self) -> bool {
        matches!(self, Answer::Success(_))
    }

    /// A 4xx: the delivery will never succeed as it is, so retrying it is pointless.
    pub fn is_permanent_failure(&self) -> bool {
        matches!(
            self,
            Answer::Rejected(_) | Answer::Unauthorized(_) | Answer::Forbidden(_) | Answer::TooLarge(_)
        )
    }

    /// Refused before the database: not authenticated, not authorized, or too large.
    pub fn is_refused_at_the_door(&self) -> bool {
        matches!(
            self,
            Answer::Unauthorized(_) | Answer::Forbidden(_) | Answer::TooLarge(_)
        )
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Success(kind) => write!(f, "200 {kind:?}"),
            Answer::RetryLater(reason) => write!(f, "503 {reason}"),
            Answer::Rejected(reason) => write!(f, "422 {reason}"),
            Answer::Unauthorized(reason) => write!(f, "401 {reason}"),
            Answer::Forbidden(reason) => write!(f, "403 {reason}"),
            Answer::TooLarge(reason) => write!(f, "413 {reason}"),
        }
    }
}

/// What the transaction decided, before COMMIT.
enum Decision {
    Commit(SuccessKind),
    Reject(String),
}

/// An obligation to insert after the main transaction (the planted
/// `outbox-on-other-connection` bug only).
type Deferred = Option<(String, String)>;

/// A hex digest of the raw body, stored with the receipt to notice a reused event id.
pub fn body_digest(body: &[u8]) -> String {
    const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(32);
    for byte in &Sha256::digest(body)[..16] {
        text.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(HEX_DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// Handles one delivery. `planted_bug` is `None` in production.
pub async fn receive(env: &dyn Env, delivery: &WebhookDelivery, planted_bug: Option<PlantedBug>) -> Answer {
    let event = match authenticate_planted(env, delivery, planted_bug) {
        Ok(event) => event,
        Err(answer) => return answer,
    };
    let digest = body_digest(&delivery.body);
    match planted_bug {
        Some(PlantedBug::ReceiptFirst) => return receive_receipt_first(env, &event, &digest).await,
        Some(PlantedBug::CheckThenInsert) => return receive_check_then_insert(env, &event, &digest).await,
        Some(PlantedBug::ReceiptAfter) => return receive_receipt_after(env, &event, &digest).await,
        _ => {}
    }
    if let Err(error) = env.execute("BEGIN IMMEDIATE", &[]).await {
        return Answer::RetryLater(format!("could not begin: {error}"));
    }
    let decision = match record_receipt(env, &event, &digest, delivery, planted_bug).await {
        Ok(None) => apply_event(env, &event, planted_bug).await,
        Ok(Some(decision)) => Ok((decision, None)),
        Err(error) => Err(error),
    };
    if planted_bug == Some(PlantedBug::AckBeforeCommit)
        && let Ok((Decision::Commit(kind), _)) = decision
    {
        // PLANTED BUG ack-before-commit: the answer goes out with the transaction still open;
        // the web framework commits it after writing the response.
        return Answer::Success(kind);
    }
    finish(env, decision).await
}

/// Records the receipt inside the open transaction. `Ok(None)` means the event is new and must be
/// applied; `Ok(Some(decision))` settles the delivery (a duplicate, or a conflicting reuse).
async fn record_receipt(
    env: &dyn Env,
    event: &WebhookEvent,
    digest: &str,
    delivery: &WebhookDelivery,
    planted_bug: Option<PlantedBug>,
) -> Result<Option<Decision>, DbError> {
    let now_ms = env.now_ms();
    if planted_bug == Some(PlantedBug::NoReceiptDedup) {
        // PLANTED BUG no-receipt-dedup: every delivery is recorded and processed.
        env.execute(
            "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES (?1, ?2, ?3, ?4)",
            &[text(&event.account), text(&event.id), int(now_ms), text(digest)],
        )
        .await?;
        return Ok(None);
    }
    if planted_bug == Some(PlantedBug::PerDeliveryDedupKey) {
        // PLANTED BUG per-delivery-dedup-key: the attempt's timestamp makes every retry "new".
        let delivery_id = format!("{}@{}", delivery.headers.id, delivery.headers.timestamp);
        let inserted = env
            .execute(
                "INSERT INTO receipts (account, event_id, received_ms, body_digest, delivery_id) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (account, delivery_id) DO NOTHING",
                &[
                    text(&event.account),
                    text(&event.id),
                    int(now_ms),
                    text(digest),
                    text(&delivery_id),
                ],
            )
            .await?;
        return Ok((inserted == 0).then_some(Decision::Commit(SuccessKind::Duplicate)));
    }
    let inserted = env
        .execute(
            "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (account, event_id) DO NOTHING",
            &[text(&event.account), text(&event.id), int(now_ms), text(digest)],
        )
        .await?;
    if inserted == 1 {
        return Ok(None);
    }
    duplicate_or_conflict(env, event, digest).await.map(Some)
}

/// An existing receipt: a duplicate if the body is the same, a conflict if it is not.
async fn duplicate_or_conflict(
    env: &dyn Env,
    event: &WebhookEvent,
    digest: &str,
) -> Result<Decision, DbError> {
    let stored = env
        .query(
            "SELECT body_digest FROM receipts WHERE account = ?1 AND event_id = ?2",
            &[text(&event.account), text(&event.id)],
        )
        .await?;
    match stored.first() {
        Some(row) if row.text(0)? != digest => Ok(Decision::Reject(format!(
            "event {} was already received with a different body",
            event.id
        ))),
        _ => Ok(Decision::Commit(SuccessKind::Duplicate)),
    }
}

/// Commits or rolls back the open transaction according to `decision` and answers.
async fn finish(env: &dyn Env, decision: Result<(Decision, Deferred), DbError>) -> Answer {
    match decision {
        Ok((Decision::Commit(kind), deferred)) => match env.execute("COMMIT", &[]).await {
            Ok(_) => match deferred {
                None => Answer::Success(kind),
                Some((key, payload)) => {
                    // PLANTED BUG outbox-on-other-connection: the obligation commits on its own.
                    match insert_obligation(env, &key, &payload, env.now_ms(), false).await {
                        Ok(()) => Answer::Success(kind),
                        Err(error) => Answer::RetryLater(error.to_string()),
                    }
                }
            },
            Err(error) => {
                rollback(env).await;
                Answer::RetryLater(format!("commit failed: {error}"))
            }
        },
        Ok((Decision::Reject(reason), _)) => {
            rollback(env).await;
            Answer::Rejected(reason)
        }
        Err(error) => {
            rollback(env).await;
            Answer::RetryLater(error.to_string())
        }
    }
}

/// Applies a new event to its order inside the open transaction.
async fn apply_event(
    env: &dyn Env,
    event: &WebhookEvent,
    planted_bug: Option<PlantedBug>,
) -> Result<(Decision, Deferred), DbError> {
    let tenants = env
        .query(
            "SELECT tenant FROM accounts WHERE account = ?1",
            &[text(&event.account)],
        )
        .await?;
    let Some(tenant_row) = tenants.first() else {
        return Ok((
            Decision::Reject(format!("unknown account {:?}", event.account)),
            None,
        ));
    };
    let tenant = tenant_row.text(0)?.to_owned();
    // The planted bugs that trust receipts (or their own keys) instead of the order's state drop
    // the status guard.
    let unguarded = matches!(
        planted_bug,
        Some(PlantedBug::NoReceiptDedup | PlantedBug::ReceiptOnlyGuard)
    );
    let now_ms = env.now_ms();
    let order_key = [text(&tenant), text(&event.order)];
    let (sql, extra): (&str, Vec<Value>) = match event.kind.as_str() {
        PAYMENT_SUCCEEDED if unguarded => (
            "UPDATE orders SET status = 'paid', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 RETURNING 1",
            vec![int(now_ms)],
        ),
        // PLANTED BUG key-from-event: "ensure paid", then enqueue work keyed by the event.
        PAYMENT_SUCCEEDED if planted_bug == Some(PlantedBug::KeyFromEvent) => (
            "UPDATE orders SET status = 'paid', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 \
             AND status IN ('awaiting_payment', 'paid') RETURNING 1",
            vec![int(now_ms)],
        ),
        PAYMENT_SUCCEEDED => (
            "UPDATE orders SET status = 'paid', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 \
             AND status = 'awaiting_payment' RETURNING 1",
            vec![int(now_ms)],
        ),
        CHARGE_REFUNDED if unguarded => (
            "UPDATE orders SET status = 'refunded', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 RETURNING 1",
            vec![int(now_ms)],
        ),
        CHARGE_REFUNDED => (
            "UPDATE orders SET status = 'refunded', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 \
             AND status IN ('awaiting_payment', 'paid') RETURNING 1",
            vec![int(now_ms)],
        ),
        ORDER_CANCELLED if unguarded => (
            "UPDATE orders SET status = 'cancelled', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 RETURNING 1",
            vec![int(now_ms)],
        ),
        ORDER_CANCELLED => (
            "UPDATE orders SET status = 'cancelled', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 \
             AND status = 'awaiting_payment' RETURNING 1",
            vec![int(now_ms)],
        ),
        _ if unguarded => (
            "UPDATE orders SET amount_cents = ?3, amount_version_ms = ?4, updated_ms = ?5 \
             WHERE tenant = ?1 AND id = ?2 RETURNING 1",
            vec![
                int(event.amount_cents.unwrap_or(0)),
                int(event.created_ms),
                int(now_ms),
            ],
        ),
        // An update applies only if it is newer than the one that set the amount, so arrival
        // order does not decide the final amount.
        _ => (
            "UPDATE orders SET amount_cents = ?3, amount_version_ms = ?4, updated_ms = ?5 \
             WHERE tenant = ?1 AND id = ?2 AND amount_version_ms < ?4 RETURNING 1",
            vec![
                int(event.amount_cents.unwrap_or(0)),
                int(event.created_ms),
                int(now_ms),
            ],
        ),
    };
    let params: Vec<Value> = order_key.iter().cloned().chain(extra).collect();
    let changed = env.query(sql, &params).await?;
    if changed.is_empty() {
        let existing = env
            .query("SELECT 1 FROM orders WHERE tenant = ?1 AND id = ?2", &order_key)
            .await?;
        if existing.is_empty() {
            return Ok((
                Decision::Reject(format!("unknown order {:?} for tenant {tenant:?}", event.order)),
                None,
            ));
        }
        return Ok((Decision::Commit(SuccessKind::NoTransition), None));
    }
    if event.kind != PAYMENT_SUCCEEDED {
        return Ok((Decision::Commit(SuccessKind::Applied), None));
    }
    let payload = FulfillmentPayload {
        tenant,
        order: event.order.clone(),
        operation: "fulfill".to_owned(),
        version: 1,
        amount_cents: event.amount_cents.unwrap_or(0),
    };
    let key = if planted_bug == Some(PlantedBug::KeyFromEvent) {
        format!("{}/{}/fulfill", event.account, event.id)
    } else {
        payload.operation_key()
    };
    match planted_bug {
        Some(PlantedBug::CallInsideTransaction) => {
            // PLANTED BUG call-inside-transaction: no outbox; the provider is called with the
            // write transaction open.
            let call = ProviderCall {
                request: ProviderRequest::Send {
                    idempotency_key: key,
                    payload: payload.to_json(),
                },
                timeout_ms: 10_000,
            };
            match env.call_provider(&call).await {
                Ok(ProviderReply::Accepted { .. }) => Ok((Decision::Commit(SuccessKind::Applied), None)),
                Ok(other) => Err(DbError::Other(format!("provider answered {other:?}"))),
                Err(error) => Err(DbError::Other(error.to_string())),
            }
        }
        Some(PlantedBug::OutboxOnOtherConnection) => Ok((
            Decision::Commit(SuccessKind::Applied),
            Some((key, payload.to_json())),
        )),
        _ => {
            let unique = planted_bug != Some(PlantedBug::NoReceiptDedup);
            insert_obligation(env, &key, &payload.to_json(), now_ms, unique).await?;
            Ok((Decision::Commit(SuccessKind::Applied), None))
        }
    }
}

/// Inserts an owed obligation. With `unique`, a conflict on the key keeps the first row (the
/// order guard should have made it impossible; keeping the first row is still right).
async fn insert_obligation(
    env: &dyn Env,
    key: &str,
    payload: &str,
    now_ms: i64,
    unique: bool,
) -> Result<(), DbError> {
    let sql = if unique {
        "INSERT INTO outbox (operation_key, payload, status, next_attempt_ms, created_ms) \
         VALUES (?1, ?2, 'pending', ?3, ?3) ON CONFLICT (operation_key) DO NOTHING"
    } else {
        "INSERT INTO outbox (operation_key, payload, status, next_attempt_ms, created_ms) \
         VALUES (?1, ?2, 'pending', ?3, ?3)"
    };
    env.execute(sql, &[text(key), text(payload), int(now_ms)]).await?;
    Ok(())
}

/// Rolls back the open transaction, if any. A failure here means there was nothing to roll back
/// or the connection is gone; either way no state of ours survives.
async fn rollback(env: &dyn Env) {
    let _ = env.execute("ROLLBACK", &[]).await;
}

/// PLANTED BUG receipt-first: the receipt commits on its own, then the work runs in a second
/// transaction. A crash or a busy database between the two leaves a receipt that turns every
/// redelivery into a "duplicate" while the work was never done.
async fn receive_receipt_first(env: &dyn Env, event: &WebhookEvent, digest: &str) -> Answer {
    let inserted = env
        .execute(
            "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (account, event_id) DO NOTHING",
            &[
                text(&event.account),
                text(&event.id),
                int(env.now_ms()),
                text(digest),
            ],
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
    let decision = apply_event(env, event, None).await;
    finish(env, decision).await
}

/// PLANTED BUG check-then-insert: the receipt is looked up before the write transaction, so two
/// concurrent deliveries both see "new" and both insert one (the table has no unique index).
async fn receive_check_then_insert(env: &dyn Env, event: &WebhookEvent, digest: &str) -> Answer {
    let seen = env
        .query(
            "SELECT 1 FROM receipts WHERE account = ?1 AND event_id = ?2 LIMIT 1",
            &[text(&event.account), text(&event.id)],
        )
        .await;
    match seen {
        Ok(rows) if !rows.is_empty() => return Answer::Success(SuccessKind::Duplicate),
        Ok(_) => {}
        Err(error) => return Answer::RetryLater(error.to_string()),
    }
    if let Err(error) = env.execute("BEGIN IMMEDIATE", &[]).await {
        return Answer::RetryLater(format!("could not begin: {error}"));
    }
    let inserted = env
        .execute(
            "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES (?1, ?2, ?3, ?4)",
            &[
                text(&event.account),
                text(&event.id),
                int(env.now_ms()),
                text(digest),
            ],
        )
        .await;
    let decision = match inserted {
        Ok(_) => apply_event(env, event, None).await,
        Err(error) => Err(error),
    };
    finish(env, decision).await
}

/// PLANTED BUG receipt-after: the order and the outbox commit first; the receipt follows in a
/// second transaction, so for a while (or, after a crash, for good) the work exists without the
/// receipt that should have committed with it.
async fn receive_receipt_after(env: &dyn Env, event: &WebhookEvent, digest: &str) -> Answer {
    if let Err(error) = env.execute("BEGIN IMMEDIATE", &[]).await {
        return Answer::RetryLater(format!("could not begin: {error}"));
    }
    let seen = env
        .query(
            "SELECT 1 FROM receipts WHERE account = ?1 AND event_id = ?2",
            &[text(&event.account), text(&event.id)],
        )
        .await;
    let decision = match seen {
        Ok(rows) if !rows.is_empty() => Ok((Decision::Commit(SuccessKind::Duplicate), None)),
        Ok(_) => apply_event(env, event, None).await,
        Err(error) => Err(error),
    };
    let answer = finish(env, decision).await;
    if answer != Answer::Success(SuccessKind::Applied) && answer != Answer::Success(SuccessKind::NoTransition)
    {
        return answer;
    }
    let recorded = env
        .execute(
            "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (account, event_id) DO NOTHING",
            &[
                text(&event.account),
                text(&event.id),
                int(env.now_ms()),
                text(digest),
            ],
        )
        .await;
    match recorded {
        Ok(_) => answer,
        Err(error) => Answer::RetryLater(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_validated() {
        let body = |kind: &str, amount: &str| {
            format!(r#"{{"id":"e","type":"{kind}","account":"a","order":"o","created_ms":5{amount}}}"#)
        };
        assert!(WebhookEvent::parse(&body(PAYMENT_SUCCEEDED, ",\"amount_cents\":100")).is_ok());
        assert!(
            WebhookEvent::parse(&body(PAYMENT_SUCCEEDED, ""))
                .unwrap_err()
                .contains("amount")
        );
        assert!(WebhookEvent::parse(&body(CHARGE_REFUNDED, "")).is_ok());
        assert!(
            WebhookEvent::parse(&body("invoice.paid", ""))
                .unwrap_err()
                .contains("unsupported")
        );
        assert!(WebhookEvent::parse("{").unwrap_err().contains("malformed"));
    }

    #[test]
    fn digests_tell_bodies_apart() {
        assert_eq!(body_digest(b"a"), body_digest(b"a"));
        assert_ne!(body_digest(b"a"), body_digest(b"b"));
        assert_eq!(body_digest(b"a").len(), 32);
        // The first 16 bytes of SHA-256("abc"), in lowercase hex.
        assert_eq!(body_digest(b"abc"), "ba7816bf8f01cfea414140de5dae2223");
    }
}
