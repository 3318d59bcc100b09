//! `new-key-after-error`: the relay mints a new idempotency key after an ambiguous provider error.
//!
//! After a timeout or a 5xx the team "starts clean" with a fresh key. But an ambiguous error may
//! hide an effect the provider did perform, and under a new key the retry is not deduplicated
//! against it: two effects for one operation.
//!
//! Only [`RelaySteps::idempotency_key`] differs from the reference; it must not change any other
//! step.

use commitgap::receiver::ReceiverSteps;
use commitgap::reference::Reference;
use commitgap::relay::{Claim, RelaySteps};

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct NewKeyAfterError;

impl PlantedBug for NewKeyAfterError {
    const NAME: &'static str = "new-key-after-error";
    const RULE_BROKEN: &'static str =
        "the relay mints a new idempotency key after an ambiguous provider error";
}

impl ReceiverSteps for NewKeyAfterError {}

impl RelaySteps for NewKeyAfterError {
    fn idempotency_key(&self, claim: &Claim) -> String {
        if claim.last_error.is_some() {
            format!("{}#retry{}", claim.operation_key, claim.attempts)
        } else {
            Reference.idempotency_key(claim)
        }
    }
}
