//! One live run, from an empty directory to its verdict: set-up, the fault phase, heal, the wait
//! for quiet, the operator's pass, the stop, the judging.
//!
//! Every child process is started from the calling thread (see [`super::processes`]), which
//! therefore runs the whole loop; the provider double and the proxies run on a small tokio
//! runtime beside it, the sender on threads of its own. This module must not judge: it collects
//! the evidence and hands it to [`super::judge`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use commitgap_sim::domain::{WorkloadSettings, draw_workload};
use commitgap_sim::invariants::{Invariant, InvariantChoice, InvariantKind, registry};
use commitgap_sim::judge::{FinalJudgement, FinalRow};
use commitgap_sim::judge::{JournalJudgement, judge_commit_journal};
use commitgap_sim::peers::Sender;
use commitgap_sim::peers::receiver_settings;
use commitgap_sim::rng::{Ratio, SimRng};
use commitgap_sim::run::{EventSpec, Workload};
use commitgap_sim::system::System;

use super::faults::{Action, LiveFault, Plan};
use super::journal::{read_journal, start_journal};
use super::judge::{Evidence, Snapshot, deleted_receipts, judge, keep_deleted_rows, snapshot};
use super::launch::{Launcher, absolute};
use super::processes::Fleet;
use super::proxy::{Proxy, Window};
use super::report::{Counts, Failure, Outcome, Verdict, file_error, write_file};
use super::{Options, PROVIDER_SLOW_MS, relay_settings};
use crate::env::Stop;
use crate::provider_double::{Misbehaviour, ProviderDouble};
use crate::sender::{SenderPlan, SenderRun, deliver};
use crate::workers::create_database;

/// How often the loop looks at the database (receipts, owed obligations), in milliseconds.
const LOOK_EVERY_MS: u64 = 250;
/// The purge job's own schedule.
const PURGE_EVERY: Duration = Duration::from_secs(5);
/// How long a purge or the operator's pass may run before it is killed.
const JOB_BOUND: Duration = Duration::from_secs(30);

/// How many times a receiver that exits while starting is started again on a new port.
const START_ATTEMPTS: u32 = 3;

/// Why a receiver is not ready: it exited, or it never answered, each with the message.
enum Unready {
    Exited(String),
    Silent(String),
}

/// Something to do later: start a killed process again, or resume a paused one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Later {
    Restart(usize),
    Resume(usize),
}

/// The run's state while it goes on.
struct Live<'a> {
    system: &'a Arc<dyn System>,
    added: &'a [Arc<dyn Invariant>],
    options: &'a Options,
    directory: PathBuf,
    database: PathBuf,
    fleet: Fleet,
    /// Fleet index of each receiver, then of each relay worker.
    processes: Vec<usize>,
    proxies: Vec<Proxy>,
    double: ProviderDouble,
    started: Instant,
    later: BTreeMap<(Instant, Later), ()>,
    counts: Counts,
    fault_log: Vec<String>,
    ever_received: BTreeSet<(String, String)>,
    interrupted: Arc<AtomicBool>,
    last_look: Option<Snapshot>,
    purge_due: Instant,
    /// The wall clock at the start, in milliseconds: effects are timed from it in the evidence.
    started_ms: i64,
    /// Purge runs still going, each with the moment it is killed.
    jobs: Vec<(usize, Instant)>,
    /// The observed rows where the commit journal starts, or `None` when the run keeps none (a
    /// described service whose connections cannot label the journal's rows).
    journal_start: Option<Vec<FinalRow>>,
    /// How each process is started and what it is told.
    launcher: Launcher,
    /// The invariants that judge: all but those a described service's absent columns keep out.
    choice: InvariantChoice,
}

