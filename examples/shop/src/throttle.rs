//! `partner-throttle`: for one window, while events arrive or just before heal, the fulfilment
//! partner answers every send 429 with the `Retry-After` the seed drew and performs nothing. The
//! limit is the partner's, not the incident's: a window open at heal runs on; none opens after.

use commitgap_sim::faults::{
    Fault, FaultContext, FaultKind, FaultModel, ProviderAnswer, ProviderFaults, ProviderRequest, TimerAction,
};
use commitgap_sim::rng::{Ratio, SimRng};
use serde::{Deserialize, Serialize};
/// The registry entry: what `App::fault` takes.
pub const KIND: FaultKind = FaultKind::of::<PartnerThrottle>();

/// The model's settings, as seed files write them.
#[derive(Debug, Serialize, Deserialize)]
pub struct Settings {
    /// When the throttle starts and how long it lasts, in milliseconds.
    window_ms: (i64, i64),
    /// The `Retry-After` each 429 carries, in milliseconds.
    retry_after_ms: i64,
}

/// The model in a run.
pub struct PartnerThrottle(Settings);

impl Fault for PartnerThrottle {
    const NAME: &'static str = "partner-throttle";
    const DESCRIPTION: &'static str = "the fulfilment partner answers every send 429 for a while";
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        let start_ms = if rng.chance(Ratio::new(1, 2)) {
            context.fault_phase_ms - rng.between(0, 300_000)
        } else {
            rng.between(0, context.emit_window_ms)
        };
        Settings {
            window_ms: (start_ms, *rng.pick(&[60_000, 600_000, 1_800_000])),
            retry_after_ms: *rng.pick(&[5_000, 60_000]),
        }
    }

    fn build(settings: Settings, _: SimRng, _: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        Ok(Box::new(PartnerThrottle(settings)))
    }
}

impl FaultModel for PartnerThrottle {
    fn provider_faults(&mut self, now_ms: i64, _request: &ProviderRequest) -> ProviderFaults {
        let (start_ms, duration_ms) = self.0.window_ms;
        let throttled = (start_ms..start_ms + duration_ms).contains(&now_ms);
        ProviderFaults {
            answer: throttled.then(|| ProviderAnswer::rate_limited(Some(self.0.retry_after_ms))),
            ..ProviderFaults::default()
        }
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
