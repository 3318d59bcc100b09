//! One simulated run: set up, fault phase, heal, liveness phase, verdict.
//!
//! What a run reads and records is here too: the configuration and workload a seed draws
//! ([`SimConfig`], [`Workload`]), the shape a sweep asks for ([`WorkloadShape`]), the
//! [`Backend`], the [`Registry`], scripted [`Scenario`]s, [`Schedule`]s, and what each step
//! recorded ([`StepRecord`]).
//!
//! The executor is single-threaded. Each step picks one ready item with the scheduler's stream
//! (a task to poll up to its next scheduling point, or a world event such as a delivery attempt or
//! an answer on the wire), lets the fault models act on the item's process first (crash it, pause
//! the task, fail its statement with `SQLITE_BUSY`, move its clock), then applies the step's
//! commits to the view, checks the safety invariants, ends the step's record and advances the clock
//! by a millisecond. When nothing is ready the clock jumps to the next timer. After the fault
//! phase every fault model heals, crashed processes restart, and the operator requeues dead
//! obligations and redelivers webhooks whose retries ran out (as a Stripe or GitHub user does from
//! the dashboard after an incident); the run continues
//! until the world is quiet (or a bound), and the liveness invariants give the verdict. Every loop
//! here is bounded by the configuration's step and time limits.
//!
//! The liveness phase (its bounds, what ends it, and the verdicts only it gives) is in
//! `liveness`; the database and the workload a run starts from are made in `setup`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use commitgap::env::{Env, LocalBoxFuture};
use commitgap::receiver::WebhookDelivery;
use serde::{Deserialize, Serialize};

use crate::faults::{self, ActiveFault, PointAction, ProcessRole, TimerAction};
use crate::invariants::{Invariant, InvariantKind, Observation};
use crate::rng::SimRng;
use crate::sim_env::SimEnv;
use crate::system::System;
use crate::trace::Happening;
use crate::world::{
    Arrived, DeliveryKind, DeliveryRef, Finished, Item, Process, TaskId, TaskKind, World, WorldEvent,
};

mod liveness;
pub(crate) mod scenario;
mod setup;

use liveness::LivenessEnd;
pub use liveness::{Unsettled, liveness_bounds};
// A run's inputs and records live in modules of their own, and a team reaches them here: the
// configuration and workload a seed draws, the shape a sweep asks for, the backend, the registry
// of what a run reads besides its seed, scripted scenarios, schedules, and what a step recorded.
pub use crate::backend::Backend;
pub use crate::config::*;
pub use crate::record::*;
pub use crate::registry::*;
pub use crate::schedule::*;
pub use crate::shape::*;
pub use crate::workload::*;
pub use scenario::*;

/// How to run a seed.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The database backend the seed runs against.
    pub backend: Backend,
    /// The fault models a seed draws, the invariants added to the built-in ones and the command
    /// that replays a failure: the program's or the test's (see [`Registry`]).
    pub registry: Arc<Registry>,
    /// Keep every trace line in memory (for `--trace` and determinism reports).
    pub keep_trace: bool,
    /// Run this configuration instead of the one drawn from the seed.
    pub config: Option<SimConfig>,
    /// With a drawn configuration, turn every fault model on instead of a random subset.
    pub every_fault: bool,
    /// With a drawn configuration, what it may be (see [`WorkloadShape`]).
    pub shape: WorkloadShape,
    /// Follow this schedule (fixtures, workload and every decision) instead of drawing from the
    /// seed; the configuration must then be given too.
    pub schedule: Option<Schedule>,
    /// Write the run down as a schedule (scheduled runs always are).
    pub record_schedule: bool,
    /// How far ahead a schedule's lines are matched (see [`crate::schedule::DEFAULT_LOOKAHEAD`]).
    pub schedule_lookahead: usize,
    /// With a schedule: once its lines run out, draw the rest of the run from the seed instead
    /// of taking the defaults, and leave out any fault its lines place after the heal. The run
    /// is written down whole, and its record replays it like any schedule. This is how
    /// `explore` branches a new run off a kept one.
    pub draw_after_schedule: bool,
    /// Write down every statement the processes ran on SQLite, for `bench` to replay on a bare
    /// database. Off in ordinary runs, where it would only cost time and memory.
    pub record_sql: bool,
    /// Write the fault log ([`RunOutcome::fault_log`]) in words. A sweep turns it off, since
    /// only a seed that does not pass is written down, and runs such a seed again with it on:
    /// the log changes nothing a run decides, so the second run is the same run.
    pub keep_fault_log: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            backend: Backend::Memdb,
            registry: Arc::new(Registry::default()),
            keep_trace: false,
            config: None,
            every_fault: false,
            shape: WorkloadShape::default(),
            schedule: None,
            record_schedule: false,
            schedule_lookahead: crate::schedule::DEFAULT_LOOKAHEAD,
            draw_after_schedule: false,
            record_sql: false,
            keep_fault_log: true,
        }
    }
}

