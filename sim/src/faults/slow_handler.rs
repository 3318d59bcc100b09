//! Sender timeout shorter than the handler: the receiver keeps working after the sender gave up.
//!
//! Shopify waits 5 s, GitHub 10 s, Svix 15 s. A handler that stalls longer (a slow disk, a lock,
//! a GC pause) is still running when the sender counts the attempt as failed and retries, so the
//! retry races the original. This model pauses a receiver's handler, at one of its statements,
//! for between 1.1 and 3 times the sender's timeout.

use serde::{Deserialize, Serialize};

use super::{
    Fault, FaultContext, FaultKind, FaultModel, PendingOp, PointAction, ProcessRole, SchedulingPoint,
    TimerAction, check_duration, draw_ratio,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<SlowHandler>();

impl Fault for SlowHandler {
    const NAME: &'static str = "slow-handler";
    const DESCRIPTION: &'static str =
        "a handler stalls past the sender's timeout and finishes after the sender retried";
    const DETAILS: &'static str =
        "1.1–3 sender timeouts";
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }
}

/// The longest stall a seed file may set, in sender timeouts.
pub const PAUSE_TIMEOUTS_MAX: i64 = 10;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
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

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    Settings {
        rate: draw_ratio(rng, &[(1, 100), (1, 20), (1, 5)]),
        pause_ms_min: context.sender_timeout_ms * 11 / 10,
        pause_ms_max: context.sender_timeout_ms * 3,
    }
}

fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    // The stall is drawn from the sender's timeout; a configuration whose sender changed after
    // the draw would stall for less than the timeout and test nothing this model is for.
    check_duration(
        "pause_ms_min (more than sender_timeout_ms; draw the configuration again after changing the sender)",
        settings.pause_ms_min,
        context.sender_timeout_ms.saturating_add(1),
    )?;
    // A stall far past the timeout holds the receiver's transaction, and with it SQLite's write
    // lock, for longer than senders keep retrying the deliveries it blocks; a run of it could only
    // end in lost events that no receiver could have kept. Drawn stalls are at most three timeouts.
    crate::limits::check(
        &format!(
            "pause_ms_max (at least pause_ms_min, at most {PAUSE_TIMEOUTS_MAX} times sender_timeout_ms)"
        ),
        settings.pause_ms_max,
        settings.pause_ms_min,
        context.sender_timeout_ms.saturating_mul(PAUSE_TIMEOUTS_MAX),
    )?;
    Ok(Box::new(SlowHandler {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for SlowHandler {
    fn at_scheduling_point(&mut self, point: &SchedulingPoint<'_>) -> Option<PointAction> {
        let (role, op) = (point.role, point.op);
        let in_handler = role == ProcessRole::Receiver && matches!(op, PendingOp::Sql(_));
        if self.healed || !in_handler || !self.rng.chance(self.settings.rate) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;
    use crate::db::Backend;
    use crate::faults::to_json;

    #[test]
    fn the_longest_stall_a_file_may_set_leaves_the_reference_correct_and_a_longer_one_is_refused() {
        // A seed file once stalled a handler for a day: it held the write lock while every other
        // delivery met a busy database, and the run could not settle.
        for seed in 0..120 {
            let mut config = SimConfig::draw(seed, Backend::Memdb);
            let longest_ms = config.sender_timeout_ms * PAUSE_TIMEOUTS_MAX;
            config.faults.insert(
                KIND.name.to_owned(),
                to_json(&Settings {
                    rate: Ratio::new(1, 5),
                    pause_ms_min: longest_ms - 1,
                    pause_ms_max: longest_ms,
                }),
            );
            config.validate().unwrap();
            crate::run::assert_reference_survives(&config, seed);
            if seed == 0 {
                config.faults.get_mut(KIND.name).unwrap()["pause_ms_max"] = (longest_ms + 1).into();
                let refusal = config.validate().unwrap_err();
                assert!(
                    refusal.contains("at most 10 times sender_timeout_ms"),
                    "{refusal}"
                );
            }
        }
    }
}
