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

use super::{Fault, FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind::of::<StickyError>();

impl Fault for StickyError {
    const NAME: &'static str = "sticky-error";
    const DESCRIPTION: &'static str =
        "the provider caches a 5xx under the key and replays it until the key expires";
    const DETAILS: &'static str =
        "as Stripe v1 and Easyship do";
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

struct StickyError {}

fn draw(_rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {}
}

fn build(_settings: Settings, _rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(StickyError {}))
}

impl FaultModel for StickyError {
    fn provider_faults(&mut self, _now_ms: i64, _request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        faults.conditions.sticky_errors = true;
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
