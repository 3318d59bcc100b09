//! Two deliveries of one event never yield two receipts.
//!
//! Receipts deduplicate by `(account, event_id)`; a second receipt for the same pair means the
//! deduplication key was wrong (the delivery attempt instead of the event) or not enforced (a
//! check outside the transaction, no unique index), so the event was processed twice.

use std::collections::BTreeSet;

use super::{Invariant, InvariantKind, Observation};
use crate::system::ObservedRow;

pub struct OneReceiptPerEvent;

impl Invariant for OneReceiptPerEvent {
    fn name(&self) -> &'static str {
        "one-receipt-per-event"
    }

    fn description(&self) -> &'static str {
        "at most one receipt exists for each (account, event id)"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // Two receipts for one event in the final rows both existed after the later of their last
    // writes, and the commit that made that write counted them: a failure here is one the run
    // had.
    fn judges_final_state(&self) -> bool {
        true
    }

    // It reads the commit and the rows it left.
    fn judges_commits(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        let mut inserted = BTreeSet::new();
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                if let Some(ObservedRow::Receipt(receipt)) = &diff.after {
                    inserted.insert((receipt.account.as_str(), receipt.event_id.as_str()));
                }
            }
        }
        for (account, event_id) in inserted {
            let count = observation.db.receipts(account, event_id).count();
            if count > 1 {
                return Err(format!("{count} receipts exist for ({account}, {event_id})"));
            }
        }
        Ok(())
    }
}
