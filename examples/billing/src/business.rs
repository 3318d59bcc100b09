//! The billing receiver's business step: what one verified provider event does to a subscription
//! inside its receipt's transaction, and which provisioning operations it owes.
//!
//! Everything around it is the pattern's (`receive_business`): the door (size, signature, the
//! endpoint's account), the receipt and what a known event id means, the insert of the owed
//! obligations into the outbox, COMMIT and the answer. The step reads the subscription's row,
//! folds the event into it ([`fold`], a pure function of the row and the event), writes it back,
//! and returns what the event owes. It decides by creation time and plan version only, never by
//! arrival, so a late, repeated or reordered event moves nothing it should not.
//!
//! It must never call the provider (the relay does, from the outbox), never keep state outside the
//! database between deliveries, and never commit or roll back itself: the transaction is the
//! pattern's. [`Rules`] holds the decisions the planted bugs get wrong (the plan-version guard,
//! when `restore-access` is owed, how a delivery is received), with the correct ones as defaults.

use std::rc::Rc;
use std::sync::Arc;

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, Value, int, text};
use commitgap_sim::commitgap::receiver::{
    Answer, Applied, Business, NAME_CHARS_MAX, Obligation, WebhookDelivery, receive_business,
};
use commitgap_sim::serde_json::{self, Value as Json};

use crate::domain::{
    self, ACTIVE, CANCELED, DELETED, Operation, PAID, PAST_DUE, PAYMENT_FAILED, PLAN_VERSION_MAX, SEATS_MAX,
    UPDATED,
};

/// A verified provider event, as the step reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BillingEvent {
    /// The provider's event id, unique within the account.
    pub id: String,
    /// The sender account the event names (the pattern checks it is the endpoint's).
    pub account: String,
    /// The subscription the event is about, within the account's customer.
    pub subscription: String,
    /// When the provider created the event: what orders the facts.
    pub created_ms: i64,
    /// What the event reports.
    pub what: What,
}

/// What a billing event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// `customer.subscription.updated`: a plan version and its seats.
    Updated {
        /// Grows with creation time at the provider.
        plan_version: i64,
        /// The seats the plan version carries.
        seats: i64,
    },
    /// `invoice.payment_failed`.
    PaymentFailed,
    /// `invoice.paid`.
    Paid,
    /// `customer.subscription.deleted`.
    Deleted,
}

/// A subscription's row as the receiver keeps it: the state it is judged on, and what the
/// receiver remembers to decide later events by creation time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// `active`, `past_due` or `canceled`.
    pub status: String,
    /// The highest plan version applied (0 for the plan the subscription started with).
    pub plan_version: i64,
    /// That plan version's seats.
    pub seats: i64,
    /// The newest invoice event applied, as `created_ms * 2`, plus 1 for a payment (so that a
    /// payment wins a tie); -1 before any.
    pub invoice_rank: i64,
    /// The creation time of the earliest failed invoice reported.
    pub first_failed_ms: Option<i64>,
    /// The creation time of the latest paid invoice reported.
    pub last_paid_ms: Option<i64>,
}

impl Subscription {
    /// Whether some failed invoice is followed in creation order by a paid one: what owes
    /// `restore-access`, whatever order the two arrived in.
    pub fn failure_then_payment(&self) -> bool {
        match (self.first_failed_ms, self.last_paid_ms) {
            (Some(failed_ms), Some(paid_ms)) => failed_ms < paid_ms,
            _ => false,
        }
    }

    /// Takes an invoice event of `rank` if it is newer than the one applied; a canceled
    /// subscription keeps its status.
    fn take_invoice_event(&mut self, rank: i64, status: &str) {
        if rank > self.invoice_rank {
            self.invoice_rank = rank;
            if self.status != CANCELED {
                status.clone_into(&mut self.status);
            }
        }
    }

