//! `short-lease`: the lease is shorter than the provider's latency and there is no heartbeat.
//!
//! The lease is a tenth of the call timeout, so a slow call outlives it and a second worker claims
//! the obligation while the first is still waiting for the provider: two workers send the same
//! request at once.
//!
//! Only [`RelaySteps::lease_ms`] differs from the reference; it must not change any other step.

use commitgap::receiver::ReceiverSteps;
use commitgap::relay::{RelaySettings, RelaySteps};

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShortLease;

impl PlantedBug for ShortLease {
    const NAME: &'static str = "short-lease";
    const RULE_BROKEN: &'static str =
        "the lease is shorter than the provider's latency and there is no heartbeat";
}

impl ReceiverSteps for ShortLease {}

impl RelaySteps for ShortLease {
    fn lease_ms(&self, settings: &RelaySettings) -> i64 {
        (settings.call_timeout_ms / 10).max(1)
    }
}
