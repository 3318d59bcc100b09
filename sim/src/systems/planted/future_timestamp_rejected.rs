//! `future-timestamp-rejected`: the receiver refuses any timestamp ahead of its own clock, leaving
//! no tolerance that way.
//!
//! "A message from the future is forged" forgets that the sender's clock may run a little ahead of
//! this one. Every genuine delivery from such a sender is refused with a 401, and its retries
//! carry fresh timestamps just as far ahead.
//!
//! Only [`ReceiverSteps::verify_signature`] differs from the reference; it must not change any
//! other step.

use commitgap::receiver::{Answer, ReceiverSettings, ReceiverSteps, WebhookDelivery};
use commitgap::reference::Reference;
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct FutureTimestampRejected;

impl PlantedBug for FutureTimestampRejected {
    const NAME: &'static str = "future-timestamp-rejected";
    const RULE_BROKEN: &'static str =
        "the receiver refuses any timestamp ahead of its own clock, leaving no tolerance that way";
}

impl ReceiverSteps for FutureTimestampRejected {
    fn verify_signature(
        &self,
        delivery: &WebhookDelivery,
        settings: &ReceiverSettings,
        now_s: i64,
    ) -> Result<(), Answer> {
        Reference.verify_signature(delivery, settings, now_s)?;
        let ahead = delivery
            .headers
            .timestamp
            .parse::<i64>()
            .is_ok_and(|timestamp_s| timestamp_s > now_s);
        if ahead {
            return Err(Answer::Unauthorized(
                "message timestamp is in the future".to_owned(),
            ));
        }
        Ok(())
    }
}

impl RelaySteps for FutureTimestampRejected {}
