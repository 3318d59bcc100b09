//! The payments domain's rules that the generic invariants do not cover, checked only for
//! systems in that domain ([`crate::domain::payments`](mod@crate::domain::payments)): a refund that overtakes its payment
//! leaves nothing shipped, and a paid order's fulfillment settles whatever the arrival order.
//! They read the observation like any invariant and must not change anything.

mod paid_order_settled;
mod refund_first_never_ships;

pub use paid_order_settled::PaidOrderSettled;
pub use refund_first_never_ships::RefundFirstNeverShips;
