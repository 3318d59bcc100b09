//! A full disk: writes and commits fail with `SQLITE_FULL` for a while, reads still work.
//!
//! A volume fills up (a log that grew, a backup written beside the database, a quota reached) and
//! SQLite can no longer grow the database or its journal: every statement that writes, and the
//! `COMMIT` that makes a transaction durable, fails with `SQLITE_FULL` until space is freed,
//! while reads go on. Now and then the failure surfaces as an I/O error instead. SQLite may or may
//! not roll back the open transaction when a statement fails this way, so this model decides that
//! too: the code must handle both a transaction that is still open and one that is gone. The
//! disk has room again at heal.

use serde::{Deserialize, Serialize};

use super::{
    Fault, FaultContext, FaultKind, FaultModel, PointAction, SchedulingPoint, StatementFailure, TimerAction,
    check_windows, draw_ratio,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<DiskFull>();

impl Fault for DiskFull {
    const NAME: &'static str = "disk-full";
    const DESCRIPTION: &'static str =
        "the disk fills up for a while: writes and commits fail with SQLITE_FULL, reads work";
    const DETAILS: &'static str =
        "one or two windows of 1 min, 10 min or 1 h in which one write in five, one in two or every write \
        (and `COMMIT`) fails, in some seeds now and then as `SQLITE_IOERR`; SQLite rolls the open \
        transaction back never, half the time or always, so the code must handle both; the disk has room \
        again at heal";
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
    /// `(start_ms, duration_ms)` windows in which the disk is full.
    windows_ms: Vec<(i64, i64)>,
    /// Chance that a write fails while the disk is full: other processes free and take space,
    /// so some writes get through.
    rate: Ratio,
    /// Chance that a failure is reported as an I/O error rather than a full disk.
    io_error: Ratio,
    /// Chance that SQLite rolls the open transaction back when a statement fails.
    rolls_back: Ratio,
}

struct DiskFull {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    let windows_ms = (0..rng.between(1, 2))
        .map(|_| {
            let start_ms = rng.between(0, (2 * context.emit_window_ms).min(context.fault_phase_ms));
            (start_ms, *rng.pick(&[60_000, 600_000, 3_600_000]))
        })
        .collect();
    Settings {
        windows_ms,
        rate: draw_ratio(rng, &[(1, 5), (1, 2), (1, 1)]),
        io_error: draw_ratio(rng, &[(0, 1), (1, 4)]),
        rolls_back: draw_ratio(rng, &[(0, 1), (1, 2), (1, 1)]),
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_windows("windows_ms", &settings.windows_ms)?;
    Ok(Box::new(DiskFull {
        settings,
        rng,
        healed: false,
    }))
}

impl DiskFull {
    fn disk_is_full(&self, now_ms: i64) -> bool {
        self.settings.windows_ms.iter().any(|&(start_ms, duration_ms)| {
            (start_ms..start_ms.saturating_add(duration_ms)).contains(&now_ms)
        })
    }
}

impl FaultModel for DiskFull {
    fn at_scheduling_point(&mut self, point: &SchedulingPoint<'_>) -> Option<PointAction> {
        let writes = point.op.statement().is_some_and(|statement| statement.writes());
        if self.healed || !writes || !self.disk_is_full(point.now_ms) {
            return None;
        }
        if !self.rng.chance(self.settings.rate) {
            return None;
        }
        let failure = if self.rng.chance(self.settings.io_error) {
            StatementFailure::Io
        } else {
            StatementFailure::Full
        };
        Some(PointAction::FailStatement {
            failure,
            rolled_back: self.rng.chance(self.settings.rolls_back),
        })
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
