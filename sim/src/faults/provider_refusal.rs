//! Refusals for good: the provider declines some operations with a 4xx and keeps declining them.
//!
//! A card is declined, an address cannot be shipped to, an account was closed: the request was
//! well formed and the provider will never perform it. Stripe saves such a result under the
//! idempotency key like any other and replays it for the key's lifetime; a new request for the
//! operation after the key was forgotten is declined again, because the reason is the
//! operation's, not the request's. The relay must give the obligation up with the reason (an
//! operator's requeue only meets the refusal again), and only the worker that holds the lease may
//! record it: a worker that stalled past its lease and buries the obligation under the next
//! holder's lease breaks `completion-by-lease-holder`.
//!
//! Which operations are refused is decided once per operation, the first time a request for it
//! arrives, from this model's decision stream. Like sticky errors this is the provider's contract,
//! not a transient fault, so refusals go on after heal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use commitgap::provider::{FulfillmentPayload, ProviderRequest};

use super::{
    FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction, draw_ratio, from_json, to_json,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind {
    name: "provider-refusal",
    description: "the provider declines some operations for good (a 4xx stored under the key) and declines them again after the key is forgotten",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    enabled: bool,
    /// The share of operations the provider declines.
    rate: Ratio,
}

struct ProviderRefusal {
    settings: Settings,
    rng: SimRng,
    /// The decision for each operation seen so far.
    refused: BTreeMap<String, bool>,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    // On in a third of the seeds rather than swarm testing's three in four: a declined operation
    // is buried at once, and in most seeds it would take away the retries and completions other
    // bugs show in.
    to_json(&Settings {
        enabled: rng.chance(Ratio::new(1, 3)),
        rate: draw_ratio(rng, &[(1, 8), (1, 4), (1, 2)]),
    })
}

fn build(
    value: &serde_json::Value,
    rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(ProviderRefusal {
        settings: from_json(value)?,
        rng,
        refused: BTreeMap::new(),
    }))
}

impl FaultModel for ProviderRefusal {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn provider_faults(&mut self, _now_ms: i64, request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        let ProviderRequest::Send {
            idempotency_key,
            payload,
        } = request
        else {
            return faults;
        };
        if !self.settings.enabled {
            return faults;
        }
        // The operation, not the key, is what the provider declines; a payload that names none
        // is judged by its key.
        let operation = FulfillmentPayload::parse(payload)
            .map_or_else(|_| idempotency_key.clone(), |payload| payload.operation_key());
        let rate = self.settings.rate;
        let rng = &mut self.rng;
        faults.conditions.refuse = *self.refused.entry(operation).or_insert_with(|| rng.chance(rate));
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        // A refusal is the operation's for good; heal changes nothing.
        Vec::new()
    }
}
