//! An order's state only moves along allowed edges and terminal states are sticky.
//!
//! `awaiting_payment -> paid | refunded | cancelled`, `paid -> refunded`; a refunded or cancelled
//! order never becomes paid again, whatever arrives late.

use super::{Invariant, InvariantKind, Observation};
use crate::system::ObservedRow;

pub struct OrderStateMovesForward;

impl Invariant for OrderStateMovesForward {
    fn name(&self) -> &'static str {
        "order-state-moves-forward"
    }

    fn description(&self) -> &'static str {
        "an order's status only moves forward; refunded and cancelled are final"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                if let (Some(ObservedRow::Order(before)), Some(ObservedRow::Order(after))) =
                    (&diff.before, &diff.after)
                    && !before.status.may_become(after.status)
                {
                    return Err(format!(
                        "{} moved order {}/{} from {:?} to {:?}",
                        commit.process_id, after.tenant, after.order, before.status, after.status
                    ));
                }
            }
        }
        Ok(())
    }
}
