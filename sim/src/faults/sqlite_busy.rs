//! `SQLITE_BUSY` on BEGIN and a failed COMMIT.
//!
//! Beyond the contention the schedule produces by itself, SQLite returns `SQLITE_BUSY` when a
//! busy timeout runs out or when waiting could deadlock, and a COMMIT can fail with `SQLITE_BUSY`
//! while readers hold the database, leaving the transaction open. This model makes the statement
//! about to run fail that way without running it; the code under test must roll back or retry.

use serde::{Deserialize, Serialize};

use super::{
    Fault, FaultContext, FaultKind, FaultModel, PointAction, SchedulingPoint, StatementFailure, TimerAction,
    Verb, draw_ratio,
};
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<SqliteBusy>();

impl Fault for SqliteBusy {
    const NAME: &'static str = "sqlite-busy";
    const DESCRIPTION: &'static str =
        "BEGIN or COMMIT fails with SQLITE_BUSY (a failed COMMIT leaves the transaction open)";
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
    begin_rate: Ratio,
    commit_rate: Ratio,
}

struct SqliteBusy {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    let choices = [(1, 50), (1, 10), (1, 3)];
    Settings {
        begin_rate: draw_ratio(rng, &choices),
        commit_rate: draw_ratio(rng, &choices),
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(SqliteBusy {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for SqliteBusy {
    fn at_scheduling_point(&mut self, point: &SchedulingPoint<'_>) -> Option<PointAction> {
        let op = point.op;
        if self.healed {
            return None;
        }
        let rate = match op.statement().map(|statement| &statement.verb) {
            Some(Verb::Begin) => self.settings.begin_rate,
            Some(Verb::Commit) => self.settings.commit_rate,
            _ => return None,
        };
        self.rng.chance(rate).then_some(PointAction::FailStatement {
            failure: StatementFailure::Busy,
            rolled_back: false,
        })
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
