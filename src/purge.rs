//! The receipt purge job: deletes receipts older than a retention.
//!
//! Receipts only answer "was this upstream event already processed?", so they can be dropped once
//! the sender can no longer redeliver the event. Business state (orders, obligations) is never
//! purged with them: it is the guard that keeps a late redelivery from creating a second
//! obligation after its receipt is gone. This module must not touch any table but `receipts`.

use crate::env::{DbError, Env, int};

/// Deletes every receipt received before `older_than_ms` and returns how many went.
pub async fn purge_receipts(env: &dyn Env, older_than_ms: i64) -> Result<usize, DbError> {
    env.execute(
        "DELETE FROM receipts WHERE received_ms < ?1",
        &[int(older_than_ms)],
    )
    .await
}
