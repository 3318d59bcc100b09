//! `receipt-after`: the order transition and obligation commit first, the receipt in a second
//! transaction.
//!
//! The transaction only looks the receipt up; the receipt is inserted after COMMIT, on its own. For
//! a while (or, after a crash between the two, for good) the work exists without the receipt that
//! should have committed with it, and a redelivery in that gap is applied as new.
//!
//! It overrides [`ReceiverSteps::record_receipt`] (look, do not insert) and
//! [`ReceiverSteps::commit_and_answer`] (insert after the commit); it must not change any other
//! step.

use commitgap::env::{DbError, Env, text};
use commitgap::receiver::{
    Answer, Decision, Incoming, Outcome, ReceiverSteps, Recorded, SuccessKind, begin, insert_receipt,
};
use commitgap::reference::Reference;
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReceiptAfter;

impl PlantedBug for ReceiptAfter {
    const NAME: &'static str = "receipt-after";
    const RULE_BROKEN: &'static str =
        "the order transition and obligation commit first, the receipt in a second transaction";
}

impl ReceiverSteps for ReceiptAfter {
    async fn record_receipt(&self, env: &dyn Env, incoming: &Incoming<'_>) -> Result<Recorded, DbError> {
        if let Err(answer) = begin(env).await {
            return Ok(Recorded::Answered(answer));
        }
        let seen = env
            .query(
                "SELECT 1 FROM receipts WHERE account = ?1 AND event_id = ?2",
                &[text(&incoming.event.account), text(&incoming.event.id)],
            )
            .await?;
        if seen.is_empty() {
            Ok(Recorded::New)
        } else {
            Ok(Recorded::Seen(Decision::Commit(SuccessKind::Duplicate)))
        }
    }

    async fn commit_and_answer(
        &self,
        env: &dyn Env,
        incoming: &Incoming<'_>,
        outcome: Result<Outcome, DbError>,
    ) -> Answer {
        let answer = Reference.commit_and_answer(env, incoming, outcome).await;
        if answer != Answer::Success(SuccessKind::Applied)
            && answer != Answer::Success(SuccessKind::NoTransition)
        {
            return answer;
        }
        // The work has committed; the receipt follows in a transaction of its own.
        match insert_receipt(env, incoming).await {
            Ok(_) => answer,
            Err(error) => Answer::RetryLater(error.to_string()),
        }
    }
}

impl RelaySteps for ReceiptAfter {}
