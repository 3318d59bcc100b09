//! What a payment's receipt commits with: the order's transition and its obligation. This is the
//! payments half of the pattern's `receipt-commits-with-its-work`, which asks the domain what a
//! receipt's work is ([`crate::domain::Domain::check_receipt_work`],
//! [`crate::domain::Domain::check_commit_work`]). It reads the committed view and the step's
//! commits only.

use std::collections::BTreeSet;

use super::{OrderStatus, PAYMENT, fulfillment_of, status_of};
use crate::domain::Domain;
use crate::record::CommitRecord;
use crate::rows::ObservedRow;
use crate::view::DbView;
use crate::workload::{EventSpec, Workload};

/// The receipt of `event` is committed: if it is a payment, its order has left
/// `awaiting_payment`, and if the order is paid, its fulfillment obligation exists.
pub(super) fn check_payment_receipt(db: &DbView, event: &EventSpec) -> Result<(), String> {
    if event.kind != PAYMENT {
        return Ok(());
    }
    let (tenant, order) = (&event.tenant, &event.subject);
    match db.entity(tenant, order).map(|row| status_of(&row.state)) {
        None => Err(format!(
            "receipt ({}, {}) is committed for order {tenant}/{order}, which does not exist",
            event.account, event.event_id
        )),
        Some(Some(OrderStatus::AwaitingPayment)) => Err(format!(
            "receipt ({}, {}) is committed but order {tenant}/{order} still awaits payment",
            event.account, event.event_id
        )),
        Some(Some(OrderStatus::Paid)) => {
            let operation = fulfillment_of(tenant, order);
            if db.obligations_for(&operation).next().is_none() {
                return Err(format!(
                    "receipt ({}, {}) is committed but no obligation for {operation} exists",
                    event.account, event.event_id
                ));
            }
            Ok(())
        }
        // A refund or a cancellation was applied: nothing is owed for this payment. A status
        // the domain does not know is the transition invariant's to judge.
        Some(_) => Ok(()),
    }
}

/// The per-commit rules: a transition to `paid` commits with a payment receipt and the
/// obligation; an obligation commits with its order's transition to `paid`.
pub(super) fn check_payment_commit(commit: &CommitRecord, workload: &Workload) -> Result<(), String> {
    let mut paid_orders = BTreeSet::new();
    let mut new_obligations = BTreeSet::new();
    let mut new_receipts = BTreeSet::new();
    for diff in &commit.diffs {
        match (&diff.before, &diff.after) {
            (Some(ObservedRow::Entity(before)), Some(ObservedRow::Entity(after)))
                if status_of(&before.state) == Some(OrderStatus::AwaitingPayment)
                    && status_of(&after.state) == Some(OrderStatus::Paid) =>
            {
                paid_orders.insert(fulfillment_of(&after.tenant, &after.subject));
            }
            (None, Some(ObservedRow::Obligation(obligation))) => {
                new_obligations.insert(crate::view::operation_of(
                    &|payload: &str| super::Payments.operation_of(payload),
                    obligation,
                ));
            }
            (before, Some(ObservedRow::Receipt(receipt))) if before.is_none() || before != &diff.after => {
                if let Some(event) = workload.event(&receipt.account, &receipt.event_id)
                    && event.kind == PAYMENT
                {
                    new_receipts.insert(fulfillment_of(&event.tenant, &event.subject));
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
