//! Shrinking: a failing run reduced to the few decisions that matter.
//!
//! The shrinker works on a run's schedule and configuration, never on its seed: a seed cannot be
//! made smaller, but a schedule can lose events, orders, processes, fault models, fault choices
//! and scheduling decisions. Each candidate is replayed from its schedule (no randomness), and
//! kept only if it still fails the same invariant and is smaller, so a shrunk run never grows. A
//! kept candidate's schedule is the one its replay wrote down, which realigns every later pass
//! with what actually happened. Deleted step lines fall back to the simplest scheduling (the item
//! that became ready first), so removing lines also simplifies the interleaving. The work is
//! bounded by a number of candidate runs and, when asked, by wall time: a time bound makes how
//! small the result gets depend on the machine, never whether it still fails.

use std::sync::Arc;

use crate::config::SimConfig;
use crate::registry::Registry;
use crate::run::{Failure, RunOptions, RunOutcome, run_seed};
use crate::schedule::{DEFAULT_LOOKAHEAD, Schedule, StepLine};
use crate::sweep::StopFlag;
use crate::system::System;

/// A run as the shrinker sees it: configuration, schedule, and what it did.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The configuration the run replays with.
    pub config: SimConfig,
    /// The run, written down step by step.
    pub schedule: Schedule,
    /// The invariant failure the run ends in.
    pub failure: Failure,
    /// How many simulation steps the run took.
    pub steps: u64,
    /// A digest of the run's trace.
    pub digest: String,
}

impl Candidate {
    /// Fault choices in the schedule.
    pub fn faults(&self) -> usize {
        self.schedule.fault_count()
    }

    /// What the shrinker minimizes: steps first, then faults and events, which a person reads,
    /// then the world's size (orders, processes, fault models on), so that a smaller world with
    /// as many steps still counts as smaller.
    fn size(&self) -> (u64, usize, usize, usize, u32, usize) {
        let enabled = self
            .config
            .faults
            .values()
            .filter(|settings| settings.get("enabled") == Some(&serde_json::Value::Bool(true)))
            .count();
        (
            self.steps,
            self.faults(),
            self.schedule.events.len(),
            self.schedule.fixtures.subjects.len(),
            self.config.receivers + self.config.relay_workers,
            enabled,
        )
    }
}

/// The result of shrinking.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The failing run the shrinker started from.
    pub original: Candidate,
    /// The smallest candidate found that fails the same way.
    pub shrunk: Candidate,
    /// Candidate runs tried.
    pub runs: usize,
}

impl Shrunk {
    /// `shrink: 412 -> 9 steps, 7 -> 1 faults`.
    pub fn summary(&self) -> String {
        format!(
            "shrink: {} -> {} steps, {} -> {} faults",
            self.original.steps,
            self.shrunk.steps,
            self.original.faults(),
            self.shrunk.faults(),
        )
    }

    /// The rest of the story: events, orders, processes, and the work it took.
    pub fn details(&self) -> String {
        let (before, after) = (&self.original, &self.shrunk);
        format!(
            "{} -> {} events, {} -> {} subjects, {} -> {} receivers, {} -> {} relay workers, {} runs tried",
            before.schedule.events.len(),
            after.schedule.events.len(),
            before.schedule.fixtures.subjects.len(),
            after.schedule.fixtures.subjects.len(),
            before.config.receivers,
            after.config.receivers,
            before.config.relay_workers,
            after.config.relay_workers,
            self.runs
        )
    }
}

/// Reduces the failing run (`config`, `schedule`) of `system` to a smaller one that fails the
/// same invariant, trying at most `runs_max` candidates.
pub fn shrink(
    system: &Arc<dyn System>,
    seed: u64,
    config: &SimConfig,
    schedule: &Schedule,
    runs_max: usize,
) -> Result<Shrunk, String> {
    shrink_until(
        system,
        seed,
        config,
        schedule,
        runs_max,
        &StopFlag::new(),
        &Arc::default(),
    )
}

/// [`shrink`] with the fault models and invariants of `registry`, ending early with the smallest
/// run found so far once `stop` is raised.
pub fn shrink_until(
    system: &Arc<dyn System>,
    seed: u64,
    config: &SimConfig,
    schedule: &Schedule,
    runs_max: usize,
    stop: &StopFlag,
    registry: &Arc<Registry>,
) -> Result<Shrunk, String> {
    shrink_within(system, seed, config, schedule, runs_max, None, stop, registry)
}

