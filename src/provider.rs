//! The contract of the downstream provider (a shipping service) that the relay calls.
//!
//! The provider deduplicates requests by an idempotency key, checks that a reused key carries the
//! same payload, and forgets keys some time after their first use (its key lifetime). It also
//! answers lookups by key from its permanent record of effects, which is how a caller reconciles
//! an obligation whose key may have been forgotten. This module defines the messages and the
//! payload format only; it must not model the provider's behaviour (the simulator's provider and
//! a real HTTP client each do that on their side of the contract).

use serde::{Deserialize, Serialize};

/// One request to the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderCall {
    pub request: ProviderRequest,
    /// How long the caller waits for a reply before it treats the outcome as unknown.
    pub timeout_ms: i64,
}

/// What is asked of the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderRequest {
    /// Perform the effect described by `payload`, at most once per live `idempotency_key`.
    Send {
        idempotency_key: String,
        payload: String,
    },
    /// Report whether an effect was ever performed for `idempotency_key`, even if the key itself
    /// has since been forgotten by the deduplication store.
    Lookup { idempotency_key: String },
}

impl ProviderRequest {
    pub fn idempotency_key(&self) -> &str {
        match self {
            ProviderRequest::Send { idempotency_key, .. } | ProviderRequest::Lookup { idempotency_key } => {
                idempotency_key
            }
        }
    }
}

/// The provider's answer to a request that reached it and whose reply reached the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderReply {
    /// The effect exists. `replayed` is true when this key had already been used and the
    /// provider returned the stored result instead of acting again.
    Accepted { effect_id: String, replayed: bool },
    /// Lookup: an effect was performed for the key.
    Found { effect_id: String },
    /// Lookup: no effect was ever performed for the key.
    NotFound,
    /// Another request with this key is still being processed (HTTP 409). Retry later with the
    /// same key.
    Conflict,
    /// Too many requests (HTTP 429): the provider refused the request before looking at it, and
    /// says, with `Retry-After`, when to try again (in milliseconds from the answer), if it says.
    /// Nothing was performed; the request is as good as new, and waits out the limit.
    RateLimited { retry_after_ms: Option<i64> },
    /// The request can never succeed as sent (HTTP 4xx other than 409), for example a key reused
    /// with a different payload (422) or a payload the provider cannot parse (400).
    Rejected { status: u16, reason: String },
}

/// The caller did not get a reply. The provider may or may not have acted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No reply within the caller's timeout.
    Timeout,
    /// The provider answered 5xx or the connection failed.
    Unavailable(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Timeout => write!(f, "provider call timed out"),
            CallError::Unavailable(reason) => write!(f, "provider unavailable: {reason}"),
        }
    }
}

/// The body of a fulfillment request: ship one order. The provider derives the business effect
/// from these fields, not from the idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FulfillmentPayload {
    pub tenant: String,
    pub order: String,
    /// The business operation, `fulfill` for the reference system.
    pub operation: String,
    /// The version of the operation: a deliberately different second shipment is `v2`.
    pub version: u32,
    /// What the order said when the obligation was created: an immutable snapshot.
    pub amount_cents: i64,
}

impl FulfillmentPayload {
    /// The canonical JSON form. Field order is fixed by the struct, so equal payloads give
    /// byte-identical text, which is what the provider fingerprints.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a payload of strings and integers always serializes")
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|error| format!("unreadable payload: {error}"))
    }

    /// The identity of the business operation, for example `tenant-a/order-1/fulfill/v1`.
    pub fn operation_key(&self) -> String {
        operation_key(&self.tenant, &self.order, &self.operation, self.version)
    }
}

/// Formats a business operation key: `<tenant>/<order>/<operation>/v<version>`.
pub fn operation_key(tenant: &str, order: &str, operation: &str, version: u32) -> String {
    format!("{tenant}/{order}/{operation}/v{version}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_and_keys_by_operation() {
        let payload = FulfillmentPayload {
            tenant: "tenant-a".into(),
            order: "order-1".into(),
            operation: "fulfill".into(),
            version: 1,
            amount_cents: 1250,
        };
        let text = payload.to_json();
        assert_eq!(FulfillmentPayload::parse(&text).unwrap(), payload);
        assert_eq!(payload.operation_key(), "tenant-a/order-1/fulfill/v1");
        assert!(FulfillmentPayload::parse("{\"tenant\":1}").is_err());
    }
}
