//! `blind-retry-after-expiry`: the relay retries past the provider's key lifetime without looking
//! the key up first.
//!
//! Once the provider may have forgotten a key, a retry under it is no longer deduplicated: if the
//! first attempt took effect and its reply was lost, the blind retry is a second effect.
//!
//! Only [`RelaySteps::reconcile`] differs from the reference; it must not change any other step.

use commitgap::env::{DbError, Env};
use commitgap::receiver::ReceiverSteps;
use commitgap::relay::{Claim, Reconciled, RelaySettings, RelaySteps};

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct BlindRetryAfterExpiry;

impl PlantedBug for BlindRetryAfterExpiry {
    const NAME: &'static str = "blind-retry-after-expiry";
    const RULE_BROKEN: &'static str =
        "the relay retries past the provider's key lifetime without looking the key up first";
}

impl ReceiverSteps for BlindRetryAfterExpiry {}

impl RelaySteps for BlindRetryAfterExpiry {
    async fn reconcile(
        &self,
        _env: &dyn Env,
        _settings: &RelaySettings,
        _claim: &Claim,
        _idempotency_key: &str,
    ) -> Result<Reconciled, DbError> {
        // However old the key, the worker sends again as if the provider still remembered it.
        Ok(Reconciled::Send)
    }
}
