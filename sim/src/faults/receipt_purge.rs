//! Receipt purge: the deduplication table is emptied while the sender may still redeliver.
//!
//! The Standard Webhooks specification suggests keeping seen ids "for 5 minutes"; real senders
//! retry for days. This model runs the system's purge job on a cadence with an aggressive
//! retention, so redeliveries arrive after their receipts are gone and only the business state can
//! keep a second obligation out.

use serde::{Deserialize, Serialize};

use super::{Fault, FaultContext, FaultKind, FaultModel, TimerAction, check_duration};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind::of::<ReceiptPurge>();

impl Fault for ReceiptPurge {
    const NAME: &'static str = "receipt-purge";
    const DESCRIPTION: &'static str =
        "the purge job deletes receipts younger than the sender's redelivery horizon";
    const DETAILS: &'static str =
        "receipts older than 1 min, 5 min or 1 h, while the sender may still redeliver";
    const REMOVES_RECEIPTS: bool = true;
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }

    // `--receipt-retention-ms`: the retention every seed's purge keeps.
    fn apply_shape(settings: &mut Settings, shape: &crate::shape::WorkloadShape) {
        if let Some(retention_ms) = shape.receipt_retention_ms {
            settings.retention_ms = retention_ms;
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    retention_ms: i64,
    cadence_ms: i64,
}

struct ReceiptPurge {
    settings: Settings,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {
        retention_ms: *rng.pick(&[60_000, 300_000, 3_600_000]),
        cadence_ms: *rng.pick(&[30_000, 300_000, 1_800_000]),
    }
}

fn build(settings: Settings, _rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("cadence_ms", settings.cadence_ms, 1)?;
    check_duration("retention_ms", settings.retention_ms, 0)?;
    Ok(Box::new(ReceiptPurge {
        settings,
        healed: false,
    }))
}

impl FaultModel for ReceiptPurge {
    fn start(&mut self, now_ms: i64) -> Vec<TimerAction> {
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
