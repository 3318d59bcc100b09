//! A success answer to the sender is backed by a committed receipt.
//!
//! Once the sender sees 2xx it never redelivers, so a success given before the commit (or for a
//! transaction that then failed) loses the event for good.

use super::{Invariant, InvariantKind, Observation};

pub struct SuccessAnswerHasReceipt;

impl Invariant for SuccessAnswerHasReceipt {
    fn name(&self) -> &'static str {
        "success-answer-has-receipt"
    }

    fn description(&self) -> &'static str {
        "every 2xx answer to the sender is backed by a committed receipt"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for answer in &observation.step.answers {
            if answer.answer.is_success()
                && observation
                    .db
                    .receipts(&answer.account, &answer.event_id)
                    .next()
                    .is_none()
            {
                return Err(format!(
                    "{} answered {} for ({}, {}) but no receipt is committed",
                    answer.process_id, answer.answer, answer.account, answer.event_id
                ));
            }
        }
        Ok(())
    }
}