/// Runs one live check of `system` with `options`. `Err` is an environment that cannot run it
/// (a process that will not start, a full disk), in one line.
pub fn run(
    system: &Arc<dyn System>,
    added: &[Arc<dyn Invariant>],
    options: &Options,
) -> Result<Outcome, String> {
    let started = Instant::now();
    let args = &options.args;
    let directory = run_directory(&args.out, system.name(), args.seed)?;
    let logs = directory.join("logs");
    std::fs::create_dir_all(&logs).map_err(|error| file_error("create", &logs, &error))?;
    let workload = workload(system, options);
    let database = directory.join("live.sqlite");
    create_database(&database, &**system, &workload.fixtures)?;
    keep_deleted_rows(&database, &**system)?;
    let labelled = options
        .service
        .as_ref()
        .is_none_or(|service| service.description().journal_labels);
    let journal_start = if labelled {
        Some(start_journal(&database, &**system)?)
    } else {
        None
    };
    let settings = directory.join("settings.json");
    let accounts = workload
        .fixtures
        .accounts
        .iter()
        .map(|(account, _)| account.as_str());
    write_json(&settings, &receiver_settings(accounts))?;
    let relay = directory.join("relay-settings.json");
    write_json(&relay, &relay_settings(key_lifetime_ms(options)))?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))?;
    let interrupted = Arc::new(AtomicBool::new(false));
    runtime.spawn({
        let interrupted = Arc::clone(&interrupted);
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, Ordering::SeqCst);
            }
        }
    });
    let double = ProviderDouble::new(misbehaviour(options), args.seed);
    let provider_url = serve_double(&runtime, &double)?;
    let program = std::env::current_exe().map_err(|error| format!("cannot find this program: {error}"))?;
    let fleet = Fleet::new(
        program,
        vec!["--system".to_owned(), system.name().to_owned()],
        &logs,
    );
    let (launcher, choice) = launcher(options, system, &database, &settings, &relay, provider_url)?;
    let mut live = Live {
        system,
        added,
        options,
        directory,
        database,
        fleet,
        processes: Vec::new(),
        proxies: Vec::new(),
        double,
        started,
        later: BTreeMap::new(),
        counts: Counts::default(),
        fault_log: Vec::new(),
        ever_received: BTreeSet::new(),
        interrupted,
        last_look: None,
        purge_due: Instant::now() + PURGE_EVERY,
        started_ms: now_ms(),
        jobs: Vec::new(),
        journal_start,
        launcher,
        choice,
    };
    live.start_processes(&runtime)?;
    let outcome = live.go(&workload);
    drop(runtime);
    outcome
}

