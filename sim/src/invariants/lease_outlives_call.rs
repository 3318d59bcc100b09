//! A worker's lease outlives its provider call, unless the worker was paused or its clock moved.
//!
//! A lease shorter than the provider's latency (with no heartbeat) expires while the call is in
//! flight, so a second worker claims the obligation and sends it again, concurrently. The check
//! runs when the reply (or the timeout) reaches the worker: the lease it holds must still be
//! valid by its own clock. Calls interrupted by a pause or a clock jump are exempt, since no
//! lease length can survive those; fencing handles them.

use super::{Invariant, InvariantKind, Observation};

pub struct LeaseOutlivesCall;

impl Invariant for LeaseOutlivesCall {
    fn name(&self) -> &'static str {
        "lease-outlives-call"
    }

    fn description(&self) -> &'static str {
        "a worker's lease is still valid when its provider call returns (no pause, no clock jump)"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for reply in &observation.step.replies {
            if reply.disturbed {
                continue;
            }
            let held = observation.db.obligations().find(|obligation| {
                obligation.lease_owner.as_deref() == Some(reply.process_id.as_str())
                    && (obligation.operation_key == reply.key
                        || reply.operation.as_deref() == Some(observation.operation_of(obligation).as_str()))
            });
            let Some(obligation) = held else {
                continue;
            };
            if let Some(expires_ms) = obligation.lease_expires_ms
                && expires_ms < reply.process_now_ms
            {
                return Err(format!(
                    "{}'s lease on {} expired {} ms before its provider call returned",
                    reply.process_id,
                    obligation.operation_key,
                    reply.process_now_ms - expires_ms
                ));
            }
        }
        Ok(())
    }
}
