//! Every effect traces to a committed obligation and carries its persisted payload.
//!
//! An effect whose operation has no committed obligation was caused by something that never
//! committed; an effect whose payload differs from the persisted one means the relay rebuilt or
//! changed the request.
//!
//! Payloads are compared as JSON values ([`same_payload`]): the persisted text sent with its
//! fields in another order, or other spacing, is the same payload.

use crate::provider::same_payload;

use super::{Invariant, InvariantKind, Observation};

pub struct EffectMatchesObligation;

impl Invariant for EffectMatchesObligation {
    fn name(&self) -> &'static str {
        "effect-matches-obligation"
    }

    fn description(&self) -> &'static str {
        "every effect has a committed obligation and was sent with its persisted payload"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // An effect is judged against the obligations committed when it was performed, and a final
    // state may no longer hold them: a system may delete an obligation once it is settled (say,
    // when the receipt that owed it is purged), which no invariant forbids. Judged on a final
    // state, such an effect would look as if it had no obligation: a false alarm.
    fn judges_final_state(&self) -> bool {
        false
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for &index in &observation.step.new_effects {
            let effect = observation.provider.effect(index);
            let mut obligations = observation.db.obligations_for(&effect.operation).peekable();
            if obligations.peek().is_none() {
                return Err(format!(
                    "effect {} for {} has no committed obligation",
                    effect.id, effect.operation
                ));
            }
            if !obligations.any(|obligation| same_payload(&obligation.payload, &effect.payload)) {
                return Err(format!(
                    "effect {} for {} was sent with payload {} which no obligation persisted",
                    effect.id, effect.operation, effect.payload
                ));
            }
        }
        Ok(())
    }
}
