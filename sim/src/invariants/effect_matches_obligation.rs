//! Every effect traces to a committed obligation and carries its persisted payload.
//!
//! An effect whose operation has no committed obligation was caused by something that never
//! committed; an effect whose payload differs from the persisted one means the relay rebuilt or
//! changed the request.

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
            if !obligations.any(|obligation| obligation.payload == effect.payload) {
                return Err(format!(
                    "effect {} for {} was sent with payload {} which no obligation persisted",
                    effect.id, effect.operation, effect.payload
                ));
            }
        }
        Ok(())
    }
}
