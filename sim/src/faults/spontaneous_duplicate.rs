//! Spontaneous duplicates: the same event delivered again with no failure before it.
//!
//! Senders promise at-least-once delivery and mean it: one SendGrid user received each event three
//! times on average and some 46 times over 29 hours. This model adds, to some events, up to three
//! extra deliveries at random delays between a second and half an hour after creation.

use serde::{Deserialize, Serialize};

use super::{
    COPIES_MAX, Fault, FaultContext, FaultKind, FaultModel, TimerAction, check, check_duration, draw_ratio,
};
use crate::rng::{Ratio, SimRng};
use crate::workload::{EventSpec, ExtraDelivery};

pub const KIND: FaultKind = FaultKind::of::<SpontaneousDuplicate>();

impl Fault for SpontaneousDuplicate {
    const NAME: &'static str = "spontaneous-duplicate";
    const DESCRIPTION: &'static str =
        "the sender delivers an event again later although the first delivery succeeded";
    const DETAILS: &'static str =
        "seconds to half an hour later, with no failure before it";
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
    copies_max: u32,
    delay_ms_max: i64,
}

struct SpontaneousDuplicate {
    settings: Settings,
    rng: SimRng,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 10), (1, 3), (1, 1)]),
        copies_max: rng.between(1, 3) as u32,
        delay_ms_max: *rng.pick(&[10_000, 300_000, 1_800_000]),
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check("copies_max", settings.copies_max, 1, COPIES_MAX)?;
    check_duration("delay_ms_max", settings.delay_ms_max, 1_000)?;
    Ok(Box::new(SpontaneousDuplicate { settings, rng }))
}

impl FaultModel for SpontaneousDuplicate {
    fn shape_workload(
        &mut self,
        events: &mut Vec<EventSpec>,
        _context: &FaultContext,
        _domain: &dyn crate::domain::Domain,
    ) {
        for event in events.iter_mut() {
            if !self.rng.chance(self.settings.rate) {
                continue;
            }
            for _ in 0..self.rng.between(1, i64::from(self.settings.copies_max)) {
                let at_ms = event.deliver_at_ms + self.rng.between(1_000, self.settings.delay_ms_max);
                event
                    .extra_deliveries
                    .push(ExtraDelivery::new(at_ms, "spontaneous duplicate", KIND.name));
            }
        }
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
