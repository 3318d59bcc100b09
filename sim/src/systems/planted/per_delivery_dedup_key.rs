//! `per-delivery-dedup-key`: receipts deduplicate the delivery attempt instead of the event.
//!
//! The receipt is unique per delivery attempt (the message id with the attempt's timestamp), and
//! the sender refreshes the timestamp on every retry, so every retry of an event looks new and
//! records a receipt of its own.
//!
//! It overrides [`ReceiverSteps::record_receipt`] and makes receipts unique per delivery in the
//! schema; it must not change any other step.

use commitgap::env::{DbError, Env, int, text};
use commitgap::receiver::{Decision, Incoming, ReceiverSteps, Recorded, SuccessKind, begin};
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct PerDeliveryDedupKey;

impl PlantedBug for PerDeliveryDedupKey {
    const NAME: &'static str = "per-delivery-dedup-key";
    const RULE_BROKEN: &'static str = "receipts deduplicate the delivery attempt instead of the event";
    const SCHEMA_CHANGES: &'static [(&'static str, &'static str)] = &[(
        "    UNIQUE (account, event_id)\n",
        "    UNIQUE (account, delivery_id)\n",
    )];
}

impl ReceiverSteps for PerDeliveryDedupKey {
    async fn record_receipt(&self, env: &dyn Env, incoming: &Incoming<'_>) -> Result<Recorded, DbError> {
        if let Err(answer) = begin(env).await {
            return Ok(Recorded::Answered(answer));
        }
        let now_ms = env.now_ms();
        // The attempt's timestamp makes every retry "new".
        let headers = &incoming.delivery.headers;
        let delivery_id = format!("{}@{}", headers.id, headers.timestamp);
        let inserted = env
            .execute(
                "INSERT INTO receipts (account, event_id, received_ms, body_digest, delivery_id) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (account, delivery_id) DO NOTHING",
                &[
                    text(&incoming.event.account),
                    text(&incoming.event.id),
                    int(now_ms),
                    text(&incoming.digest),
                    text(&delivery_id),
                ],
            )
            .await?;
        if inserted == 0 {
            return Ok(Recorded::Seen(Decision::Commit(SuccessKind::Duplicate)));
        }
        Ok(Recorded::New)
    }
}

impl RelaySteps for PerDeliveryDedupKey {}
