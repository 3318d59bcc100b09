//! The world's side of the provider: a task's call delivered to the provider model, the faults
//! that decide how it fares (slow, failing, its reply lost, its key forgotten), the reply and when
//! it reaches the task, and a slow request the provider finishes later.
//!
//! What the provider does with a request is `crate::provider`'s; this module records the request,
//! the decisions and the effects for the invariants, the seed file and the trace.

use commitgap::provider::{CallError, ProviderCall, ProviderReply, ProviderRequest};

use super::{CallInFlight, TaskId, World, WorldEvent};
use crate::coverage::Situation;
use crate::decision::{Decision, DecisionKind};
use crate::faults::{self, ProviderPart};
use crate::provider::Quirk;
use crate::record::{ReplyRecord, RequestRecord};
use crate::trace::{CallOutcome, Happening, call_error_text, format_duration_ms};

impl World {
    /// Delivers `call` to the provider; returns when the reply (or the caller's timeout) reaches
    /// the task. The provider acts now, later (when slow), or not at all (when failing or busy).
    pub fn send_provider_call(&mut self, task: TaskId, call: &ProviderCall) -> i64 {
        let now_ms = self.now_ms;
        let key = self.note_provider_call(task, call);
        let request = call.request.clone();
        let provider_faults = match self.choose(DecisionKind::Provider, |world| {
            let drawn = faults::provider_faults(&mut world.faults, now_ms, &request);
            (!drawn.parts().is_empty()).then_some(Decision::Provider(drawn))
        }) {
            Some(Decision::Provider(faults)) => faults,
            _ => faults::ProviderFaults::default(),
        };
        if let Some(reply_at_ms) = self.scripted_rejection(task, call, &key) {
            return reply_at_ms;
        }
        let send = matches!(&call.request, ProviderRequest::Send { .. });
        let (mut reply_at_ms, mut reply, outcome) = self.provider_reply(call, &key, &provider_faults);
        let lost_by = self.provider_reply_lost(now_ms).filter(|_| reply.is_ok());
        let reply_lost = lost_by.is_some();
        if let Some(model) = lost_by {
            self.probes.reach(Situation::ProviderReplyLost);
            self.record_fault(&model, &format_args!("provider reply for key {key} lost"));
            reply = Err(CallError::Timeout);
            reply_at_ms = now_ms + call.timeout_ms;
        }
        self.record(Happening::Call {
            send,
            key,
            outcome,
            reply_lost,
        });
        self.tasks
            .get_mut(&task)
            .expect("a calling task is registered")
            .reply = Some(reply);
        reply_at_ms
    }

    /// Records the request for the invariants and marks the task as waiting on it; returns the
    /// request's idempotency key.
    fn note_provider_call(&mut self, task: TaskId, call: &ProviderCall) -> String {
        let key = call.request.idempotency_key().to_owned();
        self.stuck_watch.requested();
        let (process_id, connection) = {
            let state = &self.tasks[&task];
            (state.process_id.clone(), state.connection)
        };
        let in_transaction = connection.is_some_and(|connection| self.db.in_transaction(connection));
        let payload = match &call.request {
            ProviderRequest::Send { payload, .. } => Some(payload.clone()),
            ProviderRequest::Lookup { .. } => None,
        };
        let operation = payload
            .as_deref()
            .and_then(|payload| self.provider.reader.operation_of(payload).ok());
        self.step_record.requests.push(RequestRecord {
            process_id: process_id.to_string(),
            key: key.clone(),
            payload,
            in_transaction,
        });
        let state = self.tasks.get_mut(&task).expect("a calling task is registered");
        state.call = Some(CallInFlight {
            key: key.clone(),
            operation,
        });
        key
    }

