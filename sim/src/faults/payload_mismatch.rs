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

use super::{Fault, FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind::of::<PayloadMismatch>();

impl Fault for PayloadMismatch {
    const NAME: &'static str = "payload-mismatch";
    const DESCRIPTION: &'static str =
        "the provider silently replays the old response for a reused key with a new payload";
    const DETAILS: &'static str =
        "as Qonto and Worldline do; it acts only on what a correct system never does, so a sweep of one \
        notes that it never fired";
    const ACTS_ONLY_ON_FAULTY_SYSTEMS: bool = true;
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {}

struct PayloadMismatch {}

fn draw(_rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {}
}

fn build(_settings: Settings, _rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(PayloadMismatch {}))
}

impl FaultModel for PayloadMismatch {
    fn provider_faults(&mut self, _now_ms: i64, _request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        faults.conditions.replay_on_mismatch = true;
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
