//! Tasks and the processes they run in: a task registered, parked at a scheduling point, queued
//! again or held by a pause, finished (its connection back in its process's pool); a process
//! crashed with every task it ran, and restarted under a new identity.
//!
//! The world keeps each task's record; its future lives with the executor (`run`), which polls it
//! and drops it when this module says the task is gone. Nothing here polls a future.

use super::{Item, Park, TaskId, TaskKind, TaskState, World, WorldEvent};
use crate::faults::{PendingOp, ProcessRole};
use crate::trace::Happening;

impl World {
    /// Registers a new task of `process`; it runs once the executor polls it.
    pub fn add_task(&mut self, process: usize, kind: TaskKind) -> (TaskId, String) {
        let id = self.next_task;
        self.next_task += 1;
        if matches!(kind, TaskKind::Handler { .. } | TaskKind::Operator) {
            self.work_in_flight += 1;
        }
        let process_id = self.processes[process].id.clone();
        self.tasks.insert(
            id,
            TaskState {
                process,
                process_id: process_id.clone(),
                kind,
                connection: None,
                park: None,
                // Replaced before anything reads it: a new task runs to its first scheduling point
                // at once, within the step that spawned it.
                pending: PendingOp::Wake,
                pending_detail: String::new(),
                reply: None,
                inject_failure: None,
                disturbed: false,
                stalled_ms: 0,
                call: None,
                timer: None,
            },
        );
        (id, process_id.to_string())
    }

    /// Parks `task` until the scheduler picks it at or after `park`, about to do `op`. The
    /// detail (the statement's label, the key) is made only when decisions are written down.
    pub fn park_task(&mut self, task: TaskId, park: Park, op: PendingOp, detail: impl FnOnce() -> String) {
        let labelled = self.decider.records();
        let state = self.tasks.get_mut(&task).expect("a running task is registered");
        state.park = Some(park);
        state.pending = op;
        if labelled {
            state.pending_detail = detail();
        }
    }

    /// The time the clock of `task`'s process reads now.
    pub fn task_now_ms(&self, task: TaskId) -> i64 {
        self.process_now_ms(self.tasks[&task].process)
    }

    /// In a scripted run, remembers the statement `task` will run next (or, with `None`, that
    /// it is about to run it).
    pub fn announce(&mut self, task: TaskId, sql: Option<&str>) {
        if let Some(scripted) = &mut self.scripted {
            match sql {
                Some(sql) => scripted.pending_sql.insert(task, sql.to_owned()),
                None => scripted.pending_sql.remove(&task),
            };
        }
    }

    /// Queues a task that just returned `Pending` according to how it parked itself.
    pub fn schedule_parked(&mut self, task: TaskId) -> Result<(), String> {
        let state = self.tasks.get_mut(&task).expect("a pending task is registered");
        // The task ran, so whatever stalled it before is over (see `stall_room_ms`).
        state.stalled_ms = 0;
        let Some(park) = state.park.take() else {
            return Err(format!(
                "a task of {} suspended without an Env call; only Env calls may suspend simulated code",
                state.process_id
            ));
        };
        let at_ms = match park {
            Park::Now => self.now_ms,
            Park::Until(at_ms) => at_ms,
            Park::ForLock(until_ms) => {
                self.lock_waits.parked(task);
                until_ms
            }
        };
        let key = self.schedule(Item::Task(task), at_ms);
        self.tasks.get_mut(&task).expect("still registered").timer = key;
        Ok(())
    }

    /// Holds a task that was about to run for `duration_ms` (a pause fault); it will run the same
    /// operation when it wakes.
    pub fn pause_task(&mut self, task: TaskId, duration_ms: i64) {
        let until_ms = self.now_ms + duration_ms;
        // Paused, it waits for the pause to end and not for a lock.
        self.lock_waits.stop_waiting(task);
        let key = self.schedule(Item::Task(task), until_ms);
        let state = self.tasks.get_mut(&task).expect("a paused task is registered");
        state.timer = key;
        state.disturbed = true;
        state.stalled_ms += duration_ms;
    }

