//! An obligation leaves the owed state only with an effect or a recorded reason.
//!
//! Marking an obligation done before the provider confirmed an effect, deleting it while owed,
//! or burying it without saying why all drop owed work silently.

use super::{Invariant, InvariantKind, Observation};
use crate::system::{ObligationStatus, ObservedRow};

pub struct ObligationSettlesWithEffectOrReason;

impl Invariant for ObligationSettlesWithEffectOrReason {
    fn name(&self) -> &'static str {
        "obligation-settles-with-effect-or-reason"
    }

    fn description(&self) -> &'static str {
        "an obligation leaves the owed state only as done with an effect, or dead with a reason"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // An obligation's final row is what its last commit wrote, and the ledger only grows: a done
    // obligation with no effect, or a dead one with no reason, in the final state was one when
    // that commit was judged. Deleting an owed obligation leaves no row to see, so a final state
    // only misses that failure, never invents it.
    fn judges_final_state(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                let before = match &diff.before {
                    Some(ObservedRow::Obligation(before)) => Some(before),
                    _ => None,
                };
                let after = match &diff.after {
                    Some(ObservedRow::Obligation(after)) => Some(after),
                    _ => None,
                };
                match (before, after) {
                    (Some(before), None) if before.status == ObligationStatus::Owed => {
                        return Err(format!(
                            "{} deleted obligation {} while it was owed",
                            commit.process_id, before.operation_key
                        ));
                    }
                    (_, Some(after)) if after.status == ObligationStatus::Done => {
                        let operation = observation.operation_of(after);
                        if observation.provider.effects_for(&operation).next().is_none() {
                            return Err(format!(
                                "{} marked {} done but the provider performed no effect for {operation}",
                                commit.process_id, after.operation_key
                            ));
                        }
                    }
                    (_, Some(after))
                        if after.status == ObligationStatus::Dead
                            && after.dead_reason.as_deref().is_none_or(str::is_empty) =>
                    {
                        return Err(format!(
                            "{} marked {} dead without a reason",
                            commit.process_id, after.operation_key
                        ));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}
