//! Request lost on the way in: the delivery never reaches the receiver.
//!
//! A dropped connection, a load balancer that sheds the request, a proxy restart: the receiver
//! never sees the attempt and the sender waits out its timeout before retrying. Nothing is
//! committed, so only the sender's retry schedule stands between the event and its loss.

use super::{
    FaultContext, FaultKind, FaultModel, RateSettings, TimerAction, draw_ratio, from_json, swarm_enabled,
    to_json,
};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind {
    name: "request-lost",
    description: "a delivery is lost before it reaches the receiver; the sender times out",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

struct RequestLost {
    settings: RateSettings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    to_json(&RateSettings {
        enabled: swarm_enabled(rng),
        rate: draw_ratio(rng, &[(1, 20), (1, 5), (1, 2)]),
    })
}

fn build(
    value: &serde_json::Value,
    rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(RequestLost {
        settings: from_json(value)?,
        rng,
        healed: false,
    }))
}

impl FaultModel for RequestLost {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn drops_request(&mut self, _now_ms: i64) -> bool {
        self.settings.enabled && !self.healed && self.rng.chance(self.settings.rate)
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
