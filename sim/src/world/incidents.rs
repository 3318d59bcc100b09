//! What fault models do to the world: which fault, if any, acts at a scheduling point, then a task
//! paused, a statement made to fail, a process's clock set wrong, a process crashed, the sender's
//! clock moved, a purge begun, and at the end of the fault phase, the heal that stops every fault
//! and sets everything right.
//!
//! Choosing the fault changes nothing but the decision record. Each change records the fault (for
//! the seed file and the counts) and what happened (for the trace) together with the change
//! itself. None of them starts or drops a task's future: the executor (`run`) does that with what
//! they return.

use super::{Item, TaskId, World, WorldEvent};
use crate::coverage::Situation;
use crate::decision::{Decision, DecisionKind};
use crate::faults::{PendingOp, PointAction, ProcessRole, SchedulingPoint, StatementFailure, TimerAction};
use crate::trace::{Actor, Happening};

impl World {
    /// The fault (if any) that acts on `process`, about to do `op`, at this scheduling point:
    /// `(fault model name, action)`. Every model is asked, in registry order, and the first that
    /// acts wins.
    pub fn fault_at_scheduling_point(
        &mut self,
        process: usize,
        op: &PendingOp,
    ) -> Option<(String, PointAction)> {
        let point = SchedulingPoint {
            now_ms: self.now_ms,
            role: self.processes[process].role,
            op,
        };
        let decision = self.choose(DecisionKind::Fault, |world| {
            let mut decision = None;
            for fault in world.faults.iter_mut() {
                let action = fault.at_scheduling_point(&point);
                decision = decision.or(action.map(|action| Decision::Fault {
                    model: fault.name().to_owned(),
                    action,
                }));
            }
            decision
        });
        match decision {
            Some(Decision::Fault { model, action }) => Some((model, action)),
            _ => None,
        }
    }

    /// Holds `task` of `process` for `duration_ms` (within what its stall allowance leaves).
    /// Returns whether it was held.
    pub fn pause(&mut self, process: usize, task: TaskId, duration_ms: i64, fault: &str) -> bool {
        let duration_ms = match self.stall_room_ms(task) {
            Some(0) => return false,
            Some(room_ms) => duration_ms.min(room_ms),
            None => duration_ms,
        };
        self.pause_task(task, duration_ms);
        let pause = Happening::Pause {
            process: self.processes[process].id.to_string(),
            duration_ms,
        };
        self.record_fault(fault, &pause);
        self.record(pause);
        true
    }

    /// Makes the statement `task` is about to run fail with `failure`.
    pub fn fail_next_statement(
        &mut self,
        process: usize,
        task: TaskId,
        failure: StatementFailure,
        rolled_back: bool,
        fault: &str,
    ) {
        self.tasks
            .get_mut(&task)
            .expect("a ready task is registered")
            .inject_failure = Some((failure, rolled_back));
        self.count_fault(fault, 1);
        if self.keeps_fault_log() {
            let what = format!(
                "{} injected into {}{}",
                failure.error(),
                self.processes[process].id,
                if rolled_back {
                    ", transaction rolled back"
                } else {
                    ""
                }
            );
            self.log_fault(&what);
        }
    }

    /// Sets the clock of `process` `offset_ms` from true time.
    pub fn jump_clock(&mut self, process: usize, item: Item, offset_ms: i64, fault: &str) {
        self.processes[process].clock_offset_ms = offset_ms;
        self.history.clock_offset_max_ms = self.history.clock_offset_max_ms.max(offset_ms.saturating_abs());
        if let Item::Task(task) = item {
            self.tasks
                .get_mut(&task)
                .expect("a ready task is registered")
                .disturbed = true;
        }
        let jump = Happening::ClockSet {
            process: self.processes[process].id.to_string(),
            offset_ms,
        };
        self.record_fault(fault, &jump);
        self.record(jump);
    }

    /// Crashes `process`, as fault model `fault` (or a scenario) decided, and schedules its
    /// restart (at once after heal). Returns the tasks that died with it.
    pub fn crash(&mut self, process: usize, restart_after_ms: i64, fault: &str) -> Vec<TaskId> {
        let process_id = self.processes[process].id.clone();
        let (tasks, open_transactions) = self.crash_process(process);
        if open_transactions > 0 {
            self.probes.reach(Situation::CrashInsideTransaction);
        }
        let restart_at_ms = self.now_ms + if self.healed { 0 } else { restart_after_ms };
        self.schedule_event(restart_at_ms, WorldEvent::Restart { process });
        let crash = Happening::Crash {
            process: process_id.to_string(),
            tasks: tasks.len(),
            open_transactions,
            restart_in_ms: restart_at_ms - self.now_ms,
        };
        self.record_fault(fault, &crash);
        self.record(crash);
        tasks
    }

