//! Sweeps: many seeds against one system, over several threads.
//!
//! What a sweep reports and keeps is here too: the coverage of situations and fault models
//! ([`SweepCoverage`]), seed files ([`SeedFile`]), and shrinking ([`shrink()`]).
//!
//! Each thread takes the next seed from a shared counter and runs it on its own database, so the
//! order in which seeds finish varies but each seed's outcome does not: results are sorted by seed
//! before anyone sees them. With the determinism check on, every seed runs twice and the two
//! digests must agree; on a mismatch both runs are repeated with their traces kept, and the first
//! differing line is reported. This is the one module that reads the wall clock (for throughput
//! figures and the time budget) and starts threads, both strictly outside any simulated run.
//!
//! A sweep may run one shard of its range (see [`Shard`]) and may stop handing out seeds when a
//! time budget is spent or once a number of seeds have failed ([`SweepLimits::max_failures`]), so
//! that a broken system is reported in seconds rather than after its whole range. None of these
//! changes what any seed concludes, only which seeds run; a sweep must never let the clock, the
//! shard or the failures of other seeds reach inside a run.

pub(crate) mod report;

/// JUnit XML and JSON reports of a sweep, for CI systems and scripts.
pub(crate) mod seed_file;
pub(crate) mod shrink;
pub use report::{FailedSeed, FirstFailureSummary, SweepSummary, json_report, junit_report};
// What a sweep reports and keeps: coverage of situations and fault models, the seed files it
// writes, and the shrinking of a failing run.
pub use crate::coverage::*;
pub use seed_file::*;
pub use shrink::*;
use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::db::Backend;
use crate::registry::Registry;
use crate::run::{RunOptions, RunOutcome, run_seed};
use crate::shape::WorkloadShape;
use crate::system::System;

/// What to sweep.
#[derive(Clone)]
pub struct SweepOptions {
    /// The system under test.
    pub system: Arc<dyn System>,
    /// The first seed of the range.
    pub first_seed: u64,
    /// How many consecutive seeds the range holds.
    pub seeds: u64,
    /// How many seeds run at once, each on its own thread.
    pub jobs: usize,
    /// The database backend each seed runs against.
    pub backend: Backend,
    /// Run every seed twice and report a divergence if the traces differ.
    pub check_determinism: bool,
    /// Turn every fault model on for every seed instead of a random subset (swarm testing).
    pub every_fault: bool,
    /// What each seed's configuration may be; the default shape narrows nothing.
    pub shape: WorkloadShape,
    /// The fault models, added invariants and replay command of the program or test.
    pub registry: Arc<Registry>,
}

impl std::fmt::Debug for SweepOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SweepOptions")
            .field("first_seed", &self.first_seed)
            .field("seeds", &self.seeds)
            .field("jobs", &self.jobs)
            .field("backend", &self.backend)
            .field("check_determinism", &self.check_determinism)
            .field("every_fault", &self.every_fault)
            .field("shape", &self.shape)
            .finish_non_exhaustive()
    }
}

/// One of `count` disjoint slices of a sweep's seed range, numbered from 1.
///
/// The seeds are dealt round-robin: the seed at index `i` of the range (seed `first_seed + i`)
/// belongs to shard `i % count + 1`. Dealt this way rather than cut into contiguous slices, every
/// shard starts at the beginning of the range, so (a) shards stopped by a time budget together
/// still cover one contiguous prefix of the range instead of N prefixes with gaps between them,
/// (b) a bug that shows up within the first few seeds is found by every shard within its first
/// few seeds, and (c) if the cost of a seed drifts along the range, every shard gets its share of
/// the cheap and the expensive ones. Each seed's outcome depends only on the seed, so the union
/// of the N shards is exactly the unsharded sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which slice, 1 to `count`.
    pub index: u64,
    /// How many slices the range is dealt into.
    pub count: u64,
}

impl Shard {
    /// The whole range as one shard.
    pub const WHOLE: Shard = Shard { index: 1, count: 1 };

    /// How many of a range of `seeds` seeds fall in this shard.
    pub fn seeds_of(&self, seeds: u64) -> u64 {
        let offset = self.index - 1;
        if seeds <= offset {
            0
        } else {
            (seeds - offset).div_ceil(self.count)
        }
    }

