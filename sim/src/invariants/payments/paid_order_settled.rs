//! After heal, every paid order (and every refunded order that was owed a shipment) has
//! exactly one effect, or a dead obligation with a reason.
//!
//! Together with `one-effect-per-operation` this is "effectively once": the work owed for a payment happened once, or an
//! operator was told why it could not.

use crate::domain::payments::{OrderStatus, fulfillment_of, status_of};
use crate::invariants::{Invariant, InvariantKind, Layer, Observation};
use crate::system::ObligationStatus;

/// See the module documentation.
#[derive(Debug)]
pub struct PaidOrderSettled;

impl Invariant for PaidOrderSettled {
    fn name(&self) -> &'static str {
        "paid-order-settled"
    }

    fn description(&self) -> &'static str {
        "after heal, every order owed a shipment has exactly one effect or a dead obligation with a reason"
    }

    fn layer(&self) -> Layer {
        Layer::Domain
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for order in observation.db.entities() {
            let operation = fulfillment_of(&order.tenant, &order.subject);
            let owed = match status_of(&order.state) {
                Some(OrderStatus::Paid) => true,
                Some(OrderStatus::Refunded) => observation.db.obligations_for(&operation).next().is_some(),
                Some(OrderStatus::AwaitingPayment | OrderStatus::Cancelled) | None => false,
            };
            if !owed {
                continue;
            }
            let effects = observation.provider.effects_for(&operation).count();
            let dead = observation
                .db
                .obligations_for(&operation)
                .any(|obligation| obligation.status == ObligationStatus::Dead);
            if effects != 1 && !dead {
                return Err(format!(
                    "order {}/{} is {} but has {effects} effects and no dead obligation",
                    order.tenant, order.subject, order.state.state
                ));
            }
        }
        Ok(())
    }
}
