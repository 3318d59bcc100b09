//! Duplicate and concurrent delivery: the same event in flight at several receivers at once.
//!
//! Senders deliver at least once and sometimes many times (one SendGrid user saw an average of
//! three copies per event, up to 46); Shopify users report duplicates "at the same exact time".
//! This model sends extra copies of a delivery attempt together with it, to receivers chosen like
//! the original, so the copies' transactions interleave statement by statement.

use serde::{Deserialize, Serialize};

use super::{
    COPIES_MAX, FaultContext, FaultKind, FaultModel, TimerAction, check, draw_ratio, from_json,
    swarm_enabled, to_json,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind {
    name: "duplicate-delivery",
    description: "the sender sends extra copies of a delivery at once, to one or several receivers",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    enabled: bool,
    /// Chance that an attempt comes with copies.
    rate: Ratio,
    copies_max: u32,
}

struct DuplicateDelivery {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    to_json(&Settings {
        enabled: swarm_enabled(rng),
        rate: draw_ratio(rng, &[(1, 10), (1, 3), (1, 1)]),
        copies_max: rng.between(1, 3) as u32,
    })
}

fn build(
    value: &serde_json::Value,
    rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    let settings: Settings = from_json(value)?;
    check("copies_max", settings.copies_max, 1, COPIES_MAX)?;
    Ok(Box::new(DuplicateDelivery {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for DuplicateDelivery {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn extra_deliveries(&mut self, _now_ms: i64) -> u32 {
        if !self.settings.enabled || self.healed || !self.rng.chance(self.settings.rate) {
            return 0;
        }
        self.rng.between(1, i64::from(self.settings.copies_max)) as u32
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