impl Live<'_> {
    fn start_processes(&mut self, runtime: &tokio::runtime::Runtime) -> Result<(), String> {
        for number in 1..=self.options.args.receivers {
            let name = format!("receiver-{number}");
            let mut attempt = 1;
            let (index, address) = loop {
                let address = free_address()?;
                let launch = self.launcher.receiver(&self.fleet, address)?;
                let index = self.fleet.start(&name, launch)?;
                match self.wait_until_ready(index, address) {
                    Ok(()) => break (index, address),
                    // The port was free when it was chosen, and another program (another check
                    // on this machine) may take it before the receiver binds it: a receiver that
                    // exits while starting is given a new port, a few times, before that counts.
                    Err(Unready::Exited(_)) if attempt < START_ATTEMPTS => attempt += 1,
                    Err(Unready::Exited(why)) => {
                        return Err(format!("{why} ({attempt} tries, each on a new port)"));
                    }
                    Err(Unready::Silent(why)) => return Err(why),
                }
            };
            self.processes.push(index);
            self.proxies.push(runtime.block_on(Proxy::start(address))?);
        }
        for number in 1..=self.options.args.relay_workers {
            let name = format!("relay-{number}");
            let launch = self.launcher.relay(&self.fleet)?;
            let index = self.fleet.start(&name, launch)?;
            if let Some(status) = self.fleet.wait_for(index, Duration::from_millis(300)) {
                return Err(format!(
                    "{name} did not start ({status}): {}",
                    self.fleet.last_lines(index)
                ));
            }
            self.processes.push(index);
        }
        Ok(())
    }

    /// Waits until the receiver at `address` answers `/healthz`, or says why it will not.
    fn wait_until_ready(&mut self, index: usize, address: SocketAddr) -> Result<(), Unready> {
        let (path, bound_s) = self.launcher.readiness();
        let deadline = Instant::now() + Duration::from_secs(bound_s);
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(1)).build();
        loop {
            if agent.get(&format!("http://{address}{path}")).call().is_ok() {
                return Ok(());
            }
            if let Some(status) = self.fleet.wait_for(index, Duration::from_millis(50)) {
                return Err(Unready::Exited(format!(
                    "{} did not start ({status}): {}",
                    self.fleet.name(index),
                    self.fleet.last_lines(index)
                )));
            }
            if Instant::now() >= deadline {
                self.fleet.kill(index);
                return Err(Unready::Silent(format!(
                    "{} did not answer {path} with 2xx within {bound_s} s: {}",
                    self.fleet.name(index),
                    self.fleet.last_lines(index)
                )));
            }
        }
    }

    /// The fault phase, heal, quiet, the operator, the stop and the verdict.
    fn go(&mut self, workload: &Workload) -> Result<Outcome, String> {
        let args = &self.options.args;
        let fault_phase = Duration::from_secs(args.seconds);
        let quiet_bound = Duration::from_secs(args.quiet_bound_s);
        let sender_stop = Stop::new();
        let sender = self.start_sender(workload, &sender_stop, fault_phase + quiet_bound);
        self.fault_phase(fault_phase)?;
        self.heal()?;
        let heal_at = Instant::now();
        let quiet_deadline = heal_at + quiet_bound;
        let mut unsettled = self.wait_for_quiet(&sender, quiet_deadline)?;
        let mut dead_at_requeue = BTreeSet::new();
        if unsettled.is_none() && !self.interrupted() {
            dead_at_requeue = self.operator()?;
            if !dead_at_requeue.is_empty() {
                unsettled = self.wait_for_quiet(&sender, quiet_deadline)?;
            }
        }
        sender_stop.request();
        let run = sender.join().map_err(|_| "the sender failed".to_owned())?;
        let killed = self.fleet.stop_all(Duration::from_secs(10));
        if !killed.is_empty() {
            self.note(format!(
                "did not stop on SIGTERM within 10 s, killed: {}",
                killed.join(", ")
            ));
        }
        let last = snapshot(&self.database, &**self.system)?;
        let deleted = deleted_receipts(&self.database, &**self.system)?;
        self.ever_received.extend(deleted);
        self.finish(workload, run, last, dead_at_requeue, unsettled)
    }

    fn start_sender(&self, workload: &Workload, stop: &Stop, bound: Duration) -> JoinHandle<SenderRun> {
        let args = &self.options.args;
        let plan = SenderPlan {
            preset: self.options.preset,
            compression: args.compression,
            receivers: self
                .proxies
                .iter()
                .map(|proxy| format!("http://{}", proxy.address))
                .collect(),
            concurrency: 8,
            duplicate: if self.options.has(LiveFault::DuplicateDelivery) {
                Ratio::new(args.duplicate_percent, 100)
            } else {
                Ratio::new(0, 1)
            },
            seed: args.seed,
            redeliver_from: Some(self.started + Duration::from_secs(args.seconds)),
        };
        let domain = self.system.domain();
        let model = domain.model(workload).with_refusals(&*domain, workload);
        let events = workload.events.clone();
        let stop = stop.clone();
        let deadline = Instant::now() + bound;
        std::thread::spawn(move || {
            deliver(
                &events,
                &*domain,
                |event| model.expects_rejection(event),
                &plan,
                &stop,
                deadline,
            )
        })
    }

    fn fault_phase(&mut self, length: Duration) -> Result<(), String> {
        let end = self.started + length;
        let args = &self.options.args;
        let mut plan = Plan::new(
            args.seed,
            &self.options.faults,
            args.receivers,
            args.relay_workers,
        );
        let mut next = plan
            .next()
            .map(|(gap_ms, action)| (Instant::now() + Duration::from_millis(gap_ms), action));
        while Instant::now() < end && !self.interrupted() {
            if let Some((at, action)) = next
                && Instant::now() >= at
            {
                self.apply(action)?;
                next = plan
                    .next()
                    .map(|(gap_ms, action)| (Instant::now() + Duration::from_millis(gap_ms), action));
            }
            self.tick()?;
        }
        Ok(())
    }

    /// What every turn of the loop does: due restarts and resumes, the scheduled purge, a look
    /// at the database, processes that ended on their own.
    fn tick(&mut self) -> Result<(), String> {
        let now = Instant::now();
        while let Some((&(at, later), ())) = self.later.first_key_value() {
            if at > now {
                break;
            }
            self.later.pop_first();
            match later {
                Later::Restart(index) => self.fleet.restart(index)?,
                Later::Resume(index) => self.fleet.resume(index),
            }
        }
        if now >= self.purge_due {
            self.purge_due = now + PURGE_EVERY;
            // Receipts older than the sender's whole retry horizon, compressed, and a margin:
            // the sender no longer redelivers them.
            let horizon_ms =
                self.options.preset.horizon_ms() / i64::from(self.options.args.compression.max(1));
            self.purge(horizon_ms + 30_000, false)?;
        }
        self.collect_jobs();
        for (index, name, status) in self.fleet.exited() {
            let line = self.fleet.last_line(index);
            if line.contains("crash point") {
                self.counts.crashes += 1;
                self.note(format!("{name}: {line}; started again"));
            } else {
                self.counts.unplanned_exits += 1;
                self.note(format!(
                    "{name} ended on its own ({status}): {line}; started again"
                ));
            }
            self.fleet.restart(index)?;
        }
        let look = self.look()?;
        self.last_look = Some(look);
        std::thread::sleep(Duration::from_millis(LOOK_EVERY_MS));
        Ok(())
    }

    fn look(&mut self) -> Result<Snapshot, String> {
        let look = snapshot(&self.database, &**self.system)?;
        self.ever_received.extend(look.receipts.iter().cloned());
        Ok(look)
    }

    fn apply(&mut self, action: Action) -> Result<(), String> {
        let now = Instant::now();
        match action {
            Action::Kill { target, down_ms } => {
                let index = self.processes[target];
                if !self.fleet.is_running(index) {
                    return Ok(());
                }
                self.fleet.kill(index);
                self.later.retain(|(_, later), ()| *later != Later::Resume(index));
                self.later
                    .insert((now + Duration::from_millis(down_ms), Later::Restart(index)), ());
                self.counts.kills += 1;
                self.note(format!("killed {} for {down_ms} ms", self.fleet.name(index)));
            }
            Action::Pause { target, paused_ms } => {
                let index = self.processes[target];
                if !self.fleet.is_running(index) || self.fleet.is_paused(index) {
                    return Ok(());
                }
                self.fleet.pause(index);
                self.later
                    .insert((now + Duration::from_millis(paused_ms), Later::Resume(index)), ());
                self.counts.pauses += 1;
                self.note(format!("paused {} for {paused_ms} ms", self.fleet.name(index)));
            }
            Action::Reset { receiver, window_ms } => {
                self.proxies[receiver].open_window(Window::Reset, Duration::from_millis(window_ms));
                self.note(format!(
                    "receiver-{}: connections reset for {window_ms} ms",
                    receiver + 1
                ));
            }
            Action::DropAnswers { receiver, window_ms } => {
                self.proxies[receiver].open_window(Window::DropAnswer, Duration::from_millis(window_ms));
                self.note(format!(
                    "receiver-{}: answers dropped for {window_ms} ms",
                    receiver + 1
                ));
            }
            Action::Purge { retention_ms } => self.purge(retention_ms, true)?,
        }
        Ok(())
    }

    /// Starts one run of the purge job as its own process. The loop does not wait for it: a purge
    /// that meets a paused process's write lock must not hold back the resumes and restarts that
    /// keep every pause within its promised length.
    fn purge(&mut self, retention_ms: i64, early: bool) -> Result<(), String> {
        let name = if early { "early-purge" } else { "purge" };
        let launch = self.launcher.purge(&self.fleet, retention_ms)?;
        let index = self.fleet.start_job(name, launch)?;
        self.jobs.push((index, Instant::now() + JOB_BOUND));
        if early {
            self.counts.early_purges += 1;
            self.note(format!("purging receipts older than {retention_ms} ms"));
        } else {
            self.counts.purges += 1;
        }
        Ok(())
    }

    /// Collects the jobs that ended, noting a failure; kills one that outlived its bound.
    fn collect_jobs(&mut self) {
        let jobs = std::mem::take(&mut self.jobs);
        for (index, deadline) in jobs {
            match self.fleet.wait_for(index, Duration::ZERO) {
                Some(status) if !status.success() => {
                    let line = self.fleet.last_line(index);
                    self.note(format!("{} failed ({status}): {line}", self.fleet.name(index)));
                }
                Some(_) => {}
                None if Instant::now() >= deadline => {
                    self.fleet.kill(index);
                    let name = self.fleet.name(index).to_owned();
                    self.note(format!(
                        "{name} did not end within {} s and was killed",
                        JOB_BOUND.as_secs()
                    ));
                }
                None => self.jobs.push((index, deadline)),
            }
        }
    }

    /// Ends every fault: the provider behaves, the proxies pass everything, paused processes
    /// resume and killed ones start again.
    fn heal(&mut self) -> Result<(), String> {
        self.double.heal();
        for proxy in &self.proxies {
            proxy.heal();
        }
        let later: Vec<Later> = std::mem::take(&mut self.later)
            .into_keys()
            .map(|(_, later)| later)
            .collect();
        for later in later {
            match later {
                Later::Restart(index) => self.fleet.restart(index)?,
                Later::Resume(index) => self.fleet.resume(index),
            }
        }
        self.note("healed".to_owned());
        Ok(())
    }

    /// Waits until the sender has finished and, for a second on end, no obligation is owed and
    /// the provider works on no key; `Some(why)` when `deadline` came first.
    fn wait_for_quiet(
        &mut self,
        sender: &JoinHandle<SenderRun>,
        deadline: Instant,
    ) -> Result<Option<String>, String> {
        let mut quiet_since: Option<Instant> = None;
        loop {
            if self.interrupted() {
                return Ok(None);
            }
            self.tick()?;
            let owed = self.last_look.as_ref().map_or(0, |look| look.owed.len());
            let in_progress = self.double.keys_in_progress();
            let quiet = sender.is_finished() && owed == 0 && in_progress.is_empty();
            let now = Instant::now();
            match (quiet, quiet_since) {
                (true, Some(since)) if now - since >= Duration::from_secs(1) => return Ok(None),
                (true, None) => quiet_since = Some(now),
                (false, _) => quiet_since = None,
                _ => {}
            }
            if now >= deadline {
                let mut why = Vec::new();
                if !sender.is_finished() {
                    why.push("the sender was still delivering".to_owned());
                }
                if owed > 0 {
                    why.push(format!("{owed} obligations were still owed"));
                }
                if !in_progress.is_empty() {
                    why.push(format!(
                        "the provider was still working on {} keys",
                        in_progress.len()
                    ));
                }
                return Ok(Some(format!(
                    "no quiet within {} s of heal: {}",
                    self.options.args.quiet_bound_s,
                    why.join(", ")
                )));
            }
        }
    }

    /// The operator's pass after heal: the dead obligations are noted, then requeued by the
    /// system's own `requeue`, as its own process.
    fn operator(&mut self) -> Result<BTreeSet<String>, String> {
        let look = self.look()?;
        let dead = look.dead.clone();
        self.last_look = Some(look);
        if dead.is_empty() {
            return Ok(dead);
        }
        let Some(launch) = self.launcher.requeue(&self.fleet)? else {
            // A service without the workflow: the invariants that assume it are left out.
            return Ok(BTreeSet::new());
        };
        let index = self.fleet.start_job("operator", launch)?;
        match self.fleet.wait_for(index, JOB_BOUND) {
            Some(status) if status.success() => {}
            Some(status) => self.note(format!(
                "the operator's requeue failed ({status}): {}",
                self.fleet.last_line(index)
            )),
            None => {
                self.fleet.kill(index);
                self.note("the operator's requeue did not end within 30 s and was killed".to_owned());
            }
        }
        self.counts.requeued = dead.len();
        self.note(format!("the operator requeued {} dead obligations", dead.len()));
        Ok(dead)
    }

    fn finish(
        &mut self,
        workload: &Workload,
        run: SenderRun,
        last: Snapshot,
        dead_at_requeue: BTreeSet<String>,
        unsettled: Option<String>,
    ) -> Result<Outcome, String> {
        // Times from the start of the run read better in evidence than wall-clock ones.
        let effects: Vec<_> = self
            .double
            .effects()
            .into_iter()
            .map(|effect| crate::provider_double::LedgerEffect {
                at_ms: effect.at_ms - self.started_ms,
                ..effect
            })
            .collect();
        self.count(&run, effects.len());
        // The journal first: the receipts its commits wrote are receipts the run saw.
        let commits = self.judge_commits(workload, &run.sender, last.rows.clone());
        let mut evidence = Evidence {
            workload,
            sender: &run.sender,
            effects,
            keys_in_progress: self.double.keys_in_progress(),
            ever_received: std::mem::take(&mut self.ever_received),
            dead_at_requeue,
            now_ms: now_ms() - self.started_ms,
        };
        if let Some(commits) = &commits {
            evidence
                .ever_received
                .extend(commits.ever_received.iter().cloned());
        }
        let mut judgement = judge(&**self.system, self.added, last, evidence, &self.choice)?;
        if let Some(service) = &self.options.service {
            judgement.left_out.extend(service.not_judged());
        }
        if let Some(commits) = commits {
            merge(&mut judgement, commits);
        }
        let kinds: BTreeMap<&str, InvariantKind> = registry(&*self.system.domain(), self.added)
            .iter()
            .map(|invariant| (invariant.name(), invariant.kind()))
            .collect();
        // An unsettled run was not given the time liveness needs: only safety is judged.
        let failures: Vec<Failure> = judgement
            .failures
            .iter()
            .filter(|(name, _)| {
                unsettled.is_none() || kinds.get(name.as_str()) == Some(&InvariantKind::Safety)
            })
            .map(|(invariant, evidence)| Failure {
                invariant: invariant.clone(),
                evidence: evidence.clone(),
            })
            .collect();
        let verdict = if self.interrupted() {
            Verdict::Interrupted
        } else if !failures.is_empty() {
            Verdict::Fail
        } else if unsettled.is_some() {
            Verdict::Unsettled
        } else {
            Verdict::Pass
        };
        Ok(self.outcome(verdict, failures, unsettled, judgement.judged, judgement.left_out))
    }

    /// Judges the run's commit journal, from where it started to `end`, the final rows. A journal
    /// that cannot be read or judged is noted and left out, never failed: it says nothing of the
    /// system.
    fn judge_commits(
        &mut self,
        workload: &Workload,
        sender: &Sender,
        end: Vec<FinalRow>,
    ) -> Option<JournalJudgement> {
        let Some(start) = self.journal_start.take() else {
            self.note(
                "no commit journal: the service's connections do not label commits ([journal] labels = false)"
                    .to_owned(),
            );
            return None;
        };
        let judged = read_journal(&self.database, &**self.system, start, end).and_then(|journal| {
            judge_commit_journal(
                &**self.system,
                workload,
                sender,
                journal,
                self.added,
                &self.choice,
            )
        });
        match judged {
            Ok(judgement) => {
                self.counts.commits = judgement.commits;
                Some(judgement)
            }
            Err(error) => {
                self.note(format!("the commit journal was not judged: {error}"));
                None
            }
        }
    }

    fn count(&mut self, run: &SenderRun, effects: usize) {
        self.counts.deliveries = run.sender.streams().len();
        self.counts.attempts = run
            .attempts
            .iter()
            .filter(|attempt| !attempt.duplicate && !attempt.redelivery)
            .count();
        self.counts.redeliveries = run.attempts.iter().filter(|attempt| attempt.redelivery).count();
        self.counts.duplicates = run.attempts.iter().filter(|attempt| attempt.duplicate).count();
        self.counts.unanswered = run
            .attempts
            .iter()
            .filter(|attempt| attempt.outcome.is_err())
            .count();
        self.counts.resets = self.proxies.iter().map(Proxy::resets).sum();
        self.counts.dropped_answers = self.proxies.iter().map(Proxy::dropped_answers).sum();
        self.counts.effects = effects;
    }

    fn outcome(
        &mut self,
        verdict: Verdict,
        failures: Vec<Failure>,
        unsettled: Option<String>,
        judged: Vec<String>,
        left_out: Vec<(String, String)>,
    ) -> Outcome {
        let options = self.options;
        let args = &options.args;
        Outcome {
            system: self.system.name().to_owned(),
            seed: args.seed,
            seconds: args.seconds,
            receivers: args.receivers,
            relay_workers: args.relay_workers,
            faults: options
                .faults
                .iter()
                .map(|fault| fault.name().to_owned())
                .collect(),
            preset: options.preset.name().to_owned(),
            compression: args.compression,
            verdict,
            failures,
            unsettled,
            judged,
            left_out,
            counts: self.counts.clone(),
            fault_log: std::mem::take(&mut self.fault_log),
            reproduce: reproduce(self.system.name(), options),
            directory: self.directory.clone(),
            elapsed_s: self.started.elapsed().as_secs_f64(),
        }
    }

    fn note(&mut self, line: String) {
        let at_s = self.started.elapsed().as_secs_f64();
        self.fault_log.push(format!("{at_s:7.2} s  {line}"));
    }

    fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }
}

