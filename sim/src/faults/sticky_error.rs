//! Sticky cached errors: the first attempt's 500 is replayed for the key until it expires.
//!
//! Stripe's v1 idempotency saves the result of the first request "including 500 errors";
//! Easyship caches 400 and 500 responses for 24 hours. A relay that retries with the same key gets
//! the same error back, however healthy the provider has become, until the key is forgotten; it
//! must bound its retries and reconcile or give the obligation up with a reason.
//!
//! Like key expiry, this is the provider's contract rather than a transient fault, so errors
//! cached before heal stay cached after it.

use serde::{Deserialize, Serialize};

use commitgap::provider::ProviderRequest;

use super::{
    FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction, from_json, swarm_enabled, to_json,
};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind {
    name: "sticky-error",
    description: "the provider caches a 5xx under the key and replays it until the key expires",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    enabled: bool,
}

struct StickyError {
    settings: Settings,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    to_json(&Settings {
        enabled: swarm_enabled(rng),
    })
}

fn build(
    value: &serde_json::Value,
    _rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(StickyError {
        settings: from_json(value)?,
    }))
}

impl FaultModel for StickyError {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn provider_faults(&mut self, _now_ms: i64, _request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        faults.conditions.sticky_errors = self.settings.enabled;
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
