//! After heal, no key is stuck at the provider.
//!
//! A key permanently in progress means a request the provider never finished; together with
//! `outbox-drains` (every obligation done or dead) this says every key that hit a 409, a cached
//! 500 or a mismatch was retried with backoff and reconciled, or given up with a reason.

use super::{Invariant, InvariantKind, Observation};

pub struct NoStuckKey;

impl Invariant for NoStuckKey {
    fn name(&self) -> &'static str {
        "no-stuck-key"
    }

    fn description(&self) -> &'static str {
        "after heal, no idempotency key is still being processed at the provider"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        let stuck: Vec<&str> = observation
            .provider
            .keys_in_progress()
            .map(String::as_str)
            .collect();
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "keys still in progress at the provider: {}",
                stuck.join(", ")
            ))
        }
    }
}