/// An invariant that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The name of the invariant that failed.
    pub invariant: String,
    /// The invariant's kind (safety or liveness), as its name.
    pub kind: String,
    /// The step at which the invariant failed.
    pub step: u64,
    /// The virtual time at which it failed, in milliseconds.
    pub time_ms: i64,
    /// What the invariant found wrong.
    pub message: String,
}

/// What a run did and concluded.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The seed that ran.
    pub seed: u64,
    /// The name of the system under test.
    pub system: String,
    /// The configuration the seed drew.
    pub config: SimConfig,
    /// How many simulation steps the run took.
    pub steps: u64,
    /// The virtual time at which the run ended, in milliseconds.
    pub end_ms: i64,
    /// A digest of the run's trace, equal for runs that went the same way.
    pub digest: String,
    /// The invariant that failed, if one did.
    pub failure: Option<Failure>,
    /// Set when the run reached its liveness bound before the world settled; the liveness
    /// invariants were then not judged (safety held up to that point, or `failure` says not).
    pub unsettled: Option<Unsettled>,
    /// How often each fault model fired.
    pub faults_fired: BTreeMap<String, u64>,
    /// How often each interesting situation was reached (see `coverage`), only those reached.
    pub situations: BTreeMap<String, u64>,
    /// The step each situation reached was first reached at.
    pub situation_steps: BTreeMap<String, u64>,
    /// Invariants not checked against the system because it lacks a workflow they assume, with
    /// why.
    pub invariants_left_out: Vec<(String, String)>,
    /// The attacker's requests the system's domain cannot make (an unknown type where it names
    /// none its receiver refuses), with why; empty when the attacker is off.
    pub attacks_left_out: Vec<(String, String)>,
    /// The name of the system's domain.
    pub domain: String,
    /// The situations the system's domain declares, for coverage.
    pub domain_situations: Vec<crate::domain::DomainSituation>,
    /// The fault decisions that mattered, in order.
    pub fault_log: Vec<String>,
    /// Every step's record, if they were kept.
    pub trace: Option<Vec<crate::trace::TraceStep>>,
    /// How many effects the provider applied during the run.
    pub effects: usize,
    /// The run written down, if it was recorded (always for a scheduled run).
    pub schedule: Option<Schedule>,
    /// What a scheduled run could not follow: skipped lines and choices that no longer apply.
    pub schedule_report: Vec<String>,
    /// Every statement the processes ran on SQLite, if [`RunOptions::record_sql`] asked for it.
    pub sql: Option<RecordedSql>,
}

impl RunOutcome {
    /// What this run contributes to a sweep's coverage.
    pub fn coverage(&self) -> crate::coverage::SeedCoverage<'_> {
        crate::coverage::SeedCoverage {
            faults: &self.config.faults,
            faults_fired: &self.faults_fired,
            situations: &self.situations,
            invariants_left_out: &self.invariants_left_out,
            attacks_left_out: &self.attacks_left_out,
            domain_situations: &self.domain_situations,
            domain: &self.domain,
        }
    }
}

