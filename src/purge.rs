//! The receipt purge job: deletes receipts older than a retention.
//!
//! Receipts only answer "was this upstream event already processed?", so they can be dropped once
//! the sender can no longer redeliver the event. Business state (orders, obligations) is never
//! purged with them: it is the guard that keeps a late redelivery from creating a second
//! obligation after its receipt is gone. This module must not touch any table but `receipts`.

use crate::env::{DbError, Env};
use crate::tables::Tables;

/// Deletes every receipt received before `older_than_ms` from the reference's `receipts` table
/// and returns how many went. A system with receipts of its own calls
/// [`Tables::purge_receipts`] on its tables.
pub async fn purge_receipts(env: &dyn Env, older_than_ms: i64) -> Result<usize, DbError> {
    Tables::reference().purge_receipts(env, older_than_ms).await
}
