//! A receipt and the work it stands for commit together, in both directions.
//!
//! For every committed receipt of a payment event, the order must have left `awaiting_payment`
//! and, if it was paid, its fulfillment obligation must exist; a receipt for an event the receiver
//! must reject (unknown order) must not exist at all. And per commit: a commit that moves an order
//! to `paid` also inserts a receipt of one of its payment events and its obligation, and a commit
//! that inserts an obligation also moves its order to `paid`. Checked for every order a commit
//! touched, through any of the three tables.

use std::collections::BTreeSet;

use commitgap::provider::FulfillmentPayload;

use super::{CommitRecord, Invariant, InvariantKind, Observation, fulfillment_of};
use crate::system::{ObservedRow, OrderStatus};
use crate::view::operation_of;
use crate::workload::{EventKind, Workload};

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
        for commit in &observation.step.commits {
            check_commit(commit, observation.workload)?;
        }
        let mut touched_orders = BTreeSet::new();
        let mut touched_receipts = BTreeSet::new();
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                for row in [&diff.before, &diff.after].into_iter().flatten() {
                    match row {
                        ObservedRow::Receipt(receipt) => {
                            touched_receipts.insert((receipt.account.as_str(), receipt.event_id.as_str()));
                        }
                        ObservedRow::Order(order) => {
                            touched_orders.insert((order.tenant.clone(), order.order.clone()));
                        }
                        ObservedRow::Obligation(obligation) => {
                            if let Ok(payload) = FulfillmentPayload::parse(&obligation.payload) {
                                touched_orders.insert((payload.tenant, payload.order));
                            }
                        }
                        // A system's own tables are its own invariants' business.
                        ObservedRow::Own(_) => {}
                    }
                }
            }
        }
        for &(account, event_id) in &touched_receipts {
            if observation.db.receipts(account, event_id).next().is_none() {
                continue;
            }
            let Some(event) = observation.workload.event(account, event_id) else {
                return Err(format!(
                    "receipt ({account}, {event_id}) is for an event the sender never sent"
                ));
            };
            if observation.workload.expects_rejection(event) {
                return Err(format!(
                    "receipt ({account}, {event_id}) is committed for {}/{}, an order that does not exist",
                    event.tenant, event.order
                ));
            }
            touched_orders.insert((event.tenant.clone(), event.order.clone()));
        }
        for (tenant, order) in &touched_orders {
            check_order(observation, tenant, order)?;
        }
        Ok(())
    }
}

/// Every committed receipt of a payment for `(tenant, order)` has its work committed.
fn check_order(observation: &Observation<'_>, tenant: &str, order: &str) -> Result<(), String> {
    for event in observation.workload.events_for_order(tenant, order) {
        if event.kind != EventKind::Payment
            || observation
                .db
                .receipts(&event.account, &event.event_id)
                .next()
                .is_none()
        {
            continue;
        }
        match observation.db.order(tenant, order).map(|row| row.status) {
            None => {
                return Err(format!(
                    "receipt ({}, {}) is committed for order {tenant}/{order}, which does not exist",
                    event.account, event.event_id
                ));
            }
            Some(OrderStatus::AwaitingPayment) => {
                return Err(format!(
                    "receipt ({}, {}) is committed but order {tenant}/{order} still awaits payment",
                    event.account, event.event_id
                ));
            }
            Some(OrderStatus::Paid) => {
                let operation = fulfillment_of(tenant, order);
                if observation.db.obligations_for(&operation).next().is_none() {
                    return Err(format!(
                        "receipt ({}, {}) is committed but no obligation for {operation} exists",
                        event.account, event.event_id
                    ));
                }
            }
            // A refund or a cancellation was applied: nothing is owed for this payment.
            Some(OrderStatus::Refunded | OrderStatus::Cancelled) => {}
        }
    }
    Ok(())
}

/// The per-commit rules: a transition to `paid` commits with a payment receipt and the
/// obligation; an obligation commits with its order's transition to `paid`.
fn check_commit(commit: &CommitRecord, workload: &Workload) -> Result<(), String> {
    let mut paid_orders = BTreeSet::new();
    let mut new_obligations = BTreeSet::new();
    let mut new_receipts = BTreeSet::new();
    for diff in &commit.diffs {
        match (&diff.before, &diff.after) {
            (Some(ObservedRow::Order(before)), Some(ObservedRow::Order(after)))
                if before.status == OrderStatus::AwaitingPayment && after.status == OrderStatus::Paid =>
            {
                paid_orders.insert(fulfillment_of(&after.tenant, &after.order));
            }
            (None, Some(ObservedRow::Obligation(obligation))) => {
                new_obligations.insert(operation_of(obligation));
            }
            (before, Some(ObservedRow::Receipt(receipt))) if before.is_none() || before != &diff.after => {
                if let Some(event) = workload.event(&receipt.account, &receipt.event_id)
                    && event.kind == EventKind::Payment
                {
                    new_receipts.insert(fulfillment_of(&event.tenant, &event.order));
                }
            }
            _ => {}
        }
    }
    for operation in &paid_orders {
        if !new_receipts.contains(operation) {
            return Err(format!(
                "{} committed the transition to paid for {operation} without a payment receipt in the same transaction",
                commit.process_id
            ));
        }
        if !new_obligations.contains(operation) {
            return Err(format!(
                "{} committed the transition to paid for {operation} without its obligation in the same transaction",
                commit.process_id
            ));
        }
    }
    if let Some(operation) = new_obligations
        .iter()
        .find(|operation| !paid_orders.contains(*operation))
    {
        return Err(format!(
            "{} committed an obligation for {operation} without its order's transition to paid",
            commit.process_id
        ));
    }
    Ok(())
}
