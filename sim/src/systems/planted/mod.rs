//! Planted bugs: deliberately broken variants of the reference system, one file each.
//!
//! Each variant breaks one design rule of the receiver or the relay, in the shape the bug takes
//! in real code bases (a team that keys work by the event also drops the order guard it no longer
//! thinks it needs; a team that checks for a receipt before inserting it has no unique index). It
//! overrides as few of the reference's steps ([`ReceiverSteps`], [`RelaySteps`]) as it can, so its
//! file reads as a small diff against `src/receiver.rs` and `src/relay.rs`, and its module doc
//! names the rule it breaks. They exist so the simulator can prove, every time its tests run, that
//! it finds the bug class each rule guards against.
//!
//! [`all`] is the registry: adding a planted bug means one file here and one line there. Nothing
//! here may change the reference: a variant only overrides steps of its own type.

mod ack_before_commit;
mod blind_retry_after_expiry;
mod call_inside_transaction;
mod check_then_insert;
mod claim_ignores_live_lease;
mod future_timestamp_rejected;
mod gives_up_on_rate_limit;
mod key_from_event;
mod key_per_attempt;
mod mark_sent_before_call;
mod new_key_after_error;
mod no_receipt_dedup;
mod outbox_on_other_connection;
mod per_delivery_dedup_key;
mod rebuild_payload;
mod receipt_after;
mod receipt_first;
mod receipt_only_guard;
mod retry_while_in_flight;
mod short_lease;
mod unfenced_completion;
mod unverified_signature;

use std::sync::Arc;

use commitgap::receiver::ReceiverSteps;
use commitgap::relay::RelaySteps;
use commitgap::schema::altered_schema;

pub use ack_before_commit::AckBeforeCommit;
pub use blind_retry_after_expiry::BlindRetryAfterExpiry;
pub use call_inside_transaction::CallInsideTransaction;
pub use check_then_insert::CheckThenInsert;
pub use claim_ignores_live_lease::ClaimIgnoresLiveLease;
pub use future_timestamp_rejected::FutureTimestampRejected;
pub use gives_up_on_rate_limit::GivesUpOnRateLimit;
pub use key_from_event::KeyFromEvent;
pub use key_per_attempt::KeyPerAttempt;
pub use mark_sent_before_call::MarkSentBeforeCall;
pub use new_key_after_error::NewKeyAfterError;
pub use no_receipt_dedup::NoReceiptDedup;
pub use outbox_on_other_connection::OutboxOnOtherConnection;
pub use per_delivery_dedup_key::PerDeliveryDedupKey;
pub use rebuild_payload::RebuildPayload;
pub use receipt_after::ReceiptAfter;
pub use receipt_first::ReceiptFirst;
pub use receipt_only_guard::ReceiptOnlyGuard;
pub use retry_while_in_flight::RetryWhileInFlight;
pub use short_lease::ShortLease;
pub use unfenced_completion::UnfencedCompletion;
pub use unverified_signature::UnverifiedSignature;

use super::reference::{ReferenceSystem, Variant};
use crate::system::System;

/// Every planted bug, as a system, in a fixed order: the foundation's three first.
pub fn all() -> Vec<Arc<dyn System>> {
    vec![
        system(ReceiptFirst),
        system(KeyPerAttempt),
        system(BlindRetryAfterExpiry),
        system(NoReceiptDedup),
        system(ReceiptAfter),
        system(CheckThenInsert),
        system(PerDeliveryDedupKey),
        system(RebuildPayload),
        system(KeyFromEvent),
        system(UnfencedCompletion),
        system(ShortLease),
        system(ReceiptOnlyGuard),
        system(AckBeforeCommit),
        system(CallInsideTransaction),
        system(OutboxOnOtherConnection),
        system(MarkSentBeforeCall),
        system(NewKeyAfterError),
        system(UnverifiedSignature),
        system(FutureTimestampRejected),
        system(ClaimIgnoresLiveLease),
        system(RetryWhileInFlight),
        system(GivesUpOnRateLimit),
    ]
}

fn system<B: PlantedBug>(bug: B) -> Arc<dyn System> {
    Arc::new(ReferenceSystem::new(bug))
}

