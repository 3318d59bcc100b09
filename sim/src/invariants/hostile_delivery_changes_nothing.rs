//! A delivery that fails verification or authorization changes nothing.
//!
//! Forged, tampered, replayed, cross-account or malformed requests reach every public endpoint;
//! a receiver that writes anything for one of them (a receipt, an order transition, an
//! obligation) lets an outsider move business state. Checked on every commit, against the task
//! that committed it.

use super::{Invariant, InvariantKind, Observation};

pub struct HostileDeliveryChangesNothing;

impl Invariant for HostileDeliveryChangesNothing {
    fn name(&self) -> &'static str {
        "hostile-delivery-changes-nothing"
    }

    fn description(&self) -> &'static str {
        "a forged, tampered, replayed, cross-account or malformed request commits no row"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for commit in &observation.step.commits {
            if let Some(attack) = &commit.hostile
                && !commit.diffs.is_empty()
            {
                return Err(format!(
                    "{} committed {} row changes while handling a hostile request ({attack})",
                    commit.process_id,
                    commit.diffs.len()
                ));
            }
        }
        Ok(())
    }
}
