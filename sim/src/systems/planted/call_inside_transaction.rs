//! `call-inside-transaction`: the receiver calls the provider inside its transaction instead of
//! using the outbox.
//!
//! There is no obligation: the provider is called with the write transaction open. If the
//! transaction then fails to commit (a crash, a busy database), the provider has acted for an
//! event whose receipt and transition never committed, and the sender's retry makes it act again
//! under a request that no obligation backs.
//!
//! Only [`ReceiverSteps::enqueue_obligation`] differs from the reference; it must not change any
//! other step.

use commitgap::env::{DbError, Env};
use commitgap::provider::{ProviderCall, ProviderReply, ProviderRequest};
use commitgap::receiver::{Obligation, ReceiverSteps};
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallInsideTransaction;

impl PlantedBug for CallInsideTransaction {
    const NAME: &'static str = "call-inside-transaction";
    const RULE_BROKEN: &'static str =
        "the receiver calls the provider inside its transaction instead of using the outbox";
}

impl ReceiverSteps for CallInsideTransaction {
    async fn enqueue_obligation(&self, env: &dyn Env, obligation: &Obligation) -> Result<(), DbError> {
        let call = ProviderCall {
            request: ProviderRequest::Send {
                idempotency_key: obligation.operation_key.clone(),
                payload: obligation.payload.clone(),
            },
            timeout_ms: 10_000,
        };
        match env.call_provider(&call).await {
            Ok(ProviderReply::Accepted { .. }) => Ok(()),
            Ok(other) => Err(DbError::Other(format!("provider answered {other:?}"))),
            Err(error) => Err(DbError::Other(error.to_string())),
        }
    }
}

impl RelaySteps for CallInsideTransaction {}
