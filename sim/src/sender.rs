//! The upstream sender: emits events and delivers each one, per subscription, until it is
//! acknowledged or the retry schedule ends.
//!
//! A *stream* is one event's delivery to one subscription (an event fanned out to three
//! subscriptions has three streams, each with its own `webhook-id` and retries). Retry schedules
//! come from presets modelled on real senders (see [`SenderPreset`]). An attempt fails when its
//! answer is not 2xx or when no answer arrives within the sender's timeout; the next attempt
//! follows the preset's schedule, and the stream gives up once the schedule or the horizon is
//! exhausted. Deliveries outside the schedule (spontaneous duplicates, manual resends) do not
//! move the schedule, but a successful manual resend settles a stream that gave up. The sender
//! only knows what reached it: a lost answer is a failure even though the receiver committed.
//! This model must not look at the receiver's database.

use serde::{Deserialize, Serialize};

use crate::workload::EventSpec;

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
    /// Svix: immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (about 27.6 h in all),
    /// 15 s timeout.
    Svix,
    /// Shopify since 2024: 8 retries over 4 hours with exponential backoff, a 5 s timeout.
    ShopifyLike,
    /// GitHub: no automatic retry and a 10 s timeout; failed deliveries are redelivered by an
    /// operator (or a script) through the API.
    #[serde(alias = "github")]
    GitHub,
}

impl SenderPreset {
    /// Every sender preset.
    pub const ALL: [SenderPreset; 4] = [
        SenderPreset::StripeLike,
        SenderPreset::Svix,
        SenderPreset::ShopifyLike,
        SenderPreset::GitHub,
    ];

    /// The preset called `name` (as [`SenderPreset::name`] writes it).
    pub fn from_name(name: &str) -> Option<SenderPreset> {
        SenderPreset::ALL.into_iter().find(|preset| preset.name() == name)
    }

    /// The preset's short name, as written in configurations and seed files.
    pub fn name(self) -> &'static str {
        match self {
            SenderPreset::StripeLike => "stripe-like",
            SenderPreset::Svix => "svix",
            SenderPreset::ShopifyLike => "shopify-like",
            SenderPreset::GitHub => "github",
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
            // The published facts are "8 retries over 4 hours, exponential"; these delays double
            // from 1 to 80 minutes and add up to 238 minutes.
            SenderPreset::ShopifyLike => &[
                MINUTE_MS,
                2 * MINUTE_MS,
                5 * MINUTE_MS,
                10 * MINUTE_MS,
                20 * MINUTE_MS,
                40 * MINUTE_MS,
                80 * MINUTE_MS,
                80 * MINUTE_MS,
            ],
            SenderPreset::GitHub => &[],
        }
    }

    /// No scheduled attempt starts later than this after the first.
    pub fn horizon_ms(self) -> i64 {
        match self {
            SenderPreset::StripeLike => 72 * HOUR_MS,
            SenderPreset::Svix => 28 * HOUR_MS,
            SenderPreset::ShopifyLike => 4 * HOUR_MS,
            SenderPreset::GitHub => 0,
        }
    }

    /// How long the sender waits for an answer.
    pub fn timeout_ms(self) -> i64 {
        match self {
            SenderPreset::StripeLike => 20 * SECOND_MS,
            SenderPreset::Svix => 15 * SECOND_MS,
            SenderPreset::ShopifyLike => 5 * SECOND_MS,
            SenderPreset::GitHub => 10 * SECOND_MS,
        }
    }
}

/// Where one stream stands with the sender.
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

/// The sender's record of one stream.
#[derive(Debug, Clone)]
pub struct Stream {
    /// Index into the workload's events.
    pub event: usize,
    /// Which subscription, from 1.
    pub subscription: u32,
    /// Where the stream's delivery stands.
    pub state: EventState,
    /// Scheduled attempts started so far.
    pub attempts: u32,
    /// Whether the latest scheduled attempt still waits for its answer or timeout.
    pub attempt_open: bool,
    /// The latest non-2xx answer or failure, for reports.
    pub last_failure: Option<String>,
    first_attempt_ms: Option<i64>,
    /// Whether the receiver is expected to reject it for good; such a stream never counts as
    /// unsettled work, since retrying it cannot succeed.
    expected_rejection: bool,
}

/// The sender: every stream's delivery state.
#[derive(Debug)]
pub struct Sender {
    preset: SenderPreset,
    streams: Vec<Stream>,
    unsettled: usize,
}

