//! `unfenced-completion`: the relay records completion without checking its lease token.
//!
//! A worker whose lease ran out mid-call (a pause, a slow provider) and was taken over by another
//! still records its outcome over the new holder's: the row says done by a worker that no longer
//! held it, and the new holder's own result is overwritten or dropped.
//!
//! Only [`RelaySteps::complete`] differs from the reference; it must not change any other step.

use commitgap::env::{DbError, Env, int, text};
use commitgap::receiver::ReceiverSteps;
use commitgap::relay::{Claim, RelaySteps, fenced_write};

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnfencedCompletion;

impl PlantedBug for UnfencedCompletion {
    const NAME: &'static str = "unfenced-completion";
    const RULE_BROKEN: &'static str = "the relay records completion without checking its lease token";
}

impl ReceiverSteps for UnfencedCompletion {}

impl RelaySteps for UnfencedCompletion {
    async fn complete(&self, env: &dyn Env, claim: &Claim, effect_id: &str) -> Result<(), DbError> {
        let params = [
            text(effect_id),
            int(env.now_ms()),
            text(&claim.operation_key),
            int(claim.lease_token),
        ];
        // The token is still bound (`?4 = ?4`) but no longer compared with the row's.
        fenced_write(
            env,
            claim,
            "UPDATE outbox SET status = 'done', provider_ref = ?1, completed_ms = ?2, \
             lease_expires_ms = NULL, last_error = NULL \
             WHERE operation_key = ?3 AND ?4 = ?4 AND status = 'pending'",
            &params,
        )
        .await
    }
}
