//! `receipt-only-guard`: no business-state guard: the order transition relies on receipts alone,
//! which are purged.
//!
//! Every transition moves the order whatever state it is in, and an amount update applies
//! whatever its age. While the event's receipt exists, redeliveries are duplicates and no harm
//! shows; once the purge job has deleted it, a late redelivery of a payment moves the order again
//! and enqueues its work a second time, and a stale update overwrites a newer amount.
//!
//! Only [`ReceiverSteps::transition_statement`] differs from the reference; it must not change any
//! other step.

use commitgap::receiver::{CHARGE_REFUNDED, ORDER_CANCELLED, PAYMENT_SUCCEEDED, ReceiverSteps};
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReceiptOnlyGuard;

impl PlantedBug for ReceiptOnlyGuard {
    const NAME: &'static str = "receipt-only-guard";
    const RULE_BROKEN: &'static str =
        "no business-state guard: the order transition relies on receipts alone, which are purged";
}

impl ReceiverSteps for ReceiptOnlyGuard {
    /// The reference's statements without their `status` and `amount_version_ms` conditions.
    fn transition_statement(&self, kind: &str) -> &'static str {
        match kind {
            PAYMENT_SUCCEEDED => {
                "UPDATE orders SET status = 'paid', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 RETURNING 1"
            }
            CHARGE_REFUNDED => {
                "UPDATE orders SET status = 'refunded', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 RETURNING 1"
            }
            ORDER_CANCELLED => {
                "UPDATE orders SET status = 'cancelled', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 RETURNING 1"
            }
            _ => {
                "UPDATE orders SET amount_cents = ?3, amount_version_ms = ?4, updated_ms = ?5 \
                 WHERE tenant = ?1 AND id = ?2 RETURNING 1"
            }
        }
    }
}

impl RelaySteps for ReceiptOnlyGuard {}