/// How the run's processes are started and what they are told, and the invariants that judge
/// it: all but those a described service's absent columns keep out.
fn launcher(
    options: &Options,
    system: &Arc<dyn System>,
    database: &Path,
    settings: &Path,
    relay: &Path,
    provider_url: String,
) -> Result<(Launcher, InvariantChoice), String> {
    let launcher = Launcher {
        service: options.service.clone(),
        database: absolute(database)?,
        settings_file: absolute(settings)?,
        relay_settings_file: absolute(relay)?,
        relay: relay_settings(key_lifetime_ms(options)),
        provider_url,
        body_bytes_max: system.body_bytes_max(),
        crash_seed: options.has(LiveFault::Crash).then_some(options.args.seed),
    };
    let choice = InvariantChoice {
        only: None,
        without: options
            .service
            .as_ref()
            .map(|service| service.not_judged().into_iter().map(|(name, _)| name).collect())
            .unwrap_or_default(),
    };
    Ok((launcher, choice))
}

/// Adds the journal's verdicts to the final state's: each invariant it judged is judged, no
/// longer left out, and its failure is added unless the final state failed it already.
fn merge(judgement: &mut FinalJudgement, commits: JournalJudgement) {
    for name in commits.judged {
        judgement.left_out.retain(|(left_out, _)| *left_out != name);
        if !judgement.judged.contains(&name) {
            judgement.judged.push(name);
        }
    }
    for (name, evidence) in commits.failures {
        if !judgement.failures.iter().any(|(failed, _)| *failed == name) {
            judgement.failures.push((name, evidence));
        }
    }
}

