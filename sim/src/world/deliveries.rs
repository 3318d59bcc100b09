//! The sender's side of the world: events emitted, attempts made and timed out, deliveries
//! routed to a receiver (or lost, or refused), answers sent back and received, and the hostile
//! requests an attacker builds from deliveries it saw. Also the network's decisions on the way
//! (latency, an answer lost, extra copies), and a handler's start and answer as the sender's
//! records and the probes see them.
//!
//! These change the sender's records, the scheduler's queues and the trace together, so that
//! no caller can update one and forget another. They start no task: the executor (`run`) spawns
//! the handler for a delivery that reached a receiver.

use commitgap::receiver::{Answer, WebhookDelivery};

use super::{DeliveryKind, DeliveryRef, Origin, Route, TaskId, TaskKind, World, WorldEvent};
use crate::coverage::Situation;
use crate::decision::{Decision, DecisionKind, Destination};
use crate::faults::{Attack, ProcessRole};
use crate::record::AnswerRecord;
use crate::sender::EventState;
use crate::trace::{Arrival, DeliveryHow, Happening};

/// The largest body the receiver accepts (its `System::body_bytes_max`), and which event, if
/// any, the sender pads to exactly that size.
#[derive(Debug)]
pub(super) struct BodyLimit {
    pub(super) bytes_max: usize,
    pub(super) padded_event: Option<usize>,
}

impl Default for BodyLimit {
    fn default() -> BodyLimit {
        BodyLimit {
            bytes_max: commitgap::receiver::DEFAULT_BODY_BYTES_MAX,
            padded_event: None,
        }
    }
}

/// How often the operator looks for webhooks that still fail and redelivers them.
const OPERATOR_REDELIVERY_INTERVAL_MS: i64 = 30 * 60_000;
// Written by hand: it holds connections, futures or closures that cannot print themselves.
impl std::fmt::Debug for Arrived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arrived").finish_non_exhaustive()
    }
}

/// A delivery that reached a receiver: what the executor needs to start its handler.
pub struct Arrived {
    /// Index of the receiver process the delivery reached.
    pub receiver: usize,
    /// The request as the receiver gets it.
    pub webhook: WebhookDelivery,
    /// The upstream account of the event.
    pub account: String,
    /// The event's id.
    pub event_id: String,
    /// Who made the delivery.
    pub origin: Origin,
}

impl World {
    /// Takes the receiver's body limit, in bytes. The reference reads it from its settings. In
    /// a seed with edge values the event with the largest body arrives padded to exactly the
    /// limit (with whitespace after the JSON, so that its meaning is unchanged): a receiver that
    /// refuses a body at its limit rather than over it, or whose limit is below the one it
    /// declares, refuses a genuine delivery.
    pub fn set_body_limit(&mut self, bytes_max: usize) {
        self.settings.insert(
            commitgap::receiver::BODY_BYTES_MAX_SETTING.to_owned(),
            bytes_max.to_string(),
        );
        // Only a seed with edge values pads an event, so only it pays for writing every body.
        let padded_event = self.config.edge_values.then(|| {
            self.workload
                .events
                .iter()
                .enumerate()
                .map(|(index, event)| (self.domain.body(event).len(), std::cmp::Reverse(index)))
                .max()
                .map(|(_, std::cmp::Reverse(index))| index)
        });
        self.body_limit = BodyLimit {
            bytes_max,
            padded_event: padded_event.flatten(),
        };
    }

    /// The application emits an event: every subscription's stream schedules its first attempt.
    pub fn emit(&mut self, event: usize) {
        let spec = self.workload.events[event].clone();
        let streams: Vec<usize> = self.sender.streams_of(event).collect();
        for &stream in &streams {
            self.sender.emit(stream);
            self.schedule_event(spec.deliver_at_ms, WorldEvent::Attempt { stream });
        }
        for extra in &spec.extra_deliveries {
            self.schedule_event(
                extra.at_ms,
                WorldEvent::Extra {
                    stream: streams[0],
                    reason: extra.reason.clone(),
                    fault: extra.fault.clone(),
                },
            );
        }
        self.record(Happening::Emit {
            kind: self.domain.event_type(&spec),
            event_id: spec.event_id,
            account: spec.account,
            tenant: spec.tenant,
            subject: spec.subject,
            subscriptions: streams.len(),
        });
    }

