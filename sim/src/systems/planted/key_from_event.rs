//! `key-from-event`: the operation key is derived from the event id, and work is enqueued per
//! event.
//!
//! The team keys work by the event, and, thinking the key now makes the work idempotent, turns the
//! payment transition into "ensure paid": a payment for an order already paid still counts as
//! applied. Twin events for one payment (two event ids, one business operation) then enqueue two
//! obligations under two keys, and the provider ships twice.
//!
//! It overrides [`ReceiverSteps::transition_statement`] (for payments only) and
//! [`ReceiverSteps::operation_key`]; it must not change any other step.

use commitgap::provider::FulfillmentPayload;
use commitgap::receiver::{PAYMENT_SUCCEEDED, ReceiverSteps, WebhookEvent};
use commitgap::reference::Reference;
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyFromEvent;

impl PlantedBug for KeyFromEvent {
    const NAME: &'static str = "key-from-event";
    const RULE_BROKEN: &'static str =
        "the operation key is derived from the event id, and work is enqueued per event";
}

impl ReceiverSteps for KeyFromEvent {
    fn transition_statement(&self, kind: &str) -> &'static str {
        match kind {
            // "Ensure paid": an order already paid matches too.
            PAYMENT_SUCCEEDED => {
                "UPDATE orders SET status = 'paid', updated_ms = ?3 WHERE tenant = ?1 AND id = ?2 \
                 AND status IN ('awaiting_payment', 'paid') RETURNING 1"
            }
            other => Reference.transition_statement(other),
        }
    }

    fn operation_key(&self, event: &WebhookEvent, _payload: &FulfillmentPayload) -> String {
        format!("{}/{}/fulfill", event.account, event.id)
    }
}

impl RelaySteps for KeyFromEvent {}