    /// How much longer faults may pause `task` before it runs again, or `None` for no limit.
    ///
    /// A relay worker is promised that no stall between two of its steps lasts longer than
    /// `stall_ms_max` (the relay widens its reconciliation margin by exactly that, and a
    /// deployment must keep real stalls below it). Two fault models may pause it at the same
    /// point, and each may pause it again when it wakes, so their pauses are one stall and
    /// together stay within the promise; a stall the system was told cannot happen would only
    /// find a "bug" in a contract the system never made. Other processes make no such promise.
    pub fn stall_room_ms(&self, task: TaskId) -> Option<i64> {
        let state = &self.tasks[&task];
        (self.processes[state.process].role == ProcessRole::RelayWorker)
            .then(|| (self.config.relay.stall_ms_max - state.stalled_ms).max(0))
    }

    /// Forgets a finished task and returns its connection to the process's pool.
    pub fn finish_task(&mut self, task: TaskId) {
        let state = self.tasks.remove(&task).expect("a finished task is registered");
        self.lock_waits.forget(task);
        self.purge_returned(task);
        if matches!(state.kind, TaskKind::Handler { .. } | TaskKind::Operator) {
            self.work_in_flight -= 1;
        }
        if let Some(connection) = state.connection {
            if self.db.in_transaction(connection) {
                // The pool rolls the transaction back so the run goes on, but a connection that
                // is not reset (one connection per process, as `RealEnv` has) would hand it to
                // the process's next task: `task-closes-its-transaction` judges it.
                self.db.roll_back(connection);
                self.record(Happening::TaskEndedInTransaction);
                let framework_commits =
                    self.framework_commits_handlers && matches!(state.kind, TaskKind::Handler { .. });
                if !framework_commits {
                    self.step_record
                        .transactions_left_open
                        .push(state.process_id.to_string());
                }
            }
            self.processes[state.process].idle_connections.push(connection);
        }
    }

    /// The process and pending operation a fault at this item would hit, if the item belongs to
    /// a process.
    pub fn target_of(&self, item: Item) -> Option<(usize, PendingOp)> {
        match item {
            Item::Task(task) => self
                .tasks
                .get(&task)
                .map(|state| (state.process, state.pending.clone())),
            Item::Event(event) => match self.events.get(&event) {
                Some(WorldEvent::SendAnswer { process, .. }) => Some((*process, PendingOp::Answer)),
                _ => None,
            },
        }
    }

    /// Removes every task of `process` (the executor drops their futures) and closes its
    /// connections. Returns the removed tasks and how many open transactions rolled back.
    pub fn crash_process(&mut self, process: usize) -> (Vec<TaskId>, usize) {
        let tasks: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, state)| state.process == process)
            .map(|(&id, _)| id)
            .collect();
        let mut open_transactions = 0;
        for task in &tasks {
            let state = self.tasks.remove(task).expect("listed above");
            self.lock_waits.forget(*task);
            self.purge_killed(*task);
            if matches!(state.kind, TaskKind::Handler { .. } | TaskKind::Operator) {
                self.work_in_flight -= 1;
            }
            if let Some(key) = state.timer {
                self.timers.remove(&(key.0, key.1, Item::Task(*task)));
            }
            self.ready.retain(|item| *item != Item::Task(*task));
            self.ready_label_cache.remove(&Item::Task(*task));
            if let Some(connection) = state.connection
                && self.db.close(connection)
            {
                open_transactions += 1;
            }
        }
        let idle = std::mem::take(&mut self.processes[process].idle_connections);
        for connection in idle {
            self.db.close(connection);
        }
        self.processes[process].up = false;
        (tasks, open_transactions)
    }

    /// Brings a crashed process back with a new identity and a correct clock.
    pub fn restart_process(&mut self, process: usize) {
        let state = &mut self.processes[process];
        state.incarnation += 1;
        state.up = true;
        state.clock_offset_ms = 0;
        state.id = format!("{}#{}", state.name, state.incarnation).into();
    }

    /// The time as `process` reads it.
    pub fn process_now_ms(&self, process: usize) -> i64 {
        self.now_ms + self.processes[process].clock_offset_ms
    }
}
