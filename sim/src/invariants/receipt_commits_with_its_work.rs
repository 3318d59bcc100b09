//! A receipt and the work it stands for commit together, in both directions.
//!
//! The pattern's half, true in any domain: a receipt is never committed for an event the domain
//! says must be refused, nor for an event the sender never sent; an obligation is never committed
//! without the receipt of the event that owes it, in the same transaction (an obligation written
//! apart from its receipt is lost, or written twice, when the process dies between them); and a
//! receiver never changes an entity's state in a transaction that records no receipt.
//!
//! The domain's half: once an event's receipt is committed, the work it stands for is committed
//! too ([`crate::domain::Domain::check_receipt_work`]: by default, every operation the model says
//! the event owes for certain has an obligation once every event that owes it has committed; for payments, a paid order has left
//! `awaiting_payment` and has its fulfillment), and each commit keeps the domain's own rules of
//! what commits together ([`crate::domain::Domain::check_commit_work`]).

use std::collections::BTreeSet;

use super::{CommitRecord, Invariant, InvariantKind, Layer, Observation};
use crate::system::ObservedRow;

pub struct ReceiptCommitsWithItsWork;

impl Invariant for ReceiptCommitsWithItsWork {
    fn name(&self) -> &'static str {
        "receipt-commits-with-its-work"
    }

    fn description(&self) -> &'static str {
        "no receipt is committed without its work (state change and obligation), nor work without its receipt"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn layer(&self) -> Layer {
        Layer::Pattern
    }

    // It reads the commit, the rows it left, and the workload and model: all a journal shows.
    fn judges_commits(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for commit in &observation.step.commits {
            observation
                .domain
                .check_commit_work(commit, observation.workload)?;
            check_commit(commit)?;
        }
        let mut touched_subjects = BTreeSet::new();
        let mut touched_receipts = BTreeSet::new();
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                for row in [&diff.before, &diff.after].into_iter().flatten() {
                    match row {
                        ObservedRow::Receipt(receipt) => {
                            touched_receipts.insert((receipt.account.as_str(), receipt.event_id.as_str()));
                        }
                        ObservedRow::Entity(entity) => {
                            touched_subjects.insert((entity.tenant.as_str(), entity.subject.as_str()));
                        }
                        ObservedRow::Obligation(obligation) => {
                            let operation = observation.operation_of(obligation);
                            if let Some(owed) = observation.model.owed.get(&operation) {
                                for (account, event_id) in &owed.events {
                                    touched_receipts.insert((account.as_str(), event_id.as_str()));
                                }
                            }
                        }
                        // A system's own tables are its own invariants' business.
                        ObservedRow::Own(_) => {}
                    }
                }
            }
        }
        for (tenant, subject) in touched_subjects {
            for event in observation.workload.events_for_subject(tenant, subject) {
                touched_receipts.insert((event.account.as_str(), event.event_id.as_str()));
            }
        }
        for (account, event_id) in touched_receipts {
            if observation.db.receipts(account, event_id).next().is_none() {
                continue;
            }
            let Some(event) = observation.workload.event(account, event_id) else {
                return Err(format!(
                    "receipt ({account}, {event_id}) is for an event the sender never sent"
                ));
            };
            if let Some(refusal) = observation.model.refusal(account, event_id) {
                return Err(format!(
                    "receipt ({account}, {event_id}) is committed for an event the receiver must refuse: {}",
                    refusal.reason
                ));
            }
            observation
                .domain
                .check_receipt_work(&crate::domain::ReceiptWork {
                    event,
                    db: observation.db,
                    model: observation.model,
                    workload: observation.workload,
                    history: observation.history,
                })?;
        }
        Ok(())
    }
}

/// The pattern's per-commit rules: an obligation commits with a receipt, and a receiver's change
/// of business state commits with a receipt.
fn check_commit(commit: &CommitRecord) -> Result<(), String> {
    let mut new_receipt = false;
    let mut new_obligation = None;
    let mut changed_entity = None;
    for diff in &commit.diffs {
        match (&diff.before, &diff.after) {
            (before, Some(ObservedRow::Receipt(_))) if before.is_none() || before != &diff.after => {
                new_receipt = true;
            }
            (None, Some(ObservedRow::Obligation(obligation))) => {
                new_obligation.get_or_insert(obligation.operation_key.as_str());
            }
            (Some(ObservedRow::Entity(before)), Some(ObservedRow::Entity(after)))
                if before.state != after.state =>
            {
                changed_entity.get_or_insert(after);
            }
            _ => {}
        }
    }
    if new_receipt {
        return Ok(());
    }
    if let Some(operation_key) = new_obligation {
        return Err(format!(
            "{} committed obligation {operation_key} without the receipt of the event that owes it in the same transaction",
            commit.process_id
        ));
    }
    if let Some(entity) = changed_entity
        && commit.process_id.starts_with("receiver-")
    {
        return Err(format!(
            "{} changed {}/{} to {} without a receipt in the same transaction",
            commit.process_id, entity.tenant, entity.subject, entity.state
        ));
    }
    Ok(())
}