    /// The index in the range of this shard's `position`-th seed (counting from 0).
    pub fn range_index(&self, position: u64) -> u64 {
        (self.index - 1) + position * self.count
    }

    /// The position among this shard's seeds (counting from 0) of the range's `index`-th seed.
    pub fn position_of(&self, index: u64) -> u64 {
        index / self.count
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// Parses `K/N`; the error says what is wrong and what would be right, on one line.
    fn from_str(text: &str) -> Result<Shard, String> {
        let hint = "write K/N with 1 <= K <= N, for example 1/4";
        let Some((index, count)) = text.split_once('/') else {
            return Err(format!("{text:?} is not K/N; {hint}"));
        };
        let number = |part: &str| part.trim().parse::<u64>().ok();
        let (Some(index), Some(count)) = (number(index), number(count)) else {
            return Err(format!("{text:?} is not two whole numbers K/N; {hint}"));
        };
        if count == 0 {
            return Err(format!("{text:?} has no shards (N is 0); {hint}"));
        }
        if index == 0 || index > count {
            return Err(format!(
                "shard {index} of {count} does not exist (shards are numbered 1 to {count}); {hint}"
            ));
        }
        Ok(Shard { index, count })
    }
}

/// A request to stop, shared between whoever asks (a signal handler, a test) and the work that
/// polls it. Once raised it stays raised.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// A flag that is not raised.
    pub fn new() -> StopFlag {
        StopFlag::default()
    }

    /// Asks the work to stop.
    pub fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the flag has been raised.
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// The flag itself, for code that raises it from a signal handler.
    pub fn shared(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

/// Which of the range's seeds a sweep runs, beyond [`SweepOptions`]: a shard, a time budget
/// after which no new seed is handed out (the seeds already running finish), a number of failing
/// seeds and a stop flag with the same effect, and whether the report lists every seed's digest.
#[derive(Debug, Clone)]
pub struct SweepLimits {
    /// Which slice of the seed range this sweep runs.
    pub shard: Shard,
    /// Wall time after which no new seed is handed out; `None` runs without a limit.
    pub time_budget: Option<Duration>,
    /// Hand out no new seed once this many seeds have failed or could not run; the seeds already
    /// running finish, so a sweep over several jobs may end with up to `jobs - 1` more. `None`,
    /// the default, runs every planned seed however many fail.
    pub max_failures: Option<NonZeroU64>,
    /// Keep every seed's digest in [`SweepReport::digests`]. Off for the command: a sweep of a
    /// million seeds would hold a million digests for nobody.
    pub keep_digests: bool,
    /// Raised to stop handing out seeds (Ctrl-C); the seeds already running finish.
    pub stop: StopFlag,
}

impl Default for SweepLimits {
    fn default() -> SweepLimits {
        SweepLimits {
            shard: Shard::WHOLE,
            time_budget: None,
            max_failures: None,
            keep_digests: false,
            stop: StopFlag::new(),
        }
    }
}

/// Something a sweep found, handed to the caller the moment the seed finishes, from the thread
/// that ran it, so that nothing found is lost if the sweep never ends.
#[derive(Debug, Clone, Copy)]
pub enum Found<'a> {
    /// A seed failed an invariant, did not settle, or ran differently twice.
    Failure(&'a SeedResult),
    /// A seed could not run at all.
    Error {
        /// The seed that could not run.
        seed: u64,
        /// Why it could not run.
        message: &'a str,
    },
}

/// How far a sweep has got, as reported after each seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Seeds finished.
    pub done: u64,
    /// Seeds that failed (or could not run) so far.
    pub failures: u64,
    /// The most seeds this sweep will run: the shard's share of the range.
    pub total: u64,
    /// Wall time since the sweep started.
    pub wall: Duration,
    /// The time budget, if there is one.
    pub time_budget: Option<Duration>,
}

impl Progress {
    /// Seeds per second so far.
    pub fn seeds_per_second(&self) -> f64 {
        self.done as f64 / self.wall.as_secs_f64().max(1e-3)
    }

