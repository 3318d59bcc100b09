//! A delivery that fails verification or authorization is refused with a permanent error.
//!
//! A 2xx tells an attacker the forgery worked and a buggy sender that its broken event was
//! taken; a 503 invites it to try again forever. The answer must be a 4xx: 401 for what is not
//! verifiably from the sender, 403 for an event naming another account, 413 for an oversized
//! body, 422 for a body that is not a valid event. A request that reuses a recorded event's id
//! with another body is not judged here: a 422 and a 2xx duplicate are both correct, as long as
//! it changes nothing.

use super::{Invariant, InvariantKind, Observation};
use crate::record::Origin;

pub struct HostileDeliveryRefused;

impl Invariant for HostileDeliveryRefused {
    fn name(&self) -> &'static str {
        "hostile-delivery-refused"
    }

    fn description(&self) -> &'static str {
        "a forged, tampered, replayed, cross-account or malformed request is answered with a 4xx"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for answer in &observation.step.answers {
            // A request reusing a recorded event id with another body is signed by the sender's
            // key: refusing it (422) and acknowledging it as a duplicate without applying it are
            // both correct (deduplicating by id alone is Stripe's own advice), and a busy database
            // may ask for a retry. What must not happen is applying it, which
            // hostile-delivery-changes-nothing judges.
            let allowed = |attack: &str| {
                answer.answer.is_permanent_failure() || attack == crate::faults::Attack::ReusedEventId.name()
            };
            if let Origin::Hostile { attack } = &answer.origin
                && !allowed(attack)
            {
                return Err(format!(
                    "{} answered {} to a hostile request ({attack}); it must be refused with a 4xx",
                    answer.process_id, answer.answer
                ));
            }
        }
        Ok(())
    }
}
