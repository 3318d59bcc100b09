//! `no-receipt-dedup`: every delivery is processed: no receipt check, no order guard, no unique
//! operation key.
//!
//! Each delivery inserts a receipt of its own and applies its event to the order whatever state
//! the order is in, and each payment enqueues another obligation. A redelivery, which every sender
//! makes, is a second receipt, a second transition and a second shipment owed.
//!
//! It overrides [`ReceiverSteps::record_receipt`], [`ReceiverSteps::transition_statement`],
//! [`ReceiverSteps::enqueue_obligation`] and the schema, in the shape a code base without
//! deduplication has them; it must not change the relay.

use commitgap::env::{DbError, Env, int, text};
use commitgap::receiver::{Incoming, Obligation, ReceiverSteps, Recorded, begin};
use commitgap::relay::RelaySteps;

use super::PlantedBug;
use super::receipt_only_guard::ReceiptOnlyGuard;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoReceiptDedup;

impl PlantedBug for NoReceiptDedup {
    const NAME: &'static str = "no-receipt-dedup";
    const RULE_BROKEN: &'static str =
        "every delivery is processed: no receipt check, no order guard, no unique operation key";
    /// Neither receipts nor obligations are unique.
    const SCHEMA_CHANGES: &'static [(&'static str, &'static str)] = &[
        ("    UNIQUE (account, event_id)\n", "    CHECK (account <> '')\n"),
        (
            "operation_key    TEXT    NOT NULL UNIQUE,",
            "operation_key    TEXT    NOT NULL,",
        ),
    ];
}

impl ReceiverSteps for NoReceiptDedup {
    async fn record_receipt(&self, env: &dyn Env, incoming: &Incoming<'_>) -> Result<Recorded, DbError> {
        if let Err(answer) = begin(env).await {
            return Ok(Recorded::Answered(answer));
        }
        // Recorded, never looked at: every delivery counts as new.
        let now_ms = env.now_ms();
        env.execute(
            "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES (?1, ?2, ?3, ?4)",
            &[
                text(&incoming.event.account),
                text(&incoming.event.id),
                int(now_ms),
                text(&incoming.digest),
            ],
        )
        .await?;
        Ok(Recorded::New)
    }

    fn transition_statement(&self, kind: &str) -> &'static str {
        // The order guard goes too, as in `receipt-only-guard`.
        ReceiptOnlyGuard.transition_statement(kind)
    }

    async fn enqueue_obligation(&self, env: &dyn Env, obligation: &Obligation) -> Result<(), DbError> {
        env.execute(
            "INSERT INTO outbox (operation_key, payload, status, next_attempt_ms, created_ms) \
             VALUES (?1, ?2, 'pending', ?3, ?3)",
            &[
                text(&obligation.operation_key),
                text(&obligation.payload),
                int(obligation.created_ms),
            ],
        )
        .await?;
        Ok(())
    }
}

impl RelaySteps for NoReceiptDedup {}
