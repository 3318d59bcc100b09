//! Sender timeout shorter than the handler: the receiver keeps working after the sender gave up.
//!
//! Shopify waits 5 s, GitHub 10 s, Svix 15 s. A handler that stalls longer (a slow disk, a lock,
//! a GC pause) is still running when the sender counts the attempt as failed and retries, so the
//! retry races the original. This model pauses a receiver's handler, at one of its statements,
//! for between 1.1 and 3 times the sender's timeout.

use serde::{Deserialize, Serialize};

use super::{
    FaultContext, FaultKind, FaultModel, PendingOp, PointAction, ProcessRole, SchedulingPoint, TimerAction,
    check_duration, draw_ratio, from_json, swarm_enabled, to_json,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind {
    name: "slow-handler",
    description: "a handler stalls past the sender's timeout and finishes after the sender retried",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    enabled: bool,
    /// Chance of a stall at any one statement of a handler.
    rate: Ratio,
    pause_ms_min: i64,
    pause_ms_max: i64,
}

struct SlowHandler {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, context: &FaultContext) -> serde_json::Value {
    to_json(&Settings {
        enabled: swarm_enabled(rng),
        rate: draw_ratio(rng, &[(1, 100), (1, 20), (1, 5)]),
        pause_ms_min: context.sender_timeout_ms * 11 / 10,
        pause_ms_max: context.sender_timeout_ms * 3,
    })
}

fn build(
    value: &serde_json::Value,
    rng: SimRng,
    context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    let settings: Settings = from_json(value)?;
    // The stall is drawn from the sender's timeout; a configuration whose sender changed after
    // the draw would stall for less than the timeout and test nothing this model is for.
    check_duration(
        "pause_ms_min (more than sender_timeout_ms; draw the configuration again after changing the sender)",
        settings.pause_ms_min,
        context.sender_timeout_ms.saturating_add(1),
    )?;
    check_duration("pause_ms_max", settings.pause_ms_max, settings.pause_ms_min)?;
    Ok(Box::new(SlowHandler {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for SlowHandler {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn at_scheduling_point(&mut self, point: &SchedulingPoint<'_>) -> Option<PointAction> {
        let (role, op) = (point.role, point.op);
        let in_handler = role == ProcessRole::Receiver && matches!(op, PendingOp::Sql(_));
        if !self.settings.enabled || self.healed || !in_handler || !self.rng.chance(self.settings.rate) {
            return None;
        }
        Some(PointAction::Pause {
            duration_ms: self
                .rng
                .between(self.settings.pause_ms_min, self.settings.pause_ms_max),
        })
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