    /// In a scripted run, the provider rejects as many sends as the script asks for, at once;
    /// returns when the rejection reaches the task.
    fn scripted_rejection(&mut self, task: TaskId, call: &ProviderCall, key: &str) -> Option<i64> {
        let scripted = self.scripted.as_mut()?;
        if scripted.provider_sends_to_reject == 0 || !matches!(call.request, ProviderRequest::Send { .. }) {
            return None;
        }
        scripted.provider_sends_to_reject -= 1;
        self.provider.note_refused(&call.request);
        let reason = "account suspended".to_owned();
        let reply = Ok(ProviderReply::Rejected { status: 400, reason });
        self.record(Happening::Call {
            send: true,
            key: key.to_owned(),
            outcome: CallOutcome::Replied(reply.clone().map_err(|error: CallError| call_error_text(&error))),
            reply_lost: false,
        });
        self.tasks
            .get_mut(&task)
            .expect("a calling task is registered")
            .reply = Some(reply);
        Some(self.now_ms + 1)
    }

    /// What the provider does with the call and when its reply (or the caller's timeout) reaches
    /// the caller: it acts now, or, when slow past the caller's timeout, later.
    fn provider_reply(
        &mut self,
        call: &ProviderCall,
        key: &str,
        provider_faults: &faults::ProviderFaults,
    ) -> (i64, Result<ProviderReply, CallError>, CallOutcome) {
        let now_ms = self.now_ms;
        // An answer of a model's own comes first: it is what the provider says now, whatever
        // else it would have done.
        let answer = provider_faults
            .answer
            .clone()
            .filter(|answer| !answer.is_ordinary());
        match provider_faults.act_after_ms {
            // The provider works on it past the caller's timeout and acts afterwards; a shorter
            // delay is ordinary latency and takes the ordinary path.
            Some(act_after_ms)
                if answer.is_none()
                    && act_after_ms >= call.timeout_ms
                    && !self.provider.is_busy(key, now_ms) =>
            {
                self.provider.begin_processing(key);
                self.schedule_event(
                    now_ms + act_after_ms,
                    WorldEvent::ProviderActs {
                        request: call.request.clone(),
                        lock_after_ms: provider_faults.conditions.lock_after_ms,
                        lock_by: provider_faults.credited(ProviderPart::Lock).map(str::to_owned),
                    },
                );
                self.record_fault(
                    provider_faults.credited(ProviderPart::Slow).unwrap_or_default(),
                    &format_args!(
                        "provider will act on key {key} in {}",
                        format_duration_ms(act_after_ms)
                    ),
                );
                self.probes.reach(Situation::TimeoutWhileProviderActs);
                let outcome = CallOutcome::Busy { for_ms: act_after_ms };
                (now_ms + call.timeout_ms, Err(CallError::Timeout), outcome)
            }
            _ => {
                let mut handled = match &answer {
                    // The provider answers without looking at the request: nothing is performed.
                    Some(answer) if !answer.acted => answer.reply(),
                    _ => self.provider_handle(&call.request, now_ms, provider_faults),
                };
                if let Some(answer) = &answer {
                    self.stuck_watch.answered_by_fault(key);
                    let acted = if answer.acted { " after acting" } else { "" };
                    self.record_fault(
                        provider_faults.credited(ProviderPart::Answer).unwrap_or_default(),
                        &format_args!("provider answered {}{acted} for key {key}", answer.status),
                    );
                    handled = answer.reply();
                }
                let outcome = CallOutcome::Replied(handled.clone().map_err(|error| call_error_text(&error)));
                let latency_ms = match self.choose(DecisionKind::ProviderLatency, |world| {
                    let ms = world
                        .provider_rng
                        .between(1, world.config.provider_latency_ms_max);
                    Some(Decision::ProviderLatency { ms })
                }) {
                    Some(Decision::ProviderLatency { ms }) => ms,
                    _ => 1,
                };
                if latency_ms > call.timeout_ms {
                    (now_ms + call.timeout_ms, Err(CallError::Timeout), outcome)
                } else {
                    (now_ms + latency_ms, handled, outcome)
                }
            }
        }
    }