/// The workload of the run's seed: the domain's own draw, its events spread over the first
/// two thirds of the fault phase in the sender's virtual time, with twins and fan-out when
/// those faults are on.
fn workload(system: &Arc<dyn System>, options: &Options) -> Workload {
    let args = &options.args;
    let fault_phase_ms = i64::try_from(args.seconds)
        .unwrap_or(i64::MAX / 4_000)
        .saturating_mul(1_000);
    let settings = WorkloadSettings {
        tenants: args.tenants,
        subjects_per_tenant: args.subjects_per_tenant,
        emit_window_ms: (fault_phase_ms * 2 / 3).saturating_mul(i64::from(args.compression)),
        completed_subjects: Ratio::new(4, 5),
        updates_per_subject: None,
        racing_subjects: Ratio::new(1, 4),
        edge_values: false,
    };
    let domain = system.domain();
    let drawn = draw_workload(&*domain, args.seed, &settings);
    if !options.has(LiveFault::FanOut) && !options.has(LiveFault::TwinEvents) {
        return drawn;
    }
    // As the simulator's fan-out and twin-events models reshape a workload, from streams of
    // their own: a twin is what the domain says a second event for one fact looks like, created
    // and delivered up to a second (compressed) after the original.
    let Workload {
        fixtures, mut events, ..
    } = drawn;
    let share = Ratio::new(1, 5);
    if options.has(LiveFault::TwinEvents) {
        let mut rng = SimRng::stream(args.seed, "live/twin-events");
        let twins: Vec<(usize, EventSpec)> = (0..events.len())
            .filter_map(|index| Some((index, domain.twin(&events[index])?)))
            .collect();
        for (index, mut twin) in twins {
            if rng.chance(share) {
                twin.event_id = Workload::next_event_id(&events, &twin.account);
                let delay_ms = rng.between(0, 1_000) * i64::from(args.compression);
                twin.created_ms = events[index].created_ms + delay_ms;
                twin.deliver_at_ms = events[index].deliver_at_ms + delay_ms;
                twin.extra_deliveries.clear();
                events.push(twin);
            }
        }
    }
    if options.has(LiveFault::FanOut) {
        let mut rng = SimRng::stream(args.seed, "live/fan-out");
        for event in &mut events {
            if rng.chance(share) {
                event.subscriptions = u32::try_from(rng.between(2, 3)).unwrap_or(2);
            }
        }
    }
    Workload::new(fixtures, events)
}

