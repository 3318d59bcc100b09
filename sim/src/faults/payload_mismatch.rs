//! Key/payload mismatch handled silently: the provider replays the old response.
//!
//! The IETF draft answers a reused key with a different payload with 422 and Stripe with 400,
//! which the provider model does by default; Qonto and Worldline instead return the cached
//! response "even if the request body differs", so a relay that changed the payload never learns
//! that its new request was ignored. This model switches the provider to that silent behaviour.
//!
//! It describes the provider, not a transient fault, and stays in force after heal.

use serde::{Deserialize, Serialize};

use commitgap::provider::ProviderRequest;

use super::{
    FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction, from_json, swarm_enabled, to_json,
};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind {
    name: "payload-mismatch",
    description: "the provider silently replays the old response for a reused key with a new payload",
    draw,
    build,
    acts_only_on_faulty_systems: true,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    enabled: bool,
}

struct PayloadMismatch {
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
    Ok(Box::new(PayloadMismatch {
        settings: from_json(value)?,
    }))
}

impl FaultModel for PayloadMismatch {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn provider_faults(&mut self, _now_ms: i64, _request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        faults.conditions.replay_on_mismatch = self.settings.enabled;
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
