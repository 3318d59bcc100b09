//! The upstream sender: emits payment events and delivers each one until it is acknowledged or
//! the retry schedule ends.
//!
//! Retry schedules come from presets modelled on real senders (see [`SenderPreset`]). An attempt
//! fails when its answer is not 2xx or when no answer arrives within the sender's timeout; the
//! next attempt follows the preset's schedule, and the sender gives up once the schedule or its
//! horizon is exhausted. The sender only knows what reached it: a lost answer is a failure even
//! though the receiver committed. This model must not look at the receiver's database.

use serde::{Deserialize, Serialize};

use crate::config::EventSpec;

const SECOND_MS: i64 = 1_000;
const MINUTE_MS: i64 = 60 * SECOND_MS;
const HOUR_MS: i64 = 60 * MINUTE_MS;

/// Retry behaviour of a real webhook sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SenderPreset {
    /// Stripe live mode: resends undelivered events "for up to three days" with exponential
    /// backoff. The exact intervals are not published; these double from a minute to a day.
    StripeLike,
    /// Svix: immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (about 27.6 h in all).
    Svix,
}

impl SenderPreset {
    pub const ALL: [SenderPreset; 2] = [SenderPreset::StripeLike, SenderPreset::Svix];

    pub fn name(self) -> &'static str {
        match self {
            SenderPreset::StripeLike => "stripe-like",
            SenderPreset::Svix => "svix",
        }
    }

    /// Delay before attempt `n + 2` after attempt `n + 1` failed.
    pub fn retry_delays_ms(self) -> &'static [i64] {
        match self {
            SenderPreset::StripeLike => &[
                MINUTE_MS,
                5 * MINUTE_MS,
                30 * MINUTE_MS,
                HOUR_MS,
                2 * HOUR_MS,
                4 * HOUR_MS,
                8 * HOUR_MS,
                16 * HOUR_MS,
                24 * HOUR_MS,
                24 * HOUR_MS,
            ],
            SenderPreset::Svix => &[
                5 * SECOND_MS,
                5 * MINUTE_MS,
                30 * MINUTE_MS,
                2 * HOUR_MS,
                5 * HOUR_MS,
                10 * HOUR_MS,
                10 * HOUR_MS,
            ],
        }
    }

    /// No attempt starts later than this after the event was created.
    pub fn horizon_ms(self) -> i64 {
        match self {
            SenderPreset::StripeLike => 72 * HOUR_MS,
            SenderPreset::Svix => 28 * HOUR_MS,
        }
    }
}

/// Where one event stands with the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventState {
    /// Not created yet.
    Future,
    /// Created and not yet acknowledged; an attempt is open or scheduled.
    Delivering,
    /// A 2xx answer reached the sender.
    Acknowledged,
    /// The schedule ran out before any 2xx answer reached the sender.
    GaveUp,
}

/// The sender's record of one event.
#[derive(Debug, Clone)]
pub struct SenderEvent {
    pub state: EventState,
    /// Attempts started so far.
    pub attempts: u32,
    /// Whether the latest attempt still waits for its answer or timeout.
    pub attempt_open: bool,
    /// The latest non-2xx answer or failure, for reports.
    pub last_failure: Option<String>,
}

/// The sender: every event's delivery state.
#[derive(Debug)]
pub struct Sender {
    preset: SenderPreset,
    events: Vec<SenderEvent>,
    created_ms: Vec<i64>,
    unsettled: usize,
}

impl Sender {
    pub fn new(preset: SenderPreset, events: &[EventSpec]) -> Sender {
        Sender {
            preset,
            events: events
                .iter()
                .map(|_| SenderEvent {
                    state: EventState::Future,
                    attempts: 0,
                    attempt_open: false,
                    last_failure: None,
                })
                .collect(),
            created_ms: events.iter().map(|event| event.emit_at_ms).collect(),
            unsettled: events.len(),
        }
    }

    pub fn event(&self, index: usize) -> &SenderEvent {
        &self.events[index]
    }

    /// Every event the sender knows, in workload order (none in a scripted scenario, where the
    /// test makes the deliveries).
    pub fn events(&self) -> &[SenderEvent] {
        &self.events
    }

    /// Number of events not yet acknowledged or given up.
    pub fn unsettled(&self) -> usize {
        self.unsettled
    }

