//! Exploration: a search over runs that keeps the ones that reached something new and makes new
//! runs from them, where a sweep draws every seed on its own.
//!
//! A sweep finds a bug that one seed in a hundred reaches in a hundred seeds, and one that needs
//! several rare things at once only by luck. The explorer starts as a sweep does, from sampled
//! seeds, but reads what each run reached (see `feedback`): what happened to each obligation in
//! order, which statements of different tasks met on a table, where crashes landed, which
//! situations and fault models it reached, and how close it came to a rule's edge (a lease's time
//! left when its holder's call returned, a retry's distance from its key's forgetting). A run
//! that reached a feature no earlier run had, or came closer to a boundary than any before, joins
//! the corpus; new runs are made from corpus runs by branching after what they reached first and
//! by editing their decisions (see `mutate`). A run is a list of typed decisions that replays
//! exactly, so a mutant costs one run, and a failing one is a seed file like any other.
//!
//! The search is deterministic given its own seed and the corpus it starts from: candidates are
//! made in batches from the corpus as it stood before the batch, run over several threads, and
//! taken in the order they were made. A time budget ends it between batches, so the runs it
//! made, not what they found, depend on the machine.
//!
//! A team adds its own feedback through [`crate::App`] or [`crate::harness::Check`] (see
//! [`Steering`]): a situation it wants reached ([`Sometimes`]) and a distance from an edge of its
//! own rules ([`BoundaryMeasure`]).
//!
//! Nothing here judges a run: the invariants do, inside each run, as in a sweep. What a mutant
//! may be is bounded by what the configuration promises (see `mutate`), so that a correct
//! system is never judged against a world it was not promised.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::config::SimConfig;
use crate::db::Backend;
use crate::registry::Registry;
use crate::rng::SimRng;
use crate::run::{RunOptions, RunOutcome, run_seed};
use crate::schedule::Schedule;
use crate::shape::WorkloadShape;
use crate::sweep::StopFlag;
use crate::sweep::seed_file::{SeedFile, replay_command};
use crate::system::System;

mod feedback;
mod mutate;

pub use crate::steering::{BoundaryMeasure, Sometimes, Steering};
pub use feedback::RunFeedback;

/// What to explore, and for how long.
#[derive(Clone)]
pub struct ExploreOptions {
    /// The system under test.
    pub system: Arc<dyn System>,
    /// The explorer's own seed: which seeds it samples and which mutants it makes.
    pub seed: u64,
    /// The most runs to make; `None` for no limit (then `time` should be set).
    pub runs: Option<u64>,
    /// Wall time after which no new batch starts.
    pub time: Option<Duration>,
    /// How many runs go at once, each on its own thread.
    pub jobs: usize,
    /// The database backend every run uses.
    pub backend: Backend,
    /// Turn every fault model on in sampled runs, instead of a random subset.
    pub every_fault: bool,
    /// What sampled runs' configurations may be.
    pub shape: WorkloadShape,
    /// The fault models, invariants and replay command of the program or test.
    pub registry: Arc<Registry>,
    /// The team's own situations and boundaries to steer toward.
    pub steering: Steering,
    /// Where the corpus is read from at the start and written to as it grows.
    pub corpus_dir: Option<PathBuf>,
    /// Where failing runs are written, the moment they are found.
    pub seeds_dir: Option<PathBuf>,
    /// Stop after this many failing runs.
    pub max_failures: Option<u64>,
    /// Raised to stop between batches (Ctrl-C).
    pub stop: StopFlag,
}

impl ExploreOptions {
    /// Exploring `system` from seed 0 for `runs` runs on two threads, in memory, with the
    /// default workload, registry and steering, no corpus, no seed files and no limit on
    /// failures: change the fields a caller needs, as with any struct.
    pub fn new(system: Arc<dyn System>, runs: u64) -> ExploreOptions {
        ExploreOptions {
            system,
            seed: 0,
            runs: Some(runs),
            time: None,
            jobs: 2,
            backend: Backend::Memdb,
            every_fault: false,
            shape: WorkloadShape::default(),
            registry: Arc::new(Registry::default()),
            steering: Steering::default(),
            corpus_dir: None,
            seeds_dir: None,
            max_failures: None,
            stop: StopFlag::new(),
        }
    }
}

