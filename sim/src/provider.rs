//! The simulated downstream provider: an idempotency-key store in front of a ledger of effects.
//!
//! A `Send` with a key the store remembers is answered from the store (the same effect, marked
//! replayed) if the payload matches, and rejected with 422 if it does not; a `Send` with a key
//! the store does not remember performs a new effect. Keys are forgotten only when the key-expiry
//! fault model set a time for it, never earlier than the documented lifetime, as Stripe and
//! others promise ("at least 24 hours"). `Lookup` answers from the ledger, which is permanent, so
//! reconciliation works after a key is forgotten. The ledger is the ground truth the invariants
//! count effects in: an effect is identified by the business operation its payload names, not by
//! its key. This model must not look at the caller's database.

use std::collections::BTreeMap;

use commitgap::provider::{FulfillmentPayload, ProviderReply, ProviderRequest};

/// One real side effect (a shipment), as the provider performed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub id: String,
    /// The business operation named by the payload, e.g. `tenant-a/order-1/fulfill/v1`.
    pub operation: String,
    pub idempotency_key: String,
    pub payload: String,
    pub at_ms: i64,
}

#[derive(Debug, Clone)]
struct KeyEntry {
    payload: String,
    effect: usize,
    forget_at_ms: Option<i64>,
}

/// The provider's state.
#[derive(Debug, Default)]
pub struct ProviderModel {
    keys: BTreeMap<String, KeyEntry>,
    effects: Vec<Effect>,
    effects_by_operation: BTreeMap<String, Vec<usize>>,
    effect_by_key: BTreeMap<String, usize>,
    requests: Vec<ProviderRequest>,
}

/// What one request did at the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    pub reply: ProviderReply,
    /// Index of the effect this request performed, if it performed one.
    pub new_effect: Option<usize>,
    /// True when a forgotten key was reused, so the request counted as new.
    pub key_was_forgotten: bool,
}

impl ProviderModel {
    /// Handles one request at `now_ms`. `forget_at` is asked, only when a key is first stored,
    /// when the store may forget it.
    pub fn handle(
        &mut self,
        request: &ProviderRequest,
        now_ms: i64,
        forget_at: impl FnOnce() -> Option<i64>,
    ) -> Handled {
        self.requests.push(request.clone());
        match request {
            ProviderRequest::Lookup { idempotency_key } => {
                let reply = match self.effect_by_key.get(idempotency_key) {
                    Some(&index) => ProviderReply::Found {
                        effect_id: self.effects[index].id.clone(),
                    },
                    None => ProviderReply::NotFound,
                };
                Handled {
                    reply,
                    new_effect: None,
                    key_was_forgotten: false,
                }
            }
            ProviderRequest::Send {
                idempotency_key,
                payload,
            } => self.send(idempotency_key, payload, now_ms, forget_at),
        }
    }

    fn send(
        &mut self,
        key: &str,
        payload: &str,
        now_ms: i64,
        forget_at: impl FnOnce() -> Option<i64>,
    ) -> Handled {
        let mut key_was_forgotten = false;
        if let Some(entry) = self.keys.get(key) {
            if entry
                .forget_at_ms
                .is_some_and(|forget_at_ms| forget_at_ms <= now_ms)
            {
                self.keys.remove(key);
                key_was_forgotten = true;
            } else if entry.payload == payload {
                let effect_id = self.effects[entry.effect].id.clone();
                return Handled {
                    reply: ProviderReply::Accepted {
                        effect_id,
                        replayed: true,
                    },
                    new_effect: None,
                    key_was_forgotten,
                };
            } else {
                return Handled {
                    reply: ProviderReply::Rejected {
                        status: 422,
                        reason: "idempotency key reused with a different payload".to_owned(),
                    },
                    new_effect: None,
                    key_was_forgotten,
                };
            }
        }
        let operation = match FulfillmentPayload::parse(payload) {
            Ok(parsed) => parsed.operation_key(),
            Err(reason) => {
                return Handled {
                    reply: ProviderReply::Rejected { status: 400, reason },
                    new_effect: None,
                    key_was_forgotten,
                };
            }
        };
        let index = self.effects.len();
        let effect_id = format!("shp-{}", index + 1);
        self.effects.push(Effect {
            id: effect_id.clone(),
            operation: operation.clone(),
            idempotency_key: key.to_owned(),
            payload: payload.to_owned(),
            at_ms: now_ms,
        });
        self.effects_by_operation
            .entry(operation)
            .or_default()
            .push(index);
        self.effect_by_key.entry(key.to_owned()).or_insert(index);
        self.keys.insert(
            key.to_owned(),
            KeyEntry {
                payload: payload.to_owned(),
                effect: index,
                forget_at_ms: forget_at(),
            },
        );
        Handled {
            reply: ProviderReply::Accepted {
                effect_id,
                replayed: false,
            },
            new_effect: Some(index),
            key_was_forgotten,
        }
    }

