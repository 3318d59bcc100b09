//! One simulated run: set up, fault phase, heal, liveness phase, verdict.
//!
//! The executor is single-threaded. Each step picks one ready item with the scheduler's stream
//! (a task to poll up to its next scheduling point, or a world event such as a delivery attempt or
//! an answer on the wire), lets the fault models crash the item's process first, then applies the
//! step's commits to the view, checks the safety invariants, writes one trace line and advances
//! the clock by a millisecond. When nothing is ready the clock jumps to the next timer. After the
//! fault phase every fault model heals and crashed processes restart; the run continues until the
//! world is quiet (or a bound), and the liveness invariants give the verdict. Every loop here is
//! bounded by the configuration's step and time limits.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use commitgap::env::{Env, LocalBoxFuture};
use commitgap::receiver::WebhookDelivery;
use serde::{Deserialize, Serialize};

use crate::config::{SimConfig, Workload};
use crate::db::{Backend, Database};
use crate::faults::{self, FaultAction, ProcessRole};
use crate::invariants::{self, CommitRecord, Invariant, InvariantKind, Observation, StepRecord};
use crate::rng::SimRng;
use crate::sim_env::SimEnv;
use crate::system::{ObservedRow, System};
use crate::trace::format_time_ms;
use crate::world::{DeliveryRef, Item, Process, TaskId, TaskKind, World, WorldEvent};

/// How to run a seed.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub backend: Backend,
    /// Keep every trace line in memory (for `--trace` and determinism reports).
    pub keep_trace: bool,
    /// Run this configuration instead of the one drawn from the seed.
    pub config: Option<SimConfig>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            backend: Backend::Memdb,
            keep_trace: false,
            config: None,
        }
    }
}

/// An invariant that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub invariant: String,
    pub kind: String,
    pub step: u64,
    pub time_ms: i64,
    pub message: String,
}

/// What a run did and concluded.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub seed: u64,
    pub system: String,
    pub config: SimConfig,
    pub steps: u64,
    pub end_ms: i64,
    pub digest: String,
    pub failure: Option<Failure>,
    /// How often each fault model fired.
    pub faults_fired: BTreeMap<String, u64>,
    /// The fault decisions that mattered, in order.
    pub fault_log: Vec<String>,
    /// Every trace line, if they were kept.
    pub trace: Option<Vec<String>>,
    pub effects: usize,
}

/// Runs `seed` against `system`. `Err` means the run could not be carried out at all (a schema
/// that does not load, a row the system cannot decode); it is not an invariant failure.
pub fn run_seed(system: &Arc<dyn System>, seed: u64, options: &RunOptions) -> Result<RunOutcome, String> {
    let config = match &options.config {
        Some(config) => config.clone(),
        None => SimConfig::draw(seed, options.backend),
    };
    config.validate()?;
    let workload = Workload::draw(seed, &config);
    let mut simulation = Simulation::new(
        Arc::clone(system),
        seed,
        config,
        workload,
        options.keep_trace,
        false,
    )?;
    simulation.run()
}

pub(crate) enum StepOutcome {
    Continue,
    /// Nothing is ready and no timer is set.
    Idle,
    Failed(Failure),
}

/// The executor of one run. Scenarios (`scenario`) drive it step by step.
pub(crate) struct Simulation {
    pub(crate) world: Rc<RefCell<World>>,
    futures: BTreeMap<TaskId, LocalBoxFuture<'static, ()>>,
    system: Arc<dyn System>,
    invariants: Vec<Box<dyn Invariant>>,
    seed: u64,
    /// A scripted run: the sender stays silent and the test makes every delivery.
    scripted: bool,
}

