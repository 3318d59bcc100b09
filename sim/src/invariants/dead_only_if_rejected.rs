//! After heal, an obligation stays dead only if the provider rejected it.
//!
//! A relay gives an obligation up after its attempts are spent, so an outage long enough leaves
//! dead obligations behind; that is what the operator's requeue after an outage is for. Once the
//! faults heal and the operator has acted, an obligation still dead must have a reason the
//! provider gave: a permanent rejection of its request, or a 5xx the provider cached under its key
//! (which it replays until the key expires, whatever the relay does). One that died of failures
//! that healed,
//! and stayed dead, is work dropped with nothing to show for it but a log line (an operator tool
//! that does not requeue, or a requeue that does not reach the relay).

use super::{Invariant, InvariantKind, Observation};
use crate::system::ObligationStatus;
use crate::view::operation_of;

pub struct DeadOnlyIfRejected;

impl Invariant for DeadOnlyIfRejected {
    fn name(&self) -> &'static str {
        "dead-only-if-rejected"
    }

    fn description(&self) -> &'static str {
        "after heal and the operator's requeue, an obligation is dead only if the provider rejected it or cached an error under its key"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for obligation in observation.db.obligations() {
            if obligation.status != ObligationStatus::Dead {
                continue;
            }
            let operation = operation_of(obligation);
            if !observation.provider.rejected(&operation) {
                return Err(format!(
                    "obligation {} is still dead after heal ({}), but the provider never rejected {operation} nor cached an error for it",
                    obligation.operation_key,
                    obligation.dead_reason.as_deref().unwrap_or("no reason")
                ));
            }
        }
        Ok(())
    }
}