    /// Every request that reached the provider, in order.
    pub fn requests(&self) -> &[ProviderRequest] {
        &self.requests
    }

    /// Every effect, in the order performed.
    pub fn effects(&self) -> &[Effect] {
        &self.effects
    }

    /// The effects performed for business operation `operation`.
    pub fn effects_for(&self, operation: &str) -> impl Iterator<Item = &Effect> {
        self.effects_by_operation
            .get(operation)
            .into_iter()
            .flatten()
            .map(|&index| &self.effects[index])
    }

    pub fn effect(&self, index: usize) -> &Effect {
        &self.effects[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(amount_cents: i64) -> String {
        FulfillmentPayload {
            tenant: "t".into(),
            order: "o".into(),
            operation: "fulfill".into(),
            version: 1,
            amount_cents,
        }
        .to_json()
    }

    fn send(key: &str, payload: &str) -> ProviderRequest {
        ProviderRequest::Send {
            idempotency_key: key.into(),
            payload: payload.into(),
        }
    }

    #[test]
    fn a_live_key_replays_and_a_forgotten_key_acts_again() {
        let mut provider = ProviderModel::default();
        let first = provider.handle(&send("k", &payload(1)), 0, || Some(1_000));
        assert_eq!(first.new_effect, Some(0));
        let replay = provider.handle(&send("k", &payload(1)), 999, || unreachable!());
        assert_eq!(
            replay.reply,
            ProviderReply::Accepted {
                effect_id: "shp-1".into(),
                replayed: true
            }
        );
        let mismatch = provider.handle(&send("k", &payload(2)), 999, || unreachable!());
        assert!(matches!(
            mismatch.reply,
            ProviderReply::Rejected { status: 422, .. }
        ));
        let after_expiry = provider.handle(&send("k", &payload(1)), 1_000, || None);
        assert!(after_expiry.key_was_forgotten);
        assert_eq!(after_expiry.new_effect, Some(1));
        assert_eq!(provider.effects_for("t/o/fulfill/v1").count(), 2);
    }

    #[test]
    fn lookup_survives_key_expiry_and_bad_payloads_are_rejected() {
        let mut provider = ProviderModel::default();
        provider.handle(&send("k", &payload(1)), 0, || Some(10));
        let lookup = ProviderRequest::Lookup {
            idempotency_key: "k".into(),
        };
        assert!(matches!(
            provider.handle(&lookup, 50, || None).reply,
            ProviderReply::Found { .. }
        ));
        let unknown = ProviderRequest::Lookup {
            idempotency_key: "other".into(),
        };
        assert_eq!(
            provider.handle(&unknown, 50, || None).reply,
            ProviderReply::NotFound
        );
        let bad = provider.handle(&send("x", "not json"), 0, || None);
        assert!(matches!(bad.reply, ProviderReply::Rejected { status: 400, .. }));
        assert_eq!(provider.effects().len(), 1);
    }
}
