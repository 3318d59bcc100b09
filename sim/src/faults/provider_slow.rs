//! Provider slow past the caller's timeout while it acts.
//!
//! The caller gives up and sees an ambiguous timeout; the provider, still working, performs the
//! effect afterwards. A retry that arrives while the first request is still being processed finds
//! the key in progress (409). This model makes some sends take between 1.1 and 4 times the
//! caller's timeout before the provider acts.

use serde::{Deserialize, Serialize};

use commitgap::provider::ProviderRequest;

use super::{
    Fault, FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction, check, check_duration,
    draw_ratio,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<ProviderSlow>();

impl Fault for ProviderSlow {
    const NAME: &'static str = "provider-slow";
    const DESCRIPTION: &'static str =
        "the provider acts only after the caller's timeout, so the caller cannot tell";
    const DETAILS: &'static str =
        "1.1–4 call timeouts";
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
    rate: Ratio,
    act_after_ms_min: i64,
    act_after_ms_max: i64,
}

struct ProviderSlow {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 20), (1, 5), (1, 2)]),
        act_after_ms_min: context.call_timeout_ms * 11 / 10,
        act_after_ms_max: context.call_timeout_ms * super::PROVIDER_ACT_TIMEOUTS_MAX,
    }
}

fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("act_after_ms_min", settings.act_after_ms_min, 1)?;
    // The relay reconciles a key before it could have been forgotten with a margin of the call
    // timeout and the longest stall; a provider that sits on a request for longer than both acts
    // outside the contract the relay was written to, like a provider that forgets keys early.
    check(
        "act_after_ms_max (at most relay.call_timeout_ms + relay.stall_ms_max)",
        settings.act_after_ms_max,
        settings.act_after_ms_min,
        context.call_timeout_ms.saturating_add(context.stall_ms_max),
    )?;
    Ok(Box::new(ProviderSlow {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for ProviderSlow {
    fn provider_faults(&mut self, _now_ms: i64, request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        if !self.healed
            && matches!(request, ProviderRequest::Send { .. })
            && self.rng.chance(self.settings.rate)
        {
            faults.act_after_ms = Some(
                self.rng
                    .between(self.settings.act_after_ms_min, self.settings.act_after_ms_max),
            );
        }
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
