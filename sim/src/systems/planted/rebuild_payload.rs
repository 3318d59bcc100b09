//! `rebuild-payload`: the relay rebuilds the payload from the current order row at send time.
//!
//! The request body is rebuilt from the order as it is now, not taken from the snapshot persisted
//! with the obligation. An amount update that commits after the payment changes what the provider
//! is asked to do, and the effect no longer matches the obligation.
//!
//! Only [`RelaySteps::payload`] differs from the reference; it must not change any other step.

use commitgap::env::{DbError, Env, text};
use commitgap::provider::FulfillmentPayload;
use commitgap::receiver::ReceiverSteps;
use commitgap::relay::{Claim, RelaySteps};

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct RebuildPayload;

impl PlantedBug for RebuildPayload {
    const NAME: &'static str = "rebuild-payload";
    const RULE_BROKEN: &'static str =
        "the relay rebuilds the payload from the current order row at send time";
}

impl ReceiverSteps for RebuildPayload {}

impl RelaySteps for RebuildPayload {
    async fn payload(&self, env: &dyn Env, claim: &Claim) -> Result<String, DbError> {
        let mut payload = FulfillmentPayload::parse(&claim.payload).map_err(DbError::Other)?;
        let rows = env
            .query(
                "SELECT amount_cents FROM orders WHERE tenant = ?1 AND id = ?2",
                &[text(&payload.tenant), text(&payload.order)],
            )
            .await?;
        if let Some(row) = rows.first() {
            payload.amount_cents = row.int(0)?;
        }
        Ok(payload.to_json())
    }
}