    /// The wall time until the sweep ends at the current rate, or sooner when the time budget
    /// ends it; `None` while there is no rate to go by and no budget.
    pub fn time_left(&self) -> Option<Duration> {
        let by_budget = self.time_budget.map(|budget| budget.saturating_sub(self.wall));
        let by_rate = (self.done > 0).then(|| {
            let remaining = self.total.saturating_sub(self.done) as f64;
            Duration::from_secs_f64(remaining / self.seeds_per_second())
        });
        match (by_budget, by_rate) {
            (Some(budget), Some(rate)) => Some(budget.min(rate)),
            (left, None) | (None, left) => left,
        }
    }
}

/// `1200/20000 seeds, 0 failures, 398 seeds/s, 47 s left`: what a progress line or bar shows.
impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} seeds, {} failures, {:.0} seeds/s, ",
            self.done,
            self.total,
            self.failures,
            self.seeds_per_second()
        )?;
        match self.time_left() {
            // Rounded up, so that a sweep with time left never says 0 s.
            Some(left) => write!(f, "{} s left", left.as_secs_f64().ceil() as u64),
            None => write!(f, "time left unknown"),
        }
    }
}

/// The failing seed that comes first in the sweep's seed order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstFailure {
    /// The failing seed.
    pub seed: u64,
    /// Seeds of this sweep up to and including this one, in seed order (for an unsharded sweep,
    /// its index in the range plus one).
    pub seeds_until: u64,
    /// Wall time from the start of the sweep until this seed's result arrived.
    pub wall: Duration,
}

/// Two runs of one seed that disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The first trace line (0 is the set-up line) where the runs differ.
    pub line: usize,
    /// Each run's trace from that line on, at most [`DIVERGENCE_CONTEXT_LINES`] lines; a trace
    /// that ended there reads `(trace ended)`.
    pub first: Vec<String>,
    /// The second run's trace from that line on, like `first`.
    pub second: Vec<String>,
}

/// How many lines of each trace a divergence report shows from the first difference: enough to
/// see where the two runs went, few enough to read side by side.
pub const DIVERGENCE_CONTEXT_LINES: usize = 10;

