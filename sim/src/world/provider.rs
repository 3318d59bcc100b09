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
use crate::faults;
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
            (drawn != faults::ProviderFaults::default()).then_some(Decision::Provider(drawn))
        }) {
            Some(Decision::Provider(faults)) => faults,
            _ => faults::ProviderFaults::default(),
        };
        if let Some(reply_at_ms) = self.scripted_rejection(task, call, &key) {
            return reply_at_ms;
        }
        let send = matches!(&call.request, ProviderRequest::Send { .. });
        let (mut reply_at_ms, mut reply, outcome) = self.provider_reply(call, &key, provider_faults);
        let reply_lost = self.provider_reply_lost(now_ms) && reply.is_ok();
        if reply_lost {
            self.probes.reach(Situation::ProviderReplyLost);
            self.record_fault(
                crate::faults::lost_ack::KIND.name,
                &format_args!("provider reply for key {key} lost"),
            );
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
        provider_faults: faults::ProviderFaults,
    ) -> (i64, Result<ProviderReply, CallError>, CallOutcome) {
        let now_ms = self.now_ms;
        match provider_faults.act_after_ms {
            // The provider works on it past the caller's timeout and acts afterwards; a shorter
            // delay is ordinary latency and takes the ordinary path.
            Some(act_after_ms) if act_after_ms >= call.timeout_ms && !self.provider.is_busy(key, now_ms) => {
                self.provider.begin_processing(key);
                self.schedule_event(
                    now_ms + act_after_ms,
                    WorldEvent::ProviderActs {
                        request: call.request.clone(),
                        lock_after_ms: provider_faults.conditions.lock_after_ms,
                    },
                );
                self.record_fault(
                    crate::faults::provider_slow::KIND.name,
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
                let handled = self.provider_handle(&call.request, now_ms, provider_faults.conditions);
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

    /// Whether the provider's reply is lost on its way back (a fault model's choice, or the
    /// script's).
    fn provider_reply_lost(&mut self, now_ms: i64) -> bool {
        let mut lost = self
            .choose(DecisionKind::LoseReply, |world| {
                let mut lost = false;
                for fault in world.faults.iter_mut() {
                    lost |= fault.drops_provider_reply(now_ms);
                }
                lost.then_some(Decision::LoseReply)
            })
            .is_some();
        if let Some(scripted) = &mut self.scripted
            && scripted.provider_replies_to_drop > 0
        {
            scripted.provider_replies_to_drop -= 1;
            lost = true;
        }
        lost
    }

    /// Runs one request through the provider model now, recording effects and expiries.
    fn provider_handle(
        &mut self,
        request: &ProviderRequest,
        now_ms: i64,
        conditions: crate::provider::Conditions,
    ) -> Result<ProviderReply, CallError> {
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
                    forget_at = forget_at.or(fault.key_forget_at(now_ms, key_lifetime_ms));
                }
                forget_at.map(|at_ms| Decision::Forget { at_ms })
            }) {
                Some(Decision::Forget { at_ms }) => Some(at_ms),
                _ => None,
            }
            // The provider keeps a key for at least its documented lifetime; an edited
            // schedule cannot make it break that promise.
            .map(|at_ms| at_ms.max(now_ms.saturating_add(key_lifetime_ms)));
        }
        let handled = self.provider.handle(request, now_ms, conditions, || forget_at_ms);
        let key = request.idempotency_key();
        if let (Some(at_ms), ProviderRequest::Send { payload, .. }) = (forget_at_ms, request)
            && self.provider.forgets_at_ms(key) == Some(at_ms)
        {
            // Keys are stored once per lifetime, so parsing the payload here is rare.
            let operation = self.provider.reader.operation_of(payload).unwrap_or_default();
            self.probes.key_stored(at_ms, key, operation);
        }
        self.provider_handled(key, conditions.fail_before_acting, handled)
    }

    /// Writes down what the provider did with one request under `key`: the fault that decided
    /// it, if one did, and the effect it performed, if any.
    fn provider_handled(
        &mut self,
        key: &str,
        failed_before_acting: bool,
        handled: crate::provider::Handled,
    ) -> Result<ProviderReply, CallError> {
        if handled.key_was_forgotten {
            // The key-expiry fault fired when the key was forgotten (see `record_forgotten_keys`);
            // this is its consequence, kept for the seed file.
            self.log_fault(&format_args!("provider had forgotten key {key}"));
        }
        if let Some(quirk) = handled.quirk {
            let (fault, what) = match quirk {
                Quirk::CachedError => (
                    crate::faults::sticky_error::KIND.name,
                    format!("provider replayed the 5xx cached under key {key}"),
                ),
                Quirk::Locked => (
                    crate::faults::provider_conflict::KIND.name,
                    format!("provider answered 409: key {key} is locked after acting"),
                ),
                Quirk::LenientReplay => (
                    crate::faults::payload_mismatch::KIND.name,
                    format!("provider replayed key {key} for a different payload"),
                ),
                Quirk::Overtook => (
                    crate::faults::provider_double_execute::KIND.name,
                    format!("provider executed key {key} while a request with it was in progress"),
                ),
                Quirk::ActedAgain => (
                    crate::faults::provider_double_execute::KIND.name,
                    format!("provider finished an overtaken request for key {key} and acted again"),
                ),
                Quirk::Refused => (
                    crate::faults::provider_refusal::KIND.name,
                    format!("provider declined the operation of key {key} for good"),
                ),
            };
            self.record_fault(fault, &what);
        }
        if failed_before_acting && handled.result.is_err() {
            self.record_fault(
                crate::faults::provider_failure::KIND.name,
                &format_args!("provider failed before acting on key {key}"),
            );
        }
        if let Some(index) = handled.new_effect {
            self.step_record.new_effects.push(index);
        }
        handled.result
    }

    /// A slow provider request finishes: the provider acts now (nobody waits for the reply).
    pub fn provider_acts(&mut self, request: &ProviderRequest, lock_after_ms: i64) {
        let key = request.idempotency_key().to_owned();
        let overtaken = self.provider.end_processing(&key);
        let outcome = if overtaken {
            let handled = self.provider.act_again(request, self.now_ms);
            self.provider_handled(&key, false, handled)
        } else {
            // The key lock a provider holds after acting starts when it acts, however late; the
            // other conditions were the request's on arrival and were settled then.
            let conditions = crate::provider::Conditions {
                lock_after_ms,
                ..crate::provider::Conditions::default()
            };
            self.provider_handle(request, self.now_ms, conditions)
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
