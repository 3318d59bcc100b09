//! `receipt-first`: the receipt commits in its own transaction before the order transition and
//! the obligation.
//!
//! The receipt is inserted outside any transaction, so it commits on its own, and only then does
//! the transaction for the work begin. A crash or a busy database between the two leaves a receipt
//! that turns every redelivery into a "duplicate" while the work was never done.
//!
//! Only [`ReceiverSteps::record_receipt`] differs from the reference; it must not change any
//! other step.

use commitgap::env::{DbError, Env};
use commitgap::receiver::{Answer, Incoming, ReceiverSteps, Recorded, SuccessKind, begin, insert_receipt};
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReceiptFirst;

impl PlantedBug for ReceiptFirst {
    const NAME: &'static str = "receipt-first";
    const RULE_BROKEN: &'static str =
        "the receipt commits in its own transaction before the order transition and the obligation";
}

impl ReceiverSteps for ReceiptFirst {
    async fn record_receipt(&self, env: &dyn Env, incoming: &Incoming<'_>) -> Result<Recorded, DbError> {
        // No transaction is open yet, so this insert commits by itself. A known event is answered
        // as a duplicate at once, without comparing bodies.
        match insert_receipt(env, incoming).await {
            Ok(true) => {}
            Ok(false) => return Ok(Recorded::Answered(Answer::Success(SuccessKind::Duplicate))),
            Err(error) => return Ok(Recorded::Answered(Answer::RetryLater(error.to_string()))),
        }
        match begin(env).await {
            Ok(()) => Ok(Recorded::New),
            Err(answer) => Ok(Recorded::Answered(answer)),
        }
    }
}

impl RelaySteps for ReceiptFirst {}
