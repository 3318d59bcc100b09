//! A webhook sender over real HTTP, for checks of served systems: it signs every delivery with
//! Standard Webhooks, posts it to a receiver, and keeps its books with the simulator's own
//! [`Sender`], so that a check over real processes reads the sender's record exactly as an
//! invariant reads the simulated one.
//!
//! The preset's retry schedule runs in compressed time: virtual time (what the [`Sender`] and
//! the events' `deliver_at_ms` count in) runs `compression` times faster than the wall clock, so
//! a Stripe-like schedule of three days fits in minutes. The sender's own timeout is not
//! compressed: a real receiver answers in real time. A delivery that got no answer (refused,
//! reset, timed out) is a timeout to the [`Sender`], as a real sender sees it.
//!
//! It signs with the simulator's endpoint secrets ([`commitgap_sim::peers`]), the ones
//! `receiver_settings` gives the receivers of a check: it is a test sender, not one to post
//! to a production endpoint with.
//!
//! Attempts run on a few threads at once, so that one slow answer does not hold back every other
//! stream. This module must not decide what counts as success: the [`Sender`] does, from the
//! status, as the simulated sender does.

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use commitgap_sim::domain::Domain;
use commitgap_sim::peers::{CURRENT_GENERATION, signed_delivery};
use commitgap_sim::peers::{Sender, SenderPreset};
use commitgap_sim::rng::{Ratio, SimRng};
use commitgap_sim::run::EventSpec;

use crate::env::Stop;

/// How the sender runs.
#[derive(Debug, Clone)]
pub struct SenderPlan {
    /// The retry contract.
    pub preset: SenderPreset,
    /// Virtual time runs this many times faster than the wall clock (1 is real time).
    pub compression: u32,
    /// The receivers' base URLs (`http://127.0.0.1:8080`); attempts go round them.
    pub receivers: Vec<String>,
    /// Attempts in flight at once.
    pub concurrency: usize,
    /// The share of attempts also posted, at the same moment, to the next receiver: a
    /// concurrent duplicate, as senders with at-least-once delivery make. Its answer does not
    /// count in the books (the sender waits on the first copy).
    pub duplicate: Ratio,
    /// Draws which attempts are duplicated.
    pub seed: u64,
    /// From this moment (a live check's heal) an operator redelivers, every half hour of
    /// virtual time, each stream the sender gave up on, as the simulator's operator does after
    /// heal; `None` never redelivers.
    pub redeliver_from: Option<Instant>,
}

/// How often the operator redelivers what the sender gave up on, in virtual milliseconds.
const REDELIVERY_INTERVAL_MS: i64 = 30 * 60_000;

/// One attempt, as the sender saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The stream (event and subscription) in the sender's order.
    pub stream: usize,
    /// The scheduled attempt's number, from 1.
    pub attempt: u32,
    /// When it started, in virtual milliseconds.
    pub at_ms: i64,
    /// Which receiver it went to.
    pub receiver: String,
    /// The answer's status, or why there was none.
    pub outcome: Result<u16, String>,
    /// Whether this was the concurrent duplicate of an attempt, not counted in the books.
    pub duplicate: bool,
    /// Whether this was the operator's manual redelivery of a stream the sender gave up on.
    pub redelivery: bool,
}

/// What a run of the sender leaves: its books, and every attempt.
#[derive(Debug)]
pub struct SenderRun {
    /// The simulator's record of every stream.
    pub sender: Sender,
    /// Every attempt, in the order they ended.
    pub attempts: Vec<AttemptRecord>,
}

struct Job {
    duplicate: bool,
    redelivery: bool,
    stream: usize,
    attempt: u32,
    at_ms: i64,
    receiver: String,
    account: String,
    webhook_id: String,
    body: Vec<u8>,
}

