//! A provider double over HTTP: the wire contract of [`crate::provider`], with the misbehaviours
//! of real providers that the simulator models, seeded.
//!
//! It keeps each idempotency key with the effect it performed, forgets keys once they are older
//! than their lifetime (so that a retry after that performs a second effect, as real providers
//! do) while a lookup still finds the effect in its permanent record, answers 409 while a request with the key is in progress, and, each at a drawn rate, acts
//! slowly (after the caller's timeout, so the caller cannot tell), or acts and loses its reply
//! (the connection is held until the caller gave up). Every effect goes to a ledger that
//! `GET /ledger` returns, which is what a live check judges.
//!
//! Decisions are drawn from a seed in the order requests arrive, which the network decides: a
//! run is seeded, not deterministic. This module must not read what a request means beyond its
//! key and payload.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use commitgap_sim::rng::{Ratio, SimRng};

/// How the double misbehaves.
#[derive(Debug, Clone)]
pub struct Misbehaviour {
    /// Keys are forgotten this long after the effect, in milliseconds.
    pub key_lifetime_ms: i64,
    /// The share of sends that act only after `slow_ms`.
    pub slow: Ratio,
    /// How long a slow send takes before it acts, in milliseconds: longer than the caller's
    /// call timeout, so that the caller times out while the provider still acts.
    pub slow_ms: i64,
    /// The share of sends that act and then lose their reply: the answer is held for
    /// `slow_ms` and the caller times out first.
    pub lost_reply: Ratio,
    /// Execute a send that arrives while another with its key is in progress, instead of
    /// answering 409: both perform their effect, as a provider without a key lock does.
    pub double_execute: bool,
}

impl Default for Misbehaviour {
    /// A provider that keeps keys for a day and behaves.
    fn default() -> Misbehaviour {
        Misbehaviour {
            key_lifetime_ms: 24 * 3_600_000,
            slow: Ratio::new(0, 1),
            slow_ms: 15_000,
            lost_reply: Ratio::new(0, 1),
            double_execute: false,
        }
    }
}

/// One effect the double performed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LedgerEffect {
    /// `eff-1`, `eff-2`, ... in the order they were performed.
    pub effect_id: String,
    /// The key it was performed under.
    pub idempotency_key: String,
    /// The request's body.
    pub payload: String,
    /// When, in wall-clock milliseconds.
    pub at_ms: i64,
}

#[derive(Debug, Clone)]
struct Stored {
    effect_id: String,
    at_ms: i64,
}

struct Ledger {
    misbehaviour: Misbehaviour,
    rng: SimRng,
    keys: BTreeMap<String, Stored>,
    in_progress: BTreeMap<String, u32>,
    effects: Vec<LedgerEffect>,
}

/// The double's state, shared by its handlers.
#[derive(Clone)]
pub struct ProviderDouble {
    ledger: Arc<Mutex<Ledger>>,
}

/// What a send drew when it arrived.
enum Arrival {
    /// Another request with the key is in progress.
    Conflict,
    /// The key is known and not forgotten: its stored result.
    Replay(String),
    /// A new effect, acted on after `delay_ms`, its reply lost or not.
    Act { delay_ms: i64, reply_lost: bool },
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| {
        i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
    })
}

impl ProviderDouble {
    /// A double that misbehaves as `misbehaviour` says, drawing from `seed`.
    pub fn new(misbehaviour: Misbehaviour, seed: u64) -> ProviderDouble {
        ProviderDouble {
            ledger: Arc::new(Mutex::new(Ledger {
                misbehaviour,
                rng: SimRng::stream(seed, "provider-double"),
                keys: BTreeMap::new(),
                in_progress: BTreeMap::new(),
                effects: Vec::new(),
            })),
        }
    }