    /// The sender begins the next scheduled attempt of `stream` and sets its timeout. Returns
    /// the attempt's number and how many concurrent copies go out with it.
    pub fn begin_attempt(&mut self, stream: usize) -> (u32, u32) {
        let now_ms = self.now_ms;
        let attempt = self.sender.begin_attempt(stream, now_ms);
        let timeout_ms = now_ms + self.config.sender_timeout_ms;
        self.schedule_event(timeout_ms, WorldEvent::AttemptTimeout { stream, attempt });
        let (copies, model) = self.extra_deliveries();
        if let Some(model) = model {
            self.record_fault(
                &model,
                &format_args!("{} copies of stream {stream} at once", copies + 1),
            );
        }
        (attempt, copies)
    }

    /// The sender stops waiting for `attempt` of `stream` and schedules the next attempt, if any.
    pub fn attempt_timed_out(&mut self, stream: usize, attempt: u32) {
        let now_ms = self.now_ms;
        let record = self.sender.stream(stream);
        let open =
            record.state == EventState::Delivering && record.attempts == attempt && record.attempt_open;
        let next_ms = self.sender.time_out(stream, attempt, now_ms);
        if let Some(next_ms) = next_ms {
            self.schedule_event(next_ms, WorldEvent::Attempt { stream });
        }
        self.record(Happening::AttemptTimedOut {
            stream,
            attempt,
            next_attempt_in_ms: next_ms.map(|next_ms| next_ms - now_ms),
            settled: !open,
        });
    }

    /// Sends one delivery of `stream` into the network. Returns the delivery when it reached a
    /// receiver; a lost or refused one is recorded (and a refused attempt rescheduled) here.
    pub fn send_delivery(
        &mut self,
        stream: usize,
        attempt: u32,
        kind: DeliveryKind,
        label: &str,
    ) -> Option<Arrived> {
        let (webhook, account, event_id, origin) = self.webhook_for(stream, true);
        let now_ms = self.now_ms;
        let how = match kind {
            DeliveryKind::Scheduled => DeliveryHow::Attempt(attempt),
            DeliveryKind::Copy => DeliveryHow::Copy,
            DeliveryKind::Extra => DeliveryHow::Extra(label.to_owned()),
        };
        let (route, lost_by) = self.route_delivery();
        let deliver = Happening::Deliver {
            event_id: event_id.clone(),
            account: account.clone(),
            stream,
            how,
            arrival: self.arrival(route),
        };
        if let Some(model) = lost_by {
            self.record_fault(&model, &deliver);
        }
        self.record(deliver);
        match route {
            Route::Lost => None,
            Route::To(receiver) => Some(Arrived {
                receiver,
                webhook,
                account,
                event_id,
                origin,
            }),
            Route::Refused => {
                if kind == DeliveryKind::Scheduled
                    && let Some(next_ms) = self.sender.refuse(stream, attempt, "connection refused", now_ms)
                {
                    self.schedule_event(next_ms, WorldEvent::Attempt { stream });
                }
                None
            }
        }
    }

    fn arrival(&self, route: Route) -> Arrival {
        match route {
            Route::To(receiver) => Arrival::To(self.processes[receiver].id.to_string()),
            Route::Lost => Arrival::Lost,
            Route::Refused => Arrival::Refused,
        }
    }

    /// The webhook the sender delivers for `stream` now: signed with the endpoint's current
    /// secret (or with an empty signature) and stamped with the sender's clock, which a fault
    /// may have set wrong. Returns it with its account, event id and origin.
    pub fn webhook_for(&self, stream: usize, signed: bool) -> (WebhookDelivery, String, String, Origin) {
        let record = self.sender.stream(stream);
        let event = &self.workload.events[record.event];
        let timestamp_s = (self.now_ms + self.sender_clock_offset_ms).div_euclid(1_000);
        let webhook_id = format!("msg_{}_{}_{}", event.account, event.event_id, record.subscription);
        let mut body = self.domain.body(event).into_bytes();
        if self.body_limit.padded_event == Some(record.event) {
            body = crate::signing::padded_to(body, self.body_limit.bytes_max);
        }
        let webhook = if signed {
            crate::signing::signed_delivery(
                &event.account,
                &webhook_id,
                timestamp_s,
                body,
                crate::signing::CURRENT_GENERATION,
            )
        } else {
            crate::signing::unsigned_delivery(&event.account, &webhook_id, timestamp_s, body)
        };
        (
            webhook,
            event.account.clone(),
            event.event_id.clone(),
            Origin::Sender { timestamp_s },
        )
    }

