//! Fan-out: one event delivered to several subscriptions.
//!
//! Shopify: "if you have more than one subscription for the same topic, then you'll receive
//! several webhooks for the same event (one per subscription)"; GitHub shares one delivery GUID
//! across every hook subscribed to an event. Each subscription delivers and retries on its own,
//! with its own `webhook-id`, so the same event id arrives over independent streams.

use serde::{Deserialize, Serialize};

use super::{Fault, FaultContext, FaultKind, FaultModel, TimerAction, check, draw_ratio};
use crate::rng::{Ratio, SimRng};
use crate::workload::EventSpec;

pub const KIND: FaultKind = FaultKind::of::<FanOut>();

impl Fault for FanOut {
    const NAME: &'static str = "fan-out";
    const DESCRIPTION: &'static str =
        "one event is delivered through two or three subscriptions, each retrying on its own";
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
    subscriptions_max: u32,
}

struct FanOut {
    settings: Settings,
    rng: SimRng,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 4), (1, 1)]),
        subscriptions_max: rng.between(2, 3) as u32,
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check(
        "subscriptions_max",
        settings.subscriptions_max,
        1,
        crate::limits::FAN_OUT_MAX,
    )?;
    Ok(Box::new(FanOut { settings, rng }))
}

impl FaultModel for FanOut {
    fn shape_workload(
        &mut self,
        events: &mut Vec<EventSpec>,
        _context: &FaultContext,
        _domain: &dyn crate::domain::Domain,
    ) {
        for event in events.iter_mut() {
            if self.rng.chance(self.settings.rate) {
                event.subscriptions = self
                    .rng
                    .between(2, i64::from(self.settings.subscriptions_max.max(2)))
                    as u32;
            }
        }
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
