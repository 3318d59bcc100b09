//! Scripted scenarios: deterministic tests that say exactly what happens when.
//!
//! A scenario runs a system on the same executor, database, provider and invariants as a seeded
//! run, but the test makes every move: it delivers an event to a chosen receiver, runs a handler
//! up to the statement it names, crashes a process there, drops a provider reply, purges
//! receipts, holds SQLite's write lock as another writer would, and then lets everything else run
//! to quiet. Where several tasks are ready at once, the scenario's seed picks the interleaving, so
//! a scenario is as reproducible as a seed. No fault model runs unless the test injects it. Safety
//! invariants are checked after every step and every violation is kept, so a test can assert that
//! none happened.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use commitgap::env::{DbError, Row};
use commitgap::provider::ProviderRequest;
use commitgap::receiver::{Answer, WebhookDelivery};
use commitgap::relay::RelaySettings;

use crate::config::SimConfig;
use crate::coverage::Situation;
use crate::db::Backend;
use crate::faults::ProcessRole;
use crate::provider::Effect;
use crate::rng::Ratio;
use crate::run::{Failure, Simulation, StepOutcome};
use crate::sender::SenderPreset;
use crate::system::{Fixtures, System};
use crate::workload::{EventSpec, Workload};
use crate::world::{Item, Origin, TaskId, TaskKind};

/// The shape of a scenario's world.
#[derive(Debug, Clone)]
pub struct ScenarioSetup {
    /// Picks the interleaving whenever several tasks are ready.
    pub seed: u64,
    /// How many receiver processes start with the scenario.
    pub receivers: u32,
    /// Relay workers start with the scenario; zero leaves obligations owed.
    pub relay_workers: u32,
    /// The relay workers' settings.
    pub relay: RelaySettings,
    /// Upper bound on the provider's reply time, in milliseconds.
    pub provider_latency_ms_max: i64,
    /// The database backend the scenario runs against.
    pub backend: Backend,
}

impl Default for ScenarioSetup {
    fn default() -> Self {
        ScenarioSetup {
            seed: 0,
            receivers: 1,
            relay_workers: 0,
            relay: RelaySettings::default(),
            provider_latency_ms_max: 100,
            backend: Backend::Memdb,
        }
    }
}

/// What each statement of a task started by `Scenario::start_statements` returned, in order.
#[cfg(test)]
pub(crate) type StatementResults = Rc<RefCell<Vec<Result<usize, DbError>>>>;

/// A handler started by [`Scenario::deliver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task(TaskId);

/// A scripted run. See the module documentation.
pub struct Scenario {
    simulation: Simulation,
    failures: Vec<Failure>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("failures", &self.failures)
            .finish_non_exhaustive()
    }
}

/// Steps any one scenario call may take before it gives up.
const STEPS_PER_CALL_MAX: u64 = 100_000;

impl Scenario {
    /// Sets up `system` with `fixtures`. `events` are the events the test may deliver; the
    /// invariants use them as ground truth.
    pub fn new(
        system: Arc<dyn System>,
        fixtures: Fixtures,
        events: Vec<EventSpec>,
        setup: ScenarioSetup,
    ) -> Result<Scenario, String> {
        let config = SimConfig {
            backend: setup.backend,
            tenants: fixtures.accounts.len().max(1) as u32,
            orders_per_tenant: 1,
            paid_orders: Ratio::new(1, 1),
            receivers: setup.receivers,
            relay_workers: setup.relay_workers,
            sender_preset: SenderPreset::StripeLike,
            sender_timeout_ms: 30_000,
            emit_window_ms: 1,
            network_latency_ms_max: 1,
            provider_latency_ms_max: setup.provider_latency_ms_max,
            relay: setup.relay,
            // A scripted run has no phases: the test decides every step, so these bounds are
            // never consulted; they only need to be valid.
            fault_phase_ms: 1,
            fault_phase_steps_max: 1,
            liveness_ms_max: 1,
            liveness_steps_max: 1,
            liveness_steps_per_stream: 0,
            updates_per_order: None,
            racing_orders: Ratio::NEVER,
            edge_values: false,
            waits_for_locks: true,
            liveness_ms_per_stream: 0,
            faults: Default::default(),
            invariants: Default::default(),
        };
        // A scenario may run without relay workers (the test drives the relay, or checks what
        // the receiver alone leaves behind); everything else is held to the usual limits.
        let mut checked = config.clone();
        checked.relay_workers = checked.relay_workers.max(1);
        checked.validate()?;
        let workload = Workload::new(fixtures, events);
        let run_setup = crate::run::Setup {
            registry: std::sync::Arc::new(crate::registry::Registry::default()),
            keep_trace: true,
            scripted: true,
            shape_workload: false,
            decider: crate::schedule::Decider::seeded(false),
        };
        let mut simulation = Simulation::new(system, setup.seed, config, workload, run_setup)?;
        simulation.start()?;
        Ok(Scenario {
            simulation,
            failures: Vec::new(),
        })
    }