/// [`shrink_until`], ending too once `time` has passed since it began (the run under way
/// finishes), with the smallest run found so far.
#[allow(clippy::too_many_arguments)]
pub fn shrink_within(
    system: &Arc<dyn System>,
    seed: u64,
    config: &SimConfig,
    schedule: &Schedule,
    runs_max: usize,
    time: Option<std::time::Duration>,
    stop: &StopFlag,
    registry: &Arc<Registry>,
) -> Result<Shrunk, String> {
    let deadline = time.map(|time| std::time::Instant::now() + time);
    let first = replay(system, seed, config, schedule, registry)?;
    let Some(failure) = first.failure.clone() else {
        return Err("the schedule no longer fails: nothing to shrink".to_owned());
    };
    let original = candidate(config, first, failure.clone())?;
    let mut shrinker = Shrinker {
        system,
        registry,
        seed,
        invariant: failure.invariant.clone(),
        best: original.clone(),
        runs: 0,
        runs_max,
        lookahead: DEFAULT_LOOKAHEAD,
        stop,
        deadline,
    };
    // Edited schedules replay differently with another look-ahead, and no one distance suits
    // every run; each round starts from the best found so far (a full record, which replays the
    // same with any look-ahead) and tries again with the next distance.
    for lookahead in [DEFAULT_LOOKAHEAD, 64, 8] {
        shrinker.lookahead = lookahead;
        shrinker.shrink_until_stuck();
    }
    Ok(Shrunk {
        original,
        shrunk: shrinker.best,
        runs: shrinker.runs,
    })
}

/// Replays `schedule` under `config`, with the fault models and invariants of `registry`.
pub fn replay(
    system: &Arc<dyn System>,
    seed: u64,
    config: &SimConfig,
    schedule: &Schedule,
    registry: &Arc<Registry>,
) -> Result<RunOutcome, String> {
    let options = RunOptions {
        backend: config.backend,
        registry: Arc::clone(registry),
        config: Some(config.clone()),
        schedule: Some(schedule.clone()),
        ..RunOptions::default()
    };
    run_seed(system, seed, &options)
}

fn candidate(config: &SimConfig, outcome: RunOutcome, failure: Failure) -> Result<Candidate, String> {
    let schedule = outcome
        .schedule
        .ok_or("a scheduled run always writes its schedule down")?;
    Ok(Candidate {
        config: config.clone(),
        schedule,
        failure,
        steps: outcome.steps,
        digest: outcome.digest,
    })
}

struct Shrinker<'a> {
    system: &'a Arc<dyn System>,
    registry: &'a Arc<Registry>,
    seed: u64,
    invariant: String,
    best: Candidate,
    runs: usize,
    runs_max: usize,
    /// The look-ahead candidates are replayed with.
    lookahead: usize,
    /// Raised to end the shrinking early.
    stop: &'a StopFlag,
    /// When to end it, if a time bound was given.
    deadline: Option<std::time::Instant>,
}