impl Divergence {
    /// The two traces side by side, one row per trace line, `|` between the columns and `*`
    /// marking rows that differ. Each column is cut to `column_width` characters.
    pub fn side_by_side(&self, column_width: usize) -> Vec<String> {
        let cut = |text: Option<&String>| -> String {
            let text = text.map_or("", String::as_str);
            let mut shown: String = text.chars().take(column_width).collect();
            if text.chars().count() > column_width {
                shown.pop();
                shown.push('~');
            }
            format!("{shown:<column_width$}")
        };
        let mut rows = vec![format!(
            "  {:>6}  {} | {}",
            "line",
            cut(Some(&"first run".to_owned())),
            "second run"
        )];
        for offset in 0..self.first.len().max(self.second.len()) {
            let (left, right) = (self.first.get(offset), self.second.get(offset));
            let mark = if left == right { ' ' } else { '*' };
            rows.push(format!(
                "{mark} {:>6}  {} | {}",
                self.line + offset,
                cut(left),
                cut(right).trim_end()
            ));
        }
        rows
    }
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct SeedResult {
    /// What the seed's (first) run produced.
    pub outcome: RunOutcome,
    /// How the seed's two runs differed, if the determinism check found a difference.
    pub divergence: Option<Divergence>,
    /// Wall time from the start of the sweep until this result arrived.
    pub finished_after: Duration,
}

impl SeedResult {
    /// Whether the seed failed an invariant, did not settle within its bounds, or ran
    /// differently twice.
    pub fn failed(&self) -> bool {
        self.outcome.failure.is_some() || self.outcome.unsettled.is_some() || self.divergence.is_some()
    }
}

/// What a sweep found.
#[derive(Debug)]
pub struct SweepReport {
    /// Seeds that ran: fewer than the shard's share of the range when the time budget ran out.
    pub seeds_run: u64,
    /// The shard's share of the range: what would have run without a time budget.
    pub seeds_planned: u64,
    /// Whether the time budget stopped the sweep before it ran every planned seed.
    pub stopped_by_budget: bool,
    /// Whether the stop flag stopped the sweep before it ran every planned seed.
    pub interrupted: bool,
    /// Whether [`SweepLimits::max_failures`] stopped the sweep before it ran every planned seed.
    pub stopped_by_max_failures: bool,
    /// Failing seeds (invariant or determinism), sorted by seed.
    pub failures: Vec<SeedResult>,
    /// Seeds that could not run at all, with the reason, sorted by seed.
    pub errors: Vec<(u64, String)>,
    /// Simulation steps taken, summed over every seed that ran.
    pub steps: u64,
    /// Wall time the sweep took.
    pub wall: Duration,
    /// Every seed's digest, sorted by seed, when [`SweepLimits::keep_digests`] asked for them
    /// (determinism tests do); empty otherwise.
    pub digests: Vec<(u64, String)>,
    /// The first failing seed in seed order, if any seed failed.
    pub first_failure: Option<FirstFailure>,
    /// How often each fault model fired and each situation was reached, over every seed that
    /// ran (the first run of each, with the determinism check on).
    pub coverage: SweepCoverage,
}

impl SweepReport {
    /// Seeds run per second of wall time.
    pub fn seeds_per_second(&self) -> f64 {
        self.seeds_run as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Runs the whole range and lists every seed's digest. `on_seed_done(done, failures)` is called
/// after each seed, from any thread.
pub fn sweep(options: &SweepOptions, on_seed_done: &(dyn Fn(u64, u64) + Sync)) -> SweepReport {
    let limits = SweepLimits {
        keep_digests: true,
        ..SweepLimits::default()
    };
    sweep_with_limits(
        options,
        &limits,
        &|progress| on_seed_done(progress.done, progress.failures),
        &|_| {},
    )
}

/// What the jobs hand in as seeds finish. A passing seed is folded into the coverage counts (and
/// its digest kept, if asked) the moment it finishes, so a sweep's memory does not grow with its
/// length: only failures and errors are kept whole.
#[derive(Default)]
struct Collected {
    failures: Vec<SeedResult>,
    errors: Vec<(u64, String)>,
    digests: Vec<(u64, String)>,
    coverage: SweepCoverage,
}

/// What the jobs of one sweep share: the next seed to hand out, the counts, and what was found.
struct Shared<'a> {
    options: &'a SweepOptions,
    limits: &'a SweepLimits,
    started: Instant,
    planned: u64,
    next: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    steps: AtomicU64,
    budget_spent: AtomicBool,
    failures_reached: AtomicBool,
    collected: Mutex<Collected>,
}

impl Shared<'_> {
    /// The next seed of the shard, or `None` once the shard is done, the time budget is spent,
    /// enough seeds have failed or the stop flag is raised. All three are checked before a seed
    /// is taken.
    fn take_seed(&self) -> Option<u64> {
        if self
            .limits
            .time_budget
            .is_some_and(|budget| self.started.elapsed() >= budget)
        {
            self.budget_spent.store(true, Ordering::Relaxed);
            return None;
        }
        if self
            .limits
            .max_failures
            .is_some_and(|most| self.failed.load(Ordering::Relaxed) >= most.get())
        {
            self.failures_reached.store(true, Ordering::Relaxed);
            return None;
        }
        if self.limits.stop.is_raised() {
            return None;
        }
        let position = self.next.fetch_add(1, Ordering::Relaxed);
        if position >= self.planned {
            return None;
        }
        Some(
            self.options
                .first_seed
                .wrapping_add(self.limits.shard.range_index(position)),
        )
    }