    /// Starts one delivery of event `event_id` (of the scenario's events; the first one with that
    /// id) at receiver `receiver` (1 for `receiver-1`). The handler runs up to its first statement.
    pub fn deliver(&mut self, receiver: u32, event_id: &str) -> Result<Task, String> {
        let (account, body) = {
            let world = self.simulation.world.borrow();
            let event = world
                .workload()
                .events
                .iter()
                .find(|event| event.event_id == event_id)
                .ok_or_else(|| format!("no scenario event {event_id:?}"))?;
            (event.account.clone(), world.domain().body(event))
        };
        self.deliver_body(receiver, &account, event_id, &body)
    }

    /// Starts one delivery with an arbitrary `body` at receiver `receiver`, as if for event
    /// `(account, event_id)`: for conflicting payloads and malformed input.
    pub fn deliver_body(
        &mut self,
        receiver: u32,
        account: &str,
        event_id: &str,
        body: &str,
    ) -> Result<Task, String> {
        let timestamp_s = self.now_ms().div_euclid(1_000);
        let webhook = crate::signing::signed_delivery(
            account,
            &format!("msg_{account}_{event_id}"),
            timestamp_s,
            body.as_bytes().to_vec(),
            crate::signing::CURRENT_GENERATION,
        );
        self.deliver_webhook(
            receiver,
            webhook,
            account,
            event_id,
            Origin::Sender { timestamp_s },
        )
    }

    /// Starts one delivery of an arbitrary request at receiver `receiver`: headers, endpoint and
    /// body as given (for attacks), judged by the invariants as coming from `origin`.
    pub fn deliver_webhook(
        &mut self,
        receiver: u32,
        webhook: WebhookDelivery,
        account: &str,
        event_id: &str,
        origin: Origin,
    ) -> Result<Task, String> {
        let process = self.process(&format!("receiver-{receiver}"))?;
        let task = self.simulation.spawn_handler(
            process,
            webhook,
            account.to_owned(),
            event_id.to_owned(),
            None,
            origin,
        )?;
        Ok(Task(task))
    }

    /// Delivers every `(receiver, event_id)` at once, runs to quiet, and delivers again (to the
    /// same receiver) each one answered "retry later", as a sender would, for at most
    /// `rounds_max` rounds. Returns the final answers, in the order given, and the rounds taken.
    pub fn deliver_until_answered(
        &mut self,
        deliveries: &[(u32, &str)],
        rounds_max: u32,
    ) -> Result<(Vec<Answer>, u32), String> {
        let mut answers: Vec<Option<Answer>> = vec![None; deliveries.len()];
        for round in 1..=rounds_max {
            let mut tasks = Vec::new();
            for (index, &(receiver, event_id)) in deliveries.iter().enumerate() {
                if !answers[index]
                    .as_ref()
                    .is_some_and(|answer| answer.is_success() || answer.is_permanent_failure())
                {
                    tasks.push((index, self.deliver(receiver, event_id)?));
                }
            }
            self.run_until_quiet()?;
            for (index, task) in tasks {
                answers[index] = self.answer(task);
            }
            if answers.iter().all(|answer| {
                answer
                    .as_ref()
                    .is_some_and(|answer| answer.is_success() || answer.is_permanent_failure())
            }) {
                return Ok((answers.into_iter().map(Option::unwrap).collect(), round));
            }
        }
        Err(format!(
            "deliveries still answered \"retry later\" after {rounds_max} rounds"
        ))
    }