    /// A receiver hands its answer to the network; a crash or a lost acknowledgment may keep it
    /// from the sender.
    pub fn send_answer(
        &mut self,
        process: usize,
        incarnation: u32,
        delivery: Option<DeliveryRef>,
        answer: Answer,
    ) {
        let alive = self.processes[process].up && self.processes[process].incarnation == incarnation;
        match delivery {
            _ if !alive => {
                self.record(Happening::AnswerLostInCrash);
                if let Some(delivery) = delivery
                    && answer.is_success()
                {
                    self.success_not_settled(delivery);
                }
            }
            None => self.record(Happening::AnswerWritten),
            Some(delivery) if let Some(model) = self.webhook_answer_dropped() => {
                let lost = Happening::AnswerLost {
                    answer: answer.clone(),
                    stream: delivery.stream,
                };
                self.record_fault(&model, &lost);
                self.record(lost);
                if answer.is_success() {
                    self.success_not_settled(delivery);
                }
            }
            Some(delivery) => {
                let at_ms = self.now_ms + self.network_latency_ms();
                self.schedule_event(at_ms, WorldEvent::AnswerArrives { delivery, answer });
                self.record(Happening::AnswerSent);
            }
        }
    }

    /// The answer reaches the sender, which settles the attempt or schedules the next one.
    pub fn answer_arrives(&mut self, delivery: DeliveryRef, answer: Answer) {
        let now_ms = self.now_ms;
        let stream = delivery.stream;
        let mut next_attempt_in_ms = None;
        match delivery.kind {
            DeliveryKind::Copy => {}
            DeliveryKind::Extra => self.sender.answer_extra(stream, answer.is_success()),
            DeliveryKind::Scheduled => {
                let success = answer.is_success();
                let next = self
                    .sender
                    .answer(stream, delivery.attempt, success, &answer.to_string(), now_ms);
                if let Some(next_ms) = next {
                    self.schedule_event(next_ms, WorldEvent::Attempt { stream });
                    next_attempt_in_ms = Some(next_ms - now_ms);
                }
                if success && self.sender.stream(stream).state != EventState::Acknowledged {
                    // The attempt had timed out: the sender retries committed work.
                    self.success_not_settled(delivery);
                }
            }
        }
        if self.sender.stream(stream).state == EventState::Acknowledged {
            self.probes.stream_settled(stream);
        }
        self.watch_answer(delivery, &answer);
        let how = match delivery.kind {
            DeliveryKind::Scheduled => DeliveryHow::Attempt(delivery.attempt),
            DeliveryKind::Copy => DeliveryHow::Copy,
            DeliveryKind::Extra => DeliveryHow::Extra(String::new()),
        };
        self.record(Happening::SenderGot {
            answer,
            stream,
            attempt: delivery.attempt,
            how,
            next_attempt_in_ms,
        });
    }

    /// The operator's round of manual redelivery after heal: returns the streams the sender
    /// gave up on, and looks again later while anything is unsettled.
    pub fn operator_redelivery_round(&mut self, round: u32) -> Vec<usize> {
        let given_up = self.sender.given_up();
        self.watch_manual_redeliveries(&given_up);
        self.record(Happening::OperatorRedeliver {
            streams: given_up.len(),
            round,
        });
        given_up
    }

    /// Schedules the operator's next round while deliveries still fail (the liveness bound ends
    /// it if nothing helps).
    pub fn schedule_next_redelivery(&mut self, round: u32) {
        if self.sender.unsettled() > 0 {
            let at_ms = self.now_ms + OPERATOR_REDELIVERY_INTERVAL_MS;
            self.schedule_event(at_ms, WorldEvent::OperatorRedeliver { round: round + 1 });
        }
    }

    /// Whether the receipt of `stream`'s event is committed and no purge can remove it: the
    /// condition under which a request reusing its id with another body must be refused.
    fn receipt_stays(&self, stream: usize) -> bool {
        let purges = self
            .faults
            .iter()
            .any(crate::faults::ActiveFault::removes_receipts);
        let event = &self.workload.events[self.sender.stream(stream).event];
        !purges
            && self
                .view
                .receipts(&event.account, &event.event_id)
                .next()
                .is_some()
    }

