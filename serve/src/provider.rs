//! An HTTP client for the downstream provider, with the idempotency key in a header and the
//! relay's call timeout on every request.
//!
//! The wire contract is the one most payment and shipping APIs share, kept small so that a
//! provider double (or an adapter in front of a real API) can speak it:
//! - `POST {base}/effects` with `Idempotency-Key: K` and the obligation's payload as the JSON
//!   body performs the effect once per key; a 2xx answer carries
//!   `{"effect_id": "...", "replayed": bool}`;
//! - `GET {base}/effects` with `Idempotency-Key: K` looks the key up: 200 with `{"effect_id":
//!   "..."}` when an effect was performed under it, 404 when none has been performed yet. A 404
//!   does not mean that none ever will be: a request with the key that is still in progress (a
//!   slow one, or one whose reply was lost) may act after the lookup, so a relay may read 404 as
//!   "never performed" only for a key none of whose requests can still be acting;
//! - 409 means a request with the key is still in progress; 429 means too many requests, with a
//!   `Retry-After` (in seconds) saying when to come back, which reaches the relay as
//!   [`ProviderReply::RateLimited`]; 408, 425 and 5xx ask for a later try; any other 4xx refuses
//!   the request for good.
//!
//! A reply that does not come within the timeout is [`CallError::Timeout`], ambiguous as it is in
//! the simulation: the provider may have acted. This module must not retry: retrying is the
//! relay's decision, with the key it persisted.

use std::time::Duration;

use commitgap_sim::commitgap::provider::{CallError, ProviderReply, ProviderRequest};
use commitgap_sim::commitgap::realtime::ProviderClient;

/// The provider's API at `base_url`. See the module documentation.
#[derive(Debug, Clone)]
pub struct HttpProvider {
    base_url: String,
    agent: ureq::Agent,
}

impl HttpProvider {
    /// A client for the provider at `base_url` (such as `http://127.0.0.1:9000`). Refuses a URL
    /// this build cannot call, with the reason.
    pub fn new(base_url: &str) -> Result<HttpProvider, String> {
        let base_url = base_url.trim_end_matches('/');
        let https = base_url.starts_with("https://");
        if !(base_url.starts_with("http://") || https) {
            return Err(format!(
                "provider URL {base_url:?} must start with http:// or https://"
            ));
        }
        if https && !cfg!(feature = "tls") {
            return Err(format!(
                "provider URL {base_url:?} is https, and this build has no TLS: build with `--features tls`, or put a TLS proxy on localhost"
            ));
        }
        Ok(HttpProvider {
            base_url: base_url.to_owned(),
            agent: ureq::AgentBuilder::new().build(),
        })
    }
}

impl ProviderClient for HttpProvider {
    fn call(&self, request: &ProviderRequest, timeout_ms: i64) -> Result<ProviderReply, CallError> {
        let url = format!("{}/effects", self.base_url);
        let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0).max(1));
        let (answer, lookup) = match request {
            ProviderRequest::Send {
                idempotency_key,
                payload,
            } => (
                self.agent
                    .post(&url)
                    .set("Idempotency-Key", idempotency_key)
                    .set("Content-Type", "application/json")
                    .timeout(timeout)
                    .send_string(payload),
                false,
            ),
            ProviderRequest::Lookup { idempotency_key } => (
                self.agent
                    .get(&url)
                    .set("Idempotency-Key", idempotency_key)
                    .timeout(timeout)
                    .call(),
                true,
            ),
        };
        match answer {
            Ok(response) => success(response, lookup),
            Err(ureq::Error::Status(status, response)) => {
                let retry_after_ms = response.header("Retry-After").and_then(retry_after_ms);
                let reason = response.into_string().unwrap_or_default();
                failure(status, reason, lookup, retry_after_ms)
            }
            Err(ureq::Error::Transport(transport)) => Err(transport_error(&transport)),
        }
    }
}

/// Reads a 2xx answer: the effect's id, and whether it was replayed.
fn success(response: ureq::Response, lookup: bool) -> Result<ProviderReply, CallError> {
    let text = response
        .into_string()
        .map_err(|error| CallError::Unavailable(format!("reading the reply: {error}")))?;
    let reply: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| CallError::Unavailable(format!("the reply is not JSON ({error}): {text}")))?;
    let effect_id = reply
        .get("effect_id")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| CallError::Unavailable(format!("the reply has no effect_id: {text}")))?
        .to_owned();
    if lookup {
        return Ok(ProviderReply::Found { effect_id });
    }
    let replayed = reply
        .get("replayed")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    Ok(ProviderReply::Accepted { effect_id, replayed })
}

/// Reads a non-2xx answer, with the milliseconds its `Retry-After` asked for, if any.
fn failure(
    status: u16,
    reason: String,
    lookup: bool,
    retry_after_ms: Option<i64>,
) -> Result<ProviderReply, CallError> {
    match status {
        404 if lookup => Ok(ProviderReply::NotFound),
        409 => Ok(ProviderReply::Conflict),
        429 => Ok(ProviderReply::RateLimited { retry_after_ms }),
        408 | 425 | 500..=599 => Err(CallError::Unavailable(format!("{status}: {reason}"))),
        _ => Ok(ProviderReply::Rejected { status, reason }),
    }
}

/// A `Retry-After` header's delay in milliseconds, when it gives one in seconds (RFC 9110 also
/// allows a date, which a relay cannot read without trusting the provider's clock, so it is
/// taken as no delay given).
fn retry_after_ms(header: &str) -> Option<i64> {
    let seconds = header
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|seconds| *seconds >= 0)?;
    seconds.checked_mul(1_000)
}

/// A request that got no answer: a timeout is the ambiguous [`CallError::Timeout`]; anything else
/// (refused connection, reset) is unavailable, which the relay treats as ambiguous too.
fn transport_error(transport: &ureq::Transport) -> CallError {
    let timed_out = std::error::Error::source(transport)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            )
        })
        || transport.to_string().contains("timed out");
    if timed_out {
        CallError::Timeout
    } else {
        CallError::Unavailable(transport.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_the_relay_expects() {
        assert_eq!(
            failure(404, String::new(), true, None),
            Ok(ProviderReply::NotFound)
        );
        assert_eq!(
            failure(409, String::new(), false, None),
            Ok(ProviderReply::Conflict)
        );
        assert_eq!(
            failure(429, String::new(), false, retry_after_ms("30")),
            Ok(ProviderReply::RateLimited {
                retry_after_ms: Some(30_000)
            })
        );
        assert_eq!(retry_after_ms("Wed, 21 Oct 2026 07:28:00 GMT"), None);
        assert!(matches!(
            failure(503, String::new(), true, None),
            Err(CallError::Unavailable(_))
        ));
        assert_eq!(
            failure(402, "card declined".to_owned(), false, None),
            Ok(ProviderReply::Rejected {
                status: 402,
                reason: "card declined".to_owned()
            })
        );
        assert!(matches!(
            failure(404, String::new(), false, None),
            Ok(ProviderReply::Rejected { status: 404, .. })
        ));
    }

    #[test]
    fn a_url_this_build_cannot_call_is_refused_with_the_reason() {
        assert!(
            HttpProvider::new("ftp://provider")
                .unwrap_err()
                .contains("http://")
        );
        if !cfg!(feature = "tls") {
            assert!(
                HttpProvider::new("https://provider")
                    .unwrap_err()
                    .contains("--features tls")
            );
        }
        assert!(HttpProvider::new("http://127.0.0.1:9/").is_ok());
    }
}