/// Delivers `events` (their bodies as `domain` writes them) until every stream settled, `stop`
/// is requested or `deadline` passes; `expected_rejection` names the events the receivers must
/// refuse for good, which the [`Sender`] does not count as unsettled.
pub fn deliver(
    events: &[EventSpec],
    domain: &dyn Domain,
    expected_rejection: impl Fn(&EventSpec) -> bool,
    plan: &SenderPlan,
    stop: &Stop,
    deadline: Instant,
) -> SenderRun {
    let sender = Sender::new(plan.preset, events, expected_rejection);
    // Due attempts, by virtual time then stream.
    let due: BTreeSet<(i64, usize)> = (0..sender.streams().len())
        .map(|stream| (events[sender.stream(stream).event].deliver_at_ms, stream))
        .collect();
    let timeout = Duration::from_millis(plan.preset.timeout_ms().unsigned_abs());
    let (jobs, finished, workers) = spawn_posters(plan.concurrency.max(1), timeout);
    let mut delivering = Delivering {
        events,
        domain,
        plan,
        sender,
        started: Instant::now(),
        due,
        jobs,
        in_flight: 0,
        attempts: Vec::new(),
        next_receiver: 0,
        duplicates: SimRng::stream(plan.seed, "live/sender-duplicates"),
        next_redelivery_ms: 0,
        redelivering: BTreeSet::new(),
    };
    while !stop.is_requested() && Instant::now() < deadline && delivering.has_work() {
        let now_ms = delivering.virtual_now_ms();
        if delivering.issue(now_ms).is_err() {
            break;
        }
        match finished.recv_timeout(Duration::from_millis(10)) {
            Ok((job, outcome)) => delivering.finish(job, outcome),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let Delivering {
        sender,
        attempts,
        jobs,
        ..
    } = delivering;
    drop(jobs);
    for worker in workers {
        let _ = worker.join();
    }
    SenderRun { sender, attempts }
}

/// The sender's state while it delivers.
struct Delivering<'a> {
    events: &'a [EventSpec],
    domain: &'a dyn Domain,
    plan: &'a SenderPlan,
    sender: Sender,
    started: Instant,
    due: BTreeSet<(i64, usize)>,
    jobs: mpsc::Sender<Job>,
    in_flight: usize,
    attempts: Vec<AttemptRecord>,
    next_receiver: usize,
    duplicates: SimRng,
    next_redelivery_ms: i64,
    redelivering: BTreeSet<usize>,
}

/// The posting threads are gone.
struct Stopped;

impl Delivering<'_> {
    fn virtual_now_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
            * i64::from(self.plan.compression.max(1))
    }

    /// Whether anything is left to do: an attempt in flight or due, or, once an operator
    /// redelivers, a stream not yet acknowledged.
    fn has_work(&self) -> bool {
        self.in_flight > 0
            || !self.due.is_empty()
            || (self.plan.redeliver_from.is_some() && self.sender.unsettled() > 0)
    }

    /// Starts the operator's redeliveries and the attempts due at `now_ms`.
    fn issue(&mut self, now_ms: i64) -> Result<(), Stopped> {
        if self
            .plan
            .redeliver_from
            .is_some_and(|from| Instant::now() >= from)
            && now_ms >= self.next_redelivery_ms
        {
            self.next_redelivery_ms = now_ms + REDELIVERY_INTERVAL_MS;
            for stream in self.sender.given_up() {
                if self.redelivering.insert(stream) {
                    let job = self.job(stream, 0, now_ms);
                    self.post(Job {
                        redelivery: true,
                        ..job
                    })?;
                }
            }
        }
        while let Some(&(at_ms, stream)) = self.due.first().filter(|(at_ms, _)| *at_ms <= now_ms) {
            self.due.pop_first();
            if self.sender.stream(stream).attempts == 0 {
                self.sender.emit(stream);
            }
            let attempt = self.sender.begin_attempt(stream, now_ms);
            let job = self.job(stream, attempt, at_ms);
            if self.duplicates.chance(self.plan.duplicate) {
                let twin = self.job(stream, attempt, at_ms);
                self.post(Job {
                    duplicate: true,
                    ..twin
                })?;
            }
            self.post(job)?;
        }
        Ok(())
    }

    /// A job for attempt `attempt` of `stream`, to the next receiver in turn.
    fn job(&mut self, stream: usize, attempt: u32, at_ms: i64) -> Job {
        let event = &self.events[self.sender.stream(stream).event];
        let receivers = &self.plan.receivers;
        let receiver = receivers[self.next_receiver % receivers.len().max(1)].clone();
        self.next_receiver += 1;
        Job {
            duplicate: false,
            redelivery: false,
            stream,
            attempt,
            at_ms,
            receiver,
            account: event.account.clone(),
            webhook_id: webhook_id(event, self.sender.stream(stream).subscription),
            body: self.domain.body(event).into_bytes(),
        }
    }

    fn post(&mut self, job: Job) -> Result<(), Stopped> {
        self.jobs.send(job).map_err(|_| Stopped)?;
        self.in_flight += 1;
        Ok(())
    }

    /// Books the outcome of `job`: a scheduled attempt's answer or timeout in the [`Sender`],
    /// with its retry; a redelivery's success; a duplicate's nothing.
    fn finish(&mut self, job: Job, outcome: Result<u16, String>) {
        self.in_flight -= 1;
        let success = matches!(outcome, Ok(status) if (200..300).contains(&status));
        if job.redelivery {
            self.redelivering.remove(&job.stream);
            self.sender.answer_extra(job.stream, success);
        } else if !job.duplicate {
            let now_ms = self.virtual_now_ms();
            let retry_at_ms = match &outcome {
                Ok(status) => self.sender.answer(
                    job.stream,
                    job.attempt,
                    success,
                    &format!("answered {status}"),
                    now_ms,
                ),
                Err(_) => self.sender.time_out(job.stream, job.attempt, now_ms),
            };
            if let Some(at_ms) = retry_at_ms {
                self.due.insert((at_ms, job.stream));
            }
        }
        self.attempts.push(AttemptRecord {
            stream: job.stream,
            attempt: job.attempt,
            at_ms: job.at_ms,
            receiver: job.receiver,
            outcome,
            duplicate: job.duplicate,
            redelivery: job.redelivery,
        });
    }
}

