//! `retry-while-in-flight`: the relay retries an ambiguous send after its ordinary backoff and
//! holds only the configured lease, without waiting out the provider's processing bound.
//!
//! After a timeout or a 409, the provider may still be working on the first request. Retrying
//! with the same key then puts two requests with one key at the provider at once; a provider that
//! locks keys answers the second with 409 and nothing breaks, but a provider that executes
//! concurrent requests twice performs the effect twice. The same goes for a worker that dies
//! mid-call when its lease is shorter than the provider may take: the next worker sends while the
//! first request is still being processed.
//!
//! Only [`RelaySteps::in_flight_wait_ms`] and [`RelaySteps::lease_ms`] differ from the reference;
//! it must not change any other step.

use commitgap::receiver::ReceiverSteps;
use commitgap::relay::{RelaySettings, RelaySteps};

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct RetryWhileInFlight;

impl PlantedBug for RetryWhileInFlight {
    const NAME: &'static str = "retry-while-in-flight";
    const RULE_BROKEN: &'static str = "the relay retries an ambiguous send after its ordinary backoff and holds only the configured lease, without waiting out the provider's processing bound";
}

impl ReceiverSteps for RetryWhileInFlight {}

impl RelaySteps for RetryWhileInFlight {
    fn lease_ms(&self, settings: &RelaySettings) -> i64 {
        settings.lease_ms
    }

    fn in_flight_wait_ms(&self, _settings: &RelaySettings) -> i64 {
        0
    }
}
