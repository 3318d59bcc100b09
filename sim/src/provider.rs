//! The simulated downstream provider: an idempotency-key store in front of a ledger of effects.
//!
//! A `Send` with a key the store remembers is answered from the store: the same effect, marked
//! replayed, if the payload matches (as JSON: [`same_payload`]); a 422 if it does not (or, for providers that behave like
//! Qonto or Worldline, a silent replay of the old response). A `Send` with a key the store does not
//! remember performs a new effect. A key is "in progress" while a slow request for it is being
//! processed and, on providers that hold a lock after finishing, for a while after; requests for it
//! in that window get 409, as the IETF draft specifies. A failure before acting (a 5xx) may be
//! cached under the key like a result (Stripe's v1 "including 500 errors"), so every retry with
//! that key fails the same way until the key is forgotten. Keys are forgotten only when the
//! key-expiry fault model set a time for it, never earlier than the documented lifetime. A
//! provider that executes concurrent requests twice (`Conditions::double_execute`) does not answer
//! 409 for a key in progress: it executes the new request, and the request it was still working on
//! performs its effect too when it finishes, since it passed the key check before either stored
//! the key.
//!
//! `Lookup` answers from the ledger, which is permanent, so reconciliation works after a key is
//! forgotten. The ledger is the ground truth the invariants count effects in: an effect is
//! identified by the business operation its payload names, not by its key. This model must not
//! look at the caller's database.

use std::collections::BTreeMap;

use commitgap::provider::{CallError, ProviderReply, ProviderRequest};

/// Whether two payloads are the same request body. The wire contract sends "the obligation's
/// payload as the JSON body", so two texts of one JSON value (fields in another order, other
/// spacing) are the same payload, as a real provider that compares a request's parameters reads
/// them; texts that are not JSON are compared as they are. Equal texts are never parsed, so a
/// system that sends what it persisted costs nothing here.
pub fn same_payload(first: &str, second: &str) -> bool {
    if first == second {
        return true;
    }
    match (
        serde_json::from_str::<serde_json::Value>(first),
        serde_json::from_str::<serde_json::Value>(second),
    ) {
        (Ok(first), Ok(second)) => first == second,
        _ => false,
    }
}

/// One real side effect (a shipment), as the provider performed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The provider's id for the effect (`shp-1`), numbered in order performed.
    pub id: String,
    /// The business operation named by the payload, e.g. `tenant-a/order-1/fulfill/v1`.
    pub operation: String,
    /// The idempotency key the request was sent under.
    pub idempotency_key: String,
    /// The request body the provider acted on.
    pub payload: String,
    /// Virtual time the provider performed the effect, in milliseconds.
    pub at_ms: i64,
}

/// One effect a real provider performed, as its ledger records it: what
/// [`ProviderModel::from_ledger`] reads to judge a final state over real processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The provider's id for the effect.
    pub effect_id: String,
    /// The idempotency key the request was sent under.
    pub idempotency_key: String,
    /// The request body the provider acted on.
    pub payload: String,
    /// When the provider performed the effect, in milliseconds.
    pub at_ms: i64,
}

/// How the provider behaves for one request, as the fault models decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Conditions {
    /// Fail with a 5xx before doing anything.
    pub fail_before_acting: bool,
    /// Cache that failure under the key, like a result.
    pub sticky_errors: bool,
    /// Answer a reused key with a different payload by replaying the stored result.
    pub replay_on_mismatch: bool,
    /// Keep the key locked this long after acting; same-key requests meanwhile get 409.
    pub lock_after_ms: i64,
    /// Execute a request whose key is still being processed instead of answering 409.
    pub double_execute: bool,
    /// Decline the request for good (a 4xx) instead of acting, and store the refusal under the
    /// key like a result.
    pub refuse: bool,
}

#[derive(Debug, Clone)]
enum Stored {
    Result {
        payload: String,
        effect: usize,
    },
    Error {
        reason: String,
    },
    /// A refusal for good, replayed as the same 4xx.
    Refusal {
        status: u16,
        reason: String,
    },
}

#[derive(Debug, Clone)]
struct KeyEntry {
    stored: Stored,
    forget_at_ms: Option<i64>,
    locked_until_ms: i64,
}

/// Reads which operation a payload is for, as the system's domain says: the key effects are
/// counted under. Without one (a provider made for a unit test) it reads the reference's
/// fulfillment payload.
#[derive(Clone, Default)]
pub struct OperationReader(Option<std::sync::Arc<ReadOperation>>);