/// The `webhook-id` of an event's subscription: the same on every retry, as the simulated
/// sender writes it.
fn webhook_id(event: &EventSpec, subscription: u32) -> String {
    format!("msg_{}_{}_{subscription}", event.account, event.event_id)
}

type Outcome = (Job, Result<u16, String>);

/// Starts `concurrency` threads that post the jobs sent to the first channel and send each back
/// with its outcome on the second.
fn spawn_posters(
    concurrency: usize,
    timeout: Duration,
) -> (
    mpsc::Sender<Job>,
    mpsc::Receiver<Outcome>,
    Vec<std::thread::JoinHandle<()>>,
) {
    let (jobs, job_queue) = mpsc::channel::<Job>();
    let job_queue = std::sync::Arc::new(std::sync::Mutex::new(job_queue));
    let (results, finished) = mpsc::channel::<Outcome>();
    let workers = (0..concurrency)
        .map(|_| {
            let (job_queue, results) = (std::sync::Arc::clone(&job_queue), results.clone());
            std::thread::spawn(move || {
                // A connection per attempt, so that a proxy in front of the receivers that resets
                // a connection or drops an answer hits exactly one attempt, and no attempt rides
                // on a connection a killed receiver left half-closed.
                let agent = ureq::AgentBuilder::new()
                    .timeout(timeout)
                    .max_idle_connections(0)
                    .build();
                loop {
                    let job = match job_queue.lock().map(|queue| queue.recv()) {
                        Ok(Ok(job)) => job,
                        _ => return,
                    };
                    let outcome = post(&agent, &job);
                    if results.send((job, outcome)).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    (jobs, finished, workers)
}

/// Posts one signed delivery; its status, or why there was none.
fn post(agent: &ureq::Agent, job: &Job) -> Result<u16, String> {
    let timestamp_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_secs()).unwrap_or(0));
    let delivery = signed_delivery(
        &job.account,
        &job.webhook_id,
        timestamp_s,
        job.body.clone(),
        CURRENT_GENERATION,
    );
    let answer = agent
        .post(&format!("{}/webhooks/{}", job.receiver, job.account))
        .set("webhook-id", &delivery.headers.id)
        .set("webhook-timestamp", &delivery.headers.timestamp)
        .set("webhook-signature", &delivery.headers.signature)
        .send_bytes(&delivery.body);
    match answer {
        Ok(response) => Ok(response.status()),
        Err(ureq::Error::Status(status, _)) => Ok(status),
        Err(ureq::Error::Transport(transport)) => Err(transport.to_string()),
    }
}
