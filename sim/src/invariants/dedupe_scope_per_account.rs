//! Deduplication is scoped to the account: events with distinct `(account, event_id)` are
//! never collapsed.
//!
//! Event ids are unique only within an account (Stripe Connect, Adyen), so two accounts may both
//! send `evt-1`. A receiver that deduplicates by the id alone answers the second account's event
//! as a duplicate and drops it.

use super::{Invariant, InvariantKind, Observation};
use commitgap::receiver::{Answer, SuccessKind};

pub struct DedupeScopePerAccount;

impl Invariant for DedupeScopePerAccount {
    fn name(&self) -> &'static str {
        "dedupe-scope-per-account"
    }

    fn description(&self) -> &'static str {
        "a delivery is answered as a duplicate only if that account's event was received before"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for answer in &observation.step.answers {
            if answer.answer != Answer::Success(SuccessKind::Duplicate) {
                continue;
            }
            let key = (answer.account.clone(), answer.event_id.clone());
            if !observation.history.ever_received.contains(&key) {
                return Err(format!(
                    "{} answered ({}, {}) as a duplicate, but that account's event was never received",
                    answer.process_id, answer.account, answer.event_id
                ));
            }
        }
        Ok(())
    }
}