/// Reads a payload's operation, or says why it names none.
pub type ReadOperation = dyn Fn(&str) -> Result<String, String> + Send + Sync;

impl OperationReader {
    /// A reader that asks `read`.
    pub fn new(read: impl Fn(&str) -> Result<String, String> + Send + Sync + 'static) -> OperationReader {
        OperationReader(Some(std::sync::Arc::new(read)))
    }

    /// The operation `payload` is for, or why it names none.
    pub fn operation_of(&self, payload: &str) -> Result<String, String> {
        match &self.0 {
            Some(read) => read(payload),
            None => {
                commitgap::provider::FulfillmentPayload::parse(payload).map(|payload| payload.operation_key())
            }
        }
    }
}

impl std::fmt::Debug for OperationReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperationReader")
    }
}

/// The provider's state.
#[derive(Debug, Default)]
pub struct ProviderModel {
    /// How the provider reads a payload's operation.
    pub(crate) reader: OperationReader,
    keys: BTreeMap<String, KeyEntry>,
    in_progress: BTreeMap<String, u32>,
    /// Requests in progress that a request with their key overtook (see
    /// `Conditions::double_execute`), per key: each acts when it finishes, store or not.
    overtaken: BTreeMap<String, u32>,
    effects: Vec<Effect>,
    effects_by_operation: BTreeMap<String, Vec<usize>>,
    effect_by_key: BTreeMap<String, usize>,
    requests: Vec<ProviderRequest>,
    /// The operations (or, for a payload that names none, the keys) of requests answered with a
    /// permanent rejection or with a 5xx cached under their key.
    rejected: std::collections::BTreeSet<String>,
}

/// Which of the provider's fault conditions decided an answer: what made it differ from the
/// answer a plain provider would give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quirk {
    /// A 5xx cached under the key was replayed (`Conditions::sticky_errors`).
    CachedError,
    /// The key was locked after acting, so the request got 409 (`Conditions::lock_after_ms`).
    Locked,
    /// A reused key with a different payload got the stored result
    /// (`Conditions::replay_on_mismatch`).
    LenientReplay,
    /// A request overtook another with its key still in progress instead of getting 409
    /// (`Conditions::double_execute`).
    Overtook,
    /// A request in progress that another with its key overtook acted anyway.
    ActedAgain,
    /// The operation was declined for good, now or from the refusal stored under the key
    /// (`Conditions::refuse`).
    Refused,
}

/// What one request did at the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// The reply the caller gets, or the call's error.
    pub result: Result<ProviderReply, CallError>,
    /// Index of the effect this request performed, if it performed one.
    pub new_effect: Option<usize>,
    /// True when a forgotten key was reused, so the request counted as new.
    pub key_was_forgotten: bool,
    /// The fault condition that decided the answer, if one did.
    pub quirk: Option<Quirk>,
}

impl Handled {
    fn reply(reply: ProviderReply, key_was_forgotten: bool) -> Handled {
        Handled {
            result: Ok(reply),
            new_effect: None,
            key_was_forgotten,
            quirk: None,
        }
    }

    fn quirk(mut self, quirk: Quirk) -> Handled {
        self.quirk = Some(quirk);
        self
    }
}

impl ProviderModel {
    /// A provider that reads payloads with `reader`, holding no key and no effect yet.
    pub fn reading(reader: OperationReader) -> ProviderModel {
        ProviderModel {
            reader,
            ..ProviderModel::default()
        }
    }
}