    /// Restarts `process` unless it is up already. Returns its role when it restarted.
    pub fn restart(&mut self, process: usize) -> Option<ProcessRole> {
        if self.processes[process].up {
            self.record(Happening::RestartSkipped);
            return None;
        }
        self.restart_process(process);
        let restarted = self.processes[process].id.clone();
        self.record(Happening::Restart {
            process: restarted.to_string(),
        });
        Some(self.processes[process].role)
    }

    /// A fault model's timer fires: returns what the model does now.
    pub fn fault_timer(&mut self, fault: usize) -> Vec<TimerAction> {
        self.record(Happening::FaultTimer);
        let now_ms = self.now_ms;
        self.faults[fault].on_timer(now_ms)
    }

    /// Fault model `fault` sets the sender's clock `offset_ms` from true time.
    pub fn set_sender_clock(&mut self, fault: usize, offset_ms: i64) {
        self.sender_clock_offset_ms = offset_ms;
        let name = self.faults[fault].name();
        let set = Happening::SenderClockSet { offset_ms };
        self.record_fault(name, &set);
        self.record(set);
    }

    /// Fault model `fault` has another writer take the write lock on the operator's process for
    /// `hold_ms`. Returns the operator's process, if the run has one up.
    pub fn begin_write_lock_hold(&mut self, fault: usize, hold_ms: i64) -> Option<usize> {
        let process = self.process_with_role(ProcessRole::Operator)?;
        let name = self.faults[fault].name();
        self.record_fault(
            name,
            &format_args!("a maintenance job takes the write lock for {hold_ms} ms"),
        );
        Some(process)
    }

    /// Fault model `fault` has the purge job delete receipts older than `older_than_ms`.
    /// Returns the purge process, if the run has one.
    pub fn begin_purge(&mut self, fault: usize, older_than_ms: i64) -> Option<usize> {
        let name = self.faults[fault].name();
        let purger = self.process_with_role(ProcessRole::Purger);
        let purge = match purger {
            Some(_) => Happening::Purge { older_than_ms },
            None => Happening::PurgeSkipped,
        };
        self.record_fault(name, &purge);
        self.record(purge);
        purger
    }

    /// Stops every fault model, restarts every crashed process, sets every clock right, and has
    /// the operator clean up after the incident.
    pub fn heal(&mut self) {
        self.healed = true;
        let now_ms = self.now_ms;
        let attempts = self
            .sender
            .streams()
            .iter()
            .map(|stream| stream.attempts)
            .collect();
        self.stuck_watch.healed(now_ms, attempts);
        for index in 0..self.faults.len() {
            for action in self.faults[index].heal(now_ms) {
                self.schedule_fault_action(index, action);
            }
        }
        // Setting a clock right is a clock jump too, for every task that read the wrong time.
        let skewed: Vec<usize> = (0..self.processes.len())
            .filter(|&index| self.processes[index].clock_offset_ms != 0)
            .collect();
        for state in self.tasks.values_mut() {
            if skewed.contains(&state.process) {
                state.disturbed = true;
            }
        }
        for process in &mut self.processes {
            process.clock_offset_ms = 0;
        }
        self.sender_clock_offset_ms = 0;
        let down: Vec<usize> = (0..self.processes.len())
            .filter(|&index| !self.processes[index].up)
            .collect();
        for &process in &down {
            self.schedule_event(now_ms, WorldEvent::Restart { process });
        }
        self.schedule_event(
            now_ms + crate::faults::OPERATOR_DELAY_MS,
            WorldEvent::OperatorRequeue,
        );
        if !self.sender.streams().is_empty() {
            self.schedule_event(
                now_ms + crate::faults::OPERATOR_DELAY_MS,
                WorldEvent::OperatorRedeliver { round: 1 },
            );
        }
        let heal = Happening::Heal {
            restarting: down.len(),
        };
        self.trace.push(self.step, now_ms, Actor::World, heal);
    }
}
