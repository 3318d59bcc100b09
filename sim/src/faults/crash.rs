//! Crash and restart of any process at any scheduling point.
//!
//! Models deploys, OOM kills and pod evictions: the process dies between two statements (inside
//! a transaction, between a provider call and recording its outcome, between COMMIT and the HTTP
//! reply), its connections close so SQLite rolls back whatever was open, and it comes back after
//! a delay that is usually seconds and sometimes an hour. A crash never loses a committed
//! transaction: application crashes do not, whatever the journal mode.

use serde::{Deserialize, Serialize};

use super::{
    Fault, FaultContext, FaultKind, FaultModel, PointAction, SchedulingPoint, TimerAction, check_duration,
    draw_ratio,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<Crash>();

impl Fault for Crash {
    const NAME: &'static str = "crash";
    const DESCRIPTION: &'static str =
        "a process dies at a scheduling point (mid-transaction included) and restarts later";
    const DETAILS: &'static str =
        "anywhere: mid-transaction, between a provider call and recording it, between COMMIT and the HTTP \
        reply; it restarts after seconds or, sometimes, an hour; SQLite rolls back whatever was open";
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
    /// Chance that a process crashes at any one of its scheduling points.
    rate: Ratio,
    /// Chance that a restart takes long (up to `slow_restart_ms_max`) instead of seconds.
    slow_restart: Ratio,
    fast_restart_ms_max: i64,
    slow_restart_ms_max: i64,
}

struct Crash {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 1_000), (1, 200), (1, 50)]),
        slow_restart: draw_ratio(rng, &[(0, 1), (1, 8)]),
        fast_restart_ms_max: *rng.pick(&[1_000, 10_000]),
        slow_restart_ms_max: *rng.pick(&[600_000, 3_600_000]),
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("fast_restart_ms_max", settings.fast_restart_ms_max, 1)?;
    check_duration("slow_restart_ms_max", settings.slow_restart_ms_max, 1)?;
    Ok(Box::new(Crash {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for Crash {
    fn at_scheduling_point(&mut self, _point: &SchedulingPoint<'_>) -> Option<PointAction> {
        if self.healed || !self.rng.chance(self.settings.rate) {
            return None;
        }
        let restart_ms_max = if self.rng.chance(self.settings.slow_restart) {
            self.settings.slow_restart_ms_max
        } else {
            self.settings.fast_restart_ms_max
        };
        Some(PointAction::Crash {
            restart_after_ms: self.rng.between(1, restart_ms_max),
        })
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
