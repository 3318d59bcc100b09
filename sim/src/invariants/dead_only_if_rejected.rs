//! After heal, an obligation stays dead only if the provider rejected it.
//!
//! A relay gives an obligation up after its attempts are spent, so an outage long enough leaves
//! dead obligations behind; that is what the operator's requeue after an outage is for. An
//! obligation that was dead when the operator set out to requeue, and is dead once the world
//! settles, must have a reason the provider gave: a permanent rejection of its request, or a 5xx
//! the provider cached under its key (which it replays until the key expires, whatever the relay
//! does). One that died of failures that healed and stayed dead is work dropped with nothing to
//! show for it but a log line (an operator tool that does not requeue, or a requeue that does not
//! reach the relay). One that died only after the operator's pass (its last attempt was still in
//! flight at heal) is not judged: a single pass after an incident cannot see it.

use super::{Invariant, InvariantKind, Layer, Observation};
use crate::system::{ObligationStatus, Workflow};

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

    fn layer(&self) -> Layer {
        Layer::Pattern
    }

    fn assumes(&self) -> &'static [Workflow] {
        &[Workflow::OperatorRequeue]
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for obligation in observation.db.obligations() {
            // One that died after the operator's pass (its last attempt was still in flight at
            // heal) had no requeue to miss: a single pass after an incident cannot see it.
            if obligation.status != ObligationStatus::Dead
                || !observation
                    .history
                    .dead_at_requeue
                    .contains(&obligation.operation_key)
            {
                continue;
            }
            let operation = observation.operation_of(obligation);
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

#[cfg(test)]
mod tests {
    use crate::run::{RunOptions, run_seed};

    #[test]
    fn an_obligation_that_dies_after_the_operators_pass_is_not_judged() {
        // Seed 1253: a lookup's reply is lost just before heal, the operator's pass finds nothing
        // dead, and the relay gives the obligation up two minutes later. The first version of
        // this invariant failed the reference here.
        let reference = crate::systems::by_name("reference").unwrap();
        let outcome = run_seed(&reference, 1253, &RunOptions::default()).unwrap();
        assert_eq!(outcome.failure.map(|failure| failure.message), None);
        assert!(outcome.unsettled.is_none());
        assert!(
            outcome.fault_log.iter().any(|line| line.contains("lost")),
            "the seed still loses a reply"
        );
    }
}
