//! Sender clock skew: the sender stamps `webhook-timestamp` from a clock that is off.
//!
//! Receivers refuse a timestamp further than the tolerance (five minutes by the Standard Webhooks
//! libraries) from their own clock, in either direction, to bound replays; senders' clocks are
//! not perfect. For one window of the fault phase this model sets the sender's clock off by a
//! drawn amount: within the tolerance, where every genuine delivery must still be accepted
//! (a receiver that also refuses a timestamp slightly ahead of its clock fails here), or beyond
//! it, where deliveries are refused until the window ends and retries, with fresh timestamps,
//! get through. The clock is set right at the end of the window and at heal.

use commitgap::signature::DEFAULT_TOLERANCE_S;
use serde::{Deserialize, Serialize};

use super::{Fault, FaultContext, FaultKind, FaultModel, TimerAction, check, check_duration, swarm_enabled};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind::of::<SenderClockSkew>();

impl Fault for SenderClockSkew {
    const NAME: &'static str = "sender-clock-skew";
    const DESCRIPTION: &'static str =
        "the sender's clock is off, within or beyond the receivers' timestamp tolerance";
    const DETAILS: &'static str =
        "for a window, the sender stamps `webhook-timestamp` from a clock off by up to 4 min 50 s (within \
        the 5 min tolerance) or by 5–30 min (beyond it)";
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context).1
    }

    // The switch is drawn after the skew, as seeds have always drawn it.
    fn draw_switched(rng: &mut SimRng, context: &FaultContext) -> (bool, Settings) {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    /// How far the sender's clock is off during the window; negative is behind.
    offset_ms: i64,
    start_ms: i64,
    duration_ms: i64,
}

struct SenderClockSkew {
    settings: Settings,
    /// Whether the next timer starts the window (or ends it).
    starting: bool,
    healed: bool,
}

/// The largest skew this model draws, and the largest a seed file may ask for: six times the
/// receivers' tolerance.
const OFFSET_MS_MAX: i64 = 6 * DEFAULT_TOLERANCE_S * 1_000;

fn draw(rng: &mut SimRng, context: &FaultContext) -> (bool, Settings) {
    let tolerance_ms = DEFAULT_TOLERANCE_S * 1_000;
    // Within the tolerance, most of the time, with a margin for the network's latency; beyond it
    // by up to half an hour otherwise.
    let magnitude_ms = if rng.between(0, 2) > 0 {
        rng.between(0, tolerance_ms - 10_000)
    } else {
        rng.between(tolerance_ms + 1_000, OFFSET_MS_MAX)
    };
    let sign = if rng.between(0, 1) == 0 { -1 } else { 1 };
    let enabled = swarm_enabled(rng);
    let settings = Settings {
        offset_ms: sign * magnitude_ms,
        start_ms: rng.between(0, context.emit_window_ms),
        duration_ms: rng.between(60_000, context.fault_phase_ms.max(60_000)),
    };
    (enabled, settings)
}

fn build(settings: Settings, _rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("start_ms", settings.start_ms, 0)?;
    check_duration("duration_ms", settings.duration_ms, 1)?;
    // The stale-replay attack backdates a delivery by the tolerance and an hour; a sender clock
    // off by as much would make that replay look fresh, so the skew stays within the half hour
    // this model draws from.
    check("offset_ms", settings.offset_ms, -OFFSET_MS_MAX, OFFSET_MS_MAX)?;
    Ok(Box::new(SenderClockSkew {
        settings,
        starting: true,
        healed: false,
    }))
}

impl FaultModel for SenderClockSkew {
    fn start(&mut self, now_ms: i64) -> Vec<TimerAction> {
        vec![TimerAction::WakeAt {
            at_ms: now_ms + self.settings.start_ms,
        }]
    }

    fn on_timer(&mut self, now_ms: i64) -> Vec<TimerAction> {
        if self.healed {
            return Vec::new();
        }
        if std::mem::replace(&mut self.starting, false) {
            vec![
                TimerAction::SenderClock {
                    offset_ms: self.settings.offset_ms,
                },
                TimerAction::WakeAt {
                    at_ms: now_ms + self.settings.duration_ms,
                },
            ]
        } else {
            vec![TimerAction::SenderClock { offset_ms: 0 }]
        }
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
