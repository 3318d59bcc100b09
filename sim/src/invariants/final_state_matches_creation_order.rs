//! The final state of every order is the one its events give in creation order, whatever the
//! order (and number) of arrival.
//!
//! Refunds before payments, cancellations, and amount updates that overtake each other must all
//! end where the facts, applied in the order they happened, end. The one exception is a race
//! (`SimConfig::racing_orders`): a customer cancels an order while its payment is on the way, or a
//! refund is reported for an order that was cancelled. Which event was created first does not
//! decide it, since neither undoes the other; whichever arrives first does, so the status may be
//! any that some arrival order gives (`Workload::final_order_statuses`). The amount is always the
//! newest update's.

use super::{Invariant, InvariantKind, Observation};

pub struct FinalStateMatchesCreationOrder;

impl Invariant for FinalStateMatchesCreationOrder {
    fn name(&self) -> &'static str {
        "final-state-matches-creation-order"
    }

    fn description(&self) -> &'static str {
        "after heal, every order's status and amount are what its events give in creation order"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        if observation.sender.streams().is_empty() {
            // A scripted scenario delivers only what the test chooses; there is no full history.
            return Ok(());
        }
        for order in observation.db.orders() {
            let workload = observation.workload;
            let (Some((status, amount_cents)), Some(statuses)) = (
                workload.final_order_state(&order.tenant, &order.order),
                workload.final_order_statuses(&order.tenant, &order.order),
            ) else {
                continue;
            };
            if !statuses.contains(&order.status) || order.amount_cents != amount_cents {
                let racing = if statuses.len() > 1 {
                    format!(" (its racing events allow {statuses:?})")
                } else {
                    String::new()
                };
                return Err(format!(
                    "order {}/{} ended {:?} with {} cents; its events in creation order give {status:?} with {amount_cents}{racing}",
                    order.tenant, order.order, order.status, order.amount_cents
                ));
            }
        }
        Ok(())
    }
}
