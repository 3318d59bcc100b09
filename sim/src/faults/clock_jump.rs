//! Clock jump: a process's clock steps away from true time.
//!
//! NTP corrections, a VM restored from a snapshot, a misconfigured host: a process's clock jumps
//! forward or back. Leases, backoff, receipt retention and key-age checks all read that clock.
//! This model sets a process's clock offset, at a scheduling point, so that no two readings of
//! any two clocks disagree by more than the skew the relay is configured to tolerate (never beyond
//! it: no lease or margin can survive an unbounded clock). The relay's contract bounds how far
//! two clocks disagree, and a time one worker stamped is read later by another, so every offset
//! stays within half that bound of true time: two offsets drawn on either side then differ by at
//! most the bound, whenever each was taken. Offsets reset when a process restarts and when the
//! faults heal.

use super::{
    Fault, FaultContext, FaultKind, FaultModel, PointAction, SchedulingPoint, TimerAction, check, draw_ratio,
};
use crate::rng::{Ratio, SimRng};
use serde::{Deserialize, Serialize};

pub const KIND: FaultKind = FaultKind::of::<ClockJump>();

impl Fault for ClockJump {
    const NAME: &'static str = "clock-jump";
    const DESCRIPTION: &'static str =
        "a process's clock jumps forward or back, within the configured maximum skew";
    const DETAILS: &'static str =
        "the maximum skew the relay tolerates";
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
    /// The most two clocks may disagree: each offset stays within half of it.
    offset_ms_max: i64,
}

struct ClockJump {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 500), (1, 100), (1, 20)]),
        offset_ms_max: context.clock_skew_ms_max,
    }
}

fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    // The relay is told how far clocks may drift (`relay.clock_skew_ms_max`) and widens its
    // margins by that much; a jump beyond it breaks the contract, not the relay.
    check(
        "offset_ms_max (at most relay.clock_skew_ms_max)",
        settings.offset_ms_max,
        0,
        context.clock_skew_ms_max,
    )?;
    Ok(Box::new(ClockJump {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for ClockJump {
    fn at_scheduling_point(&mut self, _point: &SchedulingPoint<'_>) -> Option<PointAction> {
        if self.healed || !self.rng.chance(self.settings.rate) {
            return None;
        }
        // `offset_ms_max` bounds the disagreement of two clocks, so each keeps within half of it.
        let bound = self.settings.offset_ms_max / 2;
        Some(PointAction::ClockJump {
            offset_ms: self.rng.between(-bound, bound),
        })
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
