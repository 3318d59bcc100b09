//! Lost acknowledgments: the work happened, the reply did not arrive.
//!
//! Two places. The receiver committed and answered 2xx, but the sender never saw the answer
//! (Svix: "a delivery that succeeded can still be sent again if your endpoint's response was
//! lost"), so it redelivers. The provider performed the effect, but its reply never reached the
//! relay worker, which sees a timeout and cannot tell whether the effect exists. Provider replies
//! are also lost wholesale during outage windows (a broken load balancer in front of a provider
//! that keeps working), which is what keeps an obligation owed for longer than a key lifetime.
//! Outages start while events are still arriving (within twice the emission window), because an
//! outage after the last obligation was settled can reveal nothing.

use serde::{Deserialize, Serialize};

use super::{Fault, FaultContext, FaultKind, FaultModel, TimerAction, check_windows, draw_ratio};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<LostAck>();

impl Fault for LostAck {
    const NAME: &'static str = "lost-ack";
    const DESCRIPTION: &'static str = "a webhook answer or a provider reply is lost after the work was done";
    const DETAILS: &'static str =
        "a webhook answer after the receiver committed; a provider reply after the provider acted, singly \
        or in outage windows of up to 3 h";
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
    webhook_answer_loss: Ratio,
    provider_reply_loss: Ratio,
    /// `(start_ms, duration_ms)` windows in which every provider reply is lost.
    provider_outages_ms: Vec<(i64, i64)>,
}

struct LostAck {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

const LOSS_CHOICES: [(u32, u32); 4] = [(0, 1), (1, 20), (1, 5), (1, 2)];

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    let webhook_answer_loss = draw_ratio(rng, &LOSS_CHOICES);
    let provider_reply_loss = draw_ratio(rng, &LOSS_CHOICES);
    let outage_count = rng.below(3);
    let provider_outages_ms = (0..outage_count)
        .map(|_| {
            let start_ms = rng.between(0, (2 * context.emit_window_ms).min(context.fault_phase_ms));
            let duration_ms = *rng.pick(&[60_000, 600_000, 3_600_000, 3 * 3_600_000]);
            (start_ms, duration_ms)
        })
        .collect();
    Settings {
        webhook_answer_loss,
        provider_reply_loss,
        provider_outages_ms,
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_windows("provider_outages_ms", &settings.provider_outages_ms)?;
    Ok(Box::new(LostAck {
        settings,
        rng,
        healed: false,
    }))
}

impl LostAck {
    fn active(&self) -> bool {
        !self.healed
    }
}

impl FaultModel for LostAck {
    fn drops_webhook_answer(&mut self, _now_ms: i64) -> bool {
        self.active() && self.rng.chance(self.settings.webhook_answer_loss)
    }

    fn drops_provider_reply(&mut self, now_ms: i64) -> bool {
        if !self.active() {
            return false;
        }
        let in_outage = self
            .settings
            .provider_outages_ms
            .iter()
            .any(|&(start_ms, duration_ms)| (start_ms..start_ms + duration_ms).contains(&now_ms));
        in_outage || self.rng.chance(self.settings.provider_reply_loss)
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
