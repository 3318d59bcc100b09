//! Provider failure before acting: a 5xx, singly or during an outage, with no effect performed.
//!
//! The ordinary transient failure: the provider refuses the request (overload, a deploy, an
//! incident) before doing anything. Checkout.com and PPRO store no result for it, so a retry
//! acts; providers that cache errors are modelled by `sticky-error`. Outage windows of up to
//! three hours keep an obligation owed across a key lifetime.

use serde::{Deserialize, Serialize};

use commitgap::provider::ProviderRequest;

use super::{
    Fault, FaultContext, FaultKind, FaultModel, ProviderFaults, TimerAction, check_windows, draw_ratio,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<ProviderFailure>();

impl Fault for ProviderFailure {
    const NAME: &'static str = "provider-failure";
    const DESCRIPTION: &'static str = "the provider answers 5xx before acting, sometimes for hours";
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
    /// `(start_ms, duration_ms)` windows in which every request fails.
    outages_ms: Vec<(i64, i64)>,
}

struct ProviderFailure {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    let rate = draw_ratio(rng, &[(1, 20), (1, 5), (1, 2)]);
    let outages_ms = (0..rng.below(2))
        .map(|_| {
            let start_ms = rng.between(0, (2 * context.emit_window_ms).min(context.fault_phase_ms));
            (start_ms, *rng.pick(&[60_000, 600_000, 3_600_000, 3 * 3_600_000]))
        })
        .collect();
    Settings { rate, outages_ms }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_windows("outages_ms", &settings.outages_ms)?;
    Ok(Box::new(ProviderFailure {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for ProviderFailure {
    fn provider_faults(&mut self, now_ms: i64, request: &ProviderRequest) -> ProviderFaults {
        let mut faults = ProviderFaults::default();
        if self.healed || !matches!(request, ProviderRequest::Send { .. }) {
            return faults;
        }
        let in_outage = self
            .settings
            .outages_ms
            .iter()
            .any(|&(start_ms, duration_ms)| (start_ms..start_ms + duration_ms).contains(&now_ms));
        faults.conditions.fail_before_acting = in_outage || self.rng.chance(self.settings.rate);
        faults
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