/// What a planted bug declares besides the steps it overrides.
pub trait PlantedBug: ReceiverSteps + RelaySteps + Send + Sync + 'static {
    /// The name users pass to `--system`, and seed files record.
    const NAME: &'static str;
    /// The design rule it breaks, in one line; its module doc opens with the same words.
    const RULE_BROKEN: &'static str;
    /// Text changes to the reference schema, as [`altered_schema`] applies them: the weaker
    /// schema the bug's code base would have. None by default.
    const SCHEMA_CHANGES: &'static [(&'static str, &'static str)] = &[];
    /// Whether the web framework commits what the handler left open after the answer (see
    /// `System::commits_after_answer`).
    const COMMITS_AFTER_ANSWER: bool = false;
}

impl<B: PlantedBug> Variant for B {
    fn name(&self) -> &'static str {
        B::NAME
    }

    fn description(&self) -> String {
        format!("planted bug: {}", B::RULE_BROKEN)
    }

    fn schema_sql(&self) -> String {
        altered_schema(B::SCHEMA_CHANGES)
    }

    fn commits_after_answer(&self) -> bool {
        B::COMMITS_AFTER_ANSWER
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use commitgap::schema::SCHEMA_SQL;

    use super::*;

    /// Each planted bug's file, its source, and the name and rule its type declares.
    fn sources() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
        macro_rules! source {
            ($file:literal, $bug:ty) => {
                (
                    $file,
                    include_str!($file),
                    <$bug as PlantedBug>::NAME,
                    <$bug as PlantedBug>::RULE_BROKEN,
                )
            };
        }
        vec![
            source!("receipt_first.rs", ReceiptFirst),
            source!("key_per_attempt.rs", KeyPerAttempt),
            source!("blind_retry_after_expiry.rs", BlindRetryAfterExpiry),
            source!("no_receipt_dedup.rs", NoReceiptDedup),
            source!("receipt_after.rs", ReceiptAfter),
            source!("check_then_insert.rs", CheckThenInsert),
            source!("per_delivery_dedup_key.rs", PerDeliveryDedupKey),
            source!("rebuild_payload.rs", RebuildPayload),
            source!("key_from_event.rs", KeyFromEvent),
            source!("unfenced_completion.rs", UnfencedCompletion),
            source!("short_lease.rs", ShortLease),
            source!("receipt_only_guard.rs", ReceiptOnlyGuard),
            source!("ack_before_commit.rs", AckBeforeCommit),
            source!("call_inside_transaction.rs", CallInsideTransaction),
            source!("outbox_on_other_connection.rs", OutboxOnOtherConnection),
            source!("mark_sent_before_call.rs", MarkSentBeforeCall),
            source!("new_key_after_error.rs", NewKeyAfterError),
            source!("unverified_signature.rs", UnverifiedSignature),
            source!("future_timestamp_rejected.rs", FutureTimestampRejected),
            source!("claim_ignores_live_lease.rs", ClaimIgnoresLiveLease),
            source!("retry_while_in_flight.rs", RetryWhileInFlight),
            source!("gives_up_on_rate_limit.rs", GivesUpOnRateLimit),
        ]
    }

    #[test]
    fn names_are_unique_and_every_bug_is_registered_once() {
        let names: Vec<String> = all().iter().map(|system| system.name().to_owned()).collect();
        let unique: BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(names.len(), sources().len());
        assert!(!names.iter().any(|name| name == "reference"));
    }

    #[test]
    fn each_module_doc_opens_with_the_rule_its_bug_breaks() {
        for (file, source, name, rule) in sources() {
            let doc: Vec<&str> = source
                .lines()
                .map_while(|line| line.strip_prefix("//!"))
                .map(str::trim)
                .take_while(|line| !line.is_empty())
                .collect();
            let first_paragraph = doc.join(" ");
            assert_eq!(
                first_paragraph,
                format!("`{name}`: {rule}."),
                "{file}: the module doc must open with the bug's name and the rule it breaks"
            );
        }
    }

    #[test]
    fn every_schema_creates_and_only_the_weakened_ones_differ() {
        for system in all() {
            let connection = rusqlite::Connection::open_in_memory().unwrap();
            system.set_up_schema(&connection).unwrap();
        }
        let weakened = [
            CheckThenInsert.schema_sql(),
            PerDeliveryDedupKey.schema_sql(),
            NoReceiptDedup.schema_sql(),
        ];
        for schema in &weakened {
            assert_ne!(schema, SCHEMA_SQL);
        }
        assert!(weakened[2].contains("operation_key    TEXT    NOT NULL,"));
        assert_eq!(ReceiptFirst.schema_sql(), SCHEMA_SQL);
    }
}
