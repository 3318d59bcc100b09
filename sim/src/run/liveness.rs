//! The liveness phase of a run: how long it may last, what ends it, and the verdicts only it
//! gives. After heal the run goes on until the world is quiet, nothing more can happen, work is
//! found stuck (`work-progresses-after-heal`), or the phase's bound in steps or virtual time is
//! reached, which makes the run [`Unsettled`] rather than failed; a world that settled is judged
//! by the liveness invariants.
//!
//! The bounds depend on the run's configuration and its streams alone, never on the machine, and
//! are held to the limits every run is held to. Stepping the world is the executor's job, in
//! [`super`]; this module only decides when to stop and what that means.

use serde::{Deserialize, Serialize};

use super::{Failure, Simulation, StepOutcome, failure_of, observation};
use crate::invariants::{self, InvariantKind, StepRecord};
use crate::trace::format_time_ms;
use crate::world::World;

/// A run whose liveness phase reached its bound (in steps or in virtual time) before the world
/// was quiet. This is a verdict of its own, not an invariant's: the liveness invariants judge a
/// world that has settled, and a world cut off mid-work would fail them for the bound's sake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unsettled {
    /// The step and virtual time at which the bound was reached.
    pub step: u64,
    /// The virtual time at which the bound was reached, in milliseconds.
    pub time_ms: i64,
    /// The bound, as a reader reads it: `50000 steps after heal` or `5 days of virtual time after heal`.
    pub bound: String,
    /// What was still pending: streams the sender had not settled, obligations owed, work in
    /// flight, processes down.
    pub pending: String,
}

impl std::fmt::Display for Unsettled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "did not settle within {} (reached at step {}, {}); still pending: {}",
            self.bound,
            self.step,
            format_time_ms(self.time_ms),
            self.pending
        )
    }
}

/// The liveness phase's bounds for this run, as (virtual time, steps): the configured ones,
/// raised to the per-stream bounds times the streams of deliveries the run has, the time raised
/// to twice the relay's configured waits (`SimConfig::relay_waits_ms`), and never past the limits
/// every run is held to.
///
/// The step bound counts only the steps taken while work is due (`World::has_due_work`): a
/// delivery, answer or request in flight, a process down, or an owed obligation whose next
/// attempt and lease have both come. A system's steps while nothing is due (a relay polling for
/// work, a heartbeat) are its own business: how often it polls must not decide whether a run
/// settles, so those steps are bounded only by the virtual time and by
/// [`crate::limits::LIVENESS_STEPS_MAX`] steps in all.
///
/// Both bounds are measured from heal, or from the last action of a fault that goes on after
/// heal where the real failure would (a provider's rate limit, a refusal for good, a maintenance
/// lock), whichever is later: until that fault stops, the system cannot be expected to settle.
pub fn liveness_bounds(world: &World) -> (i64, u64) {
    let streams = world.sender().streams().len() as u64;
    let config = world.config();
    let time_ms = config
        .liveness_ms_max
        .max((streams as i64).saturating_mul(config.liveness_ms_per_stream))
        .max(config.relay_waits_ms().saturating_mul(2))
        .min(crate::limits::DURATION_MS_MAX.max(config.liveness_ms_max));
    let steps = config
        .liveness_steps_max
        .max(streams.saturating_mul(config.liveness_steps_per_stream))
        .min(crate::limits::LIVENESS_STEPS_MAX.max(config.liveness_steps_max));
    (time_ms, steps)
}

/// How a liveness phase ended.
pub(super) enum LivenessEnd {
    /// The world went quiet, or nothing could happen any more.
    Settled,
    /// A safety invariant failed on the way.
    Failed(Failure),
    /// The bound came first.
    Unsettled(Unsettled),
}

