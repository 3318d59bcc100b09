//! A receipt purge deletes the receipts received before its cutoff, and none received after.
//!
//! A receipt deleted early lets a redelivery of its event through as new; a purge that deletes
//! nothing lets the table grow without bound. The world judges each purge against the cutoff it
//! was given, by the rows' own `received_ms` (see `world/purges.rs`); a purge with a failed
//! statement may leave receipts for its next run, and a system whose receipts carry no
//! `received_ms` is not judged. The check reads only the step's record.

use super::{Invariant, InvariantKind, Observation};

pub struct PurgeKeepsRetention;

impl Invariant for PurgeKeepsRetention {
    fn name(&self) -> &'static str {
        "purge-keeps-retention"
    }

    fn description(&self) -> &'static str {
        "a receipt purge deletes the receipts received before its cutoff and none received after"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        match observation.step.purge_violations.first() {
            Some(violation) => Err(violation.clone()),
            None => Ok(()),
        }
    }
}
