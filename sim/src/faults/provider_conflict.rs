//! Concurrent same-key requests at the provider: 409 while a key is held.
//!
//! The IETF draft answers 409 ("a request is outstanding for this Idempotency-Key") and Brandur's
//! reference implementation keeps a key locked for 90 s. This model keeps every key locked for a
//! while after the provider acted, so a retry that comes quickly (a second worker, a stale worker,
//! a lost reply) is told 409 and must come back later with the same key. Requests that overlap a
//! slow request get 409 whether or not this model is on.

use serde::{Deserialize, Serialize};

use commitgap::provider::ProviderRequest;

use super::{
    FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction, check_duration, from_json,
    swarm_enabled, to_json,
};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind {
    name: "provider-conflict",
    description: "the provider holds each key for a while after acting and answers 409 meanwhile",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    enabled: bool,
    lock_ms: i64,
}

struct ProviderConflict {
    settings: Settings,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    to_json(&Settings {
        enabled: swarm_enabled(rng),
        lock_ms: *rng.pick(&[1_000, 30_000, 90_000]),
    })
}

fn build(
    value: &serde_json::Value,
    _rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    let settings: Settings = from_json(value)?;
    check_duration("lock_ms", settings.lock_ms, 0)?;
    Ok(Box::new(ProviderConflict {
        settings,
        healed: false,
    }))
}

impl FaultModel for ProviderConflict {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn provider_faults(&mut self, _now_ms: i64, _request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        if self.settings.enabled && !self.healed {
            faults.conditions.lock_after_ms = self.settings.lock_ms;
        }
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
