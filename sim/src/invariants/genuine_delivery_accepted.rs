//! A genuine delivery within the timestamp tolerance is never refused at the door.
//!
//! The Standard Webhooks tolerance exists so that clocks a few minutes apart still agree; a
//! receiver that refuses a correctly signed delivery whose timestamp is within it (because it
//! allows no clock ahead of its own, compares milliseconds with seconds, or checks the wrong
//! secret) drops real events, and a sender's retry does not help, since it is refused the same
//! way. Judged by the receiver's own clock at the moment it answered, which is when it verified.
//!
//! Nor is a genuine event the domain accepts (its [`crate::domain::Domain::refusal`] is `None`)
//! ever refused as invalid (422): the sender takes a 4xx as final, so the event is lost. Values at
//! the receiver's limits (`SimConfig::edge_values`) are where an off-by-one check does that.

use commitgap::signature::DEFAULT_TOLERANCE_S;

use super::{Invariant, InvariantKind, Layer, Observation};
use crate::record::Origin;

pub struct GenuineDeliveryAccepted;

impl Invariant for GenuineDeliveryAccepted {
    fn name(&self) -> &'static str {
        "genuine-delivery-accepted"
    }

    fn description(&self) -> &'static str {
        "a correctly signed delivery within the timestamp tolerance is never answered 401, 403 or 413, nor an event its domain accepts 422"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn layer(&self) -> Layer {
        Layer::Domain
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for answer in &observation.step.answers {
            let Origin::Sender { timestamp_s } = answer.origin else {
                continue;
            };
            let distance_s = timestamp_s.abs_diff(answer.receiver_now_s);
            // A scripted scenario may deliver any body under an event's id; the simulated sender
            // always sends the event's own.
            let valid_event = !observation.scripted()
                && observation
                    .workload
                    .event(&answer.account, &answer.event_id)
                    .is_some_and(|event| !observation.model.expects_rejection(event));
            if valid_event && answer.answer.status() == 422 {
                return Err(format!(
                    "{} answered {} to a genuine delivery of ({}, {}), an event its domain accepts; the sender takes a 4xx as final",
                    answer.process_id, answer.answer, answer.account, answer.event_id
                ));
            }
            if answer.answer.is_refused_at_the_door() && distance_s <= DEFAULT_TOLERANCE_S.unsigned_abs() {
                return Err(format!(
                    "{} answered {} to a genuine delivery of ({}, {}) signed {distance_s} s from its clock, within the tolerance of {DEFAULT_TOLERANCE_S} s",
                    answer.process_id, answer.answer, answer.account, answer.event_id
                ));
            }
        }
        Ok(())
    }
}
