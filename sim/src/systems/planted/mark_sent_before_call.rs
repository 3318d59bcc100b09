//! `mark-sent-before-call`: the relay marks the obligation done before calling the provider.
//!
//! The claim is followed at once by the write that marks the obligation done, before the provider
//! has acted. A crash, a lost request or a provider failure after that write leaves an obligation
//! that says done with no effect behind it, and nothing will ever send it again.
//!
//! Only [`RelaySteps::claim`] differs from the reference; it must not change any other step.

use commitgap::env::{DbError, Env};
use commitgap::receiver::ReceiverSteps;
use commitgap::reference::Reference;
use commitgap::relay::{Claim, RelaySettings, RelaySteps};

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct MarkSentBeforeCall;

impl PlantedBug for MarkSentBeforeCall {
    const NAME: &'static str = "mark-sent-before-call";
    const RULE_BROKEN: &'static str = "the relay marks the obligation done before calling the provider";
}

impl ReceiverSteps for MarkSentBeforeCall {}

impl RelaySteps for MarkSentBeforeCall {
    async fn claim(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        operation_key: &str,
    ) -> Result<Option<Claim>, DbError> {
        let claim = Reference.claim(env, settings, operation_key).await?;
        if let Some(claim) = &claim {
            // The row says done before the provider has acted.
            self.complete(env, claim, "pending-confirmation").await?;
        }
        Ok(claim)
    }
}
