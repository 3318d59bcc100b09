//! Concurrent same-key requests at the provider: 409 while a key is held.
//!
//! The IETF draft answers 409 ("a request is outstanding for this Idempotency-Key") and Brandur's
//! reference implementation keeps a key locked for 90 s. This model keeps every key locked for a
//! while after the provider acted, so a retry that comes quickly (a second worker, a stale worker,
//! a lost reply) is told 409 and must come back later with the same key. Requests that overlap a
//! slow request get 409 whether or not this model is on.

use serde::{Deserialize, Serialize};

use commitgap::provider::ProviderRequest;

use super::{Fault, FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction, check_duration};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind::of::<ProviderConflict>();

impl Fault for ProviderConflict {
    const NAME: &'static str = "provider-conflict";
    const DESCRIPTION: &'static str =
        "the provider holds each key for a while after acting and answers 409 meanwhile";
    const DETAILS: &'static str =
        "1–90 s";
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    lock_ms: i64,
}

struct ProviderConflict {
    settings: Settings,
    healed: bool,
}

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    // A relay that cannot tell whether the provider acted (its reply lost, or the call timed out)
    // comes back after the call timeout and the provider's processing bound; a lock shorter than
    // that is never met. So the lock runs past that moment by Brandur's 90 s or less.
    let relay_comes_back_ms = context.call_timeout_ms + context.provider_act_ms_max;
    Settings {
        lock_ms: relay_comes_back_ms + *rng.pick(&[1_000, 30_000, 90_000]),
    }
}

fn build(settings: Settings, _rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("lock_ms", settings.lock_ms, 0)?;
    Ok(Box::new(ProviderConflict {
        settings,
        healed: false,
    }))
}

impl FaultModel for ProviderConflict {
    fn provider_faults(&mut self, _now_ms: i64, _request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        if !self.healed {
            faults.conditions.lock_after_ms = self.settings.lock_ms;
        }
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
