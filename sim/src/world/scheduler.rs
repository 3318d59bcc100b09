//! The scheduler's side of the world: the ready queue, the timers and the pending world events;
//! picking the next item to run (drawn from the scheduler's stream, or as a schedule says);
//! naming items and sender streams for schedules; and [`World::choose`], through which every
//! decision of a run is drawn or taken from its schedule.
//!
//! Time moves here only when nothing is ready: the clock jumps to the next timer. Nothing here
//! runs a task or handles an event; the executor (`run`) does that with the item picked.

use std::collections::BTreeMap;

use super::{EventId, Item, TaskKind, World, WorldEvent};
use crate::decision::{Decision, DecisionKind};
use crate::faults::PendingOp;
use crate::trace::Actor;

impl World {
    /// Picks the next item to run, jumping the clock to the next timer if nothing is ready.
    pub fn next_item(&mut self) -> Option<Item> {
        self.release_due_timers();
        if self.ready.is_empty() {
            let &(time_ms, _, _) = self.timers.first()?;
            self.now_ms = self.now_ms.max(time_ms);
            self.release_due_timers();
        }
        self.decider.start_drawing_if_done();
        let index = if self.decider.is_scheduled() {
            let labels = self.ready_labels();
            self.decider.pick_scheduled(&labels, self.step + 1).unwrap_or(0)
        } else {
            self.scheduler_rng.below(self.ready.len() as u64) as usize
        };
        if self.decider.records() {
            let label = self.ready_labels().swap_remove(index);
            self.decider.begin_step(label);
        }
        let item = self.ready.remove(index);
        self.ready_label_cache.remove(&item);
        Some(item)
    }

    /// The labels of the ready items, in ready order. Items that would share a label (two
    /// handlers of one receiver, the answers of a delivery and its copies) are told apart by
    /// their position among their namesakes: `receiver-1#1 sql`, `receiver-1#1 sql (2)`.
    fn ready_labels(&mut self) -> Vec<String> {
        // Each ready item's label is worked out once while it waits (a step with hundreds of
        // ready items would otherwise write every label again on every step). An answer's
        // label names its process's current incarnation, which a restart can change meanwhile,
        // so it is written afresh each time.
        for index in 0..self.ready.len() {
            let item = self.ready[index];
            let fresh = matches!(item, Item::Event(event) if matches!(self.events.get(&event), Some(WorldEvent::SendAnswer { .. })));
            if fresh || !self.ready_label_cache.contains_key(&item) {
                let label = self.item_label(item);
                self.ready_label_cache.insert(item, label);
            }
        }
        let mut labels: Vec<String> = Vec::with_capacity(self.ready.len());
        // How many earlier labels each text starts: a label's part before ` (` is what a later
        // namesake is compared with.
        let mut earlier: BTreeMap<&str, usize> = BTreeMap::new();
        for item in &self.ready {
            let base = self.ready_label_cache[item].as_str();
            let namesakes = earlier.get(base).copied().unwrap_or(0);
            *earlier
                .entry(base.split(" (").next().unwrap_or_default())
                .or_insert(0) += 1;
            labels.push(if namesakes == 0 {
                base.to_owned()
            } else {
                format!("{base} ({})", namesakes + 1)
            });
        }
        labels
    }

