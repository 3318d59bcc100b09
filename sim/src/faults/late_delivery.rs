//! Late delivery and manual resend after the horizon.
//!
//! Shopify warns that webhooks can arrive "up to a day late"; Stripe lets an operator resend any
//! event of the last 30 days, long after automatic retries stopped and long after a short receipt
//! retention purged its receipt. This model delays some events' first delivery by one to
//! twenty-four hours and schedules manual resends of others one to thirty hours after creation.

use serde::{Deserialize, Serialize};

use super::{Fault, FaultContext, FaultKind, FaultModel, TimerAction, draw_ratio};
use crate::rng::{Ratio, SimRng};
use crate::workload::{EventSpec, ExtraDelivery};

const HOUR_MS: i64 = 3_600_000;

pub const KIND: FaultKind = FaultKind::of::<LateDelivery>();

impl Fault for LateDelivery {
    const NAME: &'static str = "late-delivery";
    const DESCRIPTION: &'static str =
        "an event arrives hours late, or an operator resends it after the retries ended";
    const DETAILS: &'static str =
        "1–24 h late (Shopify: \"up to a day\"), or resent 1–30 h after creation";
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
    late_rate: Ratio,
    resend_rate: Ratio,
}

struct LateDelivery {
    settings: Settings,
    rng: SimRng,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {
        late_rate: draw_ratio(rng, &[(0, 1), (1, 10), (1, 3)]),
        resend_rate: draw_ratio(rng, &[(1, 10), (1, 3)]),
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(LateDelivery { settings, rng }))
}

impl FaultModel for LateDelivery {
    fn shape_workload(
        &mut self,
        events: &mut Vec<EventSpec>,
        _context: &FaultContext,
        _domain: &dyn crate::domain::Domain,
    ) {
        for event in events.iter_mut() {
            if self.rng.chance(self.settings.late_rate) {
                event.deliver_at_ms += self.rng.between(HOUR_MS, 24 * HOUR_MS);
            }
            if self.rng.chance(self.settings.resend_rate) {
                let at_ms = event.created_ms + self.rng.between(HOUR_MS, 30 * HOUR_MS);
                event
                    .extra_deliveries
                    .push(ExtraDelivery::new(at_ms, "manual resend", KIND.name));
            }
        }
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
