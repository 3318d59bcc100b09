//! `jobs-table-busy`: the shop's job queue is the table every worker and handler writes, and in
//! production it is where `SQLITE_BUSY` shows up. This model makes a statement on `jobs` fail
//! with `SQLITE_BUSY` before it runs, at a rate drawn per seed, during the fault phase only.
//!
//! It is written as a team writes one: against the public fault-model interface, with its own
//! settings and the decision stream the simulator gives it, so it changes no other model's draws.

use commitgap_sim::faults::{
    FaultContext, FaultKind, FaultModel, PointAction, SchedulingPoint, StatementFailure, TimerAction,
};
use commitgap_sim::rng::{Ratio, SimRng};
use serde_json::json;

/// The registry entry: what `App::fault` takes.
pub const KIND: FaultKind = FaultKind {
    name: "jobs-table-busy",
    description: "a statement on the shop's jobs table fails with SQLITE_BUSY",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

struct JobsTableBusy {
    enabled: bool,
    /// One statement on `jobs` in this many fails.
    one_in: u32,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    // On in about half the seeds (the `enabled` field is what --faults and --without-faults
    // switch), at a rate across an order of magnitude.
    let enabled = rng.chance(Ratio::new(1, 2));
    let one_in = *rng.pick(&[3_u32, 10, 30]);
    json!({ "enabled": enabled, "one_in": one_in })
}

fn build(
    settings: &serde_json::Value,
    rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    let enabled = settings["enabled"]
        .as_bool()
        .ok_or("enabled: expected true or false")?;
    let one_in = settings["one_in"]
        .as_u64()
        .filter(|one_in| (1..=1_000).contains(one_in))
        .ok_or("one_in: expected a whole number from 1 to 1000")?;
    Ok(Box::new(JobsTableBusy {
        enabled,
        one_in: one_in as u32,
        rng,
        healed: false,
    }))
}

impl FaultModel for JobsTableBusy {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        json!({ "enabled": self.enabled, "one_in": self.one_in })
    }

    fn at_scheduling_point(&mut self, point: &SchedulingPoint<'_>) -> Option<PointAction> {
        if !self.enabled || self.healed {
            return None;
        }
        let statement = point.op.statement()?;
        if statement.table.as_deref() != Some("jobs") {
            return None;
        }
        self.rng
            .chance(Ratio::new(1, self.one_in))
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
