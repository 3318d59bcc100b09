//! After heal, no obligation is left owed.
//!
//! Every obligation must reach done or dead once faults stop; one still owed at quiescence is
//! stuck (a lease never released, a retry never scheduled, a worker that stopped polling).

use super::{Invariant, InvariantKind, Observation};
use crate::system::ObligationStatus;

pub struct OutboxDrains;

impl Invariant for OutboxDrains {
    fn name(&self) -> &'static str {
        "outbox-drains"
    }

    fn description(&self) -> &'static str {
        "after heal, every obligation reaches done or dead"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        let owed: Vec<&str> = observation
            .db
            .obligations()
            .filter(|obligation| obligation.status == ObligationStatus::Owed)
            .map(|obligation| obligation.operation_key.as_str())
            .collect();
        if owed.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} obligations still owed after heal: {}",
                owed.len(),
                owed.join(", ")
            ))
        }
    }
}
