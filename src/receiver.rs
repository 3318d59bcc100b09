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
//! The receiver is written as named steps, the default methods of [`ReceiverSteps`]: authenticate
//! the delivery, record the receipt, apply the transition, enqueue the obligation, commit and
//! answer. [`receive`] runs them as they are; [`receive_with`] runs a variant that overrides some
//! of them, so that a variant reads as a small change against this module.
//!
//! Everything but the payments transition is the webhook pattern, the same in any business:
//! [`receive_business`] runs it around a team's own [`Business`] step (how its bodies read, what
//! a new event does to its state and which obligations it owes), over the receipt and outbox
//! tables a system declares ([`crate::tables`]).
//!
//! The receiver must not call the provider (that is the relay's job, outside any transaction) and
//! must not answer success for work that has not committed.

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::env::{DbError, Env, Value, int, text};
use crate::provider::FulfillmentPayload;
use crate::reference::Reference;
use crate::signature::{self, SigningSecret, VerifyError, WebhookHeaders};
use crate::tables::Tables;

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
    Reference.authenticate(env, delivery)
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
    /// Any other status a handler answers with (500, 409, 429, ...), and why. The reference never
    /// uses it; a team's own handler may. A 2xx status here is a success without a kind.
    Other { status: u16, reason: String },
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
            Answer::Other { status, .. } => *status,
        }
    }

    /// A 2xx, read from the status as a sender reads it, so that the status an answer is sent
    /// with is what the simulated sender acts on.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status())
    }

    /// A 4xx: the delivery will never succeed as it is, so retrying it is pointless. The 4xx
    /// statuses that ask for a later try (408 timeout, 409 conflict, 425 too early, 429 too many
    /// requests) are not permanent.
    pub fn is_permanent_failure(&self) -> bool {
        let status = self.status();
        (400..500).contains(&status) && !matches!(status, 408 | 409 | 425 | 429)
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
            Answer::Other { status, reason } => write!(f, "{status} {reason}"),
        }
    }
}

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

/// A delivery that got through the door, with what the steps after it need.
#[derive(Debug, Clone)]
pub struct Incoming<'a> {
    pub delivery: &'a WebhookDelivery,
    /// The event the body holds.
    pub event: WebhookEvent,
    /// [`body_digest`] of the raw body, stored with the receipt.
    pub digest: String,
}

/// What recording the receipt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The event is new: the transaction is open and the event is to be applied in it.
    New,
    /// The transaction is open and the delivery is settled without applying anything (a
    /// duplicate, or an event id reused with another body).
    Seen(Decision),
    /// No transaction is open (it could not begin, or was never needed): this is the answer.
    Answered(Answer),
}

/// What the open transaction is to do at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Commit, then answer this kind of success.
    Commit(SuccessKind),
    /// Roll back and reject the delivery for this reason.
    Reject(String),
}

/// What applying the event to its order did, inside the open transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The order moved. `tenant` owns it; `now_ms` is the time the transition stamped, which the
    /// obligation it creates (if any) carries too.
    Moved { tenant: String, now_ms: i64 },
    /// The order did not move: no transition was due, or the event names an unknown account or
    /// order.
    Settled(Decision),
}

/// Work owed to the provider, as the receiver enqueues it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obligation {
    /// The business operation's key (the reference's: [`FulfillmentPayload::operation_key`]),
    /// never the event's, so that every event about one operation meets the same row.
    pub operation_key: String,
    /// The request body as the business writes it (the reference's: the
    /// [`FulfillmentPayload`] as JSON), sent as it is on every attempt.
    pub payload: String,
    /// When it became owed: the time of the transaction that created it.
    pub created_ms: i64,
}

/// Everything the transaction did, decided before COMMIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    /// The obligation this delivery created, which [`ReceiverSteps::enqueue_obligation`] was
    /// given inside the transaction.
    pub obligation: Option<Obligation>,
}

/// Handles one delivery with the reference's steps.
pub async fn receive(env: &dyn Env, delivery: &WebhookDelivery) -> Answer {
    receive_with(&Reference, env, delivery).await
}

