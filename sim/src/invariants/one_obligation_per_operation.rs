//! One obligation per business operation.
//!
//! The outbox is keyed by the business operation so that one payment owes one shipment, however
//! many events report it. Two obligations for one operation will be sent twice; only the
//! provider's key store (and only while it remembers) stands between them and a second shipment.

use std::collections::BTreeSet;

use super::{Invariant, InvariantKind, Observation};
use crate::system::ObservedRow;

pub struct OneObligationPerOperation;

impl Invariant for OneObligationPerOperation {
    fn name(&self) -> &'static str {
        "one-obligation-per-operation"
    }

    fn description(&self) -> &'static str {
        "at most one obligation exists for each business operation"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // Two obligations for one operation in the final rows both existed, as they end, after the
    // later of their last writes, and the commit that made that write counted them: a failure
    // here is one the run had.
    fn judges_final_state(&self) -> bool {
        true
    }

    // It reads the commit and the rows it left.
    fn judges_commits(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        let mut touched = BTreeSet::new();
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                if let Some(ObservedRow::Obligation(obligation)) = &diff.after {
                    touched.insert(observation.operation_of(obligation));
                }
            }
        }
        for operation in touched {
            let keys: Vec<&str> = observation
                .db
                .obligations_for(&operation)
                .map(|obligation| obligation.operation_key.as_str())
                .collect();
            if keys.len() > 1 {
                return Err(format!(
                    "{} obligations for {operation}: {}",
                    keys.len(),
                    keys.join(", ")
                ));
            }
        }
        Ok(())
    }
}