impl Simulation {
    pub(crate) fn new(
        system: Arc<dyn System>,
        seed: u64,
        config: SimConfig,
        workload: Workload,
        keep_trace: bool,
        scripted: bool,
    ) -> Result<Simulation, String> {
        let observed_tables = system.observed_tables().to_vec();
        let mut db = Database::create(config.backend, &observed_tables)
            .map_err(|error| format!("could not create the database: {error}"))?;
        system
            .set_up(db.setup_connection(), &workload.fixtures)
            .map_err(|error| format!("system {} failed to set up: {error}", system.name()))?;
        let setup_changes = db
            .finish_setup()
            .map_err(|error| format!("system {}: {error}", system.name()))?;

        let mut processes = Vec::new();
        for index in 1..=config.receivers {
            processes.push(Process::new(format!("receiver-{index}"), ProcessRole::Receiver));
        }
        for index in 1..=config.relay_workers {
            processes.push(Process::new(format!("relay-{index}"), ProcessRole::RelayWorker));
        }
        processes.push(Process::new("purge".to_owned(), ProcessRole::Purger));

        let mut fault_models = Vec::new();
        for kind in faults::registry() {
            if let Some(settings) = config.faults.get(kind.name) {
                let rng = SimRng::stream(seed, &faults::decision_stream_label(kind.name));
                fault_models.push((kind.build)(settings, rng)?);
            }
        }

        let mut world = World::new(
            seed,
            config,
            workload,
            db,
            observed_tables,
            processes,
            fault_models,
            keep_trace,
            scripted,
        );
        let diffs = world
            .view
            .apply(&*system, &world.observed_tables, setup_changes)?;
        world.trace.push(format!(
            "setup system={} seed={seed} rows={} accounts={} orders={} events={} receivers={} relay-workers={} sender={}",
            system.name(),
            diffs.len(),
            world.workload.fixtures.accounts.len(),
            world.workload.fixtures.orders.len(),
            world.workload.events.len(),
            world.config.receivers,
            world.config.relay_workers,
            world.config.sender_preset.name(),
        ));
        Ok(Simulation {
            world: Rc::new(RefCell::new(world)),
            futures: BTreeMap::new(),
            system,
            invariants: invariants::registry(),
            seed,
            scripted,
        })
    }

    fn run(&mut self) -> Result<RunOutcome, String> {
        self.start()?;
        let failure = match self.fault_phase()? {
            Some(failure) => Some(failure),
            None => {
                self.heal();
                match self.liveness_phase()? {
                    Some(failure) => Some(failure),
                    None => self.check_liveness(),
                }
            }
        };
        Ok(self.outcome(failure))
    }

    /// Starts the relay workers, schedules every event's creation and the fault models' timers.
    pub(crate) fn start(&mut self) -> Result<(), String> {
        let relays: Vec<usize> = {
            let world = self.world.borrow();
            (0..world.processes.len())
                .filter(|&index| world.processes[index].role == ProcessRole::RelayWorker)
                .collect()
        };
        for process in relays {
            self.spawn_relay_worker(process)?;
        }
        let mut world = self.world.borrow_mut();
        if !self.scripted {
            for (index, event) in world.workload.events.clone().iter().enumerate() {
                world.schedule_event(event.emit_at_ms, WorldEvent::Emit { event: index });
            }
        }
        for index in 0..world.faults.len() {
            let actions = world.faults[index].start(0);
            for action in actions {
                if let FaultAction::WakeAt { at_ms } = action {
                    world.schedule_event(at_ms, WorldEvent::FaultTimer { fault: index });
                }
            }
        }
        Ok(())
    }

    fn fault_phase(&mut self) -> Result<Option<Failure>, String> {
        let (end_ms, steps_max) = {
            let world = self.world.borrow();
            (world.config.fault_phase_ms, world.config.fault_phase_steps_max)
        };
        loop {
            {
                let world = self.world.borrow();
                if world.now_ms >= end_ms || world.step >= steps_max {
                    return Ok(None);
                }
            }
            match self.step()? {
                StepOutcome::Continue => {}
                StepOutcome::Idle => return Ok(None),
                StepOutcome::Failed(failure) => return Ok(Some(failure)),
            }
        }
    }

    /// Stops every fault model and restarts every crashed process at once.
    pub(crate) fn heal(&mut self) {
        let mut world = self.world.borrow_mut();
        world.healed = true;
        for fault in world.faults.iter_mut() {
            fault.heal();
        }
        let now_ms = world.now_ms;
        let down: Vec<usize> = (0..world.processes.len())
            .filter(|&index| !world.processes[index].up)
            .collect();
        for &process in &down {
            world.schedule_event(now_ms, WorldEvent::Restart { process });
        }
        let line = format!(
            "{:>6} {:>12} {:<13} heal: faults stop, {} crashed processes restart",
            world.step,
            format_time_ms(now_ms),
            "world",
            down.len()
        );
        world.trace.push(line);
    }

