//! Planted bugs: deliberately broken variants of the reference system.
//!
//! Each variant breaks one design rule of the receiver or the relay, in the shape the bug takes
//! in real code bases (a team that keys work by the event also drops the order guard it no longer
//! thinks it needs; a team that checks for a receipt before inserting it has no unique index).
//! They exist so the simulator can prove, every time its tests run, that it finds the bug class
//! each rule guards against. Production code passes `None` wherever a `PlantedBug` is accepted;
//! nothing here may change the behaviour of the reference when no bug is planted.

use std::fmt;

/// One deliberately broken rule. See [`PlantedBug::rule_broken`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PlantedBug {
    ReceiptFirst,
    KeyPerAttempt,
    BlindRetryAfterExpiry,
    NoReceiptDedup,
    ReceiptAfter,
    CheckThenInsert,
    PerDeliveryDedupKey,
    RebuildPayload,
    KeyFromEvent,
    UnfencedCompletion,
    ShortLease,
    ReceiptOnlyGuard,
    AckBeforeCommit,
    CallInsideTransaction,
    OutboxOnOtherConnection,
    MarkSentBeforeCall,
    NewKeyAfterError,
    UnverifiedSignature,
    FutureTimestampRejected,
}

impl PlantedBug {
    /// Every planted bug, in a fixed order: the foundation's three first.
    pub const ALL: [PlantedBug; 19] = [
        PlantedBug::ReceiptFirst,
        PlantedBug::KeyPerAttempt,
        PlantedBug::BlindRetryAfterExpiry,
        PlantedBug::NoReceiptDedup,
        PlantedBug::ReceiptAfter,
        PlantedBug::CheckThenInsert,
        PlantedBug::PerDeliveryDedupKey,
        PlantedBug::RebuildPayload,
        PlantedBug::KeyFromEvent,
        PlantedBug::UnfencedCompletion,
        PlantedBug::ShortLease,
        PlantedBug::ReceiptOnlyGuard,
        PlantedBug::AckBeforeCommit,
        PlantedBug::CallInsideTransaction,
        PlantedBug::OutboxOnOtherConnection,
        PlantedBug::MarkSentBeforeCall,
        PlantedBug::NewKeyAfterError,
        PlantedBug::UnverifiedSignature,
        PlantedBug::FutureTimestampRejected,
    ];

    /// The name users pass to `--system`.
    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::ReceiptFirst => "receipt-first",
            PlantedBug::KeyPerAttempt => "key-per-attempt",
            PlantedBug::BlindRetryAfterExpiry => "blind-retry-after-expiry",
            PlantedBug::NoReceiptDedup => "no-receipt-dedup",
            PlantedBug::ReceiptAfter => "receipt-after",
            PlantedBug::CheckThenInsert => "check-then-insert",
            PlantedBug::PerDeliveryDedupKey => "per-delivery-dedup-key",
            PlantedBug::RebuildPayload => "rebuild-payload",
            PlantedBug::KeyFromEvent => "key-from-event",
            PlantedBug::UnfencedCompletion => "unfenced-completion",
            PlantedBug::ShortLease => "short-lease",
            PlantedBug::ReceiptOnlyGuard => "receipt-only-guard",
            PlantedBug::AckBeforeCommit => "ack-before-commit",
            PlantedBug::CallInsideTransaction => "call-inside-transaction",
            PlantedBug::OutboxOnOtherConnection => "outbox-on-other-connection",
            PlantedBug::MarkSentBeforeCall => "mark-sent-before-call",
            PlantedBug::NewKeyAfterError => "new-key-after-error",
            PlantedBug::UnverifiedSignature => "unverified-signature",
            PlantedBug::FutureTimestampRejected => "future-timestamp-rejected",
        }
    }

    /// The design rule this variant breaks, in one line.
    pub fn rule_broken(self) -> &'static str {
        match self {
            PlantedBug::ReceiptFirst => {
                "the receipt commits in its own transaction before the order transition and the obligation"
            }
            PlantedBug::KeyPerAttempt => {
                "the relay mints a fresh idempotency key on every attempt instead of reusing the persisted one"
            }
            PlantedBug::BlindRetryAfterExpiry => {
                "the relay retries past the provider's key lifetime without looking the key up first"
            }
            PlantedBug::NoReceiptDedup => {
                "every delivery is processed: no receipt check, no order guard, no unique operation key"
            }
            PlantedBug::ReceiptAfter => {
                "the order transition and obligation commit first, the receipt in a second transaction"
            }
            PlantedBug::CheckThenInsert => {
                "the receipt is looked up outside the write transaction and then inserted, with no unique index"
            }
            PlantedBug::PerDeliveryDedupKey => {
                "receipts deduplicate the delivery attempt instead of the event"
            }
            PlantedBug::RebuildPayload => {
                "the relay rebuilds the payload from the current order row at send time"
            }
            PlantedBug::KeyFromEvent => {
                "the operation key is derived from the event id, and work is enqueued per event"
            }
            PlantedBug::UnfencedCompletion => "the relay records completion without checking its lease token",
            PlantedBug::ShortLease => {
                "the lease is shorter than the provider's latency and there is no heartbeat"
            }
            PlantedBug::ReceiptOnlyGuard => {
                "no business-state guard: the order transition relies on receipts alone, which are purged"
            }
            PlantedBug::AckBeforeCommit => "the receiver answers success before COMMIT",
            PlantedBug::CallInsideTransaction => {
                "the receiver calls the provider inside its transaction instead of using the outbox"
            }
            PlantedBug::OutboxOnOtherConnection => {
                "the obligation is inserted on a second connection, outside the receipt's transaction"
            }
            PlantedBug::MarkSentBeforeCall => {
                "the relay marks the obligation done before calling the provider"
            }
            PlantedBug::NewKeyAfterError => {
                "the relay mints a new idempotency key after an ambiguous provider error"
            }
            PlantedBug::UnverifiedSignature => {
                "the receiver trusts the body without verifying the signature or the endpoint's account"
            }
            PlantedBug::FutureTimestampRejected => {
                "the receiver refuses any timestamp ahead of its own clock, leaving no tolerance that way"
            }
        }
    }

    pub fn from_name(name: &str) -> Option<PlantedBug> {
        PlantedBug::ALL.into_iter().find(|bug| bug.name() == name)
    }
}

impl fmt::Display for PlantedBug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut names: Vec<&str> = PlantedBug::ALL.iter().map(|bug| bug.name()).collect();
        for bug in PlantedBug::ALL {
            assert_eq!(PlantedBug::from_name(bug.name()), Some(bug));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PlantedBug::ALL.len());
    }
}
