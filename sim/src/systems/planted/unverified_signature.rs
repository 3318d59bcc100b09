//! `unverified-signature`: the receiver trusts the body without verifying the signature or the
//! endpoint's account.
//!
//! Whoever can reach the endpoint can post a forged, tampered or replayed event, or one that names
//! another account, and the receiver applies it as if the sender had signed it. Only a body that
//! is not a valid event is refused.
//!
//! Only [`ReceiverSteps::authenticate`] differs from the reference; it must not change any other
//! step.

use commitgap::env::Env;
use commitgap::receiver::{Answer, ReceiverSteps, WebhookDelivery, WebhookEvent};
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnverifiedSignature;

impl PlantedBug for UnverifiedSignature {
    const NAME: &'static str = "unverified-signature";
    const RULE_BROKEN: &'static str =
        "the receiver trusts the body without verifying the signature or the endpoint's account";
}

impl ReceiverSteps for UnverifiedSignature {
    fn authenticate(&self, _env: &dyn Env, delivery: &WebhookDelivery) -> Result<WebhookEvent, Answer> {
        // The body is parsed and trusted as it is.
        WebhookEvent::parse_bytes(&delivery.body).map_err(Answer::Rejected)
    }
}

impl RelaySteps for UnverifiedSignature {}