impl std::fmt::Debug for ExploreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExploreOptions")
            .field("system", &self.system.name())
            .field("seed", &self.seed)
            .field("runs", &self.runs)
            .field("time", &self.time)
            .field("jobs", &self.jobs)
            .field("corpus_dir", &self.corpus_dir)
            .field("seeds_dir", &self.seeds_dir)
            .finish_non_exhaustive()
    }
}

/// A failing run the explorer found.
#[derive(Debug, Clone)]
pub struct ExploredFailure {
    /// The run, with its schedule and fault log.
    pub outcome: RunOutcome,
    /// How many runs the explorer had made when it found this one (1 for its first run).
    pub after_runs: u64,
    /// The seed file written for it, if one was.
    pub file: Option<PathBuf>,
    /// Why no file was written, if none was.
    pub not_written: Option<String>,
    /// How the run was made (`sampled`, `branch`, `move-fault`, ...).
    pub how: &'static str,
}

/// What happened while exploring, as it happens.
#[derive(Debug)]
pub enum ExploreEvent<'a> {
    /// A batch ended.
    Progress {
        /// Runs made so far.
        runs: u64,
        /// Runs in the corpus.
        corpus: usize,
        /// Failing runs so far.
        failures: u64,
    },
    /// A run failed (the first of its invariant, or a later one).
    Failed(&'a ExploredFailure),
}

/// What the explorer did and reached.
#[derive(Debug, Clone, Default)]
pub struct ExploreReport {
    /// Runs made, corpus runs read back included.
    pub runs: u64,
    /// Runs in the corpus at the end.
    pub corpus: usize,
    /// Corpus runs read back from the corpus directory at the start.
    pub loaded: usize,
    /// Runs sampled from fresh seeds, as a sweep makes them.
    pub sampled_runs: u64,
    /// Runs made from corpus runs.
    pub mutant_runs: u64,
    /// Mutants that broke a limit and were not run.
    pub mutants_refused: u64,
    /// Failing runs, and the first of each invariant (or verdict) in full.
    pub failing_runs: u64,
    /// The first failing run of each invariant, in the order found.
    pub failures: Vec<ExploredFailure>,
    /// Runs that could not be carried out at all, with why (the first few).
    pub errors: Vec<String>,
    /// Per situation (coverage's and the team's), how many sampled and mutant runs reached it.
    pub situations: BTreeMap<String, (u64, u64)>,
    /// Distinct features reached.
    pub features: usize,
    /// Features only mutant runs reached, by kind (`obligation`, `table`, `situation`, ...).
    pub mutant_only: BTreeMap<String, u64>,
    /// Situations only mutant runs reached.
    pub mutant_only_situations: Vec<String>,
    /// The closest each boundary was come to, in milliseconds, by sampled runs and by any.
    pub boundaries: BTreeMap<String, (Option<i64>, i64)>,
    /// Per way of making a run: how many were made, how many joined the corpus, and how many
    /// failed.
    pub by_mutation: BTreeMap<&'static str, (u64, u64, u64)>,
    /// Wall time spent.
    pub wall: Duration,
    /// Whether the time budget, a stop request or `max_failures` ended it before `runs`.
    pub stopped_early: bool,
}

impl ExploreReport {
    /// `explore: R runs, corpus C, first failure after K runs` (or `no failure`).
    pub fn summary(&self) -> String {
        let found = match self.failures.first() {
            Some(failure) => format!("first failure after {} runs", failure.after_runs),
            None => "no failure".to_owned(),
        };
        format!("explore: {} runs, corpus {}, {found}", self.runs, self.corpus)
    }
}

/// A run in the corpus.
struct Entry {
    config: SimConfig,
    schedule: Schedule,
    /// What it reached (as indexes into the explorer's features) and the step it first did.
    features: Vec<(usize, u64)>,
    heal_step: Option<u64>,
    /// Steps where an outcome was left uncertain, and how (see [`RunFeedback::hazards`]).
    hazards: Vec<(u64, &'static str)>,
    /// Runs with the same configuration and workload share a family; only they are spliced.
    family: [u8; 8],
}

/// A run to make.
#[derive(Clone)]
enum Work {
    Sample { seed: u64, every_fault: bool },
    Mutant(Box<mutate::Mutant>),
    Load { file: Box<SeedFile> },
}

impl Work {
    fn how(&self) -> &'static str {
        match self {
            Work::Sample { .. } => "sampled",
            Work::Mutant(mutant) => mutant.how,
            Work::Load { .. } => "corpus",
        }
    }
}

