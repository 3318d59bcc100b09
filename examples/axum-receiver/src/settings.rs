//! The two settings files the shop's processes read at start: the receiver's (webhook secrets per
//! sender account, the timestamp tolerance, the body limit) and the relay's (timeouts, the lease,
//! backoff, the provider's key lifetime and the bounds a deployment promises).
//!
//! Both are JSON. A setting that is missing takes its documented default; one that is present but
//! unreadable is a configuration mistake, reported at start with the setting's name, since a
//! receiver that cannot read its secrets cannot tell a genuine delivery from a forged one. This
//! module must not hold business rules: it only reads and checks numbers and secrets.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

/// The prefix of the setting holding an account's secrets: `webhook-secrets/<account>`.
const SECRETS_PREFIX: &str = "webhook-secrets/";
/// The setting with how far a delivery's timestamp may be from this clock, in seconds.
const TOLERANCE_SETTING: &str = "webhook-tolerance-s";
/// The setting with the largest body the receiver reads, in bytes.
const BODY_LIMIT_SETTING: &str = "webhook-body-bytes-max";
/// Standard Webhooks' recommended tolerance: five minutes either way.
const DEFAULT_TOLERANCE_S: i64 = 300;
/// Payment events are a few hundred bytes; 64 KiB leaves room for a sender's larger events while
/// keeping a hostile sender from making the receiver hash megabytes.
const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

/// What the receiver verifies deliveries with.
#[derive(Debug, Clone)]
pub struct ReceiverSettings {
    /// Per sender account, the HMAC keys any of which may sign its deliveries (the current one
    /// first, then the previous one while a rotation settles).
    pub keys: BTreeMap<String, Vec<Vec<u8>>>,
    pub tolerance_s: i64,
    pub body_limit: usize,
}

impl ReceiverSettings {
    /// Reads the receiver's settings file: a JSON object of names to text.
    pub fn load(path: &Path) -> Result<ReceiverSettings, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        let values: BTreeMap<String, serde_json::Value> = serde_json::from_str(&text)
            .map_err(|error| format!("{} is not a JSON object: {error}", path.display()))?;
        let mut keys = BTreeMap::new();
        for (name, value) in &values {
            let Some(account) = name.strip_prefix(SECRETS_PREFIX) else {
                continue;
            };
            let secrets = value
                .as_str()
                .ok_or_else(|| format!("{name} must be text: whsec_ secrets separated by spaces"))?;
            let decoded = secrets
                .split_whitespace()
                .map(|secret| decode_secret(secret).map_err(|why| format!("{name}: {why}")))
                .collect::<Result<Vec<_>, _>>()?;
            keys.insert(account.to_owned(), decoded);
        }
        let tolerance_s = number(&values, TOLERANCE_SETTING)?.unwrap_or(DEFAULT_TOLERANCE_S);
        let body_limit = match number(&values, BODY_LIMIT_SETTING)? {
            Some(limit) => {
                usize::try_from(limit).map_err(|_| format!("{BODY_LIMIT_SETTING} is too large"))?
            }
            None => DEFAULT_BODY_LIMIT,
        };
        Ok(ReceiverSettings {
            keys,
            tolerance_s,
            body_limit,
        })
    }
}

/// The HMAC key of a `whsec_<base64>` secret.
fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret
        .strip_prefix("whsec_")
        .ok_or_else(|| "a secret must start with whsec_".to_owned())?;
    let key = BASE64
        .decode(encoded)
        .map_err(|error| format!("a secret is not base64 after whsec_: {error}"))?;
    if key.is_empty() {
        return Err("a secret is empty".to_owned());
    }
    Ok(key)
}

/// A setting that holds a whole number, zero or more, written as text or as a JSON number.
fn number(values: &BTreeMap<String, serde_json::Value>, name: &str) -> Result<Option<i64>, String> {
    let Some(value) = values.get(name) else {
        return Ok(None);
    };
    let parsed = match value {
        serde_json::Value::String(text) => text.trim().parse::<i64>().ok(),
        serde_json::Value::Number(number) => number.as_i64(),
        _ => None,
    };
    match parsed {
        Some(number) if number >= 0 => Ok(Some(number)),
        _ => Err(format!(
            "{name} is {value}; it must be a whole number, zero or more"
        )),
    }
}

/// How the relay behaves, in milliseconds. Field names are those of the settings file.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct RelaySettings {
    /// How long a provider call may take before its outcome counts as unknown.
    pub call_timeout_ms: i64,
    /// The lease the deployment asks for; see [`RelaySettings::lease_held_ms`].
    pub lease_ms: i64,
    /// How long the provider remembers a key after it first saw it.
    pub key_lifetime_ms: i64,
    /// The first retry delay; each later one is four times longer, up to the cap.
    pub backoff_base_ms: i64,
    pub backoff_cap_ms: i64,
    /// Attempts after which a request that keeps failing is abandoned for an operator.
    pub attempts_max: i64,
    /// How far two processes' clocks may disagree.
    pub clock_skew_ms_max: i64,
    /// The longest a worker may stall (a pause, a stopped VM) at any point.
    pub stall_ms_max: i64,
    /// The longest the provider may go on working on a request after it arrived.
    #[serde(default)]
    pub provider_act_ms_max: i64,
    /// How often an idle worker looks for due work at first, and at most after a long idle time.
    #[serde(default = "default_idle_poll_min_ms")]
    pub idle_poll_min_ms: i64,
    #[serde(default = "default_idle_poll_max_ms")]
    pub idle_poll_max_ms: i64,
}

