//! `key-per-attempt`: the relay mints a fresh idempotency key on every attempt instead of reusing
//! the persisted one.
//!
//! The provider deduplicates by key, so a retry under a new key is a new request: an attempt whose
//! reply was lost (a timeout, a dropped answer) and its retry both take effect.
//!
//! Only [`RelaySteps::idempotency_key`] differs from the reference; it must not change any other
//! step.

use commitgap::receiver::ReceiverSteps;
use commitgap::relay::{Claim, RelaySteps};

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyPerAttempt;

impl PlantedBug for KeyPerAttempt {
    const NAME: &'static str = "key-per-attempt";
    const RULE_BROKEN: &'static str =
        "the relay mints a fresh idempotency key on every attempt instead of reusing the persisted one";
}

impl ReceiverSteps for KeyPerAttempt {}

impl RelaySteps for KeyPerAttempt {
    fn idempotency_key(&self, claim: &Claim) -> String {
        format!("{}#{}", claim.operation_key, claim.attempts)
    }
}
