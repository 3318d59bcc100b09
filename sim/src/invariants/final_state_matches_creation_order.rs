//! After heal, every business entity ends in a state the domain's model gives for its events in
//! creation order, whatever the order (and number) of their arrival.
//!
//! Events that arrive late, twice, or overtaken by newer ones must all end where the facts,
//! applied in the order they happened, end: for payments, refunds before payments and amount
//! updates that overtake each other; for a CI service, an older push arriving after a newer one.
//! Where the domain lets the arrival order decide a race (a cancellation racing a payment), the
//! model allows each state some arrival order gives ([`crate::domain::Model::final_states`]).

use super::{Invariant, InvariantKind, Layer, Observation};

pub struct FinalStateMatchesCreationOrder;

impl Invariant for FinalStateMatchesCreationOrder {
    fn name(&self) -> &'static str {
        "final-state-matches-creation-order"
    }

    fn description(&self) -> &'static str {
        "after heal, every entity's state is what the domain's model gives for its events in creation order"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn layer(&self) -> Layer {
        Layer::Domain
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        if observation.scripted() {
            // A scripted scenario delivers only what the test chooses; there is no full history.
            return Ok(());
        }
        for entity in observation.db.entities() {
            let key = (entity.tenant.clone(), entity.subject.clone());
            let Some(states) = observation.model.final_states.get(&key) else {
                continue;
            };
            if !states.contains(&entity.state) {
                let allowed: Vec<String> = states.iter().map(ToString::to_string).collect();
                let racing = if states.len() > 1 {
                    " (its racing events allow any of them)"
                } else {
                    ""
                };
                return Err(format!(
                    "{}/{} ended {}; its events in creation order give {}{racing}",
                    entity.tenant,
                    entity.subject,
                    entity.state,
                    allowed.join(" or ")
                ));
            }
        }
        Ok(())
    }
}