    /// Names a ready item for schedules: its actor and what it is about to do (`relay-1#1 sql
    /// UPDATE outbox`, `relay-1#1 call tenant-a/order-1/fulfill/v1`), stable across runs of the
    /// same schedule. Specific enough that a fault stays on the statement or call it was written
    /// for when an edit moves everything around it; general enough that a changed column list
    /// or parameter does not orphan it.
    pub fn item_label(&self, item: Item) -> String {
        match item {
            Item::Task(task) => {
                let state = &self.tasks[&task];
                let op = match state.pending {
                    PendingOp::Sql(_) => "sql",
                    PendingOp::ProviderCall => "call",
                    PendingOp::ProviderReply => "reply",
                    PendingOp::Wake => "wake",
                    PendingOp::Answer => "answer",
                };
                let mut label = format!("{} {op}", state.process_id);
                if !state.pending_detail.is_empty() {
                    label.push(' ');
                    label.push_str(&state.pending_detail);
                }
                // A handler's steps name the event it handles, so that removing an event from a
                // schedule can take the handler's lines with it.
                if let TaskKind::Handler {
                    account, event_id, ..
                } = &state.kind
                {
                    label.push_str(&format!(" @{account}/{event_id}"));
                }
                label
            }
            Item::Event(event) => match &self.events[&event] {
                WorldEvent::Emit { event } => format!("sender emit {}", self.event_name(*event)),
                WorldEvent::Attempt { stream } => format!("sender attempt {}", self.stream_name(*stream)),
                WorldEvent::AttemptTimeout { stream, attempt } => {
                    format!("sender timeout {} #{attempt}", self.stream_name(*stream))
                }
                WorldEvent::Extra { stream, .. } => format!("sender extra {}", self.stream_name(*stream)),
                WorldEvent::SendAnswer {
                    process, delivery, ..
                } => match delivery {
                    Some(delivery) => {
                        format!(
                            "{} answer @{}",
                            self.processes[*process].id,
                            self.stream_name(delivery.stream)
                        )
                    }
                    None => format!("{} answer", self.processes[*process].id),
                },
                WorldEvent::AnswerArrives { delivery, .. } => {
                    format!("sender answer {}", self.stream_name(delivery.stream))
                }
                WorldEvent::Restart { process } => format!("{} restart", self.processes[*process].name),
                WorldEvent::FaultTimer { fault } | WorldEvent::FaultActs { fault, .. } => {
                    format!("fault:{}", self.faults[*fault].name())
                }
                WorldEvent::ProviderActs { request, .. } => {
                    format!("provider acts {}", request.idempotency_key())
                }
                WorldEvent::OperatorRequeue => "operator requeue".to_owned(),
                WorldEvent::OperatorRedeliver { round } => format!("operator redeliver #{round}"),
            },
        }
    }

    /// Who acts when `item` runs: a task's process, or the actor of a world event.
    pub fn actor_of(&self, item: Item) -> Actor {
        match item {
            Item::Task(task) => Actor::Process(self.tasks[&task].process_id.clone()),
            Item::Event(event) => match &self.events[&event] {
                WorldEvent::SendAnswer { process, .. } | WorldEvent::Restart { process } => {
                    Actor::Process(self.processes[*process].id.clone())
                }
                WorldEvent::FaultTimer { fault } | WorldEvent::FaultActs { fault, .. } => {
                    Actor::Fault(self.faults[*fault].name().to_owned())
                }
                WorldEvent::ProviderActs { .. } => Actor::Provider,
                WorldEvent::OperatorRequeue | WorldEvent::OperatorRedeliver { .. } => Actor::Operator,
                WorldEvent::Emit { .. }
                | WorldEvent::Attempt { .. }
                | WorldEvent::AttemptTimeout { .. }
                | WorldEvent::Extra { .. }
                | WorldEvent::AnswerArrives { .. } => Actor::Sender,
            },
        }
    }

    /// `account/event_id` of workload event `event`.
    fn event_name(&self, event: usize) -> String {
        let spec = &self.workload.events[event];
        format!("{}/{}", spec.account, spec.event_id)
    }