/// Handles one delivery with `steps`: authenticate, record the receipt, apply the event, commit
/// and answer.
pub async fn receive_with<S: ReceiverSteps>(steps: &S, env: &dyn Env, delivery: &WebhookDelivery) -> Answer {
    let event = match steps.authenticate(env, delivery) {
        Ok(event) => event,
        Err(answer) => return answer,
    };
    let incoming = Incoming {
        delivery,
        digest: body_digest(&delivery.body),
        event,
    };
    let outcome = match steps.record_receipt(env, &incoming).await {
        Ok(Recorded::New) => apply_event(steps, env, &incoming.event).await,
        Ok(Recorded::Seen(decision)) => Ok(Outcome {
            decision,
            obligation: None,
        }),
        Ok(Recorded::Answered(answer)) => return answer,
        Err(error) => Err(error),
    };
    steps.commit_and_answer(env, &incoming, outcome).await
}

/// Applies a new event to its order inside the open transaction and, for a payment that moved
/// the order, enqueues the obligation it creates.
async fn apply_event<S: ReceiverSteps>(
    steps: &S,
    env: &dyn Env,
    event: &WebhookEvent,
) -> Result<Outcome, DbError> {
    let (tenant, now_ms) = match steps.apply_transition(env, event).await? {
        Transition::Moved { tenant, now_ms } => (tenant, now_ms),
        Transition::Settled(decision) => {
            return Ok(Outcome {
                decision,
                obligation: None,
            });
        }
    };
    let applied = Decision::Commit(SuccessKind::Applied);
    if event.kind != PAYMENT_SUCCEEDED {
        return Ok(Outcome {
            decision: applied,
            obligation: None,
        });
    }
    let payload = FulfillmentPayload {
        tenant,
        order: event.order.clone(),
        operation: "fulfill".to_owned(),
        version: 1,
        amount_cents: event.amount_cents.unwrap_or(0),
    };
    let obligation = Obligation {
        operation_key: steps.operation_key(event, &payload),
        payload: payload.to_json(),
        created_ms: now_ms,
    };
    steps.enqueue_obligation(env, &obligation).await?;
    Ok(Outcome {
        decision: applied,
        obligation: Some(obligation),
    })
}

/// The receiver's steps, in the order [`receive_with`] runs them. Every default method is the
/// reference; a variant overrides the steps it changes, and may call a step on
/// [`Reference`] for the reference's behaviour around its change.
// The futures run on the one thread of their `Env` (which is not `Send` either), so the
// auto-trait bounds `async fn` in a public trait cannot express are never needed.
#[allow(async_fn_in_trait)]
pub trait ReceiverSteps {
    /// Where the receipts and obligations live, and the pattern's statements over them: the
    /// reference's `receipts` and `outbox` unless overridden.
    fn receiver_tables(&self) -> &Tables {
        Tables::reference()
    }

    /// The door: see [`authenticate`]. Runs no statement.
    fn authenticate(&self, env: &dyn Env, delivery: &WebhookDelivery) -> Result<WebhookEvent, Answer> {
        verify_body(self, env, delivery)?;
        let event = WebhookEvent::parse_bytes(&delivery.body).map_err(Answer::Rejected)?;
        endpoint_owns(delivery, &event.account)?;
        Ok(event)
    }

