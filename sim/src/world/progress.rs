//! Quiet, due, stuck or slow: what is left to do (nothing, when the world is quiet), whether any
//! of it is due now (which the liveness phase's step bound counts), and what the world remembers
//! of the work left after heal, to tell a system that will never finish from one still on its
//! way.
//!
//! After heal the faults stop (but for those whose real failure outlasts an incident, such as a
//! provider's rate limit, and the liveness bounds wait for them), so every obligation still owed
//! must be taken up again within the waits the relay was configured with (its lease, the provider's
//! processing bound, its backoff cap, its idle poll: `SimConfig::relay_waits_ms`). An obligation
//! that no worker takes up for twice those waits is stuck: waiting longer would only repeat the
//! same steps until the liveness bound. (Workers taking one up again and again without an effect
//! are not judged: the provider may replay an error it cached under the key until it forgets the
//! key, and a relay that keeps trying until then, or until its own attempts run out, is slow, not
//! stuck.) Once the provider has performed an obligation's operation, a correct relay settles it at
//! its next claim (it finds the key and records the outcome); one taken up again and again after
//! that is stuck however short the time, and so is one taken up again and again while no request at
//! all reaches the provider. A claim whose request a fault model answered in the provider's stead
//! (a 429 during a rate limit that outlasts heal) is a claim, but not one a relay could have
//! settled the obligation in: the provider told it nothing, so it is not counted among the claims
//! after the operation was performed.
//!
//! Deliveries are judged the same way. After heal a correct receiver has no reason to answer a
//! delivery "retry later" (a 5xx) except a lock held past its busy timeout, and that passes; a
//! stream the sender delivered several times since heal and that got the very same 5xx answer
//! each time is stuck: the receiver refuses it the same way and will go on doing so. (4xx
//! answers are not judged here: a domain may rightly refuse an event for good, and
//! `genuine-delivery-accepted` judges the refusals it may not make. Nor are deliveries in the
//! replay of a seed file recorded before statements waited for locks: there plain contention
//! answers a burst of redeliveries busy, round after round.) This module records the
//! claims and the answers after heal and says what is stuck; it decides nothing and changes no
//! state of the run.

use std::collections::BTreeMap;

use commitgap::receiver::Answer;

use super::{DeliveryKind, DeliveryRef, World};
use crate::rows::{ObligationStatus, ObservedRow};
use crate::trace::format_time_ms;
use crate::view::RowDiff;

/// One claim of an obligation after heal.
#[derive(Debug, Clone, Copy)]
struct ClaimSeen {
    /// When the claim was made.
    at_ms: i64,
    /// Whether a fault model answered its request in the provider's stead.
    answered_by_fault: bool,
}

/// The claims of each obligation made after heal.
#[derive(Debug, Default)]
pub struct StuckWatch {
    /// When the world healed; `None` before.
    healed_at_ms: Option<i64>,
    /// By operation key: when each claim after heal was made.
    claims: BTreeMap<String, Vec<ClaimSeen>>,
    /// The next virtual time at which to look again: the windows are hours long, so looking at
    /// every step would only cost time.
    next_look_ms: i64,
    /// By sender stream: the attempts it had started by heal. Only attempts started after heal
    /// are judged, since one started before may meet a lock a fault left behind.
    attempts_at_heal: Vec<u32>,
    /// By sender stream: the 5xx answer its latest delivery got since heal, the scheduled
    /// attempt it answered (0 for a manual redelivery), and how many deliveries in a row got it.
    refusals: BTreeMap<usize, (String, u32, u32)>,
    /// By sender stream: manual redeliveries the operator made after heal, not yet answered.
    manual_redeliveries: BTreeMap<usize, u32>,
    /// A stream found refused the same way too often, waiting to be reported.
    refused_stream: Option<String>,
    /// Requests that reached the provider since heal.
    requests_since_heal: u64,
}

