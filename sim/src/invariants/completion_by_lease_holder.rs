//! An obligation's outcome is recorded only by the holder of its current lease, and a done
//! obligation never changes again.
//!
//! The holder of a lease token is the process that committed the token (see
//! `History::lease_holders`); a worker whose lease was taken over must be fenced out by the
//! token, whatever its clock says.

use super::{Invariant, InvariantKind, Observation};
use crate::system::{ObligationStatus, ObservedRow};

pub struct CompletionByLeaseHolder;

impl Invariant for CompletionByLeaseHolder {
    fn name(&self) -> &'static str {
        "completion-by-lease-holder"
    }

    fn description(&self) -> &'static str {
        "only the current lease holder records an outcome, and a done obligation never changes"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // It reads the commit and who took each lease, which the journal's earlier commits show.
    fn judges_commits(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                let (Some(ObservedRow::Obligation(before)), after) = (&diff.before, &diff.after) else {
                    continue;
                };
                let after = match after {
                    Some(ObservedRow::Obligation(after)) => after,
                    _ => continue,
                };
                if before.status == ObligationStatus::Done && after != before {
                    return Err(format!(
                        "{} changed done obligation {} (status {:?}, token {} -> {})",
                        commit.process_id,
                        after.operation_key,
                        after.status,
                        before.lease_token,
                        after.lease_token
                    ));
                }
                let settles =
                    before.status == ObligationStatus::Owed && after.status != ObligationStatus::Owed;
                if !settles {
                    continue;
                }
                let holder = observation
                    .history
                    .lease_holders
                    .get(&(after.operation_key.clone(), after.lease_token));
                if holder != Some(&commit.process_id) {
                    return Err(format!(
                        "{} recorded {:?} for {} but lease token {} belongs to {}",
                        commit.process_id,
                        after.status,
                        after.operation_key,
                        after.lease_token,
                        holder.map_or("nobody", String::as_str)
                    ));
                }
            }
        }
        Ok(())
    }
}