fn default_idle_poll_min_ms() -> i64 {
    50
}

fn default_idle_poll_max_ms() -> i64 {
    1_000
}

impl RelaySettings {
    /// Reads the relay's settings file, and checks that the numbers can drive a relay.
    pub fn load(path: &Path) -> Result<RelaySettings, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        let settings: RelaySettings = serde_json::from_str(&text)
            .map_err(|error| format!("{} is not the relay's settings: {error}", path.display()))?;
        if settings.call_timeout_ms <= 0 || settings.backoff_base_ms <= 0 || settings.attempts_max <= 0 {
            return Err("call_timeout_ms, backoff_base_ms and attempts_max must be positive".to_owned());
        }
        Ok(settings)
    }

    /// The lease a worker takes. A worker may stall right after its claim and only then send, and
    /// the provider may go on acting on that request after the call timed out; the lease must
    /// outlast both, by every clock, or a second worker could send the key while the first
    /// request is still at the provider. The configured lease is used when it is longer.
    pub fn lease_held_ms(&self) -> i64 {
        let in_flight_ms = self.call_timeout_ms.max(self.provider_act_ms_max);
        self.lease_ms
            .max(self.stall_ms_max + in_flight_ms + self.clock_skew_ms_max)
    }

    /// How long to leave a key alone after a request whose outcome is unknown (a timeout, a lost
    /// connection) or that met another request with the key in progress (409): the provider may
    /// go on acting on it that long.
    pub fn in_flight_wait_ms(&self) -> i64 {
        self.provider_act_ms_max.max(self.call_timeout_ms)
    }

    /// The delay before the next attempt after `attempts` failed ones.
    pub fn backoff_ms(&self, attempts: i64) -> i64 {
        let exponent = u32::try_from(attempts.clamp(1, 12) - 1).unwrap_or(0);
        self.backoff_base_ms
            .saturating_mul(4_i64.saturating_pow(exponent))
            .min(self.backoff_cap_ms.max(self.backoff_base_ms))
    }

    /// Whether a key first sent at `first_sent_ms` may be forgotten by the provider by the time a
    /// request decided at `now_ms` is acted on: the request may leave after a stall, act until
    /// the call times out, and this clock may run behind the one that stamped the first attempt.
    pub fn key_may_be_forgotten(&self, first_sent_ms: i64, now_ms: i64) -> bool {
        let margin_ms = self.stall_ms_max + self.call_timeout_ms + self.clock_skew_ms_max;
        now_ms.saturating_add(margin_ms) >= first_sent_ms.saturating_add(self.key_lifetime_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live_like() -> RelaySettings {
        serde_json::from_str(
            r#"{"call_timeout_ms":1000,"lease_ms":4000,"key_lifetime_ms":1800000,
                "backoff_base_ms":200,"backoff_cap_ms":3000,"attempts_max":30,
                "clock_skew_ms_max":500,"stall_ms_max":4000,"provider_act_ms_max":2500}"#,
        )
        .unwrap()
    }

    #[test]
    fn the_lease_outlasts_a_stall_and_the_providers_work() {
        let settings = live_like();
        assert_eq!(settings.lease_held_ms(), 4_000 + 2_500 + 500);
        assert_eq!(settings.in_flight_wait_ms(), 2_500);
    }

    #[test]
    fn backoff_grows_fourfold_up_to_the_cap() {
        let settings = live_like();
        assert_eq!(settings.backoff_ms(1), 200);
        assert_eq!(settings.backoff_ms(2), 800);
        assert_eq!(settings.backoff_ms(3), 3_000);
        assert_eq!(settings.backoff_ms(500), 3_000);
    }

    #[test]
    fn a_key_is_looked_up_once_a_late_request_could_meet_it_forgotten() {
        let settings = live_like();
        let margin = 4_000 + 1_000 + 500;
        let forgotten_at = 10_000 + 1_800_000;
        assert!(!settings.key_may_be_forgotten(10_000, forgotten_at - margin - 1));
        assert!(settings.key_may_be_forgotten(10_000, forgotten_at - margin));
    }

    #[test]
    fn secrets_decode_and_a_bad_one_is_named() {
        assert_eq!(decode_secret("whsec_aGVsbG8=").unwrap(), b"hello");
        assert!(decode_secret("hello").unwrap_err().contains("whsec_"));
        assert!(decode_secret("whsec_***").is_err());
    }
}
