//! S3: a receipt never exists without the work it stands for.
//!
//! For every committed receipt of a payment event, the order must have left
//! `awaiting_payment` and its fulfillment obligation must exist, because all three commit in one
//! transaction (or the receipt is for an order paid earlier, whose obligation exists already).
//! Checked for every order a commit touched, through any of the three tables.

use std::collections::BTreeSet;

use commitgap::provider::FulfillmentPayload;

use super::{Invariant, InvariantKind, Observation, fulfillment_of};
use crate::system::{ObservedRow, OrderStatus};

pub struct ReceiptCommitsWithItsWork;

impl Invariant for ReceiptCommitsWithItsWork {
    fn name(&self) -> &'static str {
        "receipt-commits-with-its-work"
    }

    fn description(&self) -> &'static str {
        "no receipt is committed without its order transition and obligation"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        let mut touched_orders = BTreeSet::new();
        let mut touched_receipts = BTreeSet::new();
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                for row in [&diff.before, &diff.after].into_iter().flatten() {
                    match row {
                        ObservedRow::Receipt(receipt) => {
                            touched_receipts.insert((receipt.account.clone(), receipt.event_id.clone()));
                        }
                        ObservedRow::Order(order) => {
                            touched_orders.insert((order.tenant.clone(), order.order.clone()));
                        }
                        ObservedRow::Obligation(obligation) => {
                            if let Ok(payload) = FulfillmentPayload::parse(&obligation.payload) {
                                touched_orders.insert((payload.tenant, payload.order));
                            }
                        }
                    }
                }
            }
        }
        for (account, event_id) in &touched_receipts {
            if observation.db.receipts(account, event_id).next().is_none() {
                continue;
            }
            let Some(event) = observation.workload.event(account, event_id) else {
                return Err(format!(
                    "receipt ({account}, {event_id}) is for an event the sender never sent"
                ));
            };
            touched_orders.insert((event.tenant.clone(), event.order.clone()));
        }
        for (tenant, order) in &touched_orders {
            for event in observation.workload.events_for_order(tenant, order) {
                if observation
                    .db
                    .receipts(&event.account, &event.event_id)
                    .next()
                    .is_none()
                {
                    continue;
                }
                let status = observation.db.order(tenant, order).map(|row| row.status);
                if status != Some(OrderStatus::Paid) {
                    return Err(format!(
                        "receipt ({}, {}) is committed but order {tenant}/{order} is {}",
                        event.account,
                        event.event_id,
                        status.map_or("missing".to_owned(), |status| format!("{status:?}"))
                    ));
                }
                let operation = fulfillment_of(tenant, order);
                if observation.db.obligations_for(&operation).next().is_none() {
                    return Err(format!(
                        "receipt ({}, {}) is committed but no obligation for {operation} exists",
                        event.account, event.event_id
                    ));
                }
            }
        }
        Ok(())
    }
}