    /// Part of the door: the signature verifies against one of the endpoint's secrets, and its
    /// timestamp is within the tolerance of `now_s` either way (the sender's clock may run a
    /// little ahead of this one as well as behind).
    fn verify_signature(
        &self,
        delivery: &WebhookDelivery,
        settings: &ReceiverSettings,
        now_s: i64,
    ) -> Result<(), Answer> {
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
        })
    }

    /// Begins the write transaction and records the receipt in it. A known event is a duplicate
    /// if its body is the same and a conflict if it is not; either way nothing is applied.
    async fn record_receipt(&self, env: &dyn Env, incoming: &Incoming<'_>) -> Result<Recorded, DbError> {
        if let Err(answer) = begin(env).await {
            return Ok(Recorded::Answered(answer));
        }
        let (account, event_id) = (&incoming.event.account, &incoming.event.id);
        let tables = self.receiver_tables();
        if tables
            .insert_receipt(env, account, event_id, &incoming.digest)
            .await?
        {
            return Ok(Recorded::New);
        }
        seen_before(env, tables, account, event_id, &incoming.digest)
            .await
            .map(Recorded::Seen)
    }

    /// Applies the event to its order through the statement of [`Self::transition_statement`],
    /// inside the open transaction, after finding the tenant the account may touch.
    async fn apply_transition(&self, env: &dyn Env, event: &WebhookEvent) -> Result<Transition, DbError> {
        let tenants = env
            .query(
                "SELECT tenant FROM accounts WHERE account = ?1",
                &[text(&event.account)],
            )
            .await?;
        let Some(tenant_row) = tenants.first() else {
            let unknown = format!("unknown account {:?}", event.account);
            return Ok(Transition::Settled(Decision::Reject(unknown)));
        };
        let tenant = tenant_row.text(0)?.to_owned();
        let now_ms = env.now_ms();
        let order_key = [text(&tenant), text(&event.order)];
        let extra = match event.kind.as_str() {
            PAYMENT_SUCCEEDED | CHARGE_REFUNDED | ORDER_CANCELLED => vec![int(now_ms)],
            _ => vec![
                int(event.amount_cents.unwrap_or(0)),
                int(event.created_ms),
                int(now_ms),
            ],
        };
        let params: Vec<Value> = order_key.iter().cloned().chain(extra).collect();
        let changed = env.query(self.transition_statement(&event.kind), &params).await?;
        if !changed.is_empty() {
            return Ok(Transition::Moved { tenant, now_ms });
        }
        let existing = env
            .query("SELECT 1 FROM orders WHERE tenant = ?1 AND id = ?2", &order_key)
            .await?;
        if existing.is_empty() {
            let unknown = format!("unknown order {:?} for tenant {tenant:?}", event.order);
            return Ok(Transition::Settled(Decision::Reject(unknown)));
        }
        Ok(Transition::Settled(Decision::Commit(SuccessKind::NoTransition)))
    }

    /// The guarded `UPDATE ... RETURNING 1` that applies an event of `kind` to its order. Its
    /// parameters are the tenant, the order and the time, or, for `order.updated`, the tenant,
    /// the order, the amount, the update's creation time and the time. The guard (the order's
    /// status, the amount's version) is what keeps a second obligation out once receipts are
    /// purged.
    fn transition_statement(&self, kind: &str) -> &'static str {
        match kind {
            PAYMENT_SUCCEEDED => {
                "UPDATE orders SET status = 'paid', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 \
                 AND status = 'awaiting_payment' RETURNING 1"
            }
            CHARGE_REFUNDED => {
                "UPDATE orders SET status = 'refunded', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 \
                 AND status IN ('awaiting_payment', 'paid') RETURNING 1"
            }
            ORDER_CANCELLED => {
                "UPDATE orders SET status = 'cancelled', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 \
                 AND status = 'awaiting_payment' RETURNING 1"
            }
            // An update applies only if it is newer than the one that set the amount, so arrival
            // order does not decide the final amount.
            _ => {
                "UPDATE orders SET amount_cents = ?3, amount_version_ms = ?4, updated_ms = ?5 \
                 WHERE tenant = ?1 AND id = ?2 AND amount_version_ms < ?4 RETURNING 1"
            }
        }
    }

    /// The key the obligation for `payload` is stored and sent under: the business operation's,
    /// so that every event about one operation (twins, redeliveries) meets the same row.
    fn operation_key(&self, event: &WebhookEvent, payload: &FulfillmentPayload) -> String {
        let _ = event;
        payload.operation_key()
    }

    /// Inserts the owed obligation inside the open transaction. A conflict on the key keeps the
    /// first row (the order guard should have made it impossible; keeping the first row is still
    /// right).
    async fn enqueue_obligation(&self, env: &dyn Env, obligation: &Obligation) -> Result<(), DbError> {
        self.receiver_tables()
            .enqueue(
                env,
                &obligation.operation_key,
                &obligation.payload,
                obligation.created_ms,
            )
            .await
    }

    /// Commits or rolls back the open transaction as `outcome` says, and answers: success only
    /// once COMMIT has returned.
    async fn commit_and_answer(
        &self,
        env: &dyn Env,
        incoming: &Incoming<'_>,
        outcome: Result<Outcome, DbError>,
    ) -> Answer {
        let _ = incoming;
        end_transaction(env, outcome.map(|outcome| outcome.decision)).await
    }
}

/// The first part of the door, before the body is read: it fits the endpoint's size limit, and
/// `steps`' signature check passes against the endpoint's secrets within the tolerance. Runs no
/// statement.
fn verify_body<S: ReceiverSteps + ?Sized>(
    steps: &S,
    env: &dyn Env,
    delivery: &WebhookDelivery,
) -> Result<(), Answer> {
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
    steps.verify_signature(delivery, &settings, now_s)
}

/// The last part of the door: a verified event may only name the account of the endpoint it was
/// posted to (the body is the sender's to write, the endpoint's secret is not).
fn endpoint_owns(delivery: &WebhookDelivery, account: &str) -> Result<(), Answer> {
    if account == delivery.endpoint {
        return Ok(());
    }
    Err(Answer::Forbidden(format!(
        "event names account {account:?} but was posted to the endpoint of account {:?}",
        delivery.endpoint
    )))
}

