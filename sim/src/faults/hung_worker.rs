//! Lease expiry and rescue of abandoned claims: a worker hangs holding a claim.
//!
//! A worker that stops making progress (a deadlocked thread, a network partition from the
//! provider) keeps its claim until the lease runs out; another worker must rescue the obligation,
//! as Oban's Lifeline and River's rescuer do. This model hangs a relay worker just before a
//! provider call or a statement, at most twice a run, for the longest stall the relay is promised
//! (`stall_ms_max`, many leases long); when it resumes, it is a stale worker with an old token.
//! The world caps a worker's pauses at one point, this model's and others' together, at
//! `stall_ms_max` (see `World::stall_room_ms`).

use serde::{Deserialize, Serialize};

use super::{
    Fault, FaultContext, FaultKind, FaultModel, PendingOp, PointAction, ProcessRole, SchedulingPoint,
    TimerAction, Verb, check, check_duration, draw_ratio,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<HungWorker>();

impl Fault for HungWorker {
    const NAME: &'static str = "hung-worker";
    const DESCRIPTION: &'static str =
        "a relay worker hangs holding a claim until its lease expires and another rescues it";
    const STALLS_WORKERS: bool = true;
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }
}

/// The most hangs one worker may suffer in a run.
const HANGS_MAX: u32 = 8;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    rate: Ratio,
    hang_ms: i64,
    hangs_max: u32,
}

struct HungWorker {
    settings: Settings,
    rng: SimRng,
    hangs: u32,
    healed: bool,
}

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 50), (1, 10)]),
        hang_ms: context.stall_ms_max.max(context.lease_ms * 2),
        hangs_max: rng.between(1, 2) as u32,
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("hang_ms", settings.hang_ms, 1)?;
    check("hangs_max", settings.hangs_max, 0, HANGS_MAX)?;
    Ok(Box::new(HungWorker {
        settings,
        rng,
        hangs: 0,
        healed: false,
    }))
}

impl FaultModel for HungWorker {
    fn at_scheduling_point(&mut self, point: &SchedulingPoint<'_>) -> Option<PointAction> {
        let (role, op) = (point.role, point.op);
        let eligible = role == ProcessRole::RelayWorker
            && match op {
                PendingOp::ProviderCall => true,
                // Any statement but the ends of a transaction.
                PendingOp::Sql(statement) => !matches!(statement.verb, Verb::Begin | Verb::Commit),
                _ => false,
            };
        if self.healed || !eligible || self.hangs >= self.settings.hangs_max {
            return None;
        }
        if !self.rng.chance(self.settings.rate) {
            return None;
        }
        self.hangs += 1;
        Some(PointAction::Pause {
            duration_ms: self.settings.hang_ms,
        })
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