/// What a run did to SQLite after set-up, enough to do it again on a bare database: the fixtures
/// that [`System::set_up`] loads first, then every operation in order.
#[derive(Debug, Clone)]
pub struct RecordedSql {
    /// The backend the statements ran on.
    pub backend: Backend,
    /// The fixtures loaded at set-up, before any operation.
    pub fixtures: crate::system::Fixtures,
    /// Every operation after set-up, in the order it ran.
    pub ops: Vec<crate::db::SqlOp>,
}

/// Runs `seed` against `system`. `Err` means the run could not be carried out at all (a schema
/// that does not load, a row the system cannot decode); it is not an invariant failure.
pub fn run_seed(system: &Arc<dyn System>, seed: u64, options: &RunOptions) -> Result<RunOutcome, String> {
    prepare(system, seed, options)?.run()
}

/// Sets up the run of `seed` that [`run_seed`] carries out, without starting it.
pub(crate) fn prepare(
    system: &Arc<dyn System>,
    seed: u64,
    options: &RunOptions,
) -> Result<Simulation, String> {
    let config = match &options.config {
        Some(config) => config.clone(),
        None => {
            let kinds = options.registry.faults();
            let mut config = SimConfig::draw_with(seed, options.backend, &options.shape, kinds);
            if options.every_fault {
                config.enable_faults_allowed_by(&options.shape, kinds);
            }
            config
        }
    };
    config.validate_before_building(options.registry.faults())?;
    let (workload, decider, shape) = match &options.schedule {
        Some(schedule) => {
            let workload = Workload::new(schedule.fixtures.clone(), schedule.events.clone());
            (
                workload,
                if options.draw_after_schedule {
                    Decider::branching(&schedule.steps, options.schedule_lookahead)
                } else {
                    Decider::scheduled(&schedule.steps, options.schedule_lookahead)
                },
                false,
            )
        }
        None => (
            crate::domain::draw_workload(&*system.domain(), seed, &config.workload_settings()),
            Decider::seeded(options.record_schedule),
            true,
        ),
    };
    let setup = Setup {
        registry: Arc::clone(&options.registry),
        keep_trace: options.keep_trace,
        scripted: false,
        shape_workload: shape,
        decider,
    };
    let simulation = Simulation::new(Arc::clone(system), seed, config, workload, setup)?;
    if !options.keep_fault_log {
        simulation.world.borrow_mut().forget_fault_log();
    }
    if options.record_sql {
        // After set-up, which a replay repeats through the system itself.
        simulation.world.borrow_mut().record_sql();
    }
    Ok(simulation)
}