    /// Hands a finished seed's failure or error to `on_found` at once, folds the seed into the
    /// counts, and reports progress.
    fn finish(
        &self,
        result: Result<SeedResult, (u64, String)>,
        on_progress: &(dyn Fn(&Progress) + Sync),
        on_found: &(dyn Fn(Found<'_>) + Sync),
    ) {
        if let Ok(result) = &result {
            self.steps.fetch_add(result.outcome.steps, Ordering::Relaxed);
        }
        if !matches!(&result, Ok(result) if !result.failed()) {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        match &result {
            Ok(result) if result.failed() => on_found(Found::Failure(result)),
            Ok(_) => {}
            Err((seed, message)) => on_found(Found::Error { seed: *seed, message }),
        }
        {
            let mut collected = self
                .collected
                .lock()
                .expect("no thread panics while holding the results");
            match result {
                Ok(result) => {
                    if self.limits.keep_digests {
                        collected
                            .digests
                            .push((result.outcome.seed, result.outcome.digest.clone()));
                    }
                    collected.coverage.add(result.outcome.coverage());
                    if result.failed() {
                        collected.failures.push(result);
                    }
                }
                Err(error) => collected.errors.push(error),
            }
        }
        let finished = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        on_progress(&Progress {
            done: finished,
            failures: self.failed.load(Ordering::Relaxed),
            total: self.planned,
            wall: self.started.elapsed(),
            time_budget: self.limits.time_budget,
        });
    }
}

/// Runs the seeds of `limits.shard` in order, handing out no new seed once the time budget is
/// spent, `limits.max_failures` seeds have failed or the stop flag is raised. `on_found` is
/// called with each failure or error the moment its seed finishes, and `on_progress` after each
/// seed, both from any thread.
///
/// Seeds are handed out from one counter, and the budget, the failures and the flag are checked
/// before a seed is taken, so the seeds that ran are always a prefix of the shard's seeds: every
/// seed handed out finishes. With one job, a sweep stopped by `max_failures` ends exactly at its
/// N-th failing seed; with several, the seeds in flight then may add a few more failures.
pub fn sweep_with_limits(
    options: &SweepOptions,
    limits: &SweepLimits,
    on_progress: &(dyn Fn(&Progress) + Sync),
    on_found: &(dyn Fn(Found<'_>) + Sync),
) -> SweepReport {
    let started = Instant::now();
    let planned = limits.shard.seeds_of(options.seeds);
    let state = Shared {
        options,
        limits,
        started,
        planned,
        next: AtomicU64::new(0),
        done: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        steps: AtomicU64::new(0),
        budget_spent: AtomicBool::new(false),
        failures_reached: AtomicBool::new(false),
        collected: Mutex::new(Collected {
            coverage: SweepCoverage::new(options.registry.faults()),
            ..Collected::default()
        }),
    };
    let jobs = options.jobs.max(1).min(planned.max(1) as usize);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                crate::db::reusing_databases(|| {
                    while let Some(seed) = state.take_seed() {
                        let result = run_one(options, seed, started);
                        state.finish(result, on_progress, on_found);
                    }
                })
            });
        }
    });
    let Shared {
        done,
        steps,
        budget_spent,
        failures_reached,
        collected,
        ..
    } = state;
    let mut collected = collected.into_inner().expect("threads have finished");
    // Sorted by place in the range, which is seed order unless the range wraps past the largest
    // seed (the command line refuses such ranges).
    let place = |seed: u64| seed.wrapping_sub(options.first_seed);
    collected
        .failures
        .sort_by_key(|result| place(result.outcome.seed));
    collected.errors.sort_by_key(|(seed, _)| place(*seed));
    collected.digests.sort_by_key(|(seed, _)| place(*seed));
    let seeds_run = done.into_inner();
    let mut report = SweepReport {
        seeds_run,
        seeds_planned: planned,
        stopped_by_budget: budget_spent.into_inner() && seeds_run < planned,
        interrupted: limits.stop.is_raised() && seeds_run < planned,
        stopped_by_max_failures: failures_reached.into_inner() && seeds_run < planned,
        failures: collected.failures,
        errors: collected.errors,
        steps: steps.into_inner(),
        wall: started.elapsed(),
        digests: collected.digests,
        first_failure: None,
        coverage: collected.coverage,
    };
    // Failures are sorted by place in the range, and a shard hands its seeds out in that order,
    // so the first failure in the list is the first in seed order.
    report.first_failure = report.failures.first().map(|result| {
        let index = result.outcome.seed.wrapping_sub(options.first_seed);
        FirstFailure {
            seed: result.outcome.seed,
            seeds_until: limits.shard.position_of(index) + 1,
            wall: result.finished_after,
        }
    });
    report
}

fn run_one(options: &SweepOptions, seed: u64, started: Instant) -> Result<SeedResult, (u64, String)> {
    let run_options = RunOptions {
        backend: options.backend,
        keep_trace: false,
        config: None,
        every_fault: options.every_fault,
        shape: options.shape.clone(),
        registry: Arc::clone(&options.registry),
        keep_fault_log: false,
        ..RunOptions::default()
    };
    let run = |run_options: &RunOptions| {
        run_seed(&options.system, seed, run_options).map_err(|error| (seed, error))
    };
    let mut outcome = run(&run_options)?;
    let mut again = None;
    if outcome.failure.is_some() || outcome.unsettled.is_some() {
        // This seed will be written down, fault log and all: run it again with the log on. The
        // second run doubles as the determinism check, which it is whenever the digests differ.
        let logged = run(&RunOptions {
            keep_fault_log: true,
            ..run_options.clone()
        })?;
        again = Some(logged.digest.clone());
        outcome = RunOutcome {
            digest: std::mem::take(&mut outcome.digest),
            ..logged
        };
    }
    let divergence = if options.check_determinism || again.is_some() {
        let again = match again {
            Some(digest) => digest,
            None => run(&run_options)?.digest,
        };
        if again == outcome.digest {
            None
        } else {
            Some(locate_divergence(options, seed).map_err(|error| (seed, error))?)
        }
    } else {
        None
    };
    Ok(SeedResult {
        outcome,
        divergence,
        finished_after: started.elapsed(),
    })
}

/// Runs `seed` twice with traces kept and finds the first line where they differ.
fn locate_divergence(options: &SweepOptions, seed: u64) -> Result<Divergence, String> {
    let run_options = RunOptions {
        backend: options.backend,
        keep_trace: true,
        config: None,
        every_fault: options.every_fault,
        shape: options.shape.clone(),
        registry: Arc::clone(&options.registry),
        ..RunOptions::default()
    };
    let lines = |steps: Option<Vec<crate::trace::TraceStep>>| -> Vec<String> {
        steps
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    let first = lines(run_seed(&options.system, seed, &run_options)?.trace);
    let second = lines(run_seed(&options.system, seed, &run_options)?.trace);
    Ok(first_difference(&first, &second).unwrap_or(Divergence {
        line: first.len().min(second.len()),
        first: vec!["(the traces agreed when repeated: the divergence is intermittent)".to_owned()],
        second: Vec::new(),
    }))
}

/// The first line where two traces differ, if they do.
pub fn first_difference(first: &[String], second: &[String]) -> Option<Divergence> {
    let length = first.len().max(second.len());
    let line = (0..length).find(|&line| first.get(line) != second.get(line))?;
    let window = |trace: &[String]| -> Vec<String> {
        let mut lines: Vec<String> = trace
            .iter()
            .skip(line)
            .take(DIVERGENCE_CONTEXT_LINES)
            .cloned()
            .collect();
        if lines.len() < DIVERGENCE_CONTEXT_LINES && trace.len() < line + DIVERGENCE_CONTEXT_LINES {
            lines.push("(trace ended)".to_owned());
        }
        lines
    };
    Some(Divergence {
        line,
        first: window(first),
        second: window(second),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_deal_the_range_into_disjoint_slices_that_cover_it() {
        for seeds in [1, 2, 3, 7, 30, 31] {
            for count in 1..=5 {
                let mut dealt = Vec::new();
                for index in 1..=count {
                    let shard = Shard { index, count };
                    let positions = 0..shard.seeds_of(seeds);
                    for position in positions {
                        let range_index = shard.range_index(position);
                        assert_eq!(shard.position_of(range_index), position);
                        assert_eq!(
                            range_index % count,
                            index - 1,
                            "{shard} got a seed of another shard"
                        );
                        dealt.push(range_index);
                    }
                }
                dealt.sort_unstable();
                assert_eq!(
                    dealt,
                    (0..seeds).collect::<Vec<_>>(),
                    "{seeds} seeds in {count} shards"
                );
            }
        }
    }

    #[test]
    fn progress_reads_as_one_plain_line() {
        let progress = Progress {
            done: 1200,
            total: 20_000,
            failures: 0,
            wall: Duration::from_secs(3),
            time_budget: None,
        };
        assert_eq!(
            progress.to_string(),
            "1200/20000 seeds, 0 failures, 400 seeds/s, 47 s left"
        );
        let budgeted = Progress {
            time_budget: Some(Duration::from_secs(10)),
            failures: 2,
            ..progress
        };
        assert_eq!(
            budgeted.to_string(),
            "1200/20000 seeds, 2 failures, 400 seeds/s, 7 s left"
        );
        let starting = Progress {
            done: 0,
            wall: Duration::ZERO,
            ..progress
        };
        assert_eq!(
            starting.to_string(),
            "0/20000 seeds, 0 failures, 0 seeds/s, time left unknown"
        );
    }

    #[test]
    fn shard_parsing_accepts_k_of_n_and_explains_the_rest() {
        assert_eq!("2/3".parse::<Shard>(), Ok(Shard { index: 2, count: 3 }));
        assert_eq!("1/1".parse::<Shard>(), Ok(Shard::WHOLE));
        for (text, expected) in [
            ("0/3", "does not exist"),
            ("4/3", "does not exist"),
            ("1/0", "no shards"),
            ("x", "not K/N"),
            ("a/b", "not two whole numbers"),
            ("-1/3", "not two whole numbers"),
        ] {
            let error = text.parse::<Shard>().unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
            assert!(
                error.contains("1 <= K <= N"),
                "{text}: {error} says how to fix it"
            );
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }

    #[test]
    fn first_difference_finds_changes_and_truncation() {
        let lines = |items: &[&str]| items.iter().map(|item| (*item).to_owned()).collect::<Vec<_>>();
        assert_eq!(first_difference(&lines(&["a", "b"]), &lines(&["a", "b"])), None);
        let changed = first_difference(&lines(&["a", "b", "c"]), &lines(&["a", "x", "c"])).unwrap();
        assert_eq!(changed.line, 1);
        assert_eq!(changed.first, lines(&["b", "c", "(trace ended)"]));
        assert_eq!(changed.second, lines(&["x", "c", "(trace ended)"]));
        let rows = changed.side_by_side(4);
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert!(
            rows[1].starts_with('*') && rows[1].contains("b    | x"),
            "{rows:?}"
        );
        assert!(rows[2].starts_with(' '), "equal rows are not marked: {rows:?}");
        let shorter = first_difference(&lines(&["a", "b"]), &lines(&["a"])).unwrap();
        assert_eq!(
            (shorter.line, shorter.second.clone()),
            (1, lines(&["(trace ended)"]))
        );
        let long: Vec<String> = (0..30).map(|index| index.to_string()).collect();
        let mut other = long.clone();
        other[5] = "five".to_owned();
        let window = first_difference(&long, &other).unwrap();
        assert_eq!(
            window.first.len(),
            DIVERGENCE_CONTEXT_LINES,
            "a window, not the rest of the trace"
        );
    }

    #[test]
    fn a_raised_stop_flag_ends_the_sweep_once_the_running_seeds_finish() {
        let options = SweepOptions {
            system: crate::systems::by_name("reference").unwrap(),
            first_seed: 0,
            seeds: 1_000,
            jobs: 2,
            backend: Backend::Memdb,
            check_determinism: false,
            every_fault: false,
            shape: WorkloadShape::default(),
            registry: Default::default(),
        };
        let limits = SweepLimits::default();
        let stop = limits.stop.clone();
        let report = sweep_with_limits(
            &options,
            &limits,
            &|progress| {
                if progress.done >= 5 {
                    stop.raise();
                }
            },
            &|_| {},
        );
        assert!(report.interrupted);
        assert!(!report.stopped_by_budget);
        assert!(
            (5..=7).contains(&report.seeds_run),
            "{} seeds ran: the five before the flag and at most one more per job",
            report.seeds_run
        );
    }

    #[test]
    fn max_failures_stops_handing_out_seeds_once_enough_seeds_have_failed() {
        let options = |jobs: usize, seeds: u64| SweepOptions {
            system: crate::systems::by_name("receipt-first").unwrap(),
            first_seed: 0,
            seeds,
            jobs,
            backend: Backend::Memdb,
            check_determinism: false,
            every_fault: false,
            shape: WorkloadShape::default(),
            registry: Default::default(),
        };
        let failing = |report: &SweepReport| -> Vec<u64> {
            report.failures.iter().map(|result| result.outcome.seed).collect()
        };
        let whole = sweep_with_limits(&options(2, 40), &SweepLimits::default(), &|_| {}, &|_| {});
        assert!(!whole.stopped_by_max_failures, "no limit, no early stop");
        let all_failing = failing(&whole);
        assert!(
            all_failing.len() >= 4,
            "receipt-first fails most seeds: {all_failing:?}"
        );
        let limits = SweepLimits {
            max_failures: NonZeroU64::new(3),
            ..SweepLimits::default()
        };

        // One job: the sweep ends exactly at the third failing seed.
        let one_job = sweep_with_limits(&options(1, 40), &limits, &|_| {}, &|_| {});
        assert!(one_job.stopped_by_max_failures && !one_job.interrupted);
        assert_eq!(failing(&one_job), all_failing[..3]);
        assert_eq!(one_job.seeds_run, all_failing[2] + 1);
        assert_eq!(one_job.seeds_planned, 40);

        // Two jobs: the seed in flight when the third failure comes in finishes too, and the
        // seeds that ran are still a prefix of the range, failing as they do in the whole sweep.
        let two_jobs = sweep_with_limits(&options(2, 40), &limits, &|_| {}, &|_| {});
        assert!(two_jobs.stopped_by_max_failures);
        let found = failing(&two_jobs);
        assert!((3..=4).contains(&found.len()), "{found:?}");
        let in_prefix: Vec<u64> = all_failing
            .iter()
            .copied()
            .filter(|seed| *seed < two_jobs.seeds_run)
            .collect();
        assert_eq!(found, in_prefix, "{} seeds ran", two_jobs.seeds_run);

        // A limit the range never reaches changes nothing.
        let unreached = SweepLimits {
            max_failures: NonZeroU64::new(1_000),
            ..SweepLimits::default()
        };
        let report = sweep_with_limits(&options(2, 40), &unreached, &|_| {}, &|_| {});
        assert!(!report.stopped_by_max_failures);
        assert_eq!((report.seeds_run, failing(&report)), (40, all_failing));
    }

    #[test]
    fn a_sweep_keeps_failures_whole_and_folds_passing_seeds_into_counts() {
        let options = SweepOptions {
            system: crate::systems::by_name("receipt-first").unwrap(),
            first_seed: 0,
            seeds: 12,
            jobs: 2,
            backend: Backend::Memdb,
            check_determinism: false,
            every_fault: false,
            shape: WorkloadShape::default(),
            registry: Default::default(),
        };
        let found = Mutex::new(Vec::new());
        let report = sweep_with_limits(&options, &SweepLimits::default(), &|_| {}, &|found_now| {
            if let Found::Failure(result) = found_now {
                found.lock().unwrap().push(result.outcome.seed);
            }
        });
        assert_eq!(report.seeds_run, 12);
        assert!(report.digests.is_empty(), "the command keeps no digests");
        assert_eq!(report.coverage.seeds, 12, "every seed is counted");
        assert!(
            report.failures.len() >= 2,
            "receipt-first fails often enough to have several failures in 12 seeds"
        );
        assert!(report.failures.iter().all(SeedResult::failed));
        for failure in &report.failures {
            // Runs of passing seeds write no fault log; a failure is run again to get one.
            assert!(
                !failure.outcome.fault_log.is_empty(),
                "seed {}'s failure carries its fault log for the seed file",
                failure.outcome.seed
            );
            assert!(
                failure.divergence.is_none(),
                "the run with the log is the same run"
            );
        }
        let seeds: Vec<u64> = report.failures.iter().map(|result| result.outcome.seed).collect();
        let mut sorted = seeds.clone();
        sorted.sort_unstable();
        assert_eq!(seeds, sorted, "failures come in seed order");
        let mut found = found.into_inner().unwrap();
        found.sort_unstable();
        assert_eq!(found, seeds, "every failure is handed over as it is found");

        let with_digests = sweep(&options, &|_, _| {});
        assert_eq!(with_digests.digests.len(), 12);
        let failing: Vec<u64> = with_digests
            .failures
            .iter()
            .map(|result| result.outcome.seed)
            .collect();
        assert_eq!(failing, seeds, "keeping digests changes nothing else");
    }
}
