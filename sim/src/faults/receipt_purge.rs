//! Receipt purge: the deduplication table is emptied while the sender may still redeliver.
//!
//! The Standard Webhooks specification suggests keeping seen ids "for 5 minutes"; real senders
//! retry for days. This model runs the system's purge job on a cadence with an aggressive
//! retention, so redeliveries arrive after their receipts are gone and only the business state can
//! keep a second obligation out.

use serde::{Deserialize, Serialize};

use super::{
    FaultContext, FaultKind, FaultModel, TimerAction, check_duration, from_json, swarm_enabled, to_json,
};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind {
    name: "receipt-purge",
    description: "the purge job deletes receipts younger than the sender's redelivery horizon",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    enabled: bool,
    retention_ms: i64,
    cadence_ms: i64,
}

struct ReceiptPurge {
    settings: Settings,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    to_json(&Settings {
        enabled: swarm_enabled(rng),
        retention_ms: *rng.pick(&[60_000, 300_000, 3_600_000]),
        cadence_ms: *rng.pick(&[30_000, 300_000, 1_800_000]),
    })
}

fn build(
    value: &serde_json::Value,
    _rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    let settings: Settings = from_json(value)?;
    check_duration("cadence_ms", settings.cadence_ms, 1)?;
    check_duration("retention_ms", settings.retention_ms, 0)?;
    Ok(Box::new(ReceiptPurge {
        settings,
        healed: false,
    }))
}

impl FaultModel for ReceiptPurge {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn start(&mut self, now_ms: i64) -> Vec<TimerAction> {
        if !self.settings.enabled {
            return Vec::new();
        }
        vec![TimerAction::WakeAt {
            at_ms: now_ms + self.settings.cadence_ms,
        }]
    }

    fn on_timer(&mut self, now_ms: i64) -> Vec<TimerAction> {
        if self.healed {
            return Vec::new();
        }
        vec![
            TimerAction::PurgeReceipts {
                older_than_ms: now_ms - self.settings.retention_ms,
            },
            TimerAction::WakeAt {
                at_ms: now_ms + self.settings.cadence_ms,
            },
        ]
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