    /// The fault model that loses the provider's reply on its way back, if one does (the
    /// script's losses are credited to the script).
    fn provider_reply_lost(&mut self, now_ms: i64) -> Option<String> {
        let mut lost = match self.choose(DecisionKind::LoseReply, |world| {
            let model = faults::first_to_act(&mut world.faults, |fault| fault.drops_provider_reply(now_ms));
            model.map(|model| Decision::LoseReply { model })
        }) {
            Some(Decision::LoseReply { model }) => Some(model),
            _ => None,
        };
        if let Some(scripted) = &mut self.scripted
            && scripted.provider_replies_to_drop > 0
        {
            scripted.provider_replies_to_drop -= 1;
            lost = Some(super::SCRIPTED.to_owned());
        }
        lost
    }

    /// Runs one request through the provider model now, recording effects and expiries.
    fn provider_handle(
        &mut self,
        request: &ProviderRequest,
        now_ms: i64,
        provider_faults: &faults::ProviderFaults,
    ) -> Result<ProviderReply, CallError> {
        let conditions = provider_faults.conditions;
        // The provider decides when it will forget a key only when it stores one; the choice
        // is made (and written down) in this step either way.
        let key_lifetime_ms = self.config.relay.key_lifetime_ms;
        let mut forget_at_ms = None;
        if matches!(request, ProviderRequest::Send { .. })
            && !self.provider.remembers(request.idempotency_key(), now_ms)
        {
            forget_at_ms = match self.choose(DecisionKind::Forget, |world| {
                let mut forget_at = None;
                for fault in world.faults.iter_mut() {
                    let at_ms = fault.key_forget_at(now_ms, key_lifetime_ms);
                    if forget_at.is_none() {
                        forget_at = at_ms.map(|at_ms| (at_ms, fault.name().to_owned()));
                    }
                }
                forget_at.map(|(at_ms, model)| Decision::Forget { at_ms, model })
            }) {
                // The provider keeps a key for at least its documented lifetime; an edited
                // schedule cannot make it break that promise.
                Some(Decision::Forget { at_ms, model }) => {
                    Some((at_ms.max(now_ms.saturating_add(key_lifetime_ms)), model))
                }
                _ => None,
            };
        }
        let forget = forget_at_ms.as_ref().map(|(at_ms, _)| *at_ms);
        let handled = self.provider.handle(request, now_ms, conditions, || forget);
        let key = request.idempotency_key();
        if let (Some((at_ms, model)), ProviderRequest::Send { payload, .. }) = (forget_at_ms, request)
            && self.provider.forgets_at_ms(key) == Some(at_ms)
        {
            // Keys are stored once per lifetime, so parsing the payload here is rare.
            let operation = self.provider.reader.operation_of(payload).unwrap_or_default();
            self.probes.key_stored(at_ms, key, operation, model);
        }
        self.provider_handled(key, provider_faults, handled)
    }