/// Commits or rolls back the open transaction as `decision` says, and answers: success only
/// once COMMIT has returned, a retry for anything that failed, a 422 for a rejection.
pub async fn end_transaction(env: &dyn Env, decision: Result<Decision, DbError>) -> Answer {
    let decision = match decision {
        Ok(decision) => decision,
        Err(error) => {
            rollback(env).await;
            return Answer::RetryLater(error.to_string());
        }
    };
    match decision {
        Decision::Commit(kind) => match env.execute("COMMIT", &[]).await {
            Ok(_) => Answer::Success(kind),
            Err(error) => {
                rollback(env).await;
                Answer::RetryLater(format!("commit failed: {error}"))
            }
        },
        Decision::Reject(reason) => {
            rollback(env).await;
            Answer::Rejected(reason)
        }
    }
}

/// A business's own step, which the pattern's receiver ([`receive_business`]) runs: how a
/// verified body reads, and what a new event does inside its receipt's transaction. Everything
/// around it is the pattern's: the door (size, signature, the endpoint's account), the receipt
/// and what a known event id means, the obligations' insert, the commit and the answer.
// The futures run on the one thread of their `Env`, as the step traits' do.
#[allow(async_fn_in_trait)]
pub trait Business {
    /// A verified event, as the step reads it.
    type Event;

    /// Reads and validates a verified body. An `Err` says why it is not an event this business
    /// takes: the delivery is refused with a 422 and nothing is written.
    fn parse(&self, body: &[u8]) -> Result<Self::Event, String>;

    /// The account the event names (which must be its endpoint's) and its id within that
    /// account: the key of its receipt.
    fn identity<'a>(&self, event: &'a Self::Event) -> (&'a str, &'a str);

    /// Applies a new event inside the open transaction, after its receipt was written: moves
    /// the business state with guarded statements (so a late or repeated event finds nothing to
    /// move) and says which obligations the move owes. Call the provider never; return what is
    /// owed, and the pattern writes it in the same transaction.
    async fn apply(&self, env: &dyn Env, event: &Self::Event) -> Result<Applied, DbError>;
}

/// What a business step made of a new event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The event was taken: its receipt commits with the obligations it `owes` (an event may owe
    /// work whether or not it moved the state, as a superseded commit still owes its check), and
    /// the answer is a 2xx. `moved` says whether the state changed, which the trace shows.
    Taken {
        /// Whether the business state changed.
        moved: bool,
        /// The obligations the event owes, written in the receipt's transaction.
        owes: Vec<Obligation>,
    },
    /// The event can never be applied (an account or an entity that does not exist): nothing
    /// commits, and the answer is a 422 with this reason.
    Refused(String),
}

impl Applied {
    /// The state moved and owes `owes` (perhaps nothing).
    pub fn moved(owes: Vec<Obligation>) -> Applied {
        Applied::Taken { moved: true, owes }
    }

    /// Nothing changed and nothing is owed (an older update, a state that is final).
    pub fn unchanged() -> Applied {
        Applied::Taken {
            moved: false,
            owes: Vec::new(),
        }
    }
}

/// Handles one delivery with the pattern's receiver around `business`'s step, over `tables`:
/// verify the delivery, read its event, then in one `BEGIN IMMEDIATE` transaction record the
/// receipt (a known event id is a duplicate, answered 2xx with nothing applied, or, with another
/// body where the receipts keep a digest, refused), apply the event, write the obligations it
/// owes, COMMIT, and answer success only once COMMIT returned.
pub async fn receive_business<B: Business>(
    business: &B,
    tables: &Tables,
    env: &dyn Env,
    delivery: &WebhookDelivery,
) -> Answer {
    if let Err(answer) = verify_body(&Reference, env, delivery) {
        return answer;
    }
    let event = match business.parse(&delivery.body) {
        Ok(event) => event,
        Err(why) => return Answer::Rejected(why),
    };
    let (account, event_id) = business.identity(&event);
    if let Err(answer) = endpoint_owns(delivery, account) {
        return answer;
    }
    let digest = body_digest(&delivery.body);
    if let Err(answer) = begin(env).await {
        return answer;
    }
    let decision = async {
        if !tables.insert_receipt(env, account, event_id, &digest).await? {
            return seen_before(env, tables, account, event_id, &digest).await;
        }
        Ok(match business.apply(env, &event).await? {
            Applied::Taken { moved, owes } => {
                for obligation in &owes {
                    tables
                        .enqueue(
                            env,
                            &obligation.operation_key,
                            &obligation.payload,
                            obligation.created_ms,
                        )
                        .await?;
                }
                Decision::Commit(if moved {
                    SuccessKind::Applied
                } else {
                    SuccessKind::NoTransition
                })
            }
            Applied::Refused(reason) => Decision::Reject(reason),
        })
    }
    .await;
    end_transaction(env, decision).await
}