impl Shrinker<'_> {
    /// Runs every pass, again and again, until a round makes the run no smaller.
    fn shrink_until_stuck(&mut self) {
        loop {
            let before = self.best.size();
            // Cheapest and biggest cuts first: whole events and processes take many steps with
            // them.
            self.drop_events();
            self.reduce_processes();
            self.drop_unused_fixtures();
            self.drop_fault_choices();
            self.simplify_events();
            self.reduce_fault_models();
            self.truncate_step_lines();
            self.drop_step_lines();
            if self.best.size() >= before || self.exhausted() {
                return;
            }
        }
    }

    fn exhausted(&self) -> bool {
        self.runs >= self.runs_max
            || self.stop.is_raised()
            || self
                .deadline
                .is_some_and(|deadline| std::time::Instant::now() >= deadline)
    }

    /// Runs a candidate and keeps it if it fails the same invariant and is smaller.
    fn try_candidate(&mut self, config: SimConfig, schedule: Schedule) -> bool {
        if self.exhausted() || config.validate_with(self.registry.faults()).is_err() {
            return false;
        }
        self.runs += 1;
        let options = RunOptions {
            backend: config.backend,
            registry: Arc::clone(self.registry),
            config: Some(config.clone()),
            schedule: Some(schedule),
            schedule_lookahead: self.lookahead,
            ..RunOptions::default()
        };
        let Ok(outcome) = run_seed(self.system, self.seed, &options) else {
            return false;
        };
        let Some(failure) = outcome.failure.clone() else {
            return false;
        };
        if failure.invariant != self.invariant {
            return false;
        }
        let Ok(found) = candidate(&config, outcome, failure) else {
            return false;
        };
        if found.size() >= self.best.size() {
            return false;
        }
        self.best = found;
        true
    }

    /// Removes workload events one at a time, latest first: with the step lines that name the
    /// event (the sender's, and its handlers', which carry `@account/event`) and the relay's
    /// lines for its order, and failing that, leaving the lines to be skipped.
    fn drop_events(&mut self) {
        let mut index = self.best.schedule.events.len();
        while index > 0 && !self.exhausted() {
            index -= 1;
            let Some(event) = self.best.schedule.events.get(index) else {
                continue;
            };
            let name = format!("{}/{}", event.account, event.event_id);
            let order = format!("{}/{}/", event.tenant, event.subject);
            let mut schedule = self.best.schedule.clone();
            schedule.events.remove(index);
            // The relay's lines for the order go too, once no remaining event is about it.
            let order_left = schedule
                .events
                .iter()
                .any(|other| other.tenant == event.tenant && other.subject == event.subject);
            let mut without_lines = schedule.clone();
            without_lines.steps.retain(|line| {
                !names_event(line, &name)
                    && (order_left || !line.split('|').next().unwrap_or("").contains(&order))
            });
            if without_lines.steps.len() < schedule.steps.len()
                && self.try_candidate(self.best.config.clone(), without_lines)
            {
                continue;
            }
            self.try_candidate(self.best.config.clone(), schedule);
        }
    }

    /// Makes each event plainer: one subscription, no deliveries outside the schedule, delivered
    /// when created, created as early as the event before it.
    fn simplify_events(&mut self) {
        for index in 0..self.best.schedule.events.len() {
            if self.exhausted() || index >= self.best.schedule.events.len() {
                return;
            }
            let event = self.best.schedule.events[index].clone();
            let earliest_ms = if index == 0 {
                0
            } else {
                self.best.schedule.events[index - 1].created_ms
            };
            let edits: [&dyn Fn(&mut crate::workload::EventSpec); 4] = [
                &|event| event.subscriptions = 1,
                &|event| event.extra_deliveries.clear(),
                &|event| event.deliver_at_ms = event.created_ms,
                &|event| {
                    let shift_ms = event.created_ms - earliest_ms;
                    event.created_ms -= shift_ms;
                    event.deliver_at_ms -= shift_ms;
                },
            ];
            for edit in edits {
                let mut schedule = self.best.schedule.clone();
                let Some(target) = schedule.events.get_mut(index) else {
                    return;
                };
                edit(target);
                if *target != event {
                    self.try_candidate(self.best.config.clone(), schedule);
                }
            }
        }
    }

    /// Removes orders and accounts that no remaining event names.
    fn drop_unused_fixtures(&mut self) {
        let mut schedule = self.best.schedule.clone();
        let events = &schedule.events;
        schedule.fixtures.subjects.retain(|order| {
            events
                .iter()
                .any(|event| event.tenant == order.tenant && event.subject == order.subject)
        });
        schedule
            .fixtures
            .accounts
            .retain(|(account, _)| events.iter().any(|event| event.account == *account));
        if schedule.fixtures != self.best.schedule.fixtures {
            self.try_candidate(self.best.config.clone(), schedule);
        }
    }

    /// Fewer receivers and relay workers: as few as possible at once (one of each: a world
    /// without a relay worker is one where the fixed system fails too), then one fewer at a time.
    /// The step lines of a process that no longer exists go with it, so that they do not hold
    /// up the lines after them.
    fn reduce_processes(&mut self) {
        for (prefix, minimum) in [("receiver", 1), ("relay", 1)] {
            let count = |config: &SimConfig| {
                if prefix == "receiver" {
                    config.receivers
                } else {
                    config.relay_workers
                }
            };
            let mut targets = vec![minimum];
            targets.extend((minimum + 1..count(&self.best.config)).rev());
            for target in targets {
                if self.exhausted() || target >= count(&self.best.config) {
                    continue;
                }
                let mut config = self.best.config.clone();
                if prefix == "receiver" {
                    config.receivers = target;
                } else {
                    config.relay_workers = target;
                }
                let mut schedule = self.best.schedule.clone();
                schedule
                    .steps
                    .retain(|line| !names_process_beyond(line, prefix, target));
                if self.try_candidate(config, schedule) && target == minimum {
                    break;
                }
            }
        }
    }

    /// Fault models off, and a shorter fault phase. A model whose decisions the schedule still
    /// holds stays on: the file must name, with its settings, every model that made its failure.
    fn reduce_fault_models(&mut self) {
        let names: Vec<String> = self.best.config.faults.keys().cloned().collect();
        for name in names {
            let enabled =
                self.best.config.faults[&name].get("enabled") == Some(&serde_json::Value::Bool(true));
            let acts = self.best.schedule.fault_models().contains(&name);
            if enabled && !acts && !self.exhausted() {
                let mut config = self.best.config.clone();
                config.faults.get_mut(&name).expect("listed above")["enabled"] =
                    serde_json::Value::Bool(false);
                self.try_candidate(config, self.best.schedule.clone());
            }
        }
        while self.best.config.fault_phase_ms > 60_000 && !self.exhausted() {
            let mut config = self.best.config.clone();
            config.fault_phase_ms /= 2;
            if !self.try_candidate(config, self.best.schedule.clone()) {
                break;
            }
        }
    }

    /// Removes fault choices (crashes, pauses, losses, copies, failures): all of them first, then
    /// in chunks, latest first, halving the chunk until single choices are tried (delta
    /// debugging over the faults). A run a search made can hold a thousand fault choices, most
    /// of them beside the point: chunks take them out in a few dozen runs rather than one run
    /// each. After a kept candidate the schedule is the replay's own record, so the faults are
    /// listed again rather than trusting positions in the old one.
    fn drop_fault_choices(&mut self) {
        // Often none of them is needed: try that first.
        if self.best.faults() > 0 {
            let all = fault_positions(&self.best.schedule);
            self.try_candidate(
                self.best.config.clone(),
                without_faults(&self.best.schedule, &all),
            );
        }
        let mut chunk = (self.best.faults() / 2).max(1);
        loop {
            // How many faults, counted from the latest, this round has tried and kept.
            let mut passed = 0;
            while !self.exhausted() {
                let faults = fault_positions(&self.best.schedule);
                if passed >= faults.len() {
                    break;
                }
                let end = faults.len() - passed;
                let chosen = &faults[end.saturating_sub(chunk)..end];
                let schedule = without_faults(&self.best.schedule, chosen);
                if !self.try_candidate(self.best.config.clone(), schedule) {
                    passed += chosen.len();
                }
            }
            if chunk == 1 || self.exhausted() {
                return;
            }
            chunk /= 2;
        }
    }

    /// Keeps only a prefix of the step lines, so that everything after it takes the default
    /// (no more faults, the item ready first): the shortest prefix that still fails, found by
    /// bisection over the lines before the failing step.
    fn truncate_step_lines(&mut self) {
        let mut low = 0;
        let mut high = self.best.schedule.steps.len();
        while low < high && !self.exhausted() {
            let middle = low + (high - low) / 2;
            let mut schedule = self.best.schedule.clone();
            schedule.steps.truncate(middle);
            if self.try_candidate(self.best.config.clone(), schedule) {
                high = middle.min(self.best.schedule.steps.len());
            } else {
                low = middle + 1;
            }
        }
    }

    /// Removes chunks of step lines, halving the chunk size, so their steps take the default.
    fn drop_step_lines(&mut self) {
        let mut chunk = (self.best.schedule.steps.len() / 2).max(1);
        loop {
            let mut start = 0;
            while start < self.best.schedule.steps.len() && !self.exhausted() {
                let end = (start + chunk).min(self.best.schedule.steps.len());
                let mut schedule = self.best.schedule.clone();
                schedule.steps.drain(start..end);
                if !self.try_candidate(self.best.config.clone(), schedule) {
                    start += chunk;
                }
            }
            if chunk == 1 || self.exhausted() {
                return;
            }
            chunk /= 2;
        }
    }
}