    /// The row of `(customer, subscription)`, if the subscription exists.
    pub async fn read(
        env: &dyn Env,
        customer: &str,
        subscription: &str,
    ) -> Result<Option<Subscription>, DbError> {
        // One row at most: (customer, sub_id) is the primary key.
        let rows = env
            .query(
                "SELECT status, plan_version, seats, invoice_rank, first_failed_ms, last_paid_ms \
                 FROM subscriptions WHERE customer = ?1 AND sub_id = ?2",
                &[text(customer), text(subscription)],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        Ok(Some(Subscription {
            status: row.text(0)?.to_owned(),
            plan_version: row.int(1)?,
            seats: row.int(2)?,
            invoice_rank: row.int(3)?,
            first_failed_ms: row.opt_int(4)?,
            last_paid_ms: row.opt_int(5)?,
        }))
    }

    /// Writes this row over `(customer, subscription)`'s.
    pub async fn write(&self, env: &dyn Env, customer: &str, subscription: &str) -> Result<(), DbError> {
        let optional = |value: Option<i64>| value.map_or(Value::Null, int);
        env.execute(
            "UPDATE subscriptions SET status = ?3, plan_version = ?4, seats = ?5, invoice_rank = ?6, \
             first_failed_ms = ?7, last_paid_ms = ?8 WHERE customer = ?1 AND sub_id = ?2",
            &[
                text(customer),
                text(subscription),
                text(&self.status),
                int(self.plan_version),
                int(self.seats),
                int(self.invoice_rank),
                optional(self.first_failed_ms),
                optional(self.last_paid_ms),
            ],
        )
        .await?;
        Ok(())
    }
}

/// The decisions a team could get wrong, with the right ones as defaults; the planted bugs
/// (`crate::planted`) override one each. Implementations are plain configuration, shared by
/// every sweep thread.
pub trait Rules: Send + Sync + 'static {
    /// The system's name, as `--system` takes it.
    fn name(&self) -> &'static str;

    /// One line saying what the system is.
    fn description(&self) -> &'static str;

    /// Whether an update reporting plan version `reported` replaces the applied `current`. Only
    /// a newer (higher) one does: an older version that arrives late changes nothing.
    fn plan_replaces(&self, current: i64, reported: i64) -> bool {
        reported > current
    }

    /// Whether the invoice event `what`, which moved the row from `before` to `after`, owes
    /// `restore-access`: whenever, after it, a failure is followed by a payment in creation
    /// order, however the two arrived. Owing it again is harmless, since the outbox keeps the
    /// first obligation of an operation.
    fn owes_restore(&self, before: &Subscription, after: &Subscription, what: What) -> bool {
        let _ = (before, what);
        after.failure_then_payment()
    }

