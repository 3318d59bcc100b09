//! Only the operations the domain's model owes take effect at the provider, each with a payload
//! the model allows.
//!
//! The model says, from the events created, which operations are owed and with which payload
//! ([`crate::domain::Model::owed`]). An effect for anything else (a shipment for an order that was
//! never paid, a check run for a commit nobody pushed, a second operation made from a twin event
//! under another key) or with another payload (a snapshot rebuilt from a later state) is work the
//! business never asked for. Judged on each new effect; `one-effect-per-operation` counts them.
//!
//! Payloads are compared as JSON values ([`same_payload`]): the model's text and the system's
//! may order fields or space them differently.

use crate::provider::same_payload;

use super::{Invariant, InvariantKind, Layer, Observation};

pub struct OnlyOwedOperationsTakeEffect;

impl Invariant for OnlyOwedOperationsTakeEffect {
    fn name(&self) -> &'static str {
        "only-owed-operations-take-effect"
    }

    fn description(&self) -> &'static str {
        "every effect at the provider is for an operation the domain's model owes, with a payload it allows"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // Each effect is judged by the model and its own operation and payload alone, which are the
    // same whenever it is judged.
    fn judges_final_state(&self) -> bool {
        true
    }

    fn layer(&self) -> Layer {
        Layer::Domain
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        if observation.step.new_effects.is_empty() || observation.scripted() {
            return Ok(());
        }
        for &index in &observation.step.new_effects {
            let effect = observation.provider.effect(index);
            let Some(owed) = observation.model.owed.get(&effect.operation) else {
                return Err(format!(
                    "the provider performed {} for operation {}, which no event created owes",
                    effect.id, effect.operation
                ));
            };
            if !owed
                .payloads
                .iter()
                .any(|payload| same_payload(payload, &effect.payload))
            {
                return Err(format!(
                    "the provider performed {} for operation {} with payload {}, which the events created do not give",
                    effect.id, effect.operation, effect.payload
                ));
            }
        }
        Ok(())
    }
}
