//! A refund that arrives before its payment never ends with a shipment.
//!
//! When the refund is applied while the order still awaits payment, the order is final as
//! refunded; the payment that arrives afterwards must not create an obligation, and nothing may be
//! shipped for the order.

use crate::domain::payments::{OrderStatus, fulfillment_of};
use crate::invariants::{Invariant, InvariantKind, Layer, Observation};
use crate::system::ObservedRow;

/// See the module documentation.
#[derive(Debug)]
pub struct RefundFirstNeverShips;

impl Invariant for RefundFirstNeverShips {
    fn name(&self) -> &'static str {
        "refund-first-never-ships"
    }

    fn description(&self) -> &'static str {
        "an order refunded before its payment gets no obligation and no shipment"
    }

    fn layer(&self) -> Layer {
        Layer::Domain
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        let refunded: Vec<(&str, &str)> = observation
            .history
            .moves_from_to(OrderStatus::AwaitingPayment.name(), OrderStatus::Refunded.name())
            .collect();
        if refunded.is_empty() {
            return Ok(());
        }
        let is_refunded = |operation: &str| {
            refunded
                .iter()
                .find(|(tenant, order)| fulfillment_of(tenant, order) == operation)
                .copied()
        };
        for &index in &observation.step.new_effects {
            let effect = observation.provider.effect(index);
            if let Some((tenant, order)) = is_refunded(&effect.operation) {
                return Err(format!(
                    "order {tenant}/{order} was refunded before payment but shipped as {}",
                    effect.id
                ));
            }
        }
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                if let (None, Some(ObservedRow::Obligation(obligation))) = (&diff.before, &diff.after) {
                    if let Some((tenant, order)) = is_refunded(&observation.operation_of(obligation)) {
                        return Err(format!(
                            "{} created obligation {} for order {tenant}/{order}, refunded before its payment",
                            commit.process_id, obligation.operation_key
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