    fn liveness_phase(&mut self) -> Result<Option<Failure>, String> {
        let (end_ms, steps_max) = {
            let world = self.world.borrow();
            (
                world.now_ms + world.config.liveness_ms_max,
                world.step + world.config.liveness_steps_max,
            )
        };
        loop {
            {
                let world = self.world.borrow();
                if world.is_quiescent() || world.now_ms >= end_ms || world.step >= steps_max {
                    return Ok(None);
                }
            }
            match self.step()? {
                StepOutcome::Continue => {}
                StepOutcome::Idle => return Ok(None),
                StepOutcome::Failed(failure) => return Ok(Some(failure)),
            }
        }
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

    // ----- One step -----

    pub(crate) fn step(&mut self) -> Result<StepOutcome, String> {
        let Some(item) = self.world.borrow_mut().next_item() else {
            return Ok(StepOutcome::Idle);
        };
        self.run_item(item)
    }

    /// Runs one step for `item`, which the caller has taken off the ready queue.
    pub(crate) fn run_item(&mut self, item: Item) -> Result<StepOutcome, String> {
        let actor = {
            let mut world = self.world.borrow_mut();
            world.step += 1;
            world.line.clear();
            match item {
                Item::Task(task) => world.tasks[&task].process_id.clone(),
                Item::Event(event) => match &world.events[&event] {
                    WorldEvent::SendAnswer { process, .. } | WorldEvent::Restart { process } => {
                        world.processes[*process].id.clone()
                    }
                    WorldEvent::FaultTimer { fault } => format!("fault:{}", world.faults[*fault].name()),
                    _ => "sender".to_owned(),
                },
            }
        };
        if !self.crash_at(item)? {
            match item {
                Item::Task(task) => self.poll_task(task)?,
                Item::Event(event) => self.handle_event(event)?,
            }
        }
        self.finish_step(&actor)
    }

    /// Crashes `process` now, as a step of its own (scenarios use this).
    pub(crate) fn crash_now(&mut self, process: usize, restart_after_ms: i64) -> Result<StepOutcome, String> {
        let actor = {
            let mut world = self.world.borrow_mut();
            world.step += 1;
            world.line.clear();
            world.processes[process].id.clone()
        };
        self.crash(process, restart_after_ms);
        self.finish_step(&actor)
    }

    /// Lets the fault models crash the process `item` belongs to. Returns whether it crashed.
    fn crash_at(&mut self, item: Item) -> Result<bool, String> {
        let decision = {
            let mut world = self.world.borrow_mut();
            let Some(process) = world.process_of(item) else {
                return Ok(false);
            };
            let role = world.processes[process].role;
            let mut decision = None;
            for fault in world.faults.iter_mut() {
                let action = fault.at_scheduling_point(role);
                decision = decision.or(action);
            }
            match decision {
                Some(FaultAction::Crash { restart_after_ms }) => Some((process, restart_after_ms)),
                _ => None,
            }
        };
        let Some((process, restart_after_ms)) = decision else {
            return Ok(false);
        };
        if let Item::Event(event) = item {
            // The crash takes the answer that was about to be written with it.
            self.world.borrow_mut().take_event(event);
        }
        self.crash(process, restart_after_ms);
        Ok(true)
    }

    pub(crate) fn crash(&mut self, process: usize, restart_after_ms: i64) {
        let tasks = {
            let mut world = self.world.borrow_mut();
            let process_id = world.processes[process].id.clone();
            let (tasks, open_transactions) = world.crash_process(process);
            let restart_at_ms = world.now_ms + if world.healed { 0 } else { restart_after_ms };
            world.schedule_event(restart_at_ms, WorldEvent::Restart { process });
            let what = format!(
                "crash {process_id}: {} tasks dropped, {open_transactions} open transactions rolled back, restart in {}",
                tasks.len(),
                World::duration(restart_at_ms - world.now_ms)
            );
            world.note(&what);
            world.record_fault("crash", &what);
            tasks
        };
        for task in tasks {
            self.futures.remove(&task);
        }
    }

    fn poll_task(&mut self, task: TaskId) -> Result<(), String> {
        let mut future = self.futures.remove(&task).expect("a ready task has a future");
        let poll = future.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        let mut world = self.world.borrow_mut();
        match poll {
            Poll::Ready(()) => world.finish_task(task),
            Poll::Pending => {
                world.schedule_parked(task)?;
                drop(world);
                self.futures.insert(task, future);
            }
        }
        Ok(())
    }

    /// Registers a task and runs it to its first scheduling point, within the current step.
    pub(crate) fn spawn(
        &mut self,
        process: usize,
        kind: TaskKind,
        make: impl FnOnce(Rc<dyn Env>, TaskId) -> LocalBoxFuture<'static, ()>,
    ) -> Result<TaskId, String> {
        let (task, process_id) = self.world.borrow_mut().add_task(process, kind);
        let env: Rc<dyn Env> = Rc::new(SimEnv::new(Rc::clone(&self.world), task, process_id));
        self.futures.insert(task, make(env, task));
        self.poll_task(task)?;
        Ok(task)
    }

    fn spawn_relay_worker(&mut self, process: usize) -> Result<(), String> {
        let settings = self.world.borrow().config.relay.clone();
        let system = Arc::clone(&self.system);
        self.spawn(process, TaskKind::RelayWorker, move |env, _| {
            system.run_relay_worker(env, settings)
        })?;
        Ok(())
    }

    /// The system under test.
    pub(crate) fn system(&self) -> &Arc<dyn System> {
        &self.system
    }

    pub(crate) fn spawn_handler(&mut self, process: usize, delivery: DeliveryRef) -> Result<TaskId, String> {
        let (webhook, account, event_id) = {
            let world = self.world.borrow();
            let event = &world.workload.events[delivery.event];
            let body = serde_json::json!({
                "id": event.event_id,
                "type": commitgap::receiver::PAYMENT_SUCCEEDED,
                "account": event.account,
                "order": event.order,
            })
            .to_string();
            let webhook = WebhookDelivery {
                webhook_id: format!("msg_{}_{}", event.account, event.event_id),
                timestamp_s: world.now_ms / 1_000,
                body,
            };
            (webhook, event.account.clone(), event.event_id.clone())
        };
        let system = Arc::clone(&self.system);
        let world = Rc::clone(&self.world);
        let kind = TaskKind::Handler {
            delivery,
            account,
            event_id,
        };
        self.spawn(process, kind, move |env, task| {
            let handling = system.handle_delivery(env, webhook);
            Box::pin(async move {
                let answer = handling.await;
                world.borrow_mut().handler_finished(task, answer);
            })
        })
    }

    fn handle_event(&mut self, event: crate::world::EventId) -> Result<(), String> {
        let event = self.world.borrow_mut().take_event(event);
        match event {
            WorldEvent::Emit { event } => {
                {
                    let mut world = self.world.borrow_mut();
                    world.sender.emit(event);
                    let spec = &world.workload.events[event];
                    let text = format!(
                        "emit {} ({}, order {}/{})",
                        spec.event_id, spec.account, spec.tenant, spec.order
                    );
                    world.note(&text);
                }
                self.attempt(event)
            }
            WorldEvent::Attempt { event } => self.attempt(event),
            WorldEvent::AttemptTimeout { event, attempt } => {
                let mut world = self.world.borrow_mut();
                let now_ms = world.now_ms;
                if let Some(next_ms) = world.sender.time_out(event, attempt, now_ms) {
                    world.schedule_event(next_ms, WorldEvent::Attempt { event });
                    let text = format!(
                        "attempt {attempt} of {} timed out; next attempt in {}",
                        world.workload.events[event].event_id,
                        World::duration(next_ms - now_ms)
                    );
                    world.note(&text);
                } else {
                    world.note("timeout of a settled attempt ignored");
                }
                Ok(())
            }
            WorldEvent::SendAnswer {
                process,
                incarnation,
                delivery,
                answer,
            } => {
                let mut world = self.world.borrow_mut();
                let alive =
                    world.processes[process].up && world.processes[process].incarnation == incarnation;
                if !alive {
                    world.note("answer lost: the receiver crashed before writing it");
                } else if world.webhook_answer_dropped() {
                    let what = format!(
                        "answer {answer} to {} lost",
                        world.workload.events[delivery.event].event_id
                    );
                    world.note(&what);
                    world.record_fault("lost-ack", &what);
                } else {
                    let at_ms = world.now_ms + world.network_latency_ms();
                    world.schedule_event(at_ms, WorldEvent::AnswerArrives { delivery, answer });
                    world.note("answer sent");
                }
                Ok(())
            }
            WorldEvent::AnswerArrives { delivery, answer } => {
                let mut world = self.world.borrow_mut();
                let event_id = world.workload.events[delivery.event].event_id.clone();
                if delivery.duplicate {
                    world.note(&format!("answer {answer} to a duplicate of {event_id} ignored"));
                    return Ok(());
                }
                let now_ms = world.now_ms;
                let next = world.sender.answer(
                    delivery.event,
                    delivery.attempt,
                    answer.is_success(),
                    &answer.to_string(),
                    now_ms,
                );
                let mut text = format!("sender got {answer} for {event_id} attempt {}", delivery.attempt);
                if let Some(next_ms) = next {
                    world.schedule_event(
                        next_ms,
                        WorldEvent::Attempt {
                            event: delivery.event,
                        },
                    );
                    text.push_str(&format!(
                        "; next attempt in {}",
                        World::duration(next_ms - now_ms)
                    ));
                }
                world.note(&text);
                Ok(())
            }
            WorldEvent::Restart { process } => {
                let role = {
                    let mut world = self.world.borrow_mut();
                    if world.processes[process].up {
                        world.note("restart skipped: already up");
                        return Ok(());
                    }
                    world.restart_process(process);
                    let text = format!("restart as {}", world.processes[process].id);
                    world.note(&text);
                    world.processes[process].role
                };
                if role == ProcessRole::RelayWorker {
                    self.spawn_relay_worker(process)?;
                }
                Ok(())
            }
            WorldEvent::FaultTimer { fault } => {
                let actions = {
                    let mut world = self.world.borrow_mut();
                    let now_ms = world.now_ms;
                    world.faults[fault].on_timer(now_ms)
                };
                for action in actions {
                    self.apply_timer_action(fault, action)?;
                }
                Ok(())
            }
        }
    }

    fn apply_timer_action(&mut self, fault: usize, action: FaultAction) -> Result<(), String> {
        match action {
            FaultAction::WakeAt { at_ms } => {
                self.world
                    .borrow_mut()
                    .schedule_event(at_ms, WorldEvent::FaultTimer { fault });
                Ok(())
            }
            FaultAction::PurgeReceipts { older_than_ms } => {
                let purger = {
                    let mut world = self.world.borrow_mut();
                    let name = world.faults[fault].name();
                    let purger = (0..world.processes.len()).find(|&index| {
                        world.processes[index].role == ProcessRole::Purger && world.processes[index].up
                    });
                    let what = match purger {
                        Some(_) => {
                            format!("purge receipts received before {}", format_time_ms(older_than_ms))
                        }
                        None => "purge skipped: the purge process is down".to_owned(),
                    };
                    world.note(&what);
                    world.record_fault(name, &what);
                    purger
                };
                let Some(process) = purger else {
                    return Ok(());
                };
                let system = Arc::clone(&self.system);
                self.spawn(process, TaskKind::Purge, move |env, _| {
                    system.purge_receipts(env, older_than_ms)
                })?;
                Ok(())
            }
            FaultAction::Crash { .. } => Ok(()),
        }
    }

    /// The sender makes the next attempt at `event`, with any duplicate copies.
    fn attempt(&mut self, event: usize) -> Result<(), String> {
        let (attempt, receivers) = {
            let mut world = self.world.borrow_mut();
            let attempt = world.sender.begin_attempt(event);
            let copies = 1 + world.extra_deliveries();
            let receivers: Vec<usize> = (0..copies).filter_map(|_| world.pick_receiver()).collect();
            let event_id = world.workload.events[event].event_id.clone();
            let now_ms = world.now_ms;
            if receivers.is_empty() {
                let next = world.sender.refuse(event, attempt, now_ms);
                if let Some(next_ms) = next {
                    world.schedule_event(next_ms, WorldEvent::Attempt { event });
                }
                world.note(&format!(
                    "attempt {attempt} of {event_id}: connection refused, no receiver up"
                ));
                return Ok(());
            }
            let names: Vec<String> = receivers
                .iter()
                .map(|&index| world.processes[index].id.clone())
                .collect();
            let mut text = format!("deliver {event_id} attempt {attempt} -> {}", names.join(", "));
            if receivers.len() > 1 {
                let copies = format!("{} copies of {event_id} in flight at once", receivers.len());
                world.record_fault("duplicate-delivery", &copies);
                text.push_str(" (duplicates)");
            }
            world.note(&text);
            let timeout_ms = now_ms + world.config.sender_timeout_ms;
            world.schedule_event(timeout_ms, WorldEvent::AttemptTimeout { event, attempt });
            (attempt, receivers)
        };
        for (copy, process) in receivers.into_iter().enumerate() {
            self.spawn_handler(
                process,
                DeliveryRef {
                    event,
                    attempt,
                    duplicate: copy > 0,
                },
            )?;
        }
        Ok(())
    }

    /// Applies the step's commits to the view, checks the safety invariants and writes the trace.
    pub(crate) fn finish_step(&mut self, actor: &str) -> Result<StepOutcome, String> {
        let mut world = self.world.borrow_mut();
        let world = &mut *world;
        if let Some(hazard) = world.determinism_hazard.take() {
            return Err(format!(
                "system {} at step {}: {hazard}",
                self.system.name(),
                world.step
            ));
        }
        let commits = std::mem::take(&mut world.step_commits);
        for (process_id, changes) in commits {
            let diffs = world.view.apply(&*self.system, &world.observed_tables, changes)?;
            record_history(&mut world.history, &process_id, &diffs);
            world.step_record.commits.push(CommitRecord { process_id, diffs });
        }
        let failure = if world.step_record.is_empty() {
            None
        } else {
            let observation = observation(world, &world.step_record);
            self.invariants
                .iter()
                .filter(|invariant| invariant.kind() == InvariantKind::Safety)
                .find_map(|invariant| failure_of(&**invariant, &observation, world))
        };
        let line = format!(
            "{:>6} {:>12} {:<13} {}",
            world.step,
            format_time_ms(world.now_ms),
            actor,
            world.line
        );
        world.trace.push(line);
        world.step_record.clear();
        world.now_ms += 1;
        Ok(match failure {
            Some(failure) => {
                let line = format!(
                    "{:>6} {:>12} {:<13} FAILED {}: {}",
                    world.step,
                    format_time_ms(failure.time_ms),
                    "invariant",
                    failure.invariant,
                    failure.message
                );
                world.trace.push(line);
                StepOutcome::Failed(failure)
            }
            None => StepOutcome::Continue,
        })
    }

    pub(crate) fn outcome(&self, failure: Option<Failure>) -> RunOutcome {
        let mut world = self.world.borrow_mut();
        let digest = world.trace.digest();
        let trace = std::mem::replace(&mut world.trace, crate::trace::Trace::new(false)).into_lines();
        RunOutcome {
            seed: self.seed,
            system: self.system.name().to_owned(),
            config: world.config.clone(),
            steps: world.step,
            end_ms: world.now_ms,
            digest,
            failure,
            faults_fired: world.fault_counts.clone(),
            fault_log: world.fault_log.clone(),
            trace,
            effects: world.provider.effects().len(),
        }
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        // Futures hold environments that point back at the world; drop them first so the world
        // (and its database connections) can go.
        self.futures.clear();
    }
}

fn observation<'a>(world: &'a World, step: &'a StepRecord) -> Observation<'a> {
    Observation {
        db: &world.view,
        provider: &world.provider,
        workload: &world.workload,
        sender: &world.sender,
        history: &world.history,
        step,
    }
}

fn failure_of(invariant: &dyn Invariant, observation: &Observation<'_>, world: &World) -> Option<Failure> {
    invariant.check(observation).err().map(|message| Failure {
        invariant: invariant.name().to_owned(),
        kind: invariant.kind().name().to_owned(),
        step: world.step,
        time_ms: world.now_ms,
        message,
    })
}

/// Remembers who took each lease and which events were ever received.
fn record_history(
    history: &mut crate::invariants::History,
    process_id: &str,
    diffs: &[crate::view::RowDiff],
) {
    for diff in diffs {
        match (&diff.before, &diff.after) {
            (before, Some(ObservedRow::Obligation(after))) => {
                let token_before = match before {
                    Some(ObservedRow::Obligation(before)) => Some(before.lease_token),
                    _ => None,
                };
                if token_before != Some(after.lease_token) {
                    history.lease_holders.insert(
                        (after.operation_key.clone(), after.lease_token),
                        process_id.to_owned(),
                    );
                }
            }
            (_, Some(ObservedRow::Receipt(receipt))) => {
                history
                    .ever_received
                    .insert((receipt.account.clone(), receipt.event_id.clone()));
            }
            _ => {}
        }
    }
}