/// A run made, with what it reached.
struct Made {
    outcome: RunOutcome,
    feedback: RunFeedback,
    /// The team's situations reached.
    sometimes: Vec<String>,
    /// The team's boundaries: closest distance.
    measured: Vec<(String, i64)>,
}

/// Candidates made at once, from the corpus as it stood before them. Fixed, not tied to the
/// number of jobs, so that the search is the same on any machine; small, so that what a run
/// reached steers the next runs soon.
const BATCH: usize = 4;

/// Sampled runs the search starts with before it mutates anything.
const FIRST_SAMPLES: u64 = 2;

/// What one first reach of a feature weighs when a parent is picked: a feature reached by n
/// runs adds this over n to each corpus run that reached it.
const RARITY_SCALE: u64 = 1_000_000;

/// How many of a corpus run's rarest features its branches start after.
const RAREST_KEPT: usize = 3;

/// Errors kept in the report; more are counted only.
const ERRORS_KEPT: usize = 5;

/// Explores `options.system`, calling `on_event` as runs fail and batches end.
pub fn explore(options: &ExploreOptions, on_event: &mut dyn FnMut(ExploreEvent<'_>)) -> ExploreReport {
    let started = Instant::now();
    let mut explorer = Explorer {
        options,
        rng: SimRng::stream(options.seed, "explore"),
        entries: Vec::new(),
        feature_ids: BTreeMap::new(),
        reached: Vec::new(),
        situation_holders: BTreeMap::new(),
        hazard_runs: BTreeMap::new(),
        hazard_holders: BTreeMap::new(),
        closest: BTreeMap::new(),
        closest_sampled: BTreeMap::new(),
        closest_any: BTreeMap::new(),
        pool: mutate::Pool::default(),
        report: ExploreReport::default(),
        failed_invariants: BTreeSet::new(),
    };
    let loads = explorer.corpus_files();
    let (work_sender, work_receiver) = std::sync::mpsc::channel::<(usize, Work)>();
    let work_receiver = std::sync::Mutex::new(work_receiver);
    let (made_sender, made_receiver) = std::sync::mpsc::channel::<(usize, Result<Made, String>)>();
    std::thread::scope(|scope| {
        for _ in 0..options.jobs.max(1) {
            let made_sender = made_sender.clone();
            let work_receiver = &work_receiver;
            scope.spawn(move || {
                crate::db::reusing_databases(|| {
                    loop {
                        let next = work_receiver
                            .lock()
                            .expect("no worker panics holding the queue")
                            .recv();
                        let Ok((index, work)) = next else { return };
                        let made = make(options, &work);
                        if made_sender.send((index, made)).is_err() {
                            return;
                        }
                    }
                })
            });
        }
        drop(made_sender);
        explorer.run_batches(loads, started, &work_sender, &made_receiver, on_event);
        drop(work_sender);
    });
    explorer.finish(started)
}

/// Carries out one run, with its trace kept for the feedback and dropped after it.
fn make(options: &ExploreOptions, work: &Work) -> Result<Made, String> {
    let base = RunOptions {
        backend: options.backend,
        registry: Arc::clone(&options.registry),
        keep_trace: true,
        keep_fault_log: false,
        ..RunOptions::default()
    };
    let (seed, run_options) = match work {
        Work::Sample { seed, every_fault } => (
            *seed,
            RunOptions {
                every_fault: *every_fault,
                shape: options.shape.clone(),
                record_schedule: true,
                ..base
            },
        ),
        Work::Mutant(mutant) => (
            mutant.seed,
            RunOptions {
                config: Some(mutant.config.clone()),
                schedule: Some(mutant.schedule.clone()),
                draw_after_schedule: true,
                ..base
            },
        ),
        Work::Load { file } => (
            file.seed,
            RunOptions {
                config: Some(file.config.clone()),
                schedule: file.schedule.clone(),
                ..base
            },
        ),
    };
    let mut outcome = run_seed(&options.system, seed, &run_options)?;
    let feedback = feedback::read(&outcome);
    let sometimes = options
        .steering
        .sometimes
        .iter()
        .filter(|situation| (situation.reached)(&outcome))
        .map(|situation| situation.name().to_owned())
        .collect();
    let measured = options
        .steering
        .boundaries
        .iter()
        .filter_map(|boundary| {
            (boundary.distance_ms)(&outcome).map(|ms| (boundary.name().to_owned(), ms.max(0)))
        })
        .collect();
    outcome.trace = None;
    Ok(Made {
        outcome,
        feedback,
        sometimes,
        measured,
    })
}

struct Explorer<'a> {
    options: &'a ExploreOptions,
    rng: SimRng,
    entries: Vec<Entry>,
    /// Every feature reached, numbered in the order first reached.
    feature_ids: BTreeMap<String, usize>,
    /// Per feature (by number), how many sampled and mutant runs reached it.
    reached: Vec<(u64, u64)>,
    /// Per situation reached (by feature number), the corpus runs that reached it.
    situation_holders: BTreeMap<usize, Vec<usize>>,
    /// Per kind of uncertain moment, how many runs met it, and the corpus runs that did.
    hazard_runs: BTreeMap<&'static str, u64>,
    hazard_holders: BTreeMap<&'static str, Vec<usize>>,
    /// Per boundary, the closest distance a corpus run came, and that run.
    closest: BTreeMap<String, (i64, usize)>,
    /// Per boundary, the closest distance sampled runs came, and any run.
    closest_sampled: BTreeMap<String, i64>,
    closest_any: BTreeMap<String, i64>,
    pool: mutate::Pool,
    report: ExploreReport,
    failed_invariants: BTreeSet<String>,
}

