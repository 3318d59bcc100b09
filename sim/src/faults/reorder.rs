//! Reordering: events about one order arrive in a different order than they were created.
//!
//! Stripe does not guarantee delivery order; `updated` arrives before `created`, a refund before
//! its payment. This model delays the first delivery of some events by up to twice the emission
//! window, so a refund, a cancellation or an older update can overtake the events created before
//! it. The receiver must end in the state the creation order gives, whatever the arrival order.

use super::{
    FaultContext, FaultKind, FaultModel, RateSettings, TimerAction, draw_ratio, from_json, swarm_enabled,
    to_json,
};
use crate::rng::SimRng;
use crate::workload::EventSpec;

pub const KIND: FaultKind = FaultKind {
    name: "reorder",
    description: "events about one order arrive out of creation order (a refund before its payment)",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

struct Reorder {
    settings: RateSettings,
    rng: SimRng,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    to_json(&RateSettings {
        enabled: swarm_enabled(rng),
        rate: draw_ratio(rng, &[(1, 4), (1, 2), (1, 1)]),
    })
}

fn build(
    value: &serde_json::Value,
    rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(Reorder {
        settings: from_json(value)?,
        rng,
    }))
}

impl FaultModel for Reorder {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn shape_workload(
        &mut self,
        events: &mut Vec<EventSpec>,
        context: &FaultContext,
        _owes_work: &dyn Fn(&EventSpec) -> bool,
    ) {
        if !self.settings.enabled {
            return;
        }
        for event in events.iter_mut() {
            if self.rng.chance(self.settings.rate) {
                event.deliver_at_ms += self.rng.between(0, 2 * context.emit_window_ms);
            }
        }
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
