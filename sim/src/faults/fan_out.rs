//! Fan-out: one event delivered to several subscriptions.
//!
//! Shopify: "if you have more than one subscription for the same topic, then you'll receive
//! several webhooks for the same event (one per subscription)"; GitHub shares one delivery GUID
//! across every hook subscribed to an event. Each subscription delivers and retries on its own,
//! with its own `webhook-id`, so the same event id arrives over independent streams.

use serde::{Deserialize, Serialize};

use super::{
    FaultContext, FaultKind, FaultModel, TimerAction, check, draw_ratio, from_json, swarm_enabled, to_json,
};
use crate::rng::{Ratio, SimRng};
use crate::workload::EventSpec;

pub const KIND: FaultKind = FaultKind {
    name: "fan-out",
    description: "one event is delivered through two or three subscriptions, each retrying on its own",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    enabled: bool,
    rate: Ratio,
    subscriptions_max: u32,
}

struct FanOut {
    settings: Settings,
    rng: SimRng,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    to_json(&Settings {
        enabled: swarm_enabled(rng),
        rate: draw_ratio(rng, &[(1, 4), (1, 1)]),
        subscriptions_max: rng.between(2, 3) as u32,
    })
}

fn build(
    value: &serde_json::Value,
    rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    let settings: Settings = from_json(value)?;
    check(
        "subscriptions_max",
        settings.subscriptions_max,
        1,
        crate::limits::FAN_OUT_MAX,
    )?;
    Ok(Box::new(FanOut { settings, rng }))
}

impl FaultModel for FanOut {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn shape_workload(
        &mut self,
        events: &mut Vec<EventSpec>,
        _context: &FaultContext,
        _owes_work: &dyn Fn(&EventSpec) -> bool,
    ) {
        if !self.settings.enabled {
            return;
        }
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