impl ProviderModel {
    /// The provider a real provider's ledger describes: `effects` in the order performed, each
    /// counted under the operation `reader` reads from its payload, as [`ProviderModel::handle`]
    /// counts them, and `keys_in_progress` still being processed (a key listed twice has two
    /// requests in progress). `Err` names an effect whose payload names no operation.
    ///
    /// Nothing is rejected: the provider doubles a check over real processes runs never refuse a
    /// request for good nor cache an error, so no operation counts as refused (see
    /// [`ProviderModel::rejected`]). The key store stays empty, since a ledger does not say what
    /// a real store still remembers, and no invariant reads it; so does the list of requests.
    pub fn from_ledger(
        reader: OperationReader,
        effects: impl IntoIterator<Item = LedgerEntry>,
        keys_in_progress: impl IntoIterator<Item = String>,
    ) -> Result<ProviderModel, String> {
        let mut provider = ProviderModel::reading(reader);
        for entry in effects {
            let operation = provider.reader.operation_of(&entry.payload).map_err(|reason| {
                format!(
                    "effect {} (key {}) has a payload that names no operation: {reason}",
                    entry.effect_id, entry.idempotency_key
                )
            })?;
            // As `act` records an effect: by operation, and under its key the first effect
            // performed with it, which is what a lookup by key finds.
            let index = provider.effects.len();
            provider
                .effects_by_operation
                .entry(operation.clone())
                .or_default()
                .push(index);
            provider
                .effect_by_key
                .entry(entry.idempotency_key.clone())
                .or_insert(index);
            provider.effects.push(Effect {
                id: entry.effect_id,
                operation,
                idempotency_key: entry.idempotency_key,
                payload: entry.payload,
                at_ms: entry.at_ms,
            });
        }
        for key in keys_in_progress {
            provider.begin_processing(&key);
        }
        Ok(provider)
    }

    /// Handles one request at `now_ms`. `forget_at` is asked, only when a key is first stored,
    /// when the store may forget it.
    pub fn handle(
        &mut self,
        request: &ProviderRequest,
        now_ms: i64,
        conditions: Conditions,
        forget_at: impl FnOnce() -> Option<i64>,
    ) -> Handled {
        self.requests.push(request.clone());
        match request {
            ProviderRequest::Lookup { idempotency_key } => {
                let reply = match self.effect_by_key.get(idempotency_key) {
                    Some(&index) => ProviderReply::Found {
                        effect_id: self.effects[index].id.clone(),
                    },
                    None => ProviderReply::NotFound,
                };
                Handled::reply(reply, false)
            }
            ProviderRequest::Send {
                idempotency_key,
                payload,
            } => {
                let handled = self.send(idempotency_key, payload, now_ms, conditions, forget_at);
                // A 5xx cached under the key is the provider's answer until the key expires, as
                // final for that key as a rejection.
                if matches!(handled.result, Ok(ProviderReply::Rejected { .. }))
                    || handled.quirk == Some(Quirk::CachedError)
                {
                    self.note_refused(request);
                }
                handled
            }
        }
    }

    /// Notes that `request` was refused for good: rejected, or answered with an error cached under
    /// its key. A test that scripts a rejection notes it here too.
    pub fn note_refused(&mut self, request: &ProviderRequest) {
        let operation = match request {
            ProviderRequest::Send {
                idempotency_key,
                payload,
            } => self
                .reader
                .operation_of(payload)
                .unwrap_or_else(|_| idempotency_key.clone()),
            ProviderRequest::Lookup { idempotency_key } => idempotency_key.clone(),
        };
        self.rejected.insert(operation);
    }

    /// Whether a request for `operation` (or with that key, when its payload named none) was
    /// ever answered with a permanent rejection or a 5xx cached under its key.
    pub fn rejected(&self, operation: &str) -> bool {
        self.rejected.contains(operation)
    }

    /// Whether the key store holds `key` (a result or a cached error) and has not forgotten it.
    pub fn remembers(&self, key: &str, now_ms: i64) -> bool {
        self.keys.get(key).is_some_and(|entry| {
            entry
                .forget_at_ms
                .is_none_or(|forget_at_ms| forget_at_ms > now_ms)
        })
    }

    /// When the key store will forget `key`, if it holds the key and will ever forget it.
    pub fn forgets_at_ms(&self, key: &str) -> Option<i64> {
        self.keys.get(key).and_then(|entry| entry.forget_at_ms)
    }

    /// Whether a request for `key` is being processed right now or the key is locked.
    pub fn is_busy(&self, key: &str, now_ms: i64) -> bool {
        self.in_progress.contains_key(key)
            || self
                .keys
                .get(key)
                .is_some_and(|entry| entry.locked_until_ms > now_ms)
    }

    /// A slow request for `key` started: same-key requests get 409 until it ends.
    pub fn begin_processing(&mut self, key: &str) {
        *self.in_progress.entry(key.to_owned()).or_default() += 1;
    }

