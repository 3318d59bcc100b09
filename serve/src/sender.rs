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
//! It signs with the simulator's endpoint secrets ([`commitgap_sim::signing`]), the ones
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
use commitgap_sim::sender::{Sender, SenderPreset};
use commitgap_sim::signing::{CURRENT_GENERATION, signed_delivery};
use commitgap_sim::workload::EventSpec;

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
}

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
    let mut sender = Sender::new(plan.preset, events, expected_rejection);
    let compression = i64::from(plan.compression.max(1));
    let started = Instant::now();
    let virtual_now_ms = || i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX) * compression;
    // Due attempts, by virtual time then stream.
    let mut due: BTreeSet<(i64, usize)> = (0..sender.streams().len())
        .map(|stream| (events[sender.stream(stream).event].deliver_at_ms, stream))
        .collect();
    let timeout = Duration::from_millis(plan.preset.timeout_ms().unsigned_abs());
    let (jobs, finished, workers) = spawn_posters(plan.concurrency.max(1), timeout);
    let mut in_flight = 0_usize;
    let mut attempts = Vec::new();
    let mut next_receiver = 0_usize;
    while !stop.is_requested() && Instant::now() < deadline && (in_flight > 0 || !due.is_empty()) {
        let now_ms = virtual_now_ms();
        while let Some(&(at_ms, stream)) = due.first().filter(|(at_ms, _)| *at_ms <= now_ms) {
            due.pop_first();
            let event = &events[sender.stream(stream).event];
            if sender.stream(stream).attempts == 0 {
                sender.emit(stream);
            }
            let attempt = sender.begin_attempt(stream, now_ms);
            let receiver = plan.receivers[next_receiver % plan.receivers.len().max(1)].clone();
            next_receiver += 1;
            let job = Job {
                stream,
                attempt,
                at_ms,
                receiver,
                account: event.account.clone(),
                webhook_id: webhook_id(event, sender.stream(stream).subscription),
                body: domain.body(event).into_bytes(),
            };
            if jobs.send(job).is_err() {
                break;
            }
            in_flight += 1;
        }
        match finished.recv_timeout(Duration::from_millis(10)) {
            Ok((job, outcome)) => {
                in_flight -= 1;
                let now_ms = virtual_now_ms();
                let retry_at_ms = match &outcome {
                    Ok(status) => sender.answer(
                        job.stream,
                        job.attempt,
                        (200..300).contains(status),
                        &format!("answered {status}"),
                        now_ms,
                    ),
                    Err(_) => sender.time_out(job.stream, job.attempt, now_ms),
                };
                if let Some(at_ms) = retry_at_ms {
                    due.insert((at_ms, job.stream));
                }
                attempts.push(AttemptRecord {
                    stream: job.stream,
                    attempt: job.attempt,
                    at_ms: job.at_ms,
                    receiver: job.receiver,
                    outcome,
                });
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    drop(jobs);
    for worker in workers {
        let _ = worker.join();
    }
    SenderRun { sender, attempts }
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
                let agent = ureq::AgentBuilder::new().timeout(timeout).build();
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
