//! After heal, every operation the domain's model owes whatever the arrival order has exactly one
//! effect, or a dead obligation with a reason.
//!
//! The pattern's `obligation-settles-with-effect-or-reason` judges the obligations a system
//! wrote; this judges the ones it should have written. A receiver that took an event (2xx, a
//! receipt) but never wrote its obligation, or dropped it in a rewrite, owes work nobody will do.
//! Operations owed only in some arrival orders ([`crate::domain::Owing::Possibly`]) are not judged
//! here: the domain's own rules say when they are owed.

use super::{Invariant, InvariantKind, Layer, Observation};
use crate::domain::Owing;
use crate::system::ObligationStatus;

pub struct OwedOperationSettles;

impl Invariant for OwedOperationSettles {
    fn name(&self) -> &'static str {
        "owed-operation-settles"
    }

    fn description(&self) -> &'static str {
        "after heal, every operation the domain's model owes has exactly one effect or a dead obligation with a reason"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn layer(&self) -> Layer {
        Layer::Domain
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        if observation.scripted() {
            return Ok(());
        }
        for (operation, owed) in &observation.model.owed {
            if owed.owing != Owing::Certainly {
                continue;
            }
            let effects = observation.provider.effects_for(operation).count();
            let dead = observation.db.obligations_for(operation).any(|obligation| {
                obligation.status == ObligationStatus::Dead && obligation.dead_reason.is_some()
            });
            if effects != 1 && !dead {
                let (account, event_id) = owed.events.iter().next().cloned().unwrap_or_default();
                return Err(format!(
                    "operation {operation}, owed since event ({account}, {event_id}), has {effects} effects and no dead obligation with a reason"
                ));
            }
        }
        Ok(())
    }
}