    /// `POST /effects`, `GET /effects` (lookup) and `GET /ledger`.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/effects", get(lookup).post(send))
            .route("/ledger", get(ledger))
            .with_state(self.clone())
    }

    /// Every effect performed so far, oldest first.
    pub fn effects(&self) -> Vec<LedgerEffect> {
        self.lock().effects.clone()
    }

    /// Keys with a request still being worked on.
    pub fn keys_in_progress(&self) -> Vec<String> {
        self.lock().in_progress.keys().cloned().collect()
    }

    /// Ends the transient misbehaviours: no send is slow or loses its reply from now on. Keys
    /// are still forgotten at their lifetime, which is the provider's contract, not a fault.
    pub fn heal(&self) {
        let mut ledger = self.lock();
        ledger.misbehaviour.slow = Ratio::new(0, 1);
        ledger.misbehaviour.lost_reply = Ratio::new(0, 1);
        ledger.misbehaviour.double_execute = false;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn arrive(&self, key: &str) -> Arrival {
        let mut ledger = self.lock();
        let now_ms = now_ms();
        let lifetime_ms = ledger.misbehaviour.key_lifetime_ms;
        ledger
            .keys
            .retain(|_, stored| stored.at_ms + lifetime_ms > now_ms);
        let overtakes = ledger.in_progress.contains_key(key);
        if overtakes && !ledger.misbehaviour.double_execute {
            return Arrival::Conflict;
        }
        // A request that overtakes one in progress passed no stored result either: the first
        // stores its result only when it acts.
        if let Some(stored) = ledger.keys.get(key).filter(|_| !overtakes) {
            return Arrival::Replay(stored.effect_id.clone());
        }
        let (slow, lost, slow_ms) = (
            ledger.misbehaviour.slow,
            ledger.misbehaviour.lost_reply,
            ledger.misbehaviour.slow_ms,
        );
        let delay_ms = if ledger.rng.chance(slow) { slow_ms } else { 0 };
        let reply_lost = ledger.rng.chance(lost);
        *ledger.in_progress.entry(key.to_owned()).or_default() += 1;
        Arrival::Act { delay_ms, reply_lost }
    }

    fn act(&self, key: &str, payload: String) -> String {
        let mut ledger = self.lock();
        if let Some(count) = ledger.in_progress.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                ledger.in_progress.remove(key);
            }
        }
        let at_ms = now_ms();
        let effect_id = format!("eff-{}", ledger.effects.len() + 1);
        ledger.effects.push(LedgerEffect {
            effect_id: effect_id.clone(),
            idempotency_key: key.to_owned(),
            payload,
            at_ms,
        });
        // The store keeps the first result: under double execution the second act finds one.
        ledger.keys.entry(key.to_owned()).or_insert(Stored {
            effect_id: effect_id.clone(),
            at_ms,
        });
        effect_id
    }
}

fn key_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get("Idempotency-Key")
        .and_then(|value| value.to_str().ok())
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
}

async fn send(
    State(double): State<ProviderDouble>,
    headers: HeaderMap,
    payload: String,
) -> (StatusCode, String) {
    let Some(key) = key_of(&headers) else {
        return (
            StatusCode::BAD_REQUEST,
            "an Idempotency-Key header is required".to_owned(),
        );
    };
    match double.arrive(&key) {
        Arrival::Conflict => (
            StatusCode::CONFLICT,
            "a request with this key is in progress".to_owned(),
        ),
        Arrival::Replay(effect_id) => (
            StatusCode::OK,
            serde_json::json!({"effect_id": effect_id, "replayed": true}).to_string(),
        ),
        Arrival::Act { delay_ms, reply_lost } => {
            // The work goes on if the caller hangs up, as a real provider's does: the handler is
            // dropped when the connection closes, the spawned task is not.
            let acting = tokio::spawn({
                let double = double.clone();
                async move {
                    if delay_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(delay_ms.unsigned_abs())).await;
                    }
                    double.act(&key, payload)
                }
            });
            let Ok(effect_id) = acting.await else {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the provider double failed".to_owned(),
                );
            };
            if reply_lost {
                let hold_ms = double.lock().misbehaviour.slow_ms;
                tokio::time::sleep(Duration::from_millis(hold_ms.unsigned_abs())).await;
            }
            (
                StatusCode::OK,
                serde_json::json!({"effect_id": effect_id, "replayed": false}).to_string(),
            )
        }
    }
}

async fn lookup(State(double): State<ProviderDouble>, headers: HeaderMap) -> (StatusCode, String) {
    let Some(key) = key_of(&headers) else {
        return (
            StatusCode::BAD_REQUEST,
            "an Idempotency-Key header is required".to_owned(),
        );
    };
    // A lookup reads the permanent record of effects, as the simulator's provider does, not the
    // store of keys that forgets them at their lifetime: that is how a relay reconciles an old
    // obligation after the provider forgot its key.
    let ledger = double.lock();
    match ledger.effects.iter().find(|effect| effect.idempotency_key == key) {
        Some(effect) => (
            StatusCode::OK,
            serde_json::json!({"effect_id": effect.effect_id}).to_string(),
        ),
        None => (StatusCode::NOT_FOUND, "no effect under this key".to_owned()),
    }
}

async fn ledger(State(double): State<ProviderDouble>) -> String {
    serde_json::to_string(&double.effects()).unwrap_or_else(|_| "[]".to_owned())
}
