//! The final state of every order is the one its events give in creation order, whatever the
//! order (and number) of arrival.
//!
//! Refunds before payments, cancellations, and amount updates that overtake each other must all
//! end where the facts, applied in the order they happened, end.

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
            let Some((status, amount_cents)) = observation
                .workload
                .final_order_state(&order.tenant, &order.order)
            else {
                continue;
            };
            if order.status != status || order.amount_cents != amount_cents {
                return Err(format!(
                    "order {}/{} ended {:?} with {} cents; its events in creation order give {status:?} with {amount_cents}",
                    order.tenant, order.order, order.status, order.amount_cents
                ));
            }
        }
        Ok(())
    }
}
