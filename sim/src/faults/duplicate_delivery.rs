//! Duplicate and concurrent delivery: the same event in flight at several receivers at once.
//!
//! Senders deliver at least once and sometimes many times (one SendGrid user saw an average of
//! three copies per event, up to 46); Shopify users report duplicates "at the same exact time".
//! This model sends extra copies of a delivery attempt together with it, to receivers chosen like
//! the original, so the copies' transactions interleave statement by statement.

use serde::{Deserialize, Serialize};

use super::{COPIES_MAX, Fault, FaultContext, FaultKind, FaultModel, TimerAction, check, draw_ratio};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<DuplicateDelivery>();

impl Fault for DuplicateDelivery {
    const NAME: &'static str = "duplicate-delivery";
    const DESCRIPTION: &'static str =
        "the sender sends extra copies of a delivery at once, to one or several receivers";
    const DETAILS: &'static str =
        "1–3 extra copies of an attempt, so their transactions interleave statement by statement";
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
    /// Chance that an attempt comes with copies.
    rate: Ratio,
    copies_max: u32,
}

struct DuplicateDelivery {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 10), (1, 3), (1, 1)]),
        copies_max: rng.between(1, 3) as u32,
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check("copies_max", settings.copies_max, 1, COPIES_MAX)?;
    Ok(Box::new(DuplicateDelivery {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for DuplicateDelivery {
    fn extra_deliveries(&mut self, _now_ms: i64) -> u32 {
        if self.healed || !self.rng.chance(self.settings.rate) {
            return 0;
        }
        self.rng.between(1, i64::from(self.settings.copies_max)) as u32
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