    /// Marks event `index` created.
    pub fn emit(&mut self, index: usize) {
        self.events[index].state = EventState::Delivering;
    }

    /// Starts the next attempt of event `index` and returns its number (1 for the first).
    pub fn begin_attempt(&mut self, index: usize) -> u32 {
        let event = &mut self.events[index];
        debug_assert_eq!(event.state, EventState::Delivering);
        event.attempts += 1;
        event.attempt_open = true;
        event.attempts
    }

    /// Records the answer to attempt `attempt`. Returns when to retry, if the sender will.
    pub fn answer(
        &mut self,
        index: usize,
        attempt: u32,
        success: bool,
        detail: &str,
        now_ms: i64,
    ) -> Option<i64> {
        if !self.closes_attempt(index, attempt) {
            return None;
        }
        if success {
            self.events[index].state = EventState::Acknowledged;
            self.unsettled -= 1;
            return None;
        }
        self.fail(index, detail, now_ms)
    }

    /// Records that attempt `attempt` got no answer in time. Returns when to retry, if ever.
    pub fn time_out(&mut self, index: usize, attempt: u32, now_ms: i64) -> Option<i64> {
        if !self.closes_attempt(index, attempt) {
            return None;
        }
        self.fail(index, "no answer before the sender's timeout", now_ms)
    }

    /// Records that attempt `attempt` could not connect. Returns when to retry, if ever.
    pub fn refuse(&mut self, index: usize, attempt: u32, now_ms: i64) -> Option<i64> {
        if !self.closes_attempt(index, attempt) {
            return None;
        }
        self.fail(index, "connection refused: no receiver up", now_ms)
    }

    /// True (and closes the attempt) if `attempt` is the open, latest attempt of event `index`.
    fn closes_attempt(&mut self, index: usize, attempt: u32) -> bool {
        let event = &mut self.events[index];
        if event.state != EventState::Delivering || event.attempts != attempt || !event.attempt_open {
            return false;
        }
        event.attempt_open = false;
        true
    }

    fn fail(&mut self, index: usize, detail: &str, now_ms: i64) -> Option<i64> {
        let event = &mut self.events[index];
        event.last_failure = Some(detail.to_owned());
        let delays = self.preset.retry_delays_ms();
        let next = delays
            .get(event.attempts as usize - 1)
            .map(|delay| now_ms + delay)
            .filter(|&at_ms| at_ms - self.created_ms[index] <= self.preset.horizon_ms());
        if next.is_none() {
            event.state = EventState::GaveUp;
            self.unsettled -= 1;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EventSpec {
        EventSpec {
            account: "acct-a".into(),
            event_id: "evt-1".into(),
            tenant: "tenant-a".into(),
            order: "order-1".into(),
            emit_at_ms: 0,
        }
    }

    #[test]
    fn svix_schedule_retries_seven_times_then_gives_up() {
        let mut sender = Sender::new(SenderPreset::Svix, &[spec()]);
        sender.emit(0);
        let mut now_ms = 0;
        let mut attempts = 0;
        loop {
            let attempt = sender.begin_attempt(0);
            attempts += 1;
            match sender.time_out(0, attempt, now_ms) {
                Some(next_ms) => now_ms = next_ms,
                None => break,
            }
        }
        assert_eq!(attempts, 8);
        assert_eq!(sender.event(0).state, EventState::GaveUp);
        assert_eq!(sender.unsettled(), 0);
        assert!(now_ms <= SenderPreset::Svix.horizon_ms());
    }

    #[test]
    fn a_stale_answer_changes_nothing_and_success_settles() {
        let mut sender = Sender::new(SenderPreset::StripeLike, &[spec()]);
        sender.emit(0);
        let first = sender.begin_attempt(0);
        assert_eq!(sender.time_out(0, first, 0), Some(MINUTE_MS));
        let second = sender.begin_attempt(0);
        assert_eq!(sender.answer(0, first, true, "late", 10), None);
        assert_eq!(sender.event(0).state, EventState::Delivering);
        assert_eq!(sender.answer(0, second, true, "ok", 20), None);
        assert_eq!(sender.event(0).state, EventState::Acknowledged);
        assert_eq!(sender.unsettled(), 0);
    }
}