/// Where each fault choice of `schedule` is: its line, and its place among the line's
/// decisions, in the order they were made.
fn fault_positions(schedule: &Schedule) -> Vec<(usize, usize)> {
    schedule
        .steps
        .iter()
        .enumerate()
        .flat_map(|(line, text)| {
            let parsed = StepLine::parse(text);
            (0..parsed.decisions.len())
                .filter(|&index| parsed.decisions[index].is_fault())
                .map(|index| (line, index))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `schedule` without the fault choices at `positions` (see [`fault_positions`]).
fn without_faults(schedule: &Schedule, positions: &[(usize, usize)]) -> Schedule {
    let mut edited = schedule.clone();
    let mut by_line: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
    for &(line, index) in positions {
        by_line.entry(line).or_default().push(index);
    }
    for (line, indexes) in by_line {
        let mut parsed = StepLine::parse(&edited.steps[line]);
        let mut index = 0;
        parsed.decisions.retain(|_| {
            let keep = !indexes.contains(&index);
            index += 1;
            keep
        });
        edited.steps[line] = parsed.to_string();
    }
    edited
}

/// Whether a step line's label names the event `account/event_id` (`sender emit acct-a/evt-1`,
/// `sender attempt acct-a/evt-1~2`), and not merely one whose id starts the same (`evt-10`).
fn names_event(line: &str, name: &str) -> bool {
    let label = line.split('|').next().unwrap_or("");
    label.match_indices(name).any(|(at, _)| {
        let after = label[at + name.len()..].chars().next();
        !after.is_some_and(|next| next.is_ascii_alphanumeric() || next == '-' || next == '_')
    })
}

/// Whether a step line is run by process `prefix-N` with N above `count` (`relay-3#1 ...` for
/// prefix `relay` and count 2).
fn names_process_beyond(line: &str, prefix: &str, count: u32) -> bool {
    let Some(rest) = line.strip_prefix(prefix).and_then(|rest| rest.strip_prefix('-')) else {
        return false;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse::<u32>().is_ok_and(|number| number > count)
}

/// Candidate runs a shrink may try unless told otherwise: enough for every planted bug to reach
/// its smallest run when measured, at a few seconds per failure.
pub const DEFAULT_SHRINK_RUNS: usize = 1000;

/// Runs `seed` under `config` again, with the fault models and invariants of `registry`, writing
/// its schedule down.
pub fn record_schedule(
    system: &Arc<dyn System>,
    seed: u64,
    config: &SimConfig,
    registry: &Arc<Registry>,
) -> Result<RunOutcome, String> {
    let options = RunOptions {
        backend: config.backend,
        registry: Arc::clone(registry),
        config: Some(config.clone()),
        record_schedule: true,
        ..RunOptions::default()
    };
    run_seed(system, seed, &options)
}

/// A failing seed recorded and shrunk, or why it could not be.
pub type ShrinkResult = Result<(RunOutcome, Shrunk), String>;

/// Records and shrinks each failing `(seed, config)` of `system`, over `jobs` threads. Results
/// come back in the order given; each is the recorded run and, if it still failed, its shrinking.
pub fn shrink_all(
    system: &Arc<dyn System>,
    failures: &[(u64, SimConfig)],
    jobs: usize,
    runs_max: usize,
    stop: &StopFlag,
    registry: &Arc<Registry>,
) -> Vec<ShrinkResult> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<ShrinkResult>>> = Mutex::new(vec![None; failures.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, failures.len().max(1)) {
            scope.spawn(|| {
                crate::db::reusing_databases(|| {
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some((seed, config)) = failures.get(index) else {
                            return;
                        };
                        if stop.is_raised() {
                            return;
                        }
                        let result = record_schedule(system, *seed, config, registry).and_then(|recorded| {
                            let schedule =
                                recorded.schedule.clone().ok_or("a recorded run has a schedule")?;
                            let shrunk =
                                shrink_until(system, *seed, config, &schedule, runs_max, stop, registry)?;
                            Ok((recorded, shrunk))
                        });
                        results
                            .lock()
                            .expect("no shrinking thread panics holding the lock")[index] = Some(result);
                    }
                })
            });
        }
    });
    results
        .into_inner()
        .expect("the threads are done")
        .into_iter()
        .map(|result| result.unwrap_or_else(|| Err("not shrunk: stopped before its turn".to_owned())))
        .collect()
}