/// Claims of one obligation after its operation was performed that a correct relay never needs:
/// one finds the performed key and settles it, and a busy database may spoil that write a time or
/// two.
const CLAIMS_AFTER_PERFORMED_MAX: usize = 5;

/// Claims of one obligation after heal with no request reaching the provider since: a correct
/// relay calls the provider (a send or a lookup) after every claim it makes.
const CLAIMS_WITHOUT_REQUEST_MAX: usize = 5;

/// Identical 5xx answers to one stream after heal that make it stuck. GitHub's sender does not
/// retry, and its operator redelivers three times; every other sender retries for hours.
const SAME_REFUSALS_STUCK: u32 = 3;

impl StuckWatch {
    /// Starts watching at heal, when each sender stream had started `attempts`.
    pub(super) fn healed(&mut self, now_ms: i64, attempts: Vec<u32>) {
        self.healed_at_ms = Some(now_ms);
        self.attempts_at_heal = attempts;
        self.next_look_ms = now_ms;
    }

    /// A request reached the provider.
    pub(super) fn requested(&mut self) {
        if self.healed_at_ms.is_some() {
            self.requests_since_heal += 1;
        }
    }

    /// A fault model answered the request under `key` in the provider's stead (a 429 during a
    /// rate limit): the provider told the relay nothing, so the claim it was made under is not
    /// one in which a correct relay could have settled the obligation.
    pub(super) fn answered_by_fault(&mut self, key: &str) {
        if let Some(claim) = self.claims.get_mut(key).and_then(|claims| claims.last_mut()) {
            claim.answered_by_fault = true;
        }
    }

    /// Records the leases taken in one commit's changes, after heal.
    pub(super) fn committed(&mut self, now_ms: i64, diffs: &[RowDiff]) {
        if self.healed_at_ms.is_none() {
            return;
        }
        for diff in diffs {
            if let (Some(ObservedRow::Obligation(before)), Some(ObservedRow::Obligation(after))) =
                (&diff.before, &diff.after)
                && after.lease_token > before.lease_token
                && after.lease_owner.is_some()
            {
                self.claims
                    .entry(after.operation_key.clone())
                    .or_default()
                    .push(ClaimSeen {
                        at_ms: now_ms,
                        answered_by_fault: false,
                    });
            }
        }
    }
}

impl World {
    /// True when nothing is left to do: every stream that can succeed settled with the sender,
    /// no delivery or provider request in flight, no obligation owed, every process up.
    pub fn is_quiescent(&self) -> bool {
        self.sender.unsettled() == 0
            && self.work_in_flight == 0
            && self.processes.iter().all(|process| process.up)
            && self.view.owed_obligations() == 0
    }

    /// Whether work is due now: a handler or operator task running, a delivery, answer, request
    /// or operator action whose time has come, a process down, or an owed obligation whose next attempt and lease have both come. The
    /// liveness phase counts only the steps taken while work is due against its step bound, so
    /// that a system polling often while nothing is due is judged like one polling rarely.
    pub fn has_due_work(&self) -> bool {
        let now_ms = self.now_ms;
        self.work_in_flight > self.work_events_due_ms.len()
            || self.work_events_due_ms.values().any(|&at_ms| at_ms <= now_ms)
            || self.processes.iter().any(|process| !process.up)
            || self.view.obligations().any(|obligation| {
                obligation.status == crate::system::ObligationStatus::Owed
                    && obligation.next_attempt_ms.is_none_or(|at_ms| at_ms <= now_ms)
                    && obligation.lease_expires_ms.is_none_or(|at_ms| at_ms <= now_ms)
            })
    }

