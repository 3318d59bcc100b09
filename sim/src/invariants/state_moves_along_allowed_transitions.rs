//! A business entity's state moves only along the transitions its domain allows.
//!
//! The domain says which moves are allowed ([`crate::domain::Domain::may_become`]); for payments,
//! `awaiting_payment -> paid | refunded | cancelled` and `paid -> refunded`, so a refunded or
//! cancelled order never becomes paid again, whatever arrives late. Judged on every commit that
//! changed an entity's state, by the state before and after that commit: a change of a field
//! within a state of the same name (a version that must only grow, an amount) is a move the
//! domain is asked about too.

use super::{Invariant, InvariantKind, Layer, Observation};
use crate::system::ObservedRow;

pub struct StateMovesAlongAllowedTransitions;

impl Invariant for StateMovesAlongAllowedTransitions {
    fn name(&self) -> &'static str {
        "state-moves-along-allowed-transitions"
    }

    fn description(&self) -> &'static str {
        "an entity's state moves only along the transitions its domain allows"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn layer(&self) -> Layer {
        Layer::Domain
    }

    // It reads only the commit's own changes.
    fn judges_commits(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                if let (Some(ObservedRow::Entity(before)), Some(ObservedRow::Entity(after))) =
                    (&diff.before, &diff.after)
                    && before.state != after.state
                    && !observation.domain.may_become(&before.state, &after.state)
                {
                    return Err(format!(
                        "{} moved {}/{} from {} to {}, which {} does not allow",
                        commit.process_id,
                        after.tenant,
                        after.subject,
                        before.state,
                        after.state,
                        observation.domain.name()
                    ));
                }
            }
        }
        Ok(())
    }
}