    /// The delivery an attack copies: one the sender already made, chosen by `target` among the
    /// streams the attack fits and recorded as a schedule choice, with its name; `None` when the
    /// domain cannot make the attack, no stream fits, or a schedule names one this run lacks.
    fn attack_target(
        &mut self,
        fault: usize,
        attack: Attack,
        target: u64,
    ) -> Option<(Attack, usize, String, String)> {
        // An attack the domain cannot make is off (coverage says why): nothing is drawn for it.
        let off = self
            .attacks_left_out
            .iter()
            .any(|(left_out, _)| *left_out == attack);
        let attempted: Vec<usize> = (0..self.sender.streams().len())
            .filter(|_| !off)
            .filter(|&index| self.sender.stream(index).attempts > 0)
            .filter(|&index| attack != Attack::ReusedEventId || self.receipt_stays(index))
            .collect();
        let model = self.faults[fault].name().to_owned();
        let drawn = (!attempted.is_empty()).then(|| {
            let stream = attempted[(target % attempted.len() as u64) as usize];
            Decision::Attack {
                attack,
                stream: self.stream_name(stream),
                model,
            }
        });
        let Some(Decision::Attack {
            attack,
            stream: stream_name,
            model,
        }) = self.choose(DecisionKind::Attack, |_| drawn)
        else {
            return None;
        };
        // A schedule may name a stream whose receipt is not (yet) committed in this run.
        let stream = self
            .stream_named(&stream_name)
            .filter(|&stream| attack != Attack::ReusedEventId || self.receipt_stays(stream));
        let Some(stream) = stream else {
            self.record(Happening::AttackSkipped {
                attack,
                stream: stream_name,
            });
            return None;
        };
        Some((attack, stream, stream_name, model))
    }

    /// Builds one hostile request from a delivery the sender already made and sends it into the
    /// network. The attack and its target are a schedule choice (`attack forged-signature
    /// acct-a/evt-1~1`), so a shrunk schedule can drop the request or keep it. Returns it when
    /// it reached a receiver.
    pub fn send_attack(&mut self, fault: usize, attack: Attack, target: u64) -> Option<Arrived> {
        let (attack, stream, stream_name, model) = self.attack_target(fault, attack, target)?;
        let (genuine, account, event_id, _) = self.webhook_for(stream, attack.keeps_genuine_signature());
        let other_account = self
            .workload
            .fixtures
            .accounts
            .iter()
            .map(|(other, _)| other.clone())
            .find(|other| *other != account)
            .unwrap_or_else(|| "acct-elsewhere".to_owned());
        let hostile = crate::signing::hostile_request(
            attack,
            genuine,
            &other_account,
            &*self.domain,
            self.body_limit.bytes_max,
        );
        // The domain cannot make this attack (coverage says why): nothing is sent.
        let Some(hostile) = hostile else {
            self.record(Happening::AttackSkipped {
                attack,
                stream: stream_name,
            });
            return None;
        };
        self.record_fault(
            &model,
            &format_args!(
                "attacker sends {} copied from {event_id} ({account})",
                attack.name()
            ),
        );
        let (route, _) = self.route_delivery();
        let arrival = self.arrival(route);
        self.record(Happening::Attack {
            attack,
            event_id: event_id.clone(),
            account: account.clone(),
            arrival,
        });
        let Route::To(receiver) = route else {
            return None;
        };
        Some(Arrived {
            receiver,
            webhook: hostile,
            account,
            event_id,
            origin: Origin::Hostile {
                attack: attack.name().to_owned(),
            },
        })
    }

    /// A 2xx answer to `delivery` will never settle its stream: it was lost, never written, or
    /// reached the sender after the attempt had timed out. If the sender was waiting for it and
    /// the event's receipt had committed, the stream's next delivery is a retry of committed
    /// work, which the probes count when it starts.
    pub fn success_not_settled(&mut self, delivery: DeliveryRef) {
        let stream = self.sender.stream(delivery.stream);
        let awaited = match delivery.kind {
            DeliveryKind::Scheduled => true,
            // Outside the schedule, only a manual redelivery of a stream that gave up is awaited.
            DeliveryKind::Extra => stream.state == EventState::GaveUp,
            DeliveryKind::Copy => false,
        };
        if !awaited || stream.state == EventState::Acknowledged {
            return;
        }
        let event = &self.workload.events[stream.event];
        let committed = self
            .history
            .ever_received
            .contains(&(event.account.clone(), event.event_id.clone()));
        if committed {
            self.probes.success_not_settled(delivery.stream);
        }
    }

    /// A handler is about to start for `(account, event_id)`: counts a duplicate that overlaps
    /// a handler still running for the same event, and the retries and redeliveries it
    /// completes. The scan covers the live tasks, a few dozen at most, once per delivery.
    pub fn handler_starting(&mut self, delivery: Option<DeliveryRef>, account: &str, event_id: &str) {
        let overlapping = self.tasks.values().any(|state| {
            matches!(&state.kind, TaskKind::Handler { account: other_account, event_id: other_event, .. }
                if other_account == account && other_event == event_id)
        });
        if overlapping {
            self.probes.reach(Situation::ConcurrentDuplicateDelivery);
        }
        self.probes
            .delivery_started(delivery.map(|delivery| delivery.stream), account, event_id);
    }

