//! Worker pause longer than its lease: a stale worker that wakes up.
//!
//! Kleppmann's example: a client holding lease token 33 pauses (GC, a stopped VM), its lease
//! expires, another client takes token 34, and the first wakes up believing it still holds the
//! lease. This model pauses a relay worker at any of its steps for 1.5 to 4 times the lease, so
//! another worker rescues the obligation meanwhile; the stale worker must be fenced out by the
//! token when it writes. It pauses more often right after a provider reply, the moment of
//! Kleppmann's example, where the stale worker holds an answer and writes it when it wakes, and
//! right before a provider call, where the worker that took the lease over lingers inside it: a
//! stale write shows only if it lands while another worker is between its claim and its outcome.

use serde::{Deserialize, Serialize};

use super::{
    Fault, FaultContext, FaultKind, FaultModel, PendingOp, PointAction, ProcessRole, SchedulingPoint,
    TimerAction, check, check_duration, draw_ratio,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<WorkerPause>();

impl Fault for WorkerPause {
    const NAME: &'static str = "worker-pause";
    const DESCRIPTION: &'static str =
        "a relay worker pauses longer than its lease and then carries on as if it held it";
    const DETAILS: &'static str =
        "1.5–4 leases; more often right after a provider reply, where it then writes the reply as a stale \
        worker, and right before a provider call, where the worker that took over lingers inside its lease";
    const STALLS_WORKERS: bool = true;
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
    pause_ms_min: i64,
    pause_ms_max: i64,
    /// The rate at the point right after a provider reply, where a pause is Kleppmann's GC pause:
    /// the worker holds a reply and writes it once it wakes, after another worker took over.
    /// Absent in seed files written before it existed, which pause at `rate` everywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after_reply_rate: Option<Ratio>,
    /// The rate at the point right before a provider call: the worker holds a fresh lease and
    /// stalls inside it, which keeps the window open in which a stale worker's late write lands
    /// on another's lease. Absent in seed files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    before_call_rate: Option<Ratio>,
}

struct WorkerPause {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 100), (1, 20), (1, 5)]),
        pause_ms_min: (context.lease_ms * 3 / 2).min(context.stall_ms_max),
        pause_ms_max: (context.lease_ms * 4).min(context.stall_ms_max),
        after_reply_rate: Some(draw_ratio(rng, &[(1, 2), (3, 4)])),
        before_call_rate: Some(draw_ratio(rng, &[(1, 2), (3, 4)])),
    }
}

fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("pause_ms_min", settings.pause_ms_min, 1)?;
    // The relay is written to tolerate stalls up to relay.stall_ms_max; a longer pause (say,
    // drawn before that bound was lowered by hand) would test a contract the relay never made.
    check(
        "pause_ms_max (at most relay.stall_ms_max)",
        settings.pause_ms_max,
        settings.pause_ms_min,
        context.stall_ms_max,
    )?;
    Ok(Box::new(WorkerPause {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for WorkerPause {
    fn at_scheduling_point(&mut self, point: &SchedulingPoint<'_>) -> Option<PointAction> {
        let (role, op) = (point.role, point.op);
        if self.healed || role != ProcessRole::RelayWorker || *op == PendingOp::Wake {
            return None;
        }
        let rate = match (op, self.settings.after_reply_rate, self.settings.before_call_rate) {
            (PendingOp::ProviderReply, Some(rate), _) | (PendingOp::ProviderCall, _, Some(rate)) => rate,
            _ => self.settings.rate,
        };
        if !self.rng.chance(rate) {
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
