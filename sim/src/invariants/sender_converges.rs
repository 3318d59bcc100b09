//! After heal, the sender converges: every delivery of an applicable event was acknowledged.
//!
//! A duplicate, a reordered or a late delivery must eventually be answered 2xx, not left in a
//! 4xx/5xx loop until the sender gives up (a receiver that answers "retry later" until a
//! prerequisite arrives must see it arrive in time). Events the receiver must reject are excluded.

use super::{Invariant, InvariantKind, Observation};
use crate::sender::EventState;

pub struct SenderConverges;

impl Invariant for SenderConverges {
    fn name(&self) -> &'static str {
        "sender-converges"
    }

    fn description(&self) -> &'static str {
        "after heal, every subscription's delivery of an applicable event was acknowledged"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for (index, stream) in observation.sender.streams().iter().enumerate() {
            let event = &observation.workload.events[stream.event];
            if observation.model.expects_rejection(event) || stream.state == EventState::Acknowledged {
                continue;
            }
            let state = match stream.state {
                EventState::GaveUp => "the sender gave up",
                _ => "still delivering",
            };
            return Err(format!(
                "stream {index} ({}, {}, subscription {}): {state} after {} attempts; last failure: {}",
                event.account,
                event.event_id,
                stream.subscription,
                stream.attempts,
                stream.last_failure.as_deref().unwrap_or("none")
            ));
        }
        Ok(())
    }
}
