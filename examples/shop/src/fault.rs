//! `jobs-table-busy`: the shop's job queue is the table every worker and handler writes, and in
//! production it is where `SQLITE_BUSY` shows up. This model makes a statement on `jobs` fail
//! with `SQLITE_BUSY` before it runs, at a rate drawn per seed, during the fault phase only.
//!
//! It is written as a team writes one: against the public fault-model interface, with its own
//! settings and the decision stream the simulator gives it, so it changes no other model's draws.

use commitgap_sim::faults::{
    Fault, FaultContext, FaultKind, FaultModel, PointAction, SchedulingPoint, StatementFailure, TimerAction,
};
use commitgap_sim::rng::{Ratio, SimRng};
use serde::{Deserialize, Serialize};

/// The registry entry: what `App::fault` takes.
pub const KIND: FaultKind = FaultKind::of::<JobsTableBusy>();

/// The model's settings, as seed files write them; the simulator adds `enabled`, which
/// `--faults` and `--without-faults` switch.
#[derive(Debug, Serialize, Deserialize)]
pub struct Settings {
    /// One statement on `jobs` in this many fails.
    one_in: u32,
}

/// The model in a run: its settings and the decision stream the simulator gives it.
pub struct JobsTableBusy {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

impl Fault for JobsTableBusy {
    const NAME: &'static str = "jobs-table-busy";
    const DESCRIPTION: &'static str = "a statement on the shop's jobs table fails with SQLITE_BUSY";
    type Settings = Settings;

    // On in about half the seeds rather than the usual three in four.
    fn draw_enabled(rng: &mut SimRng) -> bool {
        rng.chance(Ratio::new(1, 2))
    }

    // A rate across an order of magnitude.
    fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
        Settings {
            one_in: *rng.pick(&[3_u32, 10, 30]),
        }
    }

    fn build(
        settings: Settings,
        rng: SimRng,
        _context: &FaultContext,
    ) -> Result<Box<dyn FaultModel>, String> {
        if !(1..=1_000).contains(&settings.one_in) {
            return Err("one_in: expected a whole number from 1 to 1000".to_owned());
        }
        Ok(Box::new(JobsTableBusy {
            settings,
            rng,
            healed: false,
        }))
    }
}

impl FaultModel for JobsTableBusy {
    fn at_scheduling_point(&mut self, point: &SchedulingPoint<'_>) -> Option<PointAction> {
        if self.healed {
            return None;
        }
        let statement = point.op.statement()?;
        if statement.table.as_deref() != Some("jobs") {
            return None;
        }
        self.rng
            .chance(Ratio::new(1, self.settings.one_in))
            .then_some(PointAction::FailStatement {
                failure: StatementFailure::Busy,
                rolled_back: false,
            })
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