    /// Writes down what the provider did with one request under `key`: the fault that decided
    /// it, if one did, and the effect it performed, if any.
    fn provider_handled(
        &mut self,
        key: &str,
        provider_faults: &faults::ProviderFaults,
        handled: crate::provider::Handled,
    ) -> Result<ProviderReply, CallError> {
        // What the provider keeps under the key (a cached error, a refusal, a lock) is the doing
        // of the model that asked for it, whichever later request meets it.
        for part in [ProviderPart::Sticky, ProviderPart::Refuse, ProviderPart::Lock] {
            if let Some(model) = provider_faults.credited(part) {
                self.stored_by.insert((key.to_owned(), part), model.to_owned());
            }
        }
        if handled.key_was_forgotten {
            // The key-expiry fault fired when the key was forgotten (see `record_forgotten_keys`);
            // this is its consequence, kept for the seed file.
            self.log_fault(&format_args!("provider had forgotten key {key}"));
        }
        if let Some(quirk) = handled.quirk {
            // Each quirk is one condition's doing, credited to the model that set it; an
            // overtaken request's second act, to the model that let it be overtaken.
            let (part, what) = match quirk {
                Quirk::CachedError => (
                    ProviderPart::Sticky,
                    format!("provider replayed the 5xx cached under key {key}"),
                ),
                Quirk::Locked => (
                    ProviderPart::Lock,
                    format!("provider answered 409: key {key} is locked after acting"),
                ),
                Quirk::LenientReplay => (
                    ProviderPart::Replay,
                    format!("provider replayed key {key} for a different payload"),
                ),
                Quirk::Overtook => (
                    ProviderPart::Double,
                    format!("provider executed key {key} while a request with it was in progress"),
                ),
                Quirk::ActedAgain => (
                    ProviderPart::Double,
                    format!("provider finished an overtaken request for key {key} and acted again"),
                ),
                Quirk::Refused => (
                    ProviderPart::Refuse,
                    format!("provider declined the operation of key {key} for good"),
                ),
            };
            let model = match quirk {
                Quirk::Overtook => {
                    let model = provider_faults.credited(part).unwrap_or_default().to_owned();
                    self.overtaken_by.insert(key.to_owned(), model.clone());
                    model
                }
                Quirk::ActedAgain => self.overtaken_by.remove(key).unwrap_or_default(),
                // A cached error, a refusal or a lock the provider keeps under the key meets
                // later requests that carry no such condition: the model that made it is
                // credited each time.
                _ => provider_faults
                    .credited(part)
                    .or_else(|| self.stored_by.get(&(key.to_owned(), part)).map(String::as_str))
                    .unwrap_or_default()
                    .to_owned(),
            };
            self.record_fault(&model, &what);
        }
        if provider_faults.conditions.fail_before_acting && handled.result.is_err() {
            self.record_fault(
                provider_faults.credited(ProviderPart::Fail).unwrap_or_default(),
                &format_args!("provider failed before acting on key {key}"),
            );
        }
        if let Some(index) = handled.new_effect {
            self.step_record.new_effects.push(index);
        }
        handled.result
    }

    /// A slow provider request finishes: the provider acts now (nobody waits for the reply).
    pub fn provider_acts(&mut self, request: &ProviderRequest, lock_after_ms: i64, lock_by: Option<String>) {
        let key = request.idempotency_key().to_owned();
        let overtaken = self.provider.end_processing(&key);
        // The key lock a provider holds after acting starts when it acts, however late; the
        // other conditions were the request's on arrival and were settled then.
        let mut provider_faults = faults::ProviderFaults::default();
        provider_faults.conditions.lock_after_ms = lock_after_ms;
        if let Some(model) = lock_by {
            provider_faults.credit.insert(ProviderPart::Lock, model);
        }
        let outcome = if overtaken {
            let handled = self.provider.act_again(request, self.now_ms);
            self.provider_handled(&key, &faults::ProviderFaults::default(), handled)
        } else {
            self.provider_handle(request, self.now_ms, &provider_faults)
        }
        .map_err(|error| call_error_text(&error));
        self.record(Happening::ProviderFinishes { key, outcome });
    }

    /// The reply a task's provider call got.
    pub fn take_reply(&mut self, task: TaskId) -> Result<ProviderReply, CallError> {
        let state = self
            .tasks
            .get_mut(&task)
            .expect("a task waiting for a reply is registered");
        let reply = state
            .reply
            .take()
            .expect("a reply is stored before the caller wakes");
        if let Some(call) = state.call.take() {
            // The window a disturbance counts in runs from the previous reply to this one, which
            // covers the claim that took the lease this call runs under.
            let record = ReplyRecord {
                process_id: state.process_id.to_string(),
                key: call.key,
                operation: call.operation,
                process_now_ms: self.now_ms + self.processes[state.process].clock_offset_ms,
                disturbed: std::mem::take(&mut state.disturbed),
            };
            self.step_record.replies.push(record);
        }
        match &reply {
            Ok(ProviderReply::Conflict) => self.probes.reach(Situation::ProviderConflict409),
            Ok(ProviderReply::Found { .. }) => self.probes.reach(Situation::ReconciledByLookup),
            _ => {}
        }
        self.record(Happening::Reply(
            reply.clone().map_err(|error| call_error_text(&error)),
        ));
        reply
    }
}
