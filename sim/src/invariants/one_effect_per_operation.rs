//! At most one effect per business operation, across key expiry and key changes.
//!
//! Counted on the provider's ledger by the operation the payload names, not by idempotency key,
//! so a relay that changes keys cannot hide a second shipment.

use super::{Invariant, InvariantKind, Observation};
use crate::trace::format_time_ms;

pub struct OneEffectPerOperation;

impl Invariant for OneEffectPerOperation {
    fn name(&self) -> &'static str {
        "one-effect-per-operation"
    }

    fn description(&self) -> &'static str {
        "the provider performs at most one effect per business operation"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // A final ledger with two effects for one operation held both once the second was
    // performed, when the per-step check counted them: a failure here is one the run had.
    fn judges_final_state(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for &index in &observation.step.new_effects {
            let operation = &observation.provider.effect(index).operation;
            let effects: Vec<_> = observation.provider.effects_for(operation).collect();
            if effects.len() > 1 {
                let listed: Vec<String> = effects
                    .iter()
                    .map(|effect| {
                        format!(
                            "{} under key {} at {}",
                            effect.id,
                            effect.idempotency_key,
                            format_time_ms(effect.at_ms)
                        )
                    })
                    .collect();
                return Err(format!(
                    "operation {operation} has {} effects: {}",
                    effects.len(),
                    listed.join("; ")
                ));
            }
        }
        Ok(())
    }
}
