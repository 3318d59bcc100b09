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

use super::{Fault, FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction, draw_ratio};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<ProviderRefusal>();

impl Fault for ProviderRefusal {
    const NAME: &'static str = "provider-refusal";
    const DESCRIPTION: &'static str = "the provider declines some operations for good (a 4xx stored under the key) and declines them again after the key is forgotten";
    const DETAILS: &'static str =
        "a declined card, a closed account: a 402 stored under the key like a result; it goes on after \
        heal; on in one seed in three, for an eighth, a quarter or half of the operations";
    type Settings = Settings;

    // On in a third of the seeds rather than swarm testing's three in four: a declined
    // operation is buried at once, and in most seeds it would take away the retries and
    // completions other bugs show in.
    fn draw_enabled(rng: &mut SimRng) -> bool {
        rng.chance(Ratio::new(1, 3))
    }

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    /// The share of operations the provider declines.
    rate: Ratio,
}

struct ProviderRefusal {
    settings: Settings,
    rng: SimRng,
    /// The decision for each operation seen so far.
    refused: BTreeMap<String, bool>,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 8), (1, 4), (1, 2)]),
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(ProviderRefusal {
        settings,
        rng,
        refused: BTreeMap::new(),
    }))
}

impl FaultModel for ProviderRefusal {
    fn provider_faults(&mut self, _now_ms: i64, request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        let ProviderRequest::Send {
            idempotency_key,
            payload,
        } = request
        else {
            return faults;
        };
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
