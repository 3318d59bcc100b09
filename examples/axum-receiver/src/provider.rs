//! The fulfillment provider's HTTP API, as the relay calls it.
//!
//! `POST {base}/effects` with `Idempotency-Key` and the request body performs the shipment once
//! per key and answers `{"effect_id": ..., "replayed": ...}`; `GET {base}/effects` with the key
//! says whether a shipment was performed under it (200) or not yet (404). 409 means a request
//! with the key is still in progress, 429 asks to come back after `Retry-After` seconds, 408, 425
//! and 5xx ask for a later try, any other 4xx refuses the request for good. A call that gets no
//! answer within the timeout, or loses its connection, is ambiguous: the provider may have acted.
//!
//! This module must not retry or decide what an answer means for the outbox: the relay does,
//! with the key and the body it persisted.

use std::time::Duration;

/// What a call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The shipment exists (just performed, or replayed for a key the provider knows).
    Shipped { effect_id: String },
    /// Lookup: nothing has been performed under the key yet.
    NotFound,
    /// Another request with the key is still being worked on.
    InProgress,
    /// Too many requests: come back after this many milliseconds, if the provider said.
    RateLimited { after_ms: Option<i64> },
    /// The provider (or a gateway before it) could not do it now: 408, 425, 5xx.
    TryLater(String),
    /// The provider refused the request for good.
    Refused { status: u16, reason: String },
    /// No answer: the provider may or may not have acted.
    Unknown(String),
}

/// The provider at one base URL.
pub struct Provider {
    effects_url: String,
    agent: ureq::Agent,
    timeout: Duration,
}

impl Provider {
    /// A client for the provider at `base_url` (`http://host:port`), waiting `timeout_ms` for
    /// each answer.
    pub fn new(base_url: &str, timeout_ms: i64) -> Result<Provider, String> {
        let base_url = base_url.trim_end_matches('/');
        if !base_url.starts_with("http://") {
            return Err(format!("{base_url:?}: this build speaks plain http:// only"));
        }
        Ok(Provider {
            effects_url: format!("{base_url}/effects"),
            agent: ureq::AgentBuilder::new().build(),
            timeout: Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(1).max(1)),
        })
    }

    /// Asks for the shipment described by `body`, under `key`.
    pub fn ship(&self, key: &str, body: &str) -> Reply {
        let answer = self
            .agent
            .post(&self.effects_url)
            .set("Idempotency-Key", key)
            .set("Content-Type", "application/json")
            .timeout(self.timeout)
            .send_string(body);
        read(answer, false)
    }

    /// Asks whether a shipment was performed under `key`.
    pub fn look_up(&self, key: &str) -> Reply {
        let answer = self
            .agent
            .get(&self.effects_url)
            .set("Idempotency-Key", key)
            .timeout(self.timeout)
            .call();
        read(answer, true)
    }
}

fn read(answer: Result<ureq::Response, ureq::Error>, lookup: bool) -> Reply {
    match answer {
        Ok(response) => {
            let text = match response.into_string() {
                Ok(text) => text,
                Err(error) => return Reply::Unknown(format!("the answer was cut off: {error}")),
            };
            let effect_id = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|value| value.get("effect_id")?.as_str().map(str::to_owned));
            match effect_id {
                Some(effect_id) => Reply::Shipped { effect_id },
                // A 2xx we cannot read: the provider acted, and a retry with the key replays it.
                None => Reply::Unknown(format!("a 2xx without an effect_id: {text}")),
            }
        }
        Err(ureq::Error::Status(status, response)) => {
            let after_ms = response
                .header("Retry-After")
                .and_then(|value| value.trim().parse::<i64>().ok())
                .filter(|seconds| *seconds >= 0)
                .map(|seconds| seconds.saturating_mul(1_000));
            let reason = response.into_string().unwrap_or_default();
            match status {
                404 if lookup => Reply::NotFound,
                409 => Reply::InProgress,
                429 => Reply::RateLimited { after_ms },
                408 | 425 | 500..=599 => Reply::TryLater(format!("{status}: {reason}")),
                _ => Reply::Refused { status, reason },
            }
        }
        // A timeout, a reset, a refused connection: whether the request reached the provider and
        // acted is unknown, so every one is treated as possibly in flight.
        Err(ureq::Error::Transport(transport)) => Reply::Unknown(transport.to_string()),
    }
}