    /// The sender stream whose [`World::stream_name`] is `name`, found without writing every
    /// stream's name (an attacker looks one up on every hostile request).
    pub fn stream_named(&self, name: &str) -> Option<usize> {
        (0..self.sender.streams().len()).find(|&stream| {
            let record = self.sender.stream(stream);
            let spec = &self.workload.events[record.event];
            let subscription = name
                .strip_prefix(spec.account.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                .and_then(|rest| rest.strip_prefix(spec.event_id.as_str()))
                .and_then(|rest| rest.strip_prefix('~'));
            // As a number is written: digits only, no leading zero.
            subscription.is_some_and(|digits| {
                digits.bytes().all(|byte| byte.is_ascii_digit())
                    && (digits.len() == 1 || !digits.starts_with('0'))
                    && digits.parse::<u64>().ok() == Some(u64::from(record.subscription))
            })
        })
    }

    /// `account/event_id~subscription` of sender stream `stream`.
    pub fn stream_name(&self, stream: usize) -> String {
        let record = self.sender.stream(stream);
        format!("{}~{}", self.event_name(record.event), record.subscription)
    }

    /// Makes one decision of `kind`: from the current step's schedule line in a scheduled run,
    /// otherwise with `draw`. `None` is the default (no fault, the first receiver, the shortest
    /// latency), which is not written down.
    pub fn choose(
        &mut self,
        kind: DecisionKind,
        draw: impl FnOnce(&mut World) -> Option<Decision>,
    ) -> Option<Decision> {
        let decision = if self.decider.is_scheduled() {
            let healed = self.healed;
            self.decider
                .take_scheduled(kind)
                .filter(|decision| !self.decider.ignores_fault(decision, healed))
        } else {
            draw(self)
        };
        debug_assert!(decision.as_ref().is_none_or(|decision| decision.kind() == kind));
        if let Some(decision) = &decision {
            self.decider.note(decision);
        }
        decision
    }

    fn release_due_timers(&mut self) {
        self.wake_lock_waiters();
        while let Some(&(time_ms, _, item)) = self.timers.first() {
            if time_ms > self.now_ms {
                break;
            }
            self.timers.pop_first();
            if let Item::Task(task) = item
                && let Some(state) = self.tasks.get_mut(&task)
            {
                state.timer = None;
            }
            self.ready.push(item);
        }
    }

    pub(super) fn schedule(&mut self, item: Item, at_ms: i64) -> Option<(i64, u64)> {
        if at_ms <= self.now_ms {
            self.ready.push(item);
            return None;
        }
        let key = (at_ms, self.next_timer);
        self.next_timer += 1;
        self.timers.insert((key.0, key.1, item));
        Some(key)
    }

    /// Whether an event keeps the world from being quiet while it is pending.
    fn is_work(event: &WorldEvent) -> bool {
        matches!(
            event,
            WorldEvent::SendAnswer { .. }
                | WorldEvent::AnswerArrives { .. }
                | WorldEvent::Extra { .. }
                | WorldEvent::ProviderActs { .. }
                | WorldEvent::OperatorRequeue
                | WorldEvent::OperatorRedeliver { .. }
        )
    }

    /// Schedules a world event at `at_ms` (now or later).
    pub fn schedule_event(&mut self, at_ms: i64, event: WorldEvent) {
        let id = self.next_event;
        self.next_event += 1;
        if World::is_work(&event) {
            self.work_in_flight += 1;
            self.work_events_due_ms.insert(id, at_ms);
        }
        self.events.insert(id, event);
        self.schedule(Item::Event(id), at_ms);
    }

    /// Carries out an action a fault model asked for outside a timer it set: a wake-up is a
    /// timer, anything else happens as a step of its own, now.
    pub fn schedule_fault_action(&mut self, fault: usize, action: crate::faults::TimerAction) {
        match action {
            crate::faults::TimerAction::WakeAt { at_ms } => {
                self.schedule_event(at_ms, WorldEvent::FaultTimer { fault });
            }
            crate::faults::TimerAction::PurgeReceipts { .. }
            | crate::faults::TimerAction::Attack { .. }
            | crate::faults::TimerAction::SenderClock { .. }
            | crate::faults::TimerAction::HoldWriteLock { .. } => {
                let now_ms = self.now_ms;
                self.schedule_event(now_ms, WorldEvent::FaultActs { fault, action });
            }
        }
    }

    /// Takes `item` off the ready queue, if it is there (scenarios pick items themselves).
    pub fn take_ready(&mut self, item: Item) -> bool {
        self.release_due_timers();
        match self.ready.iter().position(|candidate| *candidate == item) {
            Some(index) => {
                self.ready.remove(index);
                self.ready_label_cache.remove(&item);
                true
            }
            None => false,
        }
    }

    /// Takes a due event out of the world.
    pub fn take_event(&mut self, id: EventId) -> WorldEvent {
        let event = self
            .events
            .remove(&id)
            .expect("a scheduled event exists until handled");
        if World::is_work(&event) {
            self.work_in_flight -= 1;
            self.work_events_due_ms.remove(&id);
        }
        event
    }
}