    /// A slow request for `key` ended. Returns whether another request with its key overtook it
    /// meanwhile, so that it acts regardless of the key store (see [`ProviderModel::act_again`]).
    pub fn end_processing(&mut self, key: &str) -> bool {
        if let Some(count) = self.in_progress.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                self.in_progress.remove(key);
            }
        }
        match self.overtaken.get_mut(key) {
            Some(count) => {
                *count -= 1;
                if *count == 0 {
                    self.overtaken.remove(key);
                }
                true
            }
            None => false,
        }
    }

    /// Keys with a request still being processed.
    pub fn keys_in_progress(&self) -> impl Iterator<Item = &String> {
        self.in_progress.keys()
    }

    fn send(
        &mut self,
        key: &str,
        payload: &str,
        now_ms: i64,
        conditions: Conditions,
        forget_at: impl FnOnce() -> Option<i64>,
    ) -> Handled {
        let mut overtook = false;
        if let Some(&in_progress) = self.in_progress.get(key) {
            if !conditions.double_execute {
                return Handled::reply(ProviderReply::Conflict, false);
            }
            // Every request now in progress with this key passed its key check before this one
            // stores the key, so each will act too.
            self.overtaken.insert(key.to_owned(), in_progress);
            overtook = true;
        } else if self.is_busy(key, now_ms) {
            return Handled::reply(ProviderReply::Conflict, false).quirk(Quirk::Locked);
        }
        let mut key_was_forgotten = false;
        if let Some(entry) = self.keys.get(key) {
            if entry
                .forget_at_ms
                .is_some_and(|forget_at_ms| forget_at_ms <= now_ms)
            {
                self.keys.remove(key);
                key_was_forgotten = true;
            } else {
                return self.answer_from_store(key, payload, conditions.replay_on_mismatch);
            }
        }
        if conditions.fail_before_acting {
            if conditions.sticky_errors {
                let stored = Stored::Error {
                    reason: "500 internal error (cached under this key)".to_owned(),
                };
                self.keys.insert(
                    key.to_owned(),
                    KeyEntry {
                        stored,
                        forget_at_ms: forget_at(),
                        locked_until_ms: 0,
                    },
                );
            }
            let result = Err(CallError::Unavailable("500 internal error".to_owned()));
            return Handled {
                result,
                new_effect: None,
                key_was_forgotten,
                quirk: None,
            };
        }
        if conditions.refuse {
            let (status, reason) = (402, "the provider declined this operation".to_owned());
            self.keys.insert(
                key.to_owned(),
                KeyEntry {
                    stored: Stored::Refusal {
                        status,
                        reason: reason.clone(),
                    },
                    forget_at_ms: forget_at(),
                    locked_until_ms: 0,
                },
            );
            return Handled::reply(ProviderReply::Rejected { status, reason }, key_was_forgotten)
                .quirk(Quirk::Refused);
        }
        let mut handled = self.act(key, payload, now_ms, conditions.lock_after_ms, forget_at);
        handled.key_was_forgotten = key_was_forgotten;
        if overtook {
            handled.quirk = Some(Quirk::Overtook);
        }
        handled
    }

    /// A slow request that another with its key overtook finishes: it performs its effect,
    /// whatever the key store holds now (it checked the store when it arrived). The store keeps
    /// what the first to finish stored.
    pub fn act_again(&mut self, request: &ProviderRequest, now_ms: i64) -> Handled {
        self.requests.push(request.clone());
        let ProviderRequest::Send {
            idempotency_key,
            payload,
        } = request
        else {
            return Handled::reply(ProviderReply::NotFound, false);
        };
        let mut handled = self.act(idempotency_key, payload, now_ms, 0, || None);
        handled.quirk = Some(Quirk::ActedAgain);
        handled
    }

    /// Performs the effect `payload` asks for under `key` and stores the key, unless it already
    /// holds a result.
    fn act(
        &mut self,
        key: &str,
        payload: &str,
        now_ms: i64,
        lock_after_ms: i64,
        forget_at: impl FnOnce() -> Option<i64>,
    ) -> Handled {
        let operation = match self.reader.operation_of(payload) {
            Ok(operation) => operation,
            Err(reason) => {
                return Handled::reply(ProviderReply::Rejected { status: 400, reason }, false);
            }
        };
        let index = self.effects.len();
        let effect_id = format!("shp-{}", index + 1);
        self.effects.push(Effect {
            id: effect_id.clone(),
            operation: operation.clone(),
            idempotency_key: key.to_owned(),
            payload: payload.to_owned(),
            at_ms: now_ms,
        });
        self.effects_by_operation
            .entry(operation)
            .or_default()
            .push(index);
        self.effect_by_key.entry(key.to_owned()).or_insert(index);
        if !matches!(
            self.keys.get(key).map(|entry| &entry.stored),
            Some(Stored::Result { .. })
        ) {
            let entry = KeyEntry {
                stored: Stored::Result {
                    payload: payload.to_owned(),
                    effect: index,
                },
                forget_at_ms: forget_at(),
                locked_until_ms: now_ms + lock_after_ms,
            };
            self.keys.insert(key.to_owned(), entry);
        }
        Handled {
            result: Ok(ProviderReply::Accepted {
                effect_id,
                replayed: false,
            }),
            new_effect: Some(index),
            key_was_forgotten: false,
            quirk: None,
        }
    }

    fn answer_from_store(&self, key: &str, payload: &str, replay_on_mismatch: bool) -> Handled {
        let entry = &self.keys[key];
        match &entry.stored {
            Stored::Error { reason } => Handled {
                result: Err(CallError::Unavailable(reason.clone())),
                new_effect: None,
                key_was_forgotten: false,
                quirk: Some(Quirk::CachedError),
            },
            Stored::Refusal { status, reason } => Handled::reply(
                ProviderReply::Rejected {
                    status: *status,
                    reason: reason.clone(),
                },
                false,
            )
            .quirk(Quirk::Refused),
            Stored::Result {
                payload: stored,
                effect,
            } if same_payload(stored, payload) || replay_on_mismatch => {
                let effect_id = self.effects[*effect].id.clone();
                let replayed = Handled::reply(
                    ProviderReply::Accepted {
                        effect_id,
                        replayed: true,
                    },
                    false,
                );
                if same_payload(stored, payload) {
                    replayed
                } else {
                    replayed.quirk(Quirk::LenientReplay)
                }
            }
            Stored::Result { .. } => Handled::reply(
                ProviderReply::Rejected {
                    status: 422,
                    reason: "idempotency key reused with a different payload".to_owned(),
                },
                false,
            ),
        }
    }

    /// Every request that reached the provider, in order.
    pub fn requests(&self) -> &[ProviderRequest] {
        &self.requests
    }

    /// Every effect, in the order performed.
    pub fn effects(&self) -> &[Effect] {
        &self.effects
    }

    /// The effects performed for business operation `operation`.
    pub fn effects_for(&self, operation: &str) -> impl Iterator<Item = &Effect> {
        self.effects_by_operation
            .get(operation)
            .into_iter()
            .flatten()
            .map(|&index| &self.effects[index])
    }

    /// The effect with index `index`, in the order performed.
    pub fn effect(&self, index: usize) -> &Effect {
        &self.effects[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commitgap::provider::FulfillmentPayload;

    fn payload(amount_cents: i64) -> String {
        FulfillmentPayload {
            tenant: "t".into(),
            order: "o".into(),
            operation: "fulfill".into(),
            version: 1,
            amount_cents,
        }
        .to_json()
    }

    fn send(key: &str, payload: &str) -> ProviderRequest {
        ProviderRequest::Send {
            idempotency_key: key.into(),
            payload: payload.into(),
        }
    }

    const PLAIN: Conditions = Conditions {
        fail_before_acting: false,
        sticky_errors: false,
        replay_on_mismatch: false,
        lock_after_ms: 0,
        double_execute: false,
        refuse: false,
    };

    #[test]
    fn a_retry_with_the_same_json_in_other_text_is_a_replay_and_other_values_are_refused() {
        let mut provider = ProviderModel::default();
        let first = payload(1);
        let rewritten =
            serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&first).unwrap())
                .unwrap();
        assert_ne!(rewritten, first);
        assert!(same_payload(&first, &rewritten));
        assert!(!same_payload(&first, &payload(2)));
        assert!(!same_payload("not json", "not  json"));
        provider.handle(&send("k", &first), 0, PLAIN, || None);
        let again = provider.handle(&send("k", &rewritten), 10, PLAIN, || None);
        assert!(matches!(
            again.result,
            Ok(ProviderReply::Accepted { replayed: true, .. })
        ));
        assert_eq!(again.quirk, None);
        let other = provider.handle(&send("k", &payload(2)), 20, PLAIN, || None);
        assert!(matches!(
            other.result,
            Ok(ProviderReply::Rejected { status: 422, .. })
        ));
        assert_eq!(provider.effects().len(), 1);
    }

    #[test]
    fn a_refusal_is_stored_under_the_key_and_counts_as_refused_for_good() {
        let mut provider = ProviderModel::default();
        let refusing = Conditions {
            refuse: true,
            ..PLAIN
        };
        let request = send("k", &payload(1));
        let first = provider.handle(&request, 0, refusing, || Some(500));
        assert!(matches!(
            first.result,
            Ok(ProviderReply::Rejected { status: 402, .. })
        ));
        assert_eq!(first.quirk, Some(Quirk::Refused));
        // The key store replays the refusal to a request the model would not refuse.
        let replayed = provider.handle(&request, 100, PLAIN, || None);
        assert!(matches!(
            replayed.result,
            Ok(ProviderReply::Rejected { status: 402, .. })
        ));
        assert_eq!(replayed.quirk, Some(Quirk::Refused));
        assert!(provider.effects().is_empty());
        let operation = FulfillmentPayload::parse(&payload(1)).unwrap().operation_key();
        assert!(provider.rejected(&operation));
        // Once the key is forgotten, the provider decides again.
        let after = provider.handle(&request, 500, PLAIN, || None);
        assert!(after.key_was_forgotten && after.new_effect.is_some());
    }

    #[test]
    fn a_double_executing_provider_acts_for_both_requests_with_a_key_in_progress() {
        let mut provider = ProviderModel::default();
        let request = send("k", &payload(100));
        // The first request is slow: it is in progress when the retry comes.
        provider.begin_processing("k");
        let double = Conditions {
            double_execute: true,
            ..PLAIN
        };
        let retry = provider.handle(&request, 1_000, double, || None);
        assert_eq!(retry.new_effect, Some(0), "the retry is executed, not told 409");
        assert_eq!(retry.quirk, Some(Quirk::Overtook));
        assert!(provider.end_processing("k"), "the slow request was overtaken");
        let first = provider.act_again(&request, 2_000);
        assert_eq!(first.new_effect, Some(1), "the slow request acts too");
        assert_eq!(first.quirk, Some(Quirk::ActedAgain));
        assert_eq!(provider.effects_for("t/o/fulfill/v1").count(), 2);
        // The store keeps what the retry stored: a later retry replays the first effect.
        let later = provider.handle(&request, 3_000, PLAIN, || None);
        assert_eq!(
            later.result,
            Ok(ProviderReply::Accepted {
                effect_id: "shp-1".to_owned(),
                replayed: true
            })
        );

        // A provider that locks keys answers 409 and nothing is overtaken.
        let mut locking = ProviderModel::default();
        locking.begin_processing("k");
        let during = locking.handle(&request, 1_000, PLAIN, || None);
        assert_eq!(during.result, Ok(ProviderReply::Conflict));
        assert!(!locking.end_processing("k"));
    }

    #[test]
    fn a_live_key_replays_and_a_forgotten_key_acts_again() {
        let mut provider = ProviderModel::default();
        let first = provider.handle(&send("k", &payload(1)), 0, PLAIN, || Some(1_000));
        assert_eq!(first.new_effect, Some(0));
        let replay = provider.handle(&send("k", &payload(1)), 999, PLAIN, || unreachable!());
        assert_eq!(
            replay.result,
            Ok(ProviderReply::Accepted {
                effect_id: "shp-1".into(),
                replayed: true
            })
        );
        let mismatch = provider.handle(&send("k", &payload(2)), 999, PLAIN, || unreachable!());
        assert!(matches!(
            mismatch.result,
            Ok(ProviderReply::Rejected { status: 422, .. })
        ));
        let after_expiry = provider.handle(&send("k", &payload(1)), 1_000, PLAIN, || None);
        assert!(after_expiry.key_was_forgotten);
        assert_eq!(after_expiry.new_effect, Some(1));
        assert_eq!(provider.effects_for("t/o/fulfill/v1").count(), 2);
    }

    #[test]
    fn lookup_survives_key_expiry_and_bad_payloads_are_rejected() {
        let mut provider = ProviderModel::default();
        provider.handle(&send("k", &payload(1)), 0, PLAIN, || Some(10));
        let lookup = ProviderRequest::Lookup {
            idempotency_key: "k".into(),
        };
        assert!(matches!(
            provider.handle(&lookup, 50, PLAIN, || None).result,
            Ok(ProviderReply::Found { .. })
        ));
        let unknown = ProviderRequest::Lookup {
            idempotency_key: "other".into(),
        };
        assert_eq!(
            provider.handle(&unknown, 50, PLAIN, || None).result,
            Ok(ProviderReply::NotFound)
        );
        let bad = provider.handle(&send("x", "not json"), 0, PLAIN, || None);
        assert!(matches!(
            bad.result,
            Ok(ProviderReply::Rejected { status: 400, .. })
        ));
        assert_eq!(provider.effects().len(), 1);
    }

    #[test]
    fn keys_in_progress_or_locked_answer_409() {
        let mut provider = ProviderModel::default();
        provider.begin_processing("k");
        let during = provider.handle(&send("k", &payload(1)), 0, PLAIN, || None);
        assert_eq!(during.result, Ok(ProviderReply::Conflict));
        provider.end_processing("k");
        let locking = Conditions {
            lock_after_ms: 100,
            ..PLAIN
        };
        assert!(
            provider
                .handle(&send("k", &payload(1)), 0, locking, || None)
                .new_effect
                .is_some()
        );
        assert_eq!(
            provider
                .handle(&send("k", &payload(1)), 50, PLAIN, || None)
                .result,
            Ok(ProviderReply::Conflict)
        );
        assert!(matches!(
            provider
                .handle(&send("k", &payload(1)), 100, PLAIN, || None)
                .result,
            Ok(ProviderReply::Accepted { replayed: true, .. })
        ));
    }

    #[test]
    fn a_mismatch_is_rejected_or_silently_replayed() {
        let mut provider = ProviderModel::default();
        provider.handle(&send("k", &payload(1)), 0, PLAIN, || None);
        let lenient = Conditions {
            replay_on_mismatch: true,
            ..PLAIN
        };
        let replayed = provider.handle(&send("k", &payload(2)), 1, lenient, || None);
        assert!(matches!(
            replayed.result,
            Ok(ProviderReply::Accepted { replayed: true, .. })
        ));
        assert_eq!(provider.effects().len(), 1);
    }

    #[test]
    fn a_ledger_gives_the_provider_its_effects_would_have_made() {
        let mut handled = ProviderModel::default();
        handled.handle(&send("k1", &payload(1)), 10, PLAIN, || None);
        handled.handle(&send("k2", &payload(1)), 20, PLAIN, || None);
        let ledger = handled.effects().iter().map(|effect| LedgerEntry {
            effect_id: effect.id.clone(),
            idempotency_key: effect.idempotency_key.clone(),
            payload: effect.payload.clone(),
            at_ms: effect.at_ms,
        });
        let mut read =
            ProviderModel::from_ledger(OperationReader::default(), ledger, ["k3".to_owned()]).unwrap();
        assert_eq!(read.effects(), handled.effects());
        assert_eq!(read.effects_for("t/o/fulfill/v1").count(), 2);
        assert_eq!(read.keys_in_progress().collect::<Vec<_>>(), ["k3"]);
        assert!(!read.rejected("t/o/fulfill/v1"));
        let lookup = ProviderRequest::Lookup {
            idempotency_key: "k2".into(),
        };
        assert_eq!(
            read.handle(&lookup, 30, PLAIN, || None).result,
            Ok(ProviderReply::Found {
                effect_id: "shp-2".into()
            })
        );
        let unreadable = LedgerEntry {
            effect_id: "eff-9".into(),
            idempotency_key: "k".into(),
            payload: "not json".into(),
            at_ms: 0,
        };
        let error = ProviderModel::from_ledger(OperationReader::default(), [unreadable], Vec::new())
            .err()
            .unwrap();
        assert!(error.contains("eff-9"), "{error}");
    }

    #[test]
    fn a_sticky_error_repeats_until_the_key_is_forgotten() {
        let mut provider = ProviderModel::default();
        let failing = Conditions {
            fail_before_acting: true,
            sticky_errors: true,
            ..PLAIN
        };
        assert!(
            provider
                .handle(&send("k", &payload(1)), 0, failing, || Some(500))
                .result
                .is_err()
        );
        assert!(
            provider
                .handle(&send("k", &payload(1)), 100, PLAIN, || None)
                .result
                .is_err(),
            "cached"
        );
        let after = provider.handle(&send("k", &payload(1)), 500, PLAIN, || None);
        assert!(after.key_was_forgotten && after.new_effect.is_some());
    }
}