/// The key lifetime the relay is told, in milliseconds.
fn key_lifetime_ms(options: &Options) -> i64 {
    i64::try_from(options.args.key_lifetime_s)
        .unwrap_or(i64::MAX / 1_000)
        .saturating_mul(1_000)
}

/// The provider double's misbehaviour under the chosen faults.
fn misbehaviour(options: &Options) -> Misbehaviour {
    let share = |fault, ratio| {
        if options.has(fault) {
            ratio
        } else {
            Ratio::new(0, 1)
        }
    };
    Misbehaviour {
        // Never sooner than the lifetime the relay was told.
        key_lifetime_ms: if options.has(LiveFault::KeyExpiry) {
            key_lifetime_ms(options)
        } else {
            Misbehaviour::default().key_lifetime_ms
        },
        // A quarter of the sends are slow: a request still in progress is what a second request
        // with its key can meet, and a minute holds only a few dozen sends.
        slow: share(LiveFault::ProviderSlow, Ratio::new(1, 4)),
        slow_ms: PROVIDER_SLOW_MS,
        lost_reply: share(LiveFault::ProviderReplyLost, Ratio::new(1, 10)),
        double_execute: options.has(LiveFault::ProviderDoubleExecute),
    }
}

fn serve_double(runtime: &tokio::runtime::Runtime, double: &ProviderDouble) -> Result<String, String> {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .map_err(|error| format!("cannot start the provider double: {error}"))?;
    let address = listener
        .local_addr()
        .map_err(|error| format!("cannot read the provider double's address: {error}"))?;
    let router = double.router();
    runtime.spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(format!("http://{address}"))
}

