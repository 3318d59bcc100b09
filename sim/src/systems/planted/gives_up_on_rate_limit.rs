//! `gives-up-on-rate-limit`: the relay retries a rate-limited send at once and gives the
//! obligation up after a few.
//!
//! The team reads a 429 as one more failure: it sends again at once, ignoring `Retry-After`, and
//! after three refusals buries the obligation as undeliverable. But a 429 performs nothing and
//! says when to come back; during a burst every immediate retry meets the limit again, and an
//! obligation the provider never refused ends dead, waiting for an operator, or is never sent.
//!
//! Only [`RelaySteps::record_reply`] differs from the reference, and only for a 429; it must not
//! change any other step.

use commitgap::env::{DbError, Env, int, text};
use commitgap::provider::{CallError, ProviderReply};
use commitgap::receiver::ReceiverSteps;
use commitgap::reference::Reference;
use commitgap::relay::{Claim, RelaySettings, RelaySteps, bury, fenced_write};

use super::PlantedBug;

/// How many rate-limited sends the team's relay takes before it gives up.
const GIVES_UP_AFTER: i64 = 3;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct GivesUpOnRateLimit;

impl PlantedBug for GivesUpOnRateLimit {
    const NAME: &'static str = "gives-up-on-rate-limit";
    const RULE_BROKEN: &'static str =
        "the relay retries a rate-limited send at once and gives the obligation up after a few";
}

impl ReceiverSteps for GivesUpOnRateLimit {}

impl RelaySteps for GivesUpOnRateLimit {
    async fn record_reply(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        claim: &Claim,
        reply: Result<ProviderReply, CallError>,
    ) -> Result<(), DbError> {
        let Ok(ProviderReply::RateLimited { .. }) = reply else {
            return Reference.record_reply(env, settings, claim, reply).await;
        };
        if claim.attempts >= GIVES_UP_AFTER {
            let reason = format!("rate limited {} times; giving up", claim.attempts);
            return bury(env, self.relay_tables(), claim, &reason).await;
        }
        // Again at once: the next attempt is due now, whatever Retry-After said.
        let params = [
            int(env.now_ms()),
            text("rate limited (429)"),
            text(&claim.operation_key),
            int(claim.lease_token),
        ];
        fenced_write(env, claim, self.relay_tables().retry_sql(), &params).await
    }
}
