//! The billing service with one rule broken each: bugs a billing team could write, kept as
//! canaries. `billing-sim mutants` expects the simulation to catch every one; if it stops, it has
//! lost its power over this code.
//!
//! Each bug is a [`Rules`] that overrides exactly one decision of the correct service, so it
//! reads as a small diff against `crate::business`. Nothing here may be used by the correct
//! service.

use std::rc::Rc;
use std::sync::Arc;

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture};
use commitgap_sim::commitgap::receiver::{
    Answer, Applied, Business, SuccessKind, WebhookDelivery, receive_business,
};

use crate::business::{self, BillingEvent, Rules, Subscription, What};
use crate::domain::PAST_DUE;
use crate::system::{Correct, tables};

/// `billing-last-arrival-wins`: the plan-version guard is dropped, so whichever
/// `customer.subscription.updated` arrives last sets the seats, an old version arriving late
/// included.
#[derive(Debug, Clone, Copy, Default)]
pub struct LastArrivalWins;

impl Rules for LastArrivalWins {
    fn name(&self) -> &'static str {
        "billing-last-arrival-wins"
    }

    fn description(&self) -> &'static str {
        "planted bug: no plan-version guard, the update that arrives last sets the seats"
    }

    fn plan_replaces(&self, _current: i64, _reported: i64) -> bool {
        true
    }
}

/// `billing-restore-on-first`: access is restored when an `invoice.paid` finds the
/// subscription past due, as the row stands at arrival. A payment that arrives before the
/// failure it follows never restores access, and a payment created before a failure that
/// arrived first restores it although nothing was recovered.
#[derive(Debug, Clone, Copy, Default)]
pub struct RestoreOnFirst;

impl Rules for RestoreOnFirst {
    fn name(&self) -> &'static str {
        "billing-restore-on-first"
    }

    fn description(&self) -> &'static str {
        "planted bug: restore-access owed when invoice.paid finds the subscription past due, judged by arrival"
    }

    fn owes_restore(&self, before: &Subscription, _after: &Subscription, what: What) -> bool {
        what == What::Paid && before.status == PAST_DUE
    }
}

/// `billing-receipt-outside`: the receipt commits in a transaction of its own, then the
/// business step runs in a second one. A crash, a busy database or a full disk between the two
/// leaves the event recorded and its work lost: the retry is answered as a duplicate.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReceiptOutside;

impl Rules for ReceiptOutside {
    fn name(&self) -> &'static str {
        "billing-receipt-outside"
    }

    fn description(&self) -> &'static str {
        "planted bug: the receipt commits in its own transaction before the business step"
    }

    fn receive(
        self: Arc<Self>,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        Box::pin(async move { receive_receipt_first(&*env, &delivery).await })
    }
}

/// A business step that only records: it refuses unknown accounts and subscriptions as the real
/// one does, and otherwise takes the event without touching anything.
struct RecordOnly;

impl Business for RecordOnly {
    type Event = BillingEvent;

    fn parse(&self, body: &[u8]) -> Result<BillingEvent, String> {
        business::parse_event(body)
    }

    fn identity<'a>(&self, event: &'a BillingEvent) -> (&'a str, &'a str) {
        (&event.account, &event.id)
    }

    async fn apply(&self, env: &dyn Env, event: &BillingEvent) -> Result<Applied, DbError> {
        let Some(customer) = business::customer_of(env, &event.account).await? else {
            return Ok(Applied::Refused(format!("unknown account {}", event.account)));
        };
        if Subscription::read(env, &customer, &event.subscription)
            .await?
            .is_none()
        {
            return Ok(Applied::Refused(format!(
                "no subscription {}",
                event.subscription
            )));
        }
        Ok(Applied::Taken {
            moved: false,
            owes: Vec::new(),
        })
    }
}

/// The flawed receiver: the pattern's door and receipt around [`RecordOnly`], COMMIT, then the
/// business step by hand in a transaction of its own.
async fn receive_receipt_first(env: &dyn Env, delivery: &WebhookDelivery) -> Answer {
    let recorded = receive_business(&RecordOnly, tables(), env, delivery).await;
    // A known event was handled before, as far as this receiver can tell: the flaw.
    if !recorded.is_success() || recorded == Answer::Success(SuccessKind::Duplicate) {
        return recorded;
    }
    let event = match business::parse_event(&delivery.body) {
        Ok(event) => event,
        Err(reason) => return Answer::Rejected(reason),
    };
    if let Err(error) = env.execute("BEGIN IMMEDIATE", &[]).await {
        return Answer::RetryLater(error.to_string());
    }
    match apply_and_enqueue(env, &event).await {
        Ok(None) => match env.execute("COMMIT", &[]).await {
            Ok(_) => Answer::Success(SuccessKind::Applied),
            Err(error) => rolled_back(env, Answer::RetryLater(error.to_string())).await,
        },
        Ok(Some(reason)) => rolled_back(env, Answer::Rejected(reason)).await,
        Err(error) => rolled_back(env, Answer::RetryLater(error.to_string())).await,
    }
}

/// The correct business step and its obligations, inside the open transaction; `Some` says why
/// the event was refused.
async fn apply_and_enqueue(env: &dyn Env, event: &BillingEvent) -> Result<Option<String>, DbError> {
    let billing = business::Billing {
        rules: Arc::new(Correct),
    };
    match billing.apply(env, event).await? {
        Applied::Refused(reason) => Ok(Some(reason)),
        Applied::Taken { owes, .. } => {
            for obligation in owes {
                tables()
                    .enqueue(
                        env,
                        &obligation.operation_key,
                        &obligation.payload,
                        obligation.created_ms,
                    )
                    .await?;
            }
            Ok(None)
        }
    }
}

/// Rolls the open transaction back (a failed COMMIT may leave it open) and answers `answer`.
async fn rolled_back(env: &dyn Env, answer: Answer) -> Answer {
    // Nothing to do if it fails: the transaction or the connection is gone either way.
    let _ = env.execute("ROLLBACK", &[]).await;
    answer
}
