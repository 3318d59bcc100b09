//! After heal, every event the receiver could apply was processed.
//!
//! The faults of the fault phase leave the sender enough of its schedule to redeliver (and
//! operators redeliver by hand for senders that do not retry), so an event whose receipt never
//! committed was lost by the receiver. Events for orders or accounts that do not exist are
//! excluded: the receiver must reject those, and `receipt-commits-with-its-work` checks it
//! changed nothing.

use super::{Invariant, InvariantKind, Observation};

pub struct EveryEventProcessed;

impl Invariant for EveryEventProcessed {
    fn name(&self) -> &'static str {
        "every-event-processed"
    }

    fn description(&self) -> &'static str {
        "after heal, every event its domain accepts had its receipt committed at some point"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        if observation.sender.streams().is_empty() {
            // A scripted scenario: the test made the deliveries and checks them itself.
            return Ok(());
        }
        for event in &observation.workload.events {
            if observation.model.expects_rejection(event) {
                continue;
            }
            let key = (event.account.clone(), event.event_id.clone());
            if !observation.history.ever_received.contains(&key) {
                return Err(format!(
                    "{} ({}, {}) for {}/{} was never processed: no receipt ever committed",
                    observation.domain.event_type(event),
                    event.account,
                    event.event_id,
                    event.tenant,
                    event.subject
                ));
            }
        }
        Ok(())
    }
}