impl Explorer<'_> {
    /// Makes batches of runs until a budget ends the search: corpus runs read back first, then
    /// runs sampled and made from the corpus. Each batch goes to the workers at once; its
    /// results are taken in the order the runs were made, whatever order they finish in.
    fn run_batches(
        &mut self,
        loads: Vec<Work>,
        started: Instant,
        work_sender: &std::sync::mpsc::Sender<(usize, Work)>,
        made_receiver: &std::sync::mpsc::Receiver<(usize, Result<Made, String>)>,
        on_event: &mut dyn FnMut(ExploreEvent<'_>),
    ) {
        let mut loads = loads.into_iter();
        while !self.done(started) {
            let mut batch: Vec<Work> = loads.by_ref().take(BATCH).collect();
            while batch.len() < BATCH && self.room(batch.len() as u64) {
                batch.push(self.next_work());
            }
            if batch.is_empty() {
                return;
            }
            for (index, work) in batch.iter().enumerate() {
                work_sender
                    .send((index, work.clone()))
                    .expect("the workers wait for work until the queue closes");
            }
            let mut results: Vec<Option<Result<Made, String>>> = (0..batch.len()).map(|_| None).collect();
            for _ in 0..batch.len() {
                let (index, made) = made_receiver
                    .recv()
                    .expect("each worker answers every run it takes");
                results[index] = Some(made);
            }
            for (work, made) in batch.iter().zip(results) {
                self.take(work, made.expect("every run answered"), on_event);
            }
            on_event(ExploreEvent::Progress {
                runs: self.report.runs,
                corpus: self.entries.len(),
                failures: self.report.failing_runs,
            });
        }
    }

    /// The corpus directory's runs of this system, to read back first.
    fn corpus_files(&mut self) -> Vec<Work> {
        let Some(directory) = &self.options.corpus_dir else {
            return Vec::new();
        };
        let paths = match crate::sweep::seed_file::list(directory) {
            Ok(paths) => paths,
            Err(error) => {
                self.report.errors.push(error);
                return Vec::new();
            }
        };
        let mut loads = Vec::new();
        for path in paths {
            match SeedFile::read_with(&path, &self.options.registry) {
                Ok(file) if file.system == self.options.system.name() && file.schedule.is_some() => {
                    loads.push(Work::Load { file: Box::new(file) });
                }
                Ok(_) => {}
                Err(error) => {
                    if self.report.errors.len() < ERRORS_KEPT {
                        self.report.errors.push(format!("corpus: {error}"));
                    }
                }
            }
        }
        loads
    }

    fn done(&self, started: Instant) -> bool {
        let out_of_time = self
            .options
            .time
            .is_some_and(|budget| started.elapsed() >= budget);
        let enough_failures = self
            .options
            .max_failures
            .is_some_and(|max| self.report.failing_runs >= max);
        let out_of_runs = self.options.runs.is_some_and(|runs| self.report.runs >= runs);
        out_of_time || enough_failures || out_of_runs || self.options.stop.is_raised()
    }

    /// Whether `planned` more runs in this batch stay within the run budget.
    fn room(&self, planned: u64) -> bool {
        self.options
            .runs
            .is_none_or(|runs| self.report.runs + planned < runs)
    }

    fn next_work(&mut self) -> Work {
        let samples_first = self.report.sampled_runs < FIRST_SAMPLES && self.report.mutant_runs == 0;
        if self.entries.is_empty() || samples_first || self.rng.below(5) < 2 {
            return self.sample();
        }
        for _ in 0..16 {
            let (parent, landmarks, force) = self.pick_parent();
            let family = self.entries[parent].family;
            let partners: Vec<usize> = (0..self.entries.len())
                .filter(|&index| index != parent && self.entries[index].family == family)
                .collect();
            let partner = (!partners.is_empty()).then(|| *self.rng.pick(&partners));
            let entry = &self.entries[parent];
            let view = mutate::Parent {
                config: &entry.config,
                schedule: &entry.schedule,
                landmarks: &landmarks,
                heal_step: entry.heal_step,
                kinds: self.options.registry.faults(),
                shape: &self.options.shape,
                force,
                family,
            };
            let partner = partner.map(|index| &self.entries[index].schedule);
            let Some(mutant) = mutate::mutate(&mut self.rng, &view, partner, &self.pool) else {
                continue;
            };
            let kinds = self.options.registry.faults();
            if mutant.config.validate_with(kinds).is_err()
                || mutant.schedule.validate(&mutant.config).is_err()
                || mutant.schedule.check_fault_models_on(&mutant.config).is_err()
            {
                self.report.mutants_refused += 1;
                continue;
            }
            return Work::Mutant(Box::new(mutant));
        }
        self.sample()
    }

    /// A fresh seed, half the time with every fault model on that the shape allows (unless
    /// every sample has them all on already): the denser draw finds the common bugs sooner, the
    /// swarm's subsets the bugs that one fault masks.
    fn sample(&mut self) -> Work {
        let seed = self.rng.below(u64::MAX);
        let every_fault = self.options.every_fault || self.rng.below(2) == 0;
        Work::Sample { seed, every_fault }
    }

    /// A corpus run to mutate, the steps to branch it after, and whether only a branch will do.
    /// About a third of the time, a moment whose outcome was left uncertain (a timeout, a lost
    /// reply, a crash), branched right after it, so that the system's handling of it meets
    /// another future; a fifth, situations: a run that reached situations few runs reach, the
    /// more and the rarer the likelier, branched just after them, so that they are reached by
    /// many; a third, a run that holds a boundary's closest approach, half the time with a
    /// number pushed toward its bound; else a run drawn by how rare what it reached is, so that
    /// effort goes where few runs have been.
    fn pick_parent(&mut self) -> (usize, Vec<u64>, Option<mutate::Forced>) {
        let aim = self.rng.below(20);
        if aim < 6 && !self.hazard_holders.is_empty() {
            return self.aim_at_hazard();
        }
        if !self.situation_holders.is_empty() && aim < 10 {
            return self.aim_at_situations();
        }
        if !self.closest.is_empty() && aim < 16 {
            // The run that came closest to a boundary, its numbers pushed further half the
            // time: directed toward the edge, as a directed fuzzer is toward its target.
            let holders: Vec<usize> = self.closest.values().map(|&(_, entry)| entry).collect();
            let entry = *self.rng.pick(&holders);
            let force = (self.rng.below(2) == 0).then_some(mutate::Forced::Stretch);
            return (entry, self.landmarks(entry), force);
        }
        let weights: Vec<u64> = self
            .entries
            .iter()
            .map(|entry| {
                entry
                    .features
                    .iter()
                    .map(|&(feature, _)| RARITY_SCALE / self.times_reached(feature).max(1))
                    .sum::<u64>()
                    .max(1)
            })
            .collect();
        let entry = weighted(&mut self.rng, weights.into_iter());
        (entry, self.landmarks(entry), None)
    }

    /// A kind of uncertain moment, the fewer runs met it the likelier; a kept run that met it;
    /// one of its moments of that kind, tested again with another future.
    fn aim_at_hazard(&mut self) -> (usize, Vec<u64>, Option<mutate::Forced>) {
        let kinds: Vec<(&'static str, u64)> = self
            .hazard_holders
            .keys()
            .map(|&kind| {
                (
                    kind,
                    RARITY_SCALE / self.hazard_runs.get(kind).copied().unwrap_or(1).max(1),
                )
            })
            .collect();
        let kind = kinds[weighted(&mut self.rng, kinds.iter().map(|&(_, weight)| weight))].0;
        let entry = *self.rng.pick(&self.hazard_holders[kind]);
        let steps: Vec<u64> = self.entries[entry]
            .hazards
            .iter()
            .filter(|&&(_, of)| of == kind)
            .map(|&(step, _)| step)
            .collect();
        let step = *self.rng.pick(&steps);
        (entry, vec![step], Some(mutate::Forced::Branch))
    }

    /// Runs that reached several rare situations at once weigh the most, and branch after the
    /// last of them, so that their branches keep them all.
    fn aim_at_situations(&mut self) -> (usize, Vec<u64>, Option<mutate::Forced>) {
        let runs = self.report.sampled_runs + self.report.mutant_runs;
        let rare = |explorer: &Self, feature: usize| explorer.times_reached(feature) * 2 < runs.max(1);
        let weights: Vec<u64> = self
            .entries
            .iter()
            .map(|entry| {
                entry
                    .features
                    .iter()
                    .filter(|&&(feature, _)| self.situation_holders.contains_key(&feature))
                    .map(|&(feature, _)| {
                        let weight = RARITY_SCALE / self.times_reached(feature).max(1);
                        weight * weight / RARITY_SCALE
                    })
                    .sum::<u64>()
            })
            .collect();
        let entry = weighted(&mut self.rng, weights.into_iter());
        let situations: Vec<(usize, u64)> = self.entries[entry]
            .features
            .iter()
            .filter(|&&(feature, _)| self.situation_holders.contains_key(&feature))
            .copied()
            .collect();
        let after = situations
            .iter()
            .filter(|&&(feature, _)| rare(self, feature))
            .map(|&(_, step)| step)
            .max()
            .or_else(|| {
                situations
                    .iter()
                    .min_by_key(|&&(feature, step)| (self.times_reached(feature), step))
                    .map(|&(_, step)| step)
            })
            .unwrap_or(0);
        (entry, vec![after], None)
    }

    fn times_reached(&self, feature: usize) -> u64 {
        let (sampled, mutants) = self.reached[feature];
        sampled + mutants
    }

    /// Where to branch a corpus run: just after the rarest things it reached, so that the
    /// branch keeps them and goes on from there.
    fn landmarks(&self, entry: usize) -> Vec<u64> {
        let mut features = self.entries[entry].features.clone();
        features.sort_by_key(|&(feature, step)| (self.times_reached(feature), step));
        features.iter().take(RAREST_KEPT).map(|&(_, step)| step).collect()
    }

    /// Takes a run's result: counts what it reached, keeps it if it reached something new, and
    /// writes it down if it failed.
    fn take(&mut self, work: &Work, made: Result<Made, String>, on_event: &mut dyn FnMut(ExploreEvent<'_>)) {
        self.report.runs += 1;
        let how = work.how();
        let sampled = matches!(work, Work::Sample { .. });
        match work {
            Work::Sample { .. } => self.report.sampled_runs += 1,
            Work::Mutant(_) => self.report.mutant_runs += 1,
            Work::Load { .. } => {}
        }
        let made = match made {
            Ok(made) => made,
            Err(error) => {
                if self.report.errors.len() < ERRORS_KEPT {
                    self.report.errors.push(error);
                }
                return;
            }
        };
        let tally = self.report.by_mutation.entry(how).or_insert((0, 0, 0));
        tally.0 += 1;
        if made.outcome.failure.is_some() || made.outcome.unsettled.is_some() {
            tally.2 += 1;
        }
        let mut features: Vec<(String, u64)> = made
            .feedback
            .features
            .iter()
            .map(|(feature, step)| (feature.clone(), *step))
            .collect();
        let end = made.outcome.steps;
        for name in &made.sometimes {
            features.push((format!("situation: {name}"), end));
        }
        let (new_features, reached) = self.count_features(&features, sampled);
        let met: BTreeSet<&'static str> = made.feedback.hazards.iter().map(|&(_, kind)| kind).collect();
        for &kind in &met {
            *self.hazard_runs.entry(kind).or_insert(0) += 1;
        }
        let closer = self.compare_boundaries(&made, sampled);
        let failed = made.outcome.failure.is_some() || made.outcome.unsettled.is_some();
        if failed {
            self.failed(work, &made.outcome, on_event);
        }
        // A failing run is written down, not mutated further: what it reached is a bug.
        if (!new_features && closer.is_empty()) || failed {
            return;
        }
        let Some(schedule) = made.outcome.schedule.clone() else {
            return;
        };
        let index = self.entries.len();
        for (name, distance) in closer {
            self.closest.insert(name, (distance, index));
        }
        let family = family_of(&made.outcome.config, &schedule);
        self.pool.learn(family, &schedule);
        for (feature, &id) in features.iter().zip(&reached) {
            if feature.0.starts_with("situation: ") {
                self.situation_holders.entry(id.0).or_default().push(index);
            }
        }
        for kind in met {
            self.hazard_holders.entry(kind).or_default().push(index);
        }
        self.entries.push(Entry {
            features: reached,
            heal_step: made.feedback.heal_step,
            hazards: made.feedback.hazards.clone(),
            config: made.outcome.config.clone(),
            schedule,
            family,
        });
        if let Some(tally) = self.report.by_mutation.get_mut(how) {
            tally.1 += 1;
        }
        if matches!(work, Work::Load { .. }) {
            self.report.loaded += 1;
        } else {
            self.save(&made.outcome);
        }
    }

    /// Counts the runs that reached each feature, numbering new ones; says whether any was new,
    /// and the features by number with the step each was reached at.
    fn count_features(&mut self, features: &[(String, u64)], sampled: bool) -> (bool, Vec<(usize, u64)>) {
        let mut new_features = false;
        let mut reached = Vec::with_capacity(features.len());
        for (feature, step) in features {
            let next = self.feature_ids.len();
            let id = *self.feature_ids.entry(feature.clone()).or_insert(next);
            if id == next {
                self.reached.push((0, 0));
                new_features = true;
            }
            reached.push((id, *step));
            let counts = &mut self.reached[id];
            if sampled {
                counts.0 += 1;
            } else {
                counts.1 += 1;
            }
            if let Some(situation) = feature.strip_prefix("situation: ") {
                let situation = self
                    .report
                    .situations
                    .entry(situation.to_owned())
                    .or_insert((0, 0));
                if sampled {
                    situation.0 += 1;
                } else {
                    situation.1 += 1;
                }
            }
        }
        (new_features, reached)
    }

    /// Notes how close a run came to each boundary; returns those it came closer to than any
    /// corpus run.
    fn compare_boundaries(&mut self, made: &Made, sampled: bool) -> Vec<(String, i64)> {
        let mut boundaries: Vec<(String, i64)> = made
            .feedback
            .boundaries
            .iter()
            .map(|(name, (distance, _))| (name.clone(), *distance))
            .collect();
        boundaries.extend(made.measured.iter().cloned());
        let mut closer = Vec::new();
        for (name, distance) in boundaries {
            if sampled {
                let best = self.closest_sampled.entry(name.clone()).or_insert(distance);
                *best = (*best).min(distance);
            }
            let best = self.closest_any.entry(name.clone()).or_insert(distance);
            *best = (*best).min(distance);
            if self.closest.get(&name).is_none_or(|(best, _)| distance < *best) {
                closer.push((name, distance));
            }
        }
        closer
    }

    /// Writes a new corpus run to the corpus directory, named by its digest.
    fn save(&mut self, outcome: &RunOutcome) {
        let Some(directory) = &self.options.corpus_dir else {
            return;
        };
        let short = outcome.digest.get(..16).unwrap_or(&outcome.digest);
        let path = directory.join(format!("{}-{short}.json", outcome.system));
        let prefix = self.options.registry.replay_prefix();
        let mut file = SeedFile::from_outcome(outcome, replay_command(prefix, &path));
        // A corpus run passes; it is kept for where it went, and replayed from its schedule.
        file.fault_log.clear();
        file.explored = true;
        let written = std::fs::create_dir_all(directory)
            .map_err(|error| format!("cannot create corpus directory {}: {error}", directory.display()))
            .and_then(|()| file.write_to(&path));
        if let Err(error) = written
            && self.report.errors.len() < ERRORS_KEPT
        {
            self.report.errors.push(error);
        }
    }

    /// Writes a failing run down: its schedule replayed once more with the fault log on, which
    /// doubles as a check that it replays to the same digest.
    fn failed(&mut self, work: &Work, outcome: &RunOutcome, on_event: &mut dyn FnMut(ExploreEvent<'_>)) {
        self.report.failing_runs += 1;
        let verdict = outcome.failure.as_ref().map_or_else(
            || "did not settle".to_owned(),
            |failure| failure.invariant.clone(),
        );
        if !self.failed_invariants.insert(verdict) {
            return;
        }
        let mut failure = ExploredFailure {
            outcome: outcome.clone(),
            after_runs: self.report.runs,
            file: None,
            not_written: None,
            how: work.how(),
        };
        match self.write_failure(outcome) {
            Ok((logged, file)) => {
                failure.outcome = logged;
                failure.file = file;
            }
            Err(why) => failure.not_written = Some(why),
        }
        on_event(ExploreEvent::Failed(&failure));
        self.report.failures.push(failure);
    }

    fn write_failure(&self, outcome: &RunOutcome) -> Result<(RunOutcome, Option<PathBuf>), String> {
        let schedule = outcome
            .schedule
            .clone()
            .ok_or("a run the explorer made is written down")?;
        let options = RunOptions {
            backend: self.options.backend,
            registry: Arc::clone(&self.options.registry),
            config: Some(outcome.config.clone()),
            schedule: Some(schedule),
            ..RunOptions::default()
        };
        let logged = run_seed(&self.options.system, outcome.seed, &options)?;
        if logged.digest != outcome.digest {
            return Err(format!(
                "its schedule replayed to another run (digest {} against {}): the simulator is not deterministic here; please report it with this seed file's contents",
                logged.digest, outcome.digest
            ));
        }
        let Some(directory) = &self.options.seeds_dir else {
            return Ok((logged, None));
        };
        let mut file = SeedFile::from_outcome(&logged, String::new());
        file.explored = true;
        let path = file.write(directory, self.options.registry.replay_prefix())?;
        Ok((logged, Some(path)))
    }

    fn finish(mut self, started: Instant) -> ExploreReport {
        self.report.wall = started.elapsed();
        self.report.corpus = self.entries.len();
        self.report.features = self.feature_ids.len();
        self.report.stopped_early = self.options.runs.is_none_or(|runs| self.report.runs < runs);
        for (feature, &id) in &self.feature_ids {
            let (sampled, mutants) = self.reached[id];
            if sampled == 0 && mutants > 0 {
                let kind = feature.split(':').next().unwrap_or(feature).to_owned();
                *self.report.mutant_only.entry(kind).or_insert(0) += 1;
                if let Some(situation) = feature.strip_prefix("situation: ") {
                    self.report.mutant_only_situations.push(situation.to_owned());
                }
            }
        }
        for (name, closest) in &self.closest_any {
            self.report
                .boundaries
                .insert(name.clone(), (self.closest_sampled.get(name).copied(), *closest));
        }
        self.report
    }
}

/// An index drawn with the chances `weights` give (a zero weight is never drawn unless all
/// are).
fn weighted(rng: &mut SimRng, weights: impl Iterator<Item = u64> + Clone) -> usize {
    let total: u64 = weights.clone().sum();
    let mut ticket = rng.below(total.max(1));
    let mut last = 0;
    for (index, weight) in weights.enumerate() {
        if ticket < weight {
            return index;
        }
        ticket -= weight;
        last = index;
    }
    last
}

/// Which runs may be spliced together: those with the same configuration and workload.
fn family_of(config: &SimConfig, schedule: &Schedule) -> [u8; 8] {
    let mut hasher = Sha256::new();
    hasher.update(serde_json::to_vec(config).unwrap_or_default());
    hasher.update(serde_json::to_vec(&schedule.fixtures).unwrap_or_default());
    hasher.update(serde_json::to_vec(&schedule.events).unwrap_or_default());
    let digest = hasher.finalize();
    let mut family = [0; 8];
    family.copy_from_slice(&digest[..8]);
    family
}