impl ReceiverSteps for Reference {}

/// Begins the write transaction. `IMMEDIATE` takes the write lock now, so two deliveries of one
/// event queue here rather than both reading before either writes. The `Err` is the answer to
/// give when the database is busy or gone.
pub async fn begin(env: &dyn Env) -> Result<(), Answer> {
    match env.execute("BEGIN IMMEDIATE", &[]).await {
        Ok(_) => Ok(()),
        Err(error) => Err(Answer::RetryLater(format!("could not begin: {error}"))),
    }
}

/// Inserts the receipt of `incoming`'s event into the reference's `receipts` unless the event
/// already has one, and returns whether it was new. See [`Tables::insert_receipt`] for receipts
/// of one's own.
pub async fn insert_receipt(env: &dyn Env, incoming: &Incoming<'_>) -> Result<bool, DbError> {
    let event = &incoming.event;
    Tables::reference()
        .insert_receipt(env, &event.account, &event.id, &incoming.digest)
        .await
}

/// An event whose receipt exists: a duplicate if its body is the same (or the receipts keep no
/// digest), a conflict if it is not.
async fn seen_before(
    env: &dyn Env,
    tables: &Tables,
    account: &str,
    event_id: &str,
    digest: &str,
) -> Result<Decision, DbError> {
    if tables
        .receipt_digest_differs(env, account, event_id, digest)
        .await?
    {
        return Ok(Decision::Reject(format!(
            "event {event_id} was already received with a different body"
        )));
    }
    Ok(Decision::Commit(SuccessKind::Duplicate))
}

/// Rolls back the open transaction, if any. A failure here means there was nothing to roll back
/// or the connection is gone; either way no state of ours survives.
async fn rollback(env: &dyn Env) {
    let _ = env.execute("ROLLBACK", &[]).await;
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
    fn the_default_body_limit_is_the_documented_64_kib() {
        // The simulation cannot tell a smaller limit apart: genuine events are a few hundred
        // bytes and the oversized attack pads past whatever this constant says. A sender's
        // larger genuine events (long notes, many line items) would meet a smaller limit as 413s.
        assert_eq!(DEFAULT_BODY_BYTES_MAX, 65_536);
    }

    #[test]
    fn digests_tell_bodies_apart() {
        assert_eq!(body_digest(b"a"), body_digest(b"a"));
        assert_ne!(body_digest(b"a"), body_digest(b"b"));
        assert_eq!(body_digest(b"a").len(), 32);
        // The first 16 bytes of SHA-256("abc"), in lowercase hex.
        assert_eq!(body_digest(b"abc"), "ba7816bf8f01cfea414140de5dae2223");
    }

    #[test]
    fn any_status_reads_as_real_senders_read_it() {
        let other = |status| Answer::Other {
            status,
            reason: "handler said so".to_owned(),
        };
        assert!(other(204).is_success() && !other(204).is_permanent_failure());
        assert!(!other(500).is_success() && !other(500).is_permanent_failure());
        assert!(!other(429).is_permanent_failure() && !other(409).is_permanent_failure());
        assert!(other(400).is_permanent_failure() && !other(400).is_refused_at_the_door());
        assert_eq!(other(500).to_string(), "500 handler said so");
        let reason = || "why".to_owned();
        for (answer, status, permanent, at_the_door) in [
            (Answer::Success(SuccessKind::Applied), 200, false, false),
            (Answer::RetryLater(reason()), 503, false, false),
            (Answer::Rejected(reason()), 422, true, false),
            (Answer::Unauthorized(reason()), 401, true, true),
            (Answer::Forbidden(reason()), 403, true, true),
            (Answer::TooLarge(reason()), 413, true, true),
        ] {
            assert_eq!(answer.status(), status, "{answer}");
            assert_eq!(answer.is_success(), status == 200, "{answer}");
            assert_eq!(answer.is_permanent_failure(), permanent, "{answer}");
            assert_eq!(answer.is_refused_at_the_door(), at_the_door, "{answer}");
            assert!(answer.to_string().starts_with(&status.to_string()), "{answer}");
        }
    }
}