    /// Runs `task` alone until its next statement contains `sql_fragment`, and stops before it.
    pub fn run_until_before(&mut self, task: Task, sql_fragment: &str) -> Result<(), String> {
        for _ in 0..STEPS_PER_CALL_MAX {
            {
                let world = self.simulation.world.borrow();
                let scripted = world.scripted().expect("scenarios are scripted");
                if scripted
                    .pending_sql
                    .get(&task.0)
                    .is_some_and(|sql| sql.contains(sql_fragment))
                {
                    return Ok(());
                }
                if !world.has_task(task.0) {
                    return Err(format!(
                        "the task finished before a statement containing {sql_fragment:?}"
                    ));
                }
            }
            if !self.simulation.world.borrow_mut().take_ready(Item::Task(task.0)) {
                return Err(format!("the task is waiting, not about to run {sql_fragment:?}"));
            }
            let outcome = self.simulation.run_item(Item::Task(task.0))?;
            self.record(outcome);
        }
        Err(format!(
            "no statement containing {sql_fragment:?} within {STEPS_PER_CALL_MAX} steps"
        ))
    }

    /// Crashes the process named `name` (such as `receiver-1`) now; it restarts a millisecond
    /// later.
    pub fn crash(&mut self, name: &str) -> Result<(), String> {
        let process = self.process(name)?;
        let outcome = self.simulation.crash_now(process, 1)?;
        self.record(outcome);
        Ok(())
    }

    /// Runs every ready task and event, in the order the scenario's seed picks, until nothing is
    /// owed or in flight.
    pub fn run_until_quiet(&mut self) -> Result<(), String> {
        for _ in 0..STEPS_PER_CALL_MAX {
            if self.simulation.world.borrow().is_quiescent() {
                return Ok(());
            }
            match self.simulation.step()? {
                StepOutcome::Idle => return Ok(()),
                outcome => self.record(outcome),
            }
        }
        Err(format!(
            "the world was not quiet after {STEPS_PER_CALL_MAX} steps"
        ))
    }

    /// The answer `task` gave, once it finished.
    pub fn answer(&self, task: Task) -> Option<Answer> {
        let world = self.simulation.world.borrow();
        world
            .scripted()
            .and_then(|scripted| scripted.answers.get(&task.0).cloned())
    }

    /// Loses the next `count` provider replies (the provider still acts).
    pub fn drop_provider_replies(&mut self, count: u32) {
        let mut world = self.simulation.world.borrow_mut();
        world
            .scripted_mut()
            .expect("scenarios are scripted")
            .provider_replies_to_drop += count;
    }

    /// Makes the provider reject the next `count` sends for good (400), without acting.
    pub fn reject_provider_sends(&mut self, count: u32) {
        let mut world = self.simulation.world.borrow_mut();
        world
            .scripted_mut()
            .expect("scenarios are scripted")
            .provider_sends_to_reject += count;
    }

    /// Runs the operator's requeue of dead obligations to completion.
    pub fn requeue_dead(&mut self) -> Result<(), String> {
        let process = self.process("operator")?;
        let system = Arc::clone(self.simulation.system());
        let task = self
            .simulation
            .spawn(process, TaskKind::Operator, move |env, _| {
                system.requeue_dead_obligations(env)
            })?;
        self.run_task_to_end(task)
    }

    /// Starts a task on process `name` (such as `operator`) that takes SQLite's write lock with
    /// `BEGIN IMMEDIATE`, holds it for `hold_ms` of virtual time and commits, and returns once the
    /// lock is held: another writer the system must wait out, such as an administrator's migration
    /// or a long report. The task has a connection of its own, as a second process would.
    pub fn hold_write_lock(&mut self, name: &str, hold_ms: i64) -> Result<(), String> {
        let process = self.process(name)?;
        let began: Rc<RefCell<Option<Result<usize, DbError>>>> = Rc::new(RefCell::new(None));
        let began_in_task = Rc::clone(&began);
        let task = self
            .simulation
            .spawn(process, TaskKind::Operator, move |env, _| {
                crate::faults::maintenance_lock::hold_write_lock(env, hold_ms, move |outcome| {
                    *began_in_task.borrow_mut() = Some(outcome.clone());
                })
            })?;
        // Run the holder alone until its BEGIN has run, so that the lock is held before anything
        // the test starts next.
        for _ in 0..STEPS_PER_CALL_MAX {
            if let Some(outcome) = began.borrow().as_ref() {
                return match outcome {
                    Ok(_) => Ok(()),
                    Err(error) => Err(format!("{name} could not take the write lock: {error}")),
                };
            }
            if !self.simulation.world.borrow_mut().take_ready(Item::Task(task)) {
                return Err(format!("{name}'s lock holder is waiting before its BEGIN"));
            }
            let outcome = self.simulation.run_item(Item::Task(task))?;
            self.record(outcome);
        }
        Err(format!("{name}'s lock holder did not reach its BEGIN"))
    }

