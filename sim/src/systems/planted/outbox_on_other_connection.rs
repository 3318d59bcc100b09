//! `outbox-on-other-connection`: the obligation is inserted on a second connection, outside the
//! receipt's transaction.
//!
//! The receipt and the order transition commit in the receiver's transaction; the obligation is
//! written separately, after that commit, in a transaction of its own. A crash or a busy database
//! between the two leaves a paid order with a receipt and no shipment owed, and every redelivery
//! is a duplicate.
//!
//! It overrides [`ReceiverSteps::enqueue_obligation`] (nothing is written in the transaction) and
//! [`ReceiverSteps::commit_and_answer`] (the obligation is written after the commit); it must not
//! change any other step.

use commitgap::env::{DbError, Env, int, text};
use commitgap::receiver::{Answer, Incoming, Obligation, Outcome, ReceiverSteps};
use commitgap::reference::Reference;
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutboxOnOtherConnection;

impl PlantedBug for OutboxOnOtherConnection {
    const NAME: &'static str = "outbox-on-other-connection";
    const RULE_BROKEN: &'static str =
        "the obligation is inserted on a second connection, outside the receipt's transaction";
}

impl ReceiverSteps for OutboxOnOtherConnection {
    async fn enqueue_obligation(&self, _env: &dyn Env, _obligation: &Obligation) -> Result<(), DbError> {
        Ok(())
    }

    async fn commit_and_answer(
        &self,
        env: &dyn Env,
        incoming: &Incoming<'_>,
        outcome: Result<Outcome, DbError>,
    ) -> Answer {
        let obligation = outcome
            .as_ref()
            .ok()
            .and_then(|outcome| outcome.obligation.clone());
        let answer = Reference.commit_and_answer(env, incoming, outcome).await;
        let (Answer::Success(_), Some(obligation)) = (&answer, obligation) else {
            return answer;
        };
        // The other connection's transaction, stamped with its own time.
        let inserted = env
            .execute(
                "INSERT INTO outbox (operation_key, payload, status, next_attempt_ms, created_ms) \
                 VALUES (?1, ?2, 'pending', ?3, ?3)",
                &[
                    text(&obligation.operation_key),
                    text(&obligation.payload),
                    int(env.now_ms()),
                ],
            )
            .await;
        match inserted {
            Ok(_) => answer,
            Err(error) => Answer::RetryLater(error.to_string()),
        }
    }
}

impl RelaySteps for OutboxOnOtherConnection {}