    /// What keeps the world from being quiet, for a run that did not settle: `3 streams the
    /// sender has not settled, 1 owed obligation, 2 deliveries, answers or requests in flight,
    /// receiver-2 down`, or `nothing`.
    pub fn pending_work(&self) -> String {
        let plural =
            |count: usize, one: &str, many: &str| format!("{count} {}", if count == 1 { one } else { many });
        let mut parts = Vec::new();
        let streams = self.sender.unsettled();
        if streams > 0 {
            parts.push(plural(
                streams,
                "stream the sender has not settled",
                "streams the sender has not settled",
            ));
        }
        let owed = self.view.owed_obligations();
        if owed > 0 {
            parts.push(plural(owed, "owed obligation", "owed obligations"));
        }
        if self.work_in_flight > 0 {
            parts.push(plural(
                self.work_in_flight,
                "delivery, answer, request or operator action in flight",
                "deliveries, answers, requests or operator actions in flight",
            ));
        }
        for process in self.processes.iter().filter(|process| !process.up) {
            parts.push(format!("{} down", process.name));
        }
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join(", ")
        }
    }

    /// Notes the operator's manual redelivery of `streams` after heal: their answers are judged.
    pub(super) fn watch_manual_redeliveries(&mut self, streams: &[usize]) {
        for &stream in streams {
            *self.stuck_watch.manual_redeliveries.entry(stream).or_default() += 1;
        }
    }

    /// Records the answer the sender got for one of its scheduled attempts after heal: the same
    /// 5xx to attempt after attempt makes the stream stuck (see the module doc). Copies and
    /// extra deliveries are not judged: they come from faults, and several arrive at once.
    pub(super) fn watch_answer(&mut self, delivery: DeliveryRef, answer: &Answer) {
        let Some(healed_at_ms) = self.stuck_watch.healed_at_ms else {
            return;
        };
        // Where statements do not wait for locks (a seed file recorded before they did), a burst
        // of redeliveries is answered busy by plain contention, round after round.
        if !self.lock_waits.waits() {
            return;
        }
        let stream = delivery.stream;
        let started_before_heal = self
            .stuck_watch
            .attempts_at_heal
            .get(stream)
            .is_some_and(|&attempts| delivery.attempt <= attempts);
        match delivery.kind {
            DeliveryKind::Scheduled if !started_before_heal => {}
            // The operator's manual redeliveries come after heal, one per stream per round.
            DeliveryKind::Extra => match self.stuck_watch.manual_redeliveries.get_mut(&stream) {
                Some(pending) if *pending > 0 => *pending -= 1,
                _ => return,
            },
            _ => return,
        }
        if answer.status() < 500 {
            self.stuck_watch.refusals.remove(&stream);
            return;
        }
        let text = answer.to_string();
        let entry = self
            .stuck_watch
            .refusals
            .entry(stream)
            .or_insert_with(|| (text.clone(), 0, 0));
        if entry.0 != text {
            *entry = (text, delivery.attempt, 0);
        } else if entry.2 > 0 && delivery.attempt > 0 && entry.1 == delivery.attempt {
            // Another answer to an attempt already counted.
            return;
        }
        entry.1 = delivery.attempt;
        entry.2 += 1;
        let count = entry.2;
        if count >= SAME_REFUSALS_STUCK && self.stuck_watch.refused_stream.is_none() {
            let event = &self.workload.events[self.sender.stream(stream).event];
            self.stuck_watch.refused_stream = Some(format!(
                "{}/{} (stream {stream}) was delivered {count} times since heal at {} and answered \"{}\" each time: the receiver refuses it the same way and will go on doing so",
                event.account,
                event.event_id,
                format_time_ms(healed_at_ms),
                self.stuck_watch.refusals[&stream].0
            ));
        }
    }

    /// At the liveness bound, what is stuck rather than slow: an owed obligation, due now, that
    /// no worker has taken up in the second half of the liveness phase (`since_step`, the step at its
    /// middle), however the steps were spent. `None` when every owed obligation was taken up
    /// since, which is a run still working at its bound.
    pub fn stuck_at_bound(&self, since_step: u64, since_ms: i64) -> Option<String> {
        let healed_at_ms = self.stuck_watch.healed_at_ms?;
        for obligation in self.view.obligations() {
            // Not due yet (its next attempt or its lease lies ahead, as a long backoff leaves
            // it): nobody should have taken it up.
            let due_ms = obligation
                .next_attempt_ms
                .into_iter()
                .chain(obligation.lease_expires_ms)
                .max()
                .unwrap_or(i64::MIN);
            if obligation.status != ObligationStatus::Owed || due_ms > self.now_ms {
                continue;
            }
            let key = &obligation.operation_key;
            let last_claim_ms = self
                .stuck_watch
                .claims
                .get(key)
                .and_then(|claims| claims.last().map(|claim| claim.at_ms));
            if last_claim_ms.is_none_or(|at_ms| at_ms < since_ms) {
                let last = last_claim_ms.map_or_else(
                    || format!("not once since heal at {}", format_time_ms(healed_at_ms)),
                    |at_ms| format!("last at {}", format_time_ms(at_ms)),
                );
                return Some(format!(
                    "obligation {key} is owed and no worker took it up in the {} steps before the liveness bound ({last}): the run repeats itself without progress",
                    self.step.saturating_sub(since_step)
                ));
            }
        }
        None
    }

    /// Notes what is stuck, for `work-progresses-after-heal` to report.
    pub fn note_stuck(&mut self, diagnosis: String) {
        self.history.stuck = Some(diagnosis);
    }

    /// What is stuck after heal, in one line a person can act on, or `None` while every owed
    /// obligation is within the waits its relay was promised.
    pub fn diagnose_stuck(&mut self) -> Option<String> {
        let healed_at_ms = self.stuck_watch.healed_at_ms?;
        if let Some(diagnosis) = self.stuck_watch.refused_stream.take() {
            return Some(diagnosis);
        }
        let now_ms = self.now_ms;
        if now_ms < self.stuck_watch.next_look_ms {
            return None;
        }
        let waits_ms = self.config.relay_waits_ms().saturating_mul(2);
        self.stuck_watch.next_look_ms = now_ms.saturating_add((waits_ms / 8).max(1));
        for obligation in self.view.obligations() {
            if obligation.status != ObligationStatus::Owed {
                continue;
            }
            let key = &obligation.operation_key;
            let claims: &[ClaimSeen] = self.stuck_watch.claims.get(key).map_or(&[], Vec::as_slice);
            // The latest moment the relay itself said it would come back by.
            let promised_ms = [
                Some(healed_at_ms),
                claims.last().map(|claim| claim.at_ms),
                obligation.next_attempt_ms,
                obligation.lease_expires_ms,
            ]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(healed_at_ms);
            if now_ms.saturating_sub(promised_ms) > waits_ms {
                return Some(format!(
                    "obligation {key} is owed and no worker has taken it up since {} (healed at {}), longer than twice the relay's waits",
                    format_time_ms(promised_ms),
                    format_time_ms(healed_at_ms)
                ));
            }
            if claims.is_empty() {
                continue;
            }
            if claims.len() > CLAIMS_WITHOUT_REQUEST_MAX && self.stuck_watch.requests_since_heal == 0 {
                return Some(format!(
                    "obligation {key} was taken up {} times since heal at {} and no request has reached the provider since: the relay claims it without ever sending",
                    claims.len(),
                    format_time_ms(healed_at_ms)
                ));
            }
            let performed_ms = self
                .provider
                .effects_for(&self.view.operation_of(obligation))
                .map(|effect| effect.at_ms)
                .min();
            if let Some(performed_ms) = performed_ms {
                let after = claims
                    .iter()
                    .filter(|claim| claim.at_ms > performed_ms && !claim.answered_by_fault)
                    .count();
                if after > CLAIMS_AFTER_PERFORMED_MAX {
                    return Some(format!(
                        "obligation {key} was taken up {after} times since the provider performed it at {} and is still owed: the relay does not record the outcome it finds",
                        format_time_ms(performed_ms)
                    ));
                }
            }
        }
        None
    }
}
