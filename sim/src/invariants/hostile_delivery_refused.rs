//! A delivery that fails verification or authorization is refused with a permanent error.
//!
//! A 2xx tells an attacker the forgery worked and a buggy sender that its broken event was
//! taken; a 503 invites it to try again forever. The answer must be a 4xx: 401 for what is not
//! verifiably from the sender, 403 for an event naming another account, 413 for an oversized
//! body, 422 for a body that is not a valid event or reuses a recorded event's id with another
//! body (for which a 503 is allowed too: the receiver must read its receipts to tell).

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
            // A request reusing a recorded id is authentic, so the receiver must open its
            // database to refuse it; when the database is busy it may only ask for a retry.
            let allowed = |attack: &str| {
                answer.answer.is_permanent_failure()
                    || (attack == crate::faults::Attack::ReusedEventId.name() && !answer.answer.is_success())
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