    /// Starts a task on process `name` that runs `statements` one after another, each followed by
    /// a sleep of the given length, and keeps every result; the statements run as the scheduler
    /// picks them. For tests of the simulated database itself.
    #[cfg(test)]
    pub(crate) fn start_statements(
        &mut self,
        name: &str,
        statements: Vec<(&'static str, i64)>,
    ) -> Result<StatementResults, String> {
        let process = self.process(name)?;
        let results: StatementResults = Rc::new(RefCell::new(Vec::new()));
        let results_in_task = Rc::clone(&results);
        self.simulation
            .spawn(process, TaskKind::Operator, move |env, _| {
                Box::pin(async move {
                    for (sql, sleep_ms) in statements {
                        let outcome = if sql.starts_with("SELECT") {
                            env.query(sql, &[]).await.map(|rows| rows.len())
                        } else {
                            env.execute(sql, &[]).await
                        };
                        results_in_task.borrow_mut().push(outcome);
                        if sleep_ms > 0 {
                            env.sleep_ms(sleep_ms).await;
                        }
                    }
                })
            })?;
        Ok(results)
    }

    /// Runs the system's purge job to completion, deleting receipts received before
    /// `older_than_ms`.
    pub fn purge_receipts(&mut self, older_than_ms: i64) -> Result<(), String> {
        let process = self.process("purge")?;
        let system = Arc::clone(self.simulation.system());
        let task = self.simulation.spawn(process, TaskKind::Purge, move |env, _| {
            system.purge_receipts(env, older_than_ms)
        })?;
        self.simulation
            .world
            .borrow_mut()
            .watch_purge(task, process, older_than_ms);
        self.run_task_to_end(task)
    }

    /// Runs everything until `task` has finished.
    fn run_task_to_end(&mut self, task: TaskId) -> Result<(), String> {
        for _ in 0..STEPS_PER_CALL_MAX {
            if !self.simulation.world.borrow().has_task(task) {
                return Ok(());
            }
            match self.simulation.step()? {
                StepOutcome::Idle => break,
                outcome => self.record(outcome),
            }
        }
        Err("the task did not finish".to_owned())
    }

    /// Runs `sql` outside every process (between steps) and returns its rows.
    pub fn read(&self, sql: &str) -> Result<Vec<Row>, String> {
        self.simulation
            .world
            .borrow()
            .read(sql)
            .map_err(|error| error.to_string())
    }

    /// The integer in the first column of the first row of `sql`, such as a `count(*)`.
    pub fn count(&self, sql: &str) -> Result<i64, String> {
        let rows = self.read(sql)?;
        rows.first()
            .ok_or_else(|| format!("{sql} returned no row"))?
            .int(0)
            .map_err(|error| error.to_string())
    }

    /// Every request that reached the provider, in order.
    pub fn provider_requests(&self) -> Vec<ProviderRequest> {
        self.simulation.world.borrow().provider().requests().to_vec()
    }

    /// Every effect the provider performed, in order.
    pub fn effects(&self) -> Vec<Effect> {
        self.simulation.world.borrow().provider().effects().to_vec()
    }

    /// Every safety invariant that failed so far.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// Checks the liveness invariants now.
    pub fn check_liveness(&self) -> Option<Failure> {
        self.simulation.check_liveness()
    }

    /// Virtual milliseconds since the scenario started.
    pub fn now_ms(&self) -> i64 {
        self.simulation.world.borrow().now_ms()
    }

    /// How often `situation` was reached so far (see `coverage`).
    pub fn situation_count(&self, situation: Situation) -> u64 {
        self.simulation.world.borrow().probes().count(situation)
    }

    /// Every situation reached so far, by name.
    pub fn situations(&self) -> BTreeMap<String, u64> {
        self.simulation.world.borrow().probes().reached()
    }

    /// The trace so far, one line per step.
    pub fn trace(&self) -> Vec<String> {
        let world = self.simulation.world.borrow();
        world.trace().steps().iter().map(ToString::to_string).collect()
    }

    fn process(&self, name: &str) -> Result<usize, String> {
        let world = self.simulation.world.borrow();
        world
            .processes()
            .iter()
            .position(|process| process.name == name)
            .ok_or_else(|| format!("no process called {name:?}"))
            .and_then(|index| {
                let process = world.process(index);
                if process.up || process.role == ProcessRole::Purger {
                    Ok(index)
                } else {
                    Err(format!("{name} is down"))
                }
            })
    }

    fn record(&mut self, outcome: StepOutcome) {
        if let StepOutcome::Failed(failure) = outcome {
            self.failures.push(failure);
        }
    }
}