    /// Answers one delivery: the pattern's receiver around [`Billing`], over the declared tables.
    fn receive(
        self: Arc<Self>,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer>
    where
        Self: Sized,
    {
        Box::pin(async move {
            let billing = Billing { rules: self };
            receive_business(&billing, crate::system::tables(), &*env, &delivery).await
        })
    }
}

/// One event folded into a subscription's row, by the `rules`.
pub fn fold<R: Rules + ?Sized>(rules: &R, before: &Subscription, event: &BillingEvent) -> Subscription {
    let mut after = before.clone();
    // Twice the creation time, plus one for a payment: a payment wins a tie.
    let rank = event.created_ms.saturating_mul(2);
    match event.what {
        What::Updated { plan_version, seats } => {
            if rules.plan_replaces(before.plan_version, plan_version) {
                after.plan_version = plan_version;
                after.seats = seats;
            }
        }
        What::PaymentFailed => {
            let first = before
                .first_failed_ms
                .map_or(event.created_ms, |ms| ms.min(event.created_ms));
            after.first_failed_ms = Some(first);
            after.take_invoice_event(rank, PAST_DUE);
        }
        What::Paid => {
            let last = before
                .last_paid_ms
                .map_or(event.created_ms, |ms| ms.max(event.created_ms));
            after.last_paid_ms = Some(last);
            after.take_invoice_event(rank.saturating_add(1), ACTIVE);
        }
        What::Deleted => CANCELED.clone_into(&mut after.status),
    }
    after
}

/// The operations `event` owes, having moved `(customer, subscription)` from `before` to
/// `after`. A plan version and a deletion owe theirs whether or not they moved anything (a late
/// version still owes its set-seats, a repeated deletion meets the first one's obligation).
pub fn owed<R: Rules + ?Sized>(
    rules: &R,
    (customer, subscription): (&str, &str),
    (before, after): (&Subscription, &Subscription),
    what: What,
) -> Vec<Operation> {
    match what {
        What::Updated { plan_version, seats } => {
            vec![domain::set_seats(customer, subscription, plan_version, seats)]
        }
        What::Deleted => vec![domain::deprovision(customer, subscription)],
        What::PaymentFailed | What::Paid => {
            let restore = rules.owes_restore(before, after, what);
            restore
                .then(|| domain::restore_access(customer, subscription))
                .into_iter()
                .collect()
        }
    }
}

/// The billing business step, run by `receive_business` (see the module documentation).
#[derive(Debug)]
pub struct Billing<R> {
    /// The decisions it makes.
    pub rules: Arc<R>,
}

/// The customer the sender account `account` bills for, if it is one.
pub async fn customer_of(env: &dyn Env, account: &str) -> Result<Option<String>, DbError> {
    // One row at most: the account is the primary key.
    let rows = env
        .query(
            "SELECT customer FROM customers WHERE sender_account = ?1",
            &[text(account)],
        )
        .await?;
    rows.first().map(|row| row.text(0).map(str::to_owned)).transpose()
}

/// A name field: present, 1 to 128 characters, no control characters.
fn name(json: &Json, field: &str) -> Result<String, String> {
    let value = json[field].as_str().ok_or(format!("{field} is missing"))?;
    let length = value.chars().count();
    if length == 0 || length > NAME_CHARS_MAX || value.chars().any(char::is_control) {
        return Err(format!(
            "{field} must be 1 to {NAME_CHARS_MAX} characters with no control character"
        ));
    }
    Ok(value.to_owned())
}

/// A whole-number field within `least..=most`.
fn bounded(json: &Json, field: &str, least: i64, most: i64) -> Result<i64, String> {
    let value = json[field]
        .as_i64()
        .filter(|value| (least..=most).contains(value));
    value.ok_or(format!("{field} must be a whole number from {least} to {most}"))
}

/// Reads and validates a verified body: one of the four types taken, with valid names and times.
pub fn parse_event(body: &[u8]) -> Result<BillingEvent, String> {
    let json: Json = serde_json::from_slice(body).map_err(|error| format!("malformed body: {error}"))?;
    let wire = json["type"].as_str().ok_or("type is missing")?;
    // Unknown types are refused (422), not acknowledged: this endpoint subscribes to four.
    let kind = domain::kind_of(wire).ok_or(format!("unsupported type {wire:?}"))?;
    let created_ms = json["created_ms"]
        .as_i64()
        .filter(|ms| *ms >= 0)
        .ok_or("created_ms must be a time")?;
    let what = match kind {
        UPDATED => What::Updated {
            plan_version: bounded(&json, "plan_version", 1, PLAN_VERSION_MAX)?,
            seats: bounded(&json, "seats", 1, SEATS_MAX)?,
        },
        PAYMENT_FAILED => What::PaymentFailed,
        PAID => What::Paid,
        DELETED => What::Deleted,
        other => return Err(format!("unsupported kind {other}")),
    };
    Ok(BillingEvent {
        id: name(&json, "id")?,
        account: name(&json, "account")?,
        subscription: name(&json, "subscription")?,
        created_ms,
        what,
    })
}

impl<R: Rules> Business for Billing<R> {
    type Event = BillingEvent;

    fn parse(&self, body: &[u8]) -> Result<BillingEvent, String> {
        parse_event(body)
    }

    fn identity<'a>(&self, event: &'a BillingEvent) -> (&'a str, &'a str) {
        (&event.account, &event.id)
    }

    async fn apply(&self, env: &dyn Env, event: &BillingEvent) -> Result<Applied, DbError> {
        let Some(customer) = customer_of(env, &event.account).await? else {
            return Ok(Applied::Refused(format!("unknown account {}", event.account)));
        };
        // Reading, then writing, is safe here: the pattern's BEGIN IMMEDIATE holds the write lock
        // for the whole transaction, so no other delivery changes the row in between.
        let Some(before) = Subscription::read(env, &customer, &event.subscription).await? else {
            return Ok(Applied::Refused(format!(
                "no subscription {} for {customer}",
                event.subscription
            )));
        };
        let after = fold(&*self.rules, &before, event);
        if after != before {
            after.write(env, &customer, &event.subscription).await?;
        }
        let created_ms = env.now_ms();
        let owes = owed(
            &*self.rules,
            (&customer, &event.subscription),
            (&before, &after),
            event.what,
        )
        .into_iter()
        .map(|operation| Obligation {
            operation_key: operation.key,
            payload: operation.payload,
            created_ms,
        })
        .collect();
        Ok(Applied::Taken {
            moved: after != before,
            owes,
        })
    }
}
