//! No process calls the provider while holding a write transaction open.
//!
//! A call inside the transaction holds SQLite's single write lock for the whole network round
//! trip, and worse, the effect happens whether or not the transaction then commits: a rollback
//! after the provider acted leaves an effect with no record of why.

use super::{Invariant, InvariantKind, Observation};

pub struct NoCallInsideTransaction;

impl Invariant for NoCallInsideTransaction {
    fn name(&self) -> &'static str {
        "no-call-inside-transaction"
    }

    fn description(&self) -> &'static str {
        "no provider call is made with a database transaction open"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        match observation
            .step
            .requests
            .iter()
            .find(|request| request.in_transaction)
        {
            Some(request) => Err(format!(
                "{} called the provider (key {}) with a transaction open",
                request.process_id, request.key
            )),
            None => Ok(()),
        }
    }
}