    /// A handler finished: record its answer and put it on the wire.
    pub fn handler_finished(&mut self, task: TaskId, answer: Answer) {
        let state = &self.tasks[&task];
        let TaskKind::Handler {
            delivery,
            account,
            event_id,
            origin,
        } = &state.kind
        else {
            unreachable!("only handler tasks answer deliveries");
        };
        let (delivery, process) = (*delivery, state.process);
        // Verification runs before the handler's first awaited call, so a delivery refused at the
        // door is answered in the very step that read this clock.
        let receiver_now_s = self.process_now_ms(process).div_euclid(1_000);
        self.step_record.answers.push(AnswerRecord {
            process_id: state.process_id.to_string(),
            account: account.clone(),
            event_id: event_id.clone(),
            answer: answer.clone(),
            origin: origin.clone(),
            receiver_now_s,
        });
        self.record(Happening::Answer(answer.clone()));
        if let Some(scripted) = &mut self.scripted {
            scripted.answers.insert(task, answer.clone());
        }
        let incarnation = self.processes[process].incarnation;
        self.schedule_event(
            self.now_ms,
            WorldEvent::SendAnswer {
                process,
                incarnation,
                delivery,
                answer,
            },
        );
    }

    /// Where one delivery goes: lost on the way (with the fault model that lost it), refused
    /// (no receiver up), or to a receiver among those up (the first one up by default). One
    /// choice per delivery, always written down, so that a step sending a delivery and its
    /// copies keeps each one's fate apart.
    pub fn route_delivery(&mut self) -> (Route, Option<String>) {
        let up: Vec<usize> = (0..self.processes.len())
            .filter(|&index| self.processes[index].role == ProcessRole::Receiver && self.processes[index].up)
            .collect();
        if up.is_empty() {
            return (Route::Refused, None);
        }
        let now_ms = self.now_ms;
        let decision = self.choose(DecisionKind::Deliver, |world| {
            let lost_by = crate::faults::first_to_act(&mut world.faults, |fault| fault.drops_request(now_ms));
            let receiver = world.processes[*world.network_rng.pick(&up)].name.clone();
            Some(Decision::Deliver(match lost_by {
                Some(model) => Destination::Lost { model },
                None => Destination::Receiver(receiver),
            }))
        });
        match decision {
            Some(Decision::Deliver(Destination::Lost { model })) => (Route::Lost, Some(model)),
            // A receiver the schedule names that is not up takes the default, the first one up.
            Some(Decision::Deliver(Destination::Receiver(name))) => {
                let receiver = up
                    .iter()
                    .copied()
                    .find(|&index| self.processes[index].name == name)
                    .unwrap_or(up[0]);
                (Route::To(receiver), None)
            }
            _ => (Route::To(up[0]), None),
        }
    }

    /// Travel time of one webhook answer.
    pub fn network_latency_ms(&mut self) -> i64 {
        match self.choose(DecisionKind::Latency, |world| {
            let ms = world.network_rng.between(1, world.config.network_latency_ms_max);
            Some(Decision::Latency { ms })
        }) {
            Some(Decision::Latency { ms }) => ms,
            _ => 1,
        }
    }

    /// The fault model that drops this webhook answer, if one does. Every model is asked, so
    /// that one model's decision never changes how many draws another one makes.
    pub fn webhook_answer_dropped(&mut self) -> Option<String> {
        let now_ms = self.now_ms;
        match self.choose(DecisionKind::LoseAnswer, |world| {
            let model =
                crate::faults::first_to_act(&mut world.faults, |fault| fault.drops_webhook_answer(now_ms));
            model.map(|model| Decision::LoseAnswer { model })
        }) {
            Some(Decision::LoseAnswer { model }) => Some(model),
            _ => None,
        }
    }

    /// How many extra copies of a delivery the fault models send, and the first model that
    /// sent any (credited with them all).
    pub fn extra_deliveries(&mut self) -> (u32, Option<String>) {
        let now_ms = self.now_ms;
        match self.choose(DecisionKind::Copies, |world| {
            let mut copies = 0;
            let model = crate::faults::first_to_act(&mut world.faults, |fault| {
                let added = fault.extra_deliveries(now_ms);
                copies += added;
                added > 0
            });
            model.map(|model| Decision::Copies { count: copies, model })
        }) {
            Some(Decision::Copies { count, model }) => (count, Some(model)),
            _ => (0, None),
        }
    }
}