impl Simulation {
    /// Runs until the world is quiet (or nothing more can happen), or until the liveness bound,
    /// in steps or in virtual time, is reached first.
    pub(super) fn liveness_phase(&mut self) -> Result<LivenessEnd, String> {
        let (liveness_ms, liveness_steps) = liveness_bounds(&self.world.borrow());
        let (mut end_ms, all_steps_max, start_step, start_ms, mut fault_actions) = {
            let world = self.world.borrow();
            (
                world.now_ms().saturating_add(liveness_ms),
                world
                    .step()
                    .saturating_add(crate::limits::LIVENESS_STEPS_MAX.max(liveness_steps)),
                world.step(),
                world.now_ms(),
                world.fault_actions(),
            )
        };
        // Steps taken while work was due: what the step bound counts (see `liveness_bounds`).
        let mut due_steps = 0_u64;
        loop {
            let due = {
                let world = self.world.borrow();
                if world.is_quiescent() {
                    return Ok(LivenessEnd::Settled);
                }
                // A fault that goes on after heal acted: the bounds start again from here.
                if world.fault_actions() != fault_actions {
                    fault_actions = world.fault_actions();
                    due_steps = 0;
                    end_ms = world.now_ms().saturating_add(liveness_ms);
                }
                let bound = if due_steps >= liveness_steps {
                    Some(format!(
                        "{liveness_steps} steps taken while work was due after heal"
                    ))
                } else if world.step() >= all_steps_max {
                    Some(format!(
                        "{} steps after heal",
                        all_steps_max.saturating_sub(start_step)
                    ))
                } else if world.now_ms() >= end_ms {
                    Some(format!(
                        "{} of virtual time after heal",
                        crate::trace::format_duration_ms(liveness_ms)
                    ))
                } else {
                    None
                };
                if let Some(bound) = bound {
                    drop(world);
                    if let Some(failure) = self.stuck_at_bound(start_step, start_ms) {
                        return Ok(LivenessEnd::Failed(failure));
                    }
                    let world = self.world.borrow();
                    return Ok(LivenessEnd::Unsettled(Unsettled {
                        step: world.step(),
                        time_ms: world.now_ms(),
                        bound,
                        pending: world.pending_work(),
                    }));
                }
                world.has_due_work()
            };
            if let Some(failure) = self.stuck() {
                return Ok(LivenessEnd::Failed(failure));
            }
            if due {
                due_steps += 1;
            }
            match self.step()? {
                StepOutcome::Continue => {}
                // Nothing can happen any more: the world is as settled as it will get, and the
                // liveness invariants judge it.
                StepOutcome::Idle => return Ok(LivenessEnd::Settled),
                StepOutcome::Failed(failure) => return Ok(LivenessEnd::Failed(failure)),
            }
        }
    }

    /// At the liveness bound, the failure of `work-progresses-after-heal` if the second half of
    /// the liveness phase (from the middle of `start_step..now` and `start_ms..now`) took up no
    /// owed obligation: such a run is stuck, not slow.
    fn stuck_at_bound(&mut self, start_step: u64, start_ms: i64) -> Option<Failure> {
        let (middle_step, middle_ms) = {
            let world = self.world.borrow();
            (
                start_step + world.step().saturating_sub(start_step) / 2,
                start_ms + world.now_ms().saturating_sub(start_ms) / 2,
            )
        };
        let diagnosis = self.world.borrow().stuck_at_bound(middle_step, middle_ms);
        self.stuck_failure(diagnosis?)
    }

    /// The failure of `work-progresses-after-heal` once the world finds work stuck, if that
    /// invariant judges the run (turned off, the run goes on to its bound).
    fn stuck(&mut self) -> Option<Failure> {
        let diagnosis = self.world.borrow_mut().diagnose_stuck()?;
        self.stuck_failure(diagnosis)
    }

    /// Reports `diagnosis` as the failure of `work-progresses-after-heal`, if it judges the run.
    fn stuck_failure(&mut self, diagnosis: String) -> Option<Failure> {
        let invariant = self
            .invariants
            .iter()
            .find(|invariant| invariant.name() == invariants::work_progresses_after_heal::NAME)?;
        let mut world = self.world.borrow_mut();
        world.note_stuck(diagnosis);
        let empty = StepRecord::default();
        let observation = observation(&world, &empty);
        failure_of(&**invariant, &observation, &world)
    }

    pub(crate) fn check_liveness(&self) -> Option<Failure> {
        let world = self.world.borrow();
        let empty = StepRecord::default();
        let observation = observation(&world, &empty);
        self.invariants
            .iter()
            .filter(|invariant| invariant.kind() == InvariantKind::Liveness)
            .find_map(|invariant| failure_of(&**invariant, &observation, &world))
    }
}
