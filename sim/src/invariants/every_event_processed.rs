//! L1: after heal, every event the sender emitted was processed and acknowledged.
//!
//! The faults of the fault phase leave the sender enough of its schedule to redeliver, so an
//! event it gave up on, or one whose receipt never committed, was lost by the receiver.

use super::{Invariant, InvariantKind, Observation};
use crate::sender::EventState;

pub struct EveryEventProcessed;

impl Invariant for EveryEventProcessed {
    fn name(&self) -> &'static str {
        "every-event-processed"
    }

    fn description(&self) -> &'static str {
        "after heal, every event the sender emitted was committed and acknowledged"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for (event, delivery) in observation
            .workload
            .events
            .iter()
            .zip(observation.sender.events())
        {
            let last_failure = delivery.last_failure.as_deref().unwrap_or("none");
            match delivery.state {
                EventState::Acknowledged => {}
                EventState::GaveUp => {
                    return Err(format!(
                        "the sender gave up on ({}, {}) after {} attempts; last failure: {last_failure}",
                        event.account, event.event_id, delivery.attempts
                    ));
                }
                EventState::Future | EventState::Delivering => {
                    return Err(format!(
                        "({}, {}) is still being delivered after {} attempts; last failure: {last_failure}",
                        event.account, event.event_id, delivery.attempts
                    ));
                }
            }
            let key = (event.account.clone(), event.event_id.clone());
            if !observation.history.ever_received.contains(&key) {
                return Err(format!(
                    "the sender saw ({}, {}) acknowledged but its receipt never committed",
                    event.account, event.event_id
                ));
            }
        }
        Ok(())
    }
}
