//! `check-then-insert`: the receipt is looked up outside the write transaction and then inserted,
//! with no unique index.
//!
//! Two concurrent deliveries of one event both look before either inserts, both see "new", and
//! both insert a receipt and apply the event. The lookup guards nothing, and a team that relies on
//! it never adds the unique index that would have caught the second insert.
//!
//! It overrides [`ReceiverSteps::record_receipt`] and drops the receipts' unique index from the
//! schema; it must not change any other step.

use commitgap::env::{DbError, Env, int, text};
use commitgap::receiver::{Answer, Incoming, ReceiverSteps, Recorded, SuccessKind, begin};
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckThenInsert;

impl PlantedBug for CheckThenInsert {
    const NAME: &'static str = "check-then-insert";
    const RULE_BROKEN: &'static str =
        "the receipt is looked up outside the write transaction and then inserted, with no unique index";
    const SCHEMA_CHANGES: &'static [(&'static str, &'static str)] =
        &[("    UNIQUE (account, event_id)\n", "    CHECK (account <> '')\n")];
}

impl ReceiverSteps for CheckThenInsert {
    async fn record_receipt(&self, env: &dyn Env, incoming: &Incoming<'_>) -> Result<Recorded, DbError> {
        let event = &incoming.event;
        let seen = env
            .query(
                "SELECT 1 FROM receipts WHERE account = ?1 AND event_id = ?2 LIMIT 1",
                &[text(&event.account), text(&event.id)],
            )
            .await;
        match seen {
            Ok(rows) if !rows.is_empty() => {
                return Ok(Recorded::Answered(Answer::Success(SuccessKind::Duplicate)));
            }
            Ok(_) => {}
            Err(error) => return Ok(Recorded::Answered(Answer::RetryLater(error.to_string()))),
        }
        // Another delivery may insert the same receipt between the lookup and this transaction.
        if let Err(answer) = begin(env).await {
            return Ok(Recorded::Answered(answer));
        }
        env.execute(
            "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES (?1, ?2, ?3, ?4)",
            &[
                text(&event.account),
                text(&event.id),
                int(env.now_ms()),
                text(&incoming.digest),
            ],
        )
        .await?;
        Ok(Recorded::New)
    }
}

impl RelaySteps for CheckThenInsert {}