/// How a simulation is set up, besides its system, seed, configuration and workload.
pub(crate) struct Setup {
    /// The fault models and invariants the run reads.
    pub(crate) registry: Arc<Registry>,
    pub(crate) keep_trace: bool,
    /// A scripted run: the sender stays silent and the test makes every delivery.
    pub(crate) scripted: bool,
    /// Let fault models reshape the workload (not when it comes from a schedule or a test).
    pub(crate) shape_workload: bool,
    pub(crate) decider: Decider,
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
        setup: Setup,
    ) -> Result<Simulation, String> {
        let Setup {
            registry,
            keep_trace,
            scripted,
            shape_workload,
            decider,
        } = setup;
        let observed_tables = crate::system::observed_tables(&*system);
        let (db, setup_changes) = Self::set_up_database(&system, &config, &workload, &observed_tables)?;
        let row_reader = crate::system::RowReader::of_database(&*system, db.setup_connection())?;

        let mut processes = Vec::new();
        for index in 1..=config.receivers {
            processes.push(Process::new(format!("receiver-{index}"), ProcessRole::Receiver));
        }
        for index in 1..=config.relay_workers {
            processes.push(Process::new(format!("relay-{index}"), ProcessRole::RelayWorker));
        }
        processes.push(Process::new("purge".to_owned(), ProcessRole::Purger));
        processes.push(Process::new("operator".to_owned(), ProcessRole::Operator));

        let mut fault_models: Vec<ActiveFault> = Vec::new();
        let context = config.fault_context();
        for kind in registry.faults() {
            if let Some(settings) = config.faults.get(kind.name) {
                let rng = SimRng::stream(seed, &faults::decision_stream_label(kind.name));
                // Building checks the settings, as `SimConfig::validate` does, with its error.
                // A model the seed turned off is not built: it does nothing, so the world does
                // not ask it at every step; its stream of decisions is its own, so no other
                // model notices.
                let model = kind
                    .build(settings, rng, &context)
                    .map_err(|error| format!("faults.{}.{error}", kind.name))?;
                if let Some(model) = model {
                    fault_models.push(ActiveFault::new(kind, model));
                }
            }
        }
        let (workload, reshaped) = if shape_workload {
            Self::shape_workload(workload, &mut fault_models, &config, &*system.domain())
        } else {
            (workload, Vec::new())
        };

        let waits_for_locks = config.waits_for_locks;
        let domain = system.domain();
        let (invariants, left_out) = registry.judging(&*domain, system.workflows(), &config.invariants)?;
        let mut world = World::new(
            seed,
            config,
            workload,
            domain,
            db,
            observed_tables,
            processes,
            fault_models,
            keep_trace,
            scripted,
            decider,
        );
        world.set_framework_commits_handlers(system.commits_after_answer());
        // A seed file recorded before statements waited for locks replays with none waiting.
        world.set_lock_waits(waits_for_locks, system.busy_timeout_ms());
        world.set_body_limit(system.body_bytes_max());
        world.note_invariants_left_out(left_out);
        world.set_row_reader(row_reader);
        world.note_attacks_left_out();
        for (fault, events) in reshaped {
            world.record_reshaping(fault, events);
        }
        world.record_setup(&*system, seed, setup_changes)?;
        Ok(Simulation {
            world: Rc::new(RefCell::new(world)),
            futures: BTreeMap::new(),
            system,
            invariants,
            seed,
            scripted,
        })
    }

    pub(crate) fn run(&mut self) -> Result<RunOutcome, String> {
        self.start()?;
        if let Some(failure) = self.fault_phase()? {
            return Ok(self.outcome(Some(failure)));
        }
        self.heal();
        let outcome = match self.liveness_phase()? {
            LivenessEnd::Failed(failure) => self.outcome(Some(failure)),
            LivenessEnd::Settled => {
                let failure = self.check_liveness();
                self.outcome(failure)
            }
            LivenessEnd::Unsettled(unsettled) => {
                let mut outcome = self.outcome(None);
                outcome.unsettled = Some(unsettled);
                outcome
            }
        };
        Ok(outcome)
    }

    /// Starts the relay workers, schedules every event's creation and the fault models' timers.
    pub(crate) fn start(&mut self) -> Result<(), String> {
        let relays = self.world.borrow().processes_with_role(ProcessRole::RelayWorker);
        for process in relays {
            self.spawn_relay_worker(process)?;
        }
        self.world.borrow_mut().schedule_start(!self.scripted);
        Ok(())
    }

    fn fault_phase(&mut self) -> Result<Option<Failure>, String> {
        let (end_ms, steps_max) = {
            let world = self.world.borrow();
            (
                world.config().fault_phase_ms,
                world.config().fault_phase_steps_max,
            )
        };
        loop {
            {
                let world = self.world.borrow();
                if world.now_ms() >= end_ms || world.step() >= steps_max {
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

    /// Stops every fault model, restarts every crashed process, sets every clock right, and has
    /// the operator clean up after the incident.
    pub(crate) fn heal(&mut self) {
        self.world.borrow_mut().heal();
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
        self.world.borrow_mut().begin_step_of(item);
        let outcome = if self.fault_at(item)? {
            Ok(())
        } else {
            match item {
                Item::Task(task) => self.poll_task(task),
                Item::Event(event) => self.handle_event(event),
            }
        };
        outcome.and_then(|()| self.finish_step())
    }

    /// Crashes `process` now, as a step of its own (scenarios use this).
    pub(crate) fn crash_now(&mut self, process: usize, restart_after_ms: i64) -> Result<StepOutcome, String> {
        self.world.borrow_mut().begin_step_as(process);
        self.crash(process, restart_after_ms, crate::faults::crash::KIND.name);
        self.finish_step()
    }

    /// Lets the fault models act on the process `item` belongs to, before it runs. Returns true
    /// when the item must not run in this step (its process crashed, or its task was paused).
    fn fault_at(&mut self, item: Item) -> Result<bool, String> {
        let decision = {
            let mut world = self.world.borrow_mut();
            let Some((process, op)) = world.target_of(item) else {
                return Ok(false);
            };
            world
                .fault_at_scheduling_point(process, &op)
                .map(|(fault, action)| (process, op, fault, action))
        };
        let Some((process, op, fault, action)) = decision else {
            return Ok(false);
        };
        let fault = fault.as_str();
        match (action, item) {
            (PointAction::Crash { restart_after_ms }, _) => {
                if let Item::Event(event) = item {
                    // The crash takes the answer that was about to be written with it.
                    self.world.borrow_mut().take_event(event);
                }
                self.crash(process, restart_after_ms, fault);
                Ok(true)
            }
            (PointAction::Pause { duration_ms }, Item::Task(task)) => {
                Ok(self.world.borrow_mut().pause(process, task, duration_ms, fault))
            }
            (PointAction::FailStatement { failure, rolled_back }, Item::Task(task)) => {
                // Only a statement can fail; a decision for anything else (an edited schedule's)
                // no longer applies.
                if op.statement().is_some() {
                    self.world
                        .borrow_mut()
                        .fail_next_statement(process, task, failure, rolled_back, fault);
                }
                Ok(false)
            }
            (PointAction::ClockJump { offset_ms }, _) => {
                self.world
                    .borrow_mut()
                    .jump_clock(process, item, offset_ms, fault);
                Ok(false)
            }
            // An answer on the wire belongs to no task: it can be lost with a crash, but not
            // paused, and it runs no statement.
            (PointAction::Pause { .. } | PointAction::FailStatement { .. }, Item::Event(_)) => Ok(false),
        }
    }

    /// Crashes `process`, as fault model `fault` (or a scenario) decided; its tasks' futures go.
    pub(crate) fn crash(&mut self, process: usize, restart_after_ms: i64, fault: &str) {
        let tasks = self.world.borrow_mut().crash(process, restart_after_ms, fault);
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
        let settings = self.world.borrow().config().relay.clone();
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

    /// Starts a handler for `webhook` at receiver `process`. `delivery` says which sender stream
    /// awaits the answer; `None` for a delivery a scenario made by hand.
    pub(crate) fn spawn_handler(
        &mut self,
        process: usize,
        webhook: WebhookDelivery,
        account: String,
        event_id: String,
        delivery: Option<DeliveryRef>,
        origin: Origin,
    ) -> Result<TaskId, String> {
        let system = Arc::clone(&self.system);
        let world = Rc::clone(&self.world);
        let commits_after_answer = system.commits_after_answer();
        self.world
            .borrow_mut()
            .handler_starting(delivery, &account, &event_id);
        let kind = TaskKind::Handler {
            delivery,
            account,
            event_id,
            origin,
        };
        self.spawn(process, kind, move |env, task| {
            let handling = system.handle_delivery(Rc::clone(&env), webhook);
            Box::pin(async move {
                let answer = handling.await;
                world.borrow_mut().handler_finished(task, answer);
                if commits_after_answer {
                    // The framework commits whatever the handler left open, after the answer.
                    let _ = env.execute("COMMIT", &[]).await;
                }
            })
        })
    }

    fn handle_event(&mut self, event: crate::world::EventId) -> Result<(), String> {
        let event = self.world.borrow_mut().take_event(event);
        match event {
            WorldEvent::Emit { event } => self.world.borrow_mut().emit(event),
            WorldEvent::Attempt { stream } => return self.attempt(stream),
            WorldEvent::Extra {
                stream,
                reason,
                fault,
            } => {
                // A seed file written before deliveries named their model meant the built-in
                // its reason names.
                let fault = match fault.as_str() {
                    "" if reason.contains("resend") => crate::faults::late_delivery::KIND.name,
                    "" => crate::faults::spontaneous_duplicate::KIND.name,
                    fault => fault,
                };
                self.world
                    .borrow_mut()
                    .record_fault(fault, &format_args!("{reason} of stream {stream}"));
                return self.deliver(stream, 0, DeliveryKind::Extra, &reason);
            }
            WorldEvent::AttemptTimeout { stream, attempt } => {
                self.world.borrow_mut().attempt_timed_out(stream, attempt);
            }
            WorldEvent::SendAnswer {
                process,
                incarnation,
                delivery,
                answer,
            } => {
                self.world
                    .borrow_mut()
                    .send_answer(process, incarnation, delivery, answer);
            }
            WorldEvent::AnswerArrives { delivery, answer } => {
                self.world.borrow_mut().answer_arrives(delivery, answer);
            }
            WorldEvent::Restart { process } => {
                let restarted = self.world.borrow_mut().restart(process);
                if restarted == Some(ProcessRole::RelayWorker) {
                    self.spawn_relay_worker(process)?;
                }
            }
            WorldEvent::FaultTimer { fault } => {
                let actions = self.world.borrow_mut().fault_timer(fault);
                for action in actions {
                    self.apply_timer_action(fault, action)?;
                }
            }
            WorldEvent::FaultActs { fault, action } => return self.apply_timer_action(fault, action),
            WorldEvent::ProviderActs {
                request,
                lock_after_ms,
                lock_by,
            } => self
                .world
                .borrow_mut()
                .provider_acts(&request, lock_after_ms, lock_by),
            WorldEvent::OperatorRequeue => return self.operator_requeue(),
            WorldEvent::OperatorRedeliver { round } => {
                let given_up = self.world.borrow_mut().operator_redelivery_round(round);
                for stream in given_up {
                    self.deliver(stream, 0, DeliveryKind::Extra, "manual redelivery")?;
                }
                self.world.borrow_mut().schedule_next_redelivery(round);
            }
        }
        Ok(())
    }

    fn operator_requeue(&mut self) -> Result<(), String> {
        let Some(process) = self.world.borrow().process_with_role(ProcessRole::Operator) else {
            return Ok(());
        };
        self.world.borrow_mut().note_dead_at_requeue();
        self.world.borrow_mut().record(Happening::OperatorRequeue);
        let system = Arc::clone(&self.system);
        self.spawn(process, TaskKind::Operator, move |env, _| {
            system.requeue_dead_obligations(env)
        })?;
        Ok(())
    }

    fn apply_timer_action(&mut self, fault: usize, action: TimerAction) -> Result<(), String> {
        match action {
            TimerAction::WakeAt { at_ms } => {
                self.world
                    .borrow_mut()
                    .schedule_event(at_ms, WorldEvent::FaultTimer { fault });
            }
            TimerAction::PurgeReceipts { older_than_ms } => {
                let purger = self.world.borrow_mut().begin_purge(fault, older_than_ms);
                if let Some(process) = purger {
                    let system = Arc::clone(&self.system);
                    let task = self.spawn(process, TaskKind::Purge, move |env, _| {
                        system.purge_receipts(env, older_than_ms)
                    })?;
                    self.world.borrow_mut().watch_purge(task, process, older_than_ms);
                }
            }
            TimerAction::Attack { attack, target } => {
                let arrived = self.world.borrow_mut().send_attack(fault, attack, target);
                if let Some(arrived) = arrived {
                    self.spawn_arrived(arrived, None)?;
                }
            }
            TimerAction::SenderClock { offset_ms } => {
                self.world.borrow_mut().set_sender_clock(fault, offset_ms);
            }
            TimerAction::HoldWriteLock { hold_ms } => {
                let holder = self.world.borrow_mut().begin_write_lock_hold(fault, hold_ms);
                if let Some(process) = holder {
                    self.spawn(process, TaskKind::Operator, move |env, _| {
                        faults::maintenance_lock::hold_write_lock(env, hold_ms, |_| {})
                    })?;
                }
            }
        }
        Ok(())
    }

    /// The sender makes the next scheduled attempt of `stream`, with any concurrent copies.
    fn attempt(&mut self, stream: usize) -> Result<(), String> {
        let (attempt, copies) = self.world.borrow_mut().begin_attempt(stream);
        self.deliver(stream, attempt, DeliveryKind::Scheduled, "")?;
        for _ in 0..copies {
            self.deliver(stream, attempt, DeliveryKind::Copy, "copy")?;
        }
        Ok(())
    }

    /// Sends one delivery of `stream`, and starts its handler if it reached a receiver.
    fn deliver(
        &mut self,
        stream: usize,
        attempt: u32,
        kind: DeliveryKind,
        label: &str,
    ) -> Result<(), String> {
        let arrived = self
            .world
            .borrow_mut()
            .send_delivery(stream, attempt, kind, label);
        if let Some(arrived) = arrived {
            let delivery = DeliveryRef {
                stream,
                attempt,
                kind,
            };
            self.spawn_arrived(arrived, Some(delivery))?;
        }
        Ok(())
    }

    fn spawn_arrived(&mut self, arrived: Arrived, delivery: Option<DeliveryRef>) -> Result<TaskId, String> {
        let Arrived {
            receiver,
            webhook,
            account,
            event_id,
            origin,
        } = arrived;
        self.spawn_handler(receiver, webhook, account, event_id, delivery, origin)
    }

    /// Applies the step's commits to the view, checks the safety invariants and ends the step's
    /// record.
    pub(crate) fn finish_step(&mut self) -> Result<StepOutcome, String> {
        let mut world = self.world.borrow_mut();
        world.apply_step_commits(&*self.system)?;
        let failure = if world.step_record().is_empty() {
            None
        } else {
            let observation = observation(&world, world.step_record());
            self.invariants
                .iter()
                .filter(|invariant| invariant.kind() == InvariantKind::Safety)
                .find_map(|invariant| failure_of(&**invariant, &observation, &world))
        };
        let failed = failure.as_ref().map(|failure| {
            let failed = Happening::Failed {
                invariant: failure.invariant.clone(),
                evidence: failure.message.clone(),
            };
            (failure.time_ms, failed)
        });
        world.end_step(failed);
        Ok(match failure {
            Some(failure) => StepOutcome::Failed(failure),
            None => StepOutcome::Continue,
        })
    }

    pub(crate) fn outcome(&self, failure: Option<Failure>) -> RunOutcome {
        let mut world = self.world.borrow_mut();
        let Finished {
            digest,
            trace,
            schedule,
            schedule_report,
            sql,
        } = world.finish();
        RunOutcome {
            seed: self.seed,
            system: self.system.name().to_owned(),
            config: world.config().clone(),
            steps: world.step(),
            end_ms: world.now_ms(),
            digest,
            failure,
            unsettled: None,
            faults_fired: world.fault_counts().clone(),
            situations: world.probes().reached(),
            situation_steps: world.probes().first_steps().clone(),
            invariants_left_out: world.invariants_left_out().to_vec(),
            attacks_left_out: world
                .attacks_left_out()
                .iter()
                .map(|(attack, why)| (attack.name().to_owned(), why.clone()))
                .collect(),
            domain: world.domain().name().to_owned(),
            domain_situations: world.domain().situations(),
            fault_log: world.fault_log().to_vec(),
            trace,
            effects: world.provider().effects().len(),
            schedule,
            schedule_report,
            sql: sql.map(|ops| RecordedSql {
                backend: world.backend(),
                fixtures: world.workload().fixtures.clone(),
                ops,
            }),
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
        db: world.view(),
        provider: world.provider(),
        workload: world.workload(),
        sender: world.sender(),
        history: world.history(),
        step,
        now_ms: world.now_ms(),
        config: world.config(),
        domain: world.domain(),
        model: world.model(),
    }
}

fn failure_of(invariant: &dyn Invariant, observation: &Observation<'_>, world: &World) -> Option<Failure> {
    invariant.check(observation).err().map(|message| Failure {
        invariant: invariant.name().to_owned(),
        kind: invariant.kind().name().to_owned(),
        step: world.step(),
        time_ms: world.now_ms(),
        message,
    })
}

/// Runs `seed` of the reference under `config` and asserts that it passed and settled: how the
/// unit tests of a configuration contract show that a correct system survives the configurations
/// the contract admits.
#[cfg(test)]
pub(crate) fn assert_reference_survives(config: &SimConfig, seed: u64) {
    let reference = crate::systems::by_name("reference").unwrap();
    let options = RunOptions {
        config: Some(config.clone()),
        ..RunOptions::default()
    };
    let outcome = run_seed(&reference, seed, &options).unwrap();
    assert_eq!(
        outcome.failure.map(|failure| failure.message),
        None,
        "seed {seed}"
    );
    assert!(
        outcome.unsettled.is_none(),
        "seed {seed}: {:?}",
        outcome.unsettled
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_found_by_the_name_it_is_written_with() {
        let system = crate::systems::by_name("reference").expect("the reference exists");
        let mut checked = 0;
        for seed in 0..40 {
            let options = RunOptions {
                every_fault: true,
                ..RunOptions::default()
            };
            let simulation = prepare(&system, seed, &options).expect("every seed sets up");
            let world = simulation.world.borrow();
            for stream in 0..world.sender().streams().len() {
                let name = world.stream_name(stream);
                assert_eq!(world.stream_named(&name), Some(stream), "{name}");
                for near_miss in [
                    format!("{name}0"),
                    name.replacen('~', "~0", 1),
                    name.replacen('~', "~+", 1),
                    name.replacen('/', "//", 1),
                    name[..name.len() - 1].to_owned(),
                ] {
                    assert_eq!(world.stream_named(&near_miss), None, "{near_miss}");
                }
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked} streams");
    }

    #[test]
    fn a_run_without_its_fault_log_is_the_same_run() {
        let system = crate::systems::by_name("reference").expect("the reference exists");
        let mut logged_lines = 0;
        for seed in 0..6 {
            let logged = RunOptions {
                every_fault: true,
                ..RunOptions::default()
            };
            let quiet = RunOptions {
                keep_fault_log: false,
                ..logged.clone()
            };
            let with_log = run_seed(&system, seed, &logged).unwrap();
            let without = run_seed(&system, seed, &quiet).unwrap();
            assert_eq!(with_log.digest, without.digest, "seed {seed}");
            assert_eq!(with_log.faults_fired, without.faults_fired, "seed {seed}");
            assert!(without.fault_log.is_empty(), "seed {seed}");
            logged_lines += with_log.fault_log.len();
        }
        assert!(
            logged_lines > 0,
            "with every fault on, some fault fires and is logged"
        );
    }
}
