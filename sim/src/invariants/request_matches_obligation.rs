//! Every request sent to the provider carries a committed obligation's persisted payload.
//!
//! A relay that rebuilds the payload from mutable data sends a different request under the same
//! key (a provider answers 422, or, worse, silently replays the old result), and a request for an
//! operation with no committed obligation was caused by something that may yet roll back.
//! Checked on every send, not only on sends that produced an effect.
//!
//! Payloads are compared as JSON values ([`same_payload`]): the persisted text sent with its
//! fields in another order, or other spacing, is the same payload.

use crate::provider::same_payload;

use super::{Invariant, InvariantKind, Observation};

pub struct RequestMatchesObligation;

impl Invariant for RequestMatchesObligation {
    fn name(&self) -> &'static str {
        "request-matches-obligation"
    }

    fn description(&self) -> &'static str {
        "every request to the provider carries a committed obligation's persisted payload"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for request in &observation.step.requests {
            let Some(payload) = &request.payload else {
                continue;
            };
            let Ok(operation) = observation.domain.operation_of(payload) else {
                return Err(format!(
                    "{} sent an unreadable payload under key {}",
                    request.process_id, request.key
                ));
            };
            let mut obligations = observation.db.obligations_for(&operation).peekable();
            if obligations.peek().is_none() {
                return Err(format!(
                    "{} sent a request for {operation} (key {}) with no committed obligation",
                    request.process_id, request.key
                ));
            }
            if !obligations.any(|obligation| same_payload(&obligation.payload, payload)) {
                return Err(format!(
                    "{} sent key {} with payload {payload}, which differs from the persisted one",
                    request.process_id, request.key
                ));
            }
        }
        Ok(())
    }
}