impl Sender {
    /// A sender for `events`; `expected_rejection(event)` tells which events can never succeed.
    pub fn new(
        preset: SenderPreset,
        events: &[EventSpec],
        expected_rejection: impl Fn(&EventSpec) -> bool,
    ) -> Sender {
        let mut streams = Vec::new();
        for (index, event) in events.iter().enumerate() {
            for subscription in 1..=event.subscriptions.max(1) {
                streams.push(Stream {
                    event: index,
                    subscription,
                    state: EventState::Future,
                    attempts: 0,
                    attempt_open: false,
                    last_failure: None,
                    first_attempt_ms: None,
                    expected_rejection: expected_rejection(event),
                });
            }
        }
        let unsettled = streams.iter().filter(|stream| !stream.expected_rejection).count();
        Sender {
            preset,
            streams,
            unsettled,
        }
    }

    /// The retry policy the sender follows.
    pub fn preset(&self) -> SenderPreset {
        self.preset
    }

    /// The stream at `index`, in the sender's order.
    pub fn stream(&self, index: usize) -> &Stream {
        &self.streams[index]
    }

    /// Every stream, grouped by event in workload order (none in a scripted scenario).
    pub fn streams(&self) -> &[Stream] {
        &self.streams
    }

    /// The streams of event `event`.
    pub fn streams_of(&self, event: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.streams.len()).filter(move |&index| self.streams[index].event == event)
    }

    /// Number of streams that could still succeed and have not settled.
    pub fn unsettled(&self) -> usize {
        self.unsettled
    }

    /// Marks every stream of the event created.
    pub fn emit(&mut self, stream: usize) {
        self.streams[stream].state = EventState::Delivering;
    }

    /// Starts the next scheduled attempt of `stream` and returns its number (1 for the first).
    pub fn begin_attempt(&mut self, stream: usize, now_ms: i64) -> u32 {
        let record = &mut self.streams[stream];
        debug_assert_eq!(record.state, EventState::Delivering);
        record.first_attempt_ms.get_or_insert(now_ms);
        record.attempts += 1;
        record.attempt_open = true;
        record.attempts
    }

    /// Records the answer to scheduled attempt `attempt`. Returns when to retry, if the sender will.
    pub fn answer(
        &mut self,
        stream: usize,
        attempt: u32,
        success: bool,
        detail: &str,
        now_ms: i64,
    ) -> Option<i64> {
        if !self.closes_attempt(stream, attempt) {
            return None;
        }
        if success {
            self.settle(stream, EventState::Acknowledged);
            return None;
        }
        self.fail(stream, detail, now_ms)
    }

    /// Records the answer to a delivery outside the schedule: only a success matters, and it
    /// settles a stream that gave up (a manual resend that worked).
    pub fn answer_extra(&mut self, stream: usize, success: bool) {
        if success && self.streams[stream].state == EventState::GaveUp {
            self.settle(stream, EventState::Acknowledged);
        }
    }

    /// Records that attempt `attempt` got no answer in time. Returns when to retry, if ever.
    pub fn time_out(&mut self, stream: usize, attempt: u32, now_ms: i64) -> Option<i64> {
        if !self.closes_attempt(stream, attempt) {
            return None;
        }
        self.fail(stream, "no answer before the sender's timeout", now_ms)
    }

    /// Records that attempt `attempt` could not be delivered. Returns when to retry, if ever.
    pub fn refuse(&mut self, stream: usize, attempt: u32, why: &str, now_ms: i64) -> Option<i64> {
        if !self.closes_attempt(stream, attempt) {
            return None;
        }
        self.fail(stream, why, now_ms)
    }

    /// True (and closes the attempt) if `attempt` is the open, latest attempt of `stream`.
    fn closes_attempt(&mut self, stream: usize, attempt: u32) -> bool {
        let record = &mut self.streams[stream];
        if record.state != EventState::Delivering || record.attempts != attempt || !record.attempt_open {
            return false;
        }
        record.attempt_open = false;
        true
    }

    fn settle(&mut self, stream: usize, state: EventState) {
        let record = &mut self.streams[stream];
        let was_unsettled = matches!(
            record.state,
            EventState::Future | EventState::Delivering | EventState::GaveUp
        );
        record.state = state;
        if !record.expected_rejection && was_unsettled && state == EventState::Acknowledged {
            self.unsettled -= 1;
        }
    }

    fn fail(&mut self, stream: usize, detail: &str, now_ms: i64) -> Option<i64> {
        let preset = self.preset;
        let record = &mut self.streams[stream];
        record.last_failure = Some(detail.to_owned());
        let first_ms = record.first_attempt_ms.unwrap_or(now_ms);
        let next = preset
            .retry_delays_ms()
            .get(record.attempts as usize - 1)
            .map(|delay| now_ms + delay)
            .filter(|&at_ms| at_ms - first_ms <= preset.horizon_ms());
        if next.is_none() {
            // A stream that gave up still counts as unsettled: it was not acknowledged.
            record.state = EventState::GaveUp;
        }
        next
    }

    /// Streams that gave up although they could succeed (what an operator would redeliver).
    pub fn given_up(&self) -> Vec<usize> {
        (0..self.streams.len())
            .filter(|&index| {
                let stream = &self.streams[index];
                stream.state == EventState::GaveUp && !stream.expected_rejection
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(subscriptions: u32) -> EventSpec {
        let mut spec =
            EventSpec::new("acct-a", "tenant-a", "order-1", "payment", 0).with("amount_cents", 100);
        spec.event_id = "evt-1".into();
        spec.subscriptions = subscriptions;
        spec
    }

    fn attempts_until_given_up(preset: SenderPreset) -> (u32, i64) {
        let mut sender = Sender::new(preset, &[spec(1)], |_| false);
        sender.emit(0);
        let (mut now_ms, mut attempts) = (0, 0);
        loop {
            let attempt = sender.begin_attempt(0, now_ms);
            attempts += 1;
            match sender.time_out(0, attempt, now_ms) {
                Some(next_ms) => now_ms = next_ms,
                None => break,
            }
        }
        assert_eq!(sender.stream(0).state, EventState::GaveUp);
        assert_eq!(sender.unsettled(), 1, "a stream that gave up is not settled");
        (attempts, now_ms)
    }

    #[test]
    fn presets_retry_as_published() {
        assert_eq!(attempts_until_given_up(SenderPreset::Svix).0, 8);
        let (shopify_attempts, shopify_last_ms) = attempts_until_given_up(SenderPreset::ShopifyLike);
        assert_eq!(shopify_attempts, 9, "the first attempt and 8 retries");
        assert!(shopify_last_ms <= 4 * HOUR_MS);
        assert_eq!(attempts_until_given_up(SenderPreset::GitHub).0, 1);
        assert!(attempts_until_given_up(SenderPreset::StripeLike).1 <= 72 * HOUR_MS);
    }

    #[test]
    fn streams_settle_independently_and_stale_answers_change_nothing() {
        let mut sender = Sender::new(SenderPreset::StripeLike, &[spec(2)], |_| false);
        assert_eq!(sender.streams_of(0).count(), 2);
        sender.emit(0);
        sender.emit(1);
        let first = sender.begin_attempt(0, 0);
        assert_eq!(sender.time_out(0, first, 0), Some(MINUTE_MS));
        let second = sender.begin_attempt(0, MINUTE_MS);
        assert_eq!(sender.answer(0, first, true, "late", 10), None);
        assert_eq!(sender.stream(0).state, EventState::Delivering);
        sender.answer(0, second, true, "ok", 20);
        assert_eq!(sender.stream(0).state, EventState::Acknowledged);
        assert_eq!(sender.unsettled(), 1, "the other subscription still delivers");
    }

    #[test]
    fn a_manual_resend_settles_a_stream_that_gave_up() {
        let mut sender = Sender::new(SenderPreset::GitHub, &[spec(1)], |_| false);
        sender.emit(0);
        let attempt = sender.begin_attempt(0, 0);
        assert_eq!(sender.time_out(0, attempt, 0), None);
        assert_eq!(sender.given_up(), vec![0]);
        sender.answer_extra(0, true);
        assert_eq!(sender.stream(0).state, EventState::Acknowledged);
        assert_eq!(sender.unsettled(), 0);
    }

    #[test]
    fn expected_rejections_are_not_unsettled_work() {
        let sender = Sender::new(SenderPreset::Svix, &[spec(1), spec(1)], |event| {
            event.subscriptions == 1
        });
        assert_eq!(sender.unsettled(), 0);
    }
}