/// A localhost address no one listens on now.
fn free_address() -> Result<SocketAddr, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|error| format!("cannot find a free port on localhost: {error}"))
}

/// A new directory for the run under `out`, named by system, seed and start time.
fn run_directory(out: &Path, system: &str, seed: u64) -> Result<PathBuf, String> {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis());
    let directory = out.join(format!("{system}-seed{seed}-{stamp}"));
    std::fs::create_dir_all(&directory).map_err(|error| file_error("create", &directory, &error))?;
    Ok(directory)
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|error| format!("{}: {error}", path.display()))?;
    write_file(path, &text)
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| {
        i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
    })
}

/// The command that runs the same seed with the same options again.
fn reproduce(system: &str, options: &Options) -> String {
    let args = &options.args;
    let program = std::env::args()
        .next()
        .unwrap_or_else(|| "reference-serve".to_owned());
    let faults: Vec<&str> = options.faults.iter().map(|fault| fault.name()).collect();
    let faults = if faults.is_empty() {
        "none".to_owned()
    } else {
        faults.join(",")
    };
    let target = match &options.service {
        Some(service) => format!("--service {}", service.description().path.display()),
        None => format!("--system {system} live"),
    };
    format!(
        "{program} {target} --seed {} --seconds {} --receivers {} --relay-workers {} --faults {faults} --preset {} --compression {} --tenants {} --subjects-per-tenant {} --duplicate-percent {} --key-lifetime-s {}",
        args.seed,
        args.seconds,
        args.receivers,
        args.relay_workers,
        options.preset.name(),
        args.compression,
        args.tenants,
        args.subjects_per_tenant,
        args.duplicate_percent,
        args.key_lifetime_s
    )
}
