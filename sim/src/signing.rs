//! The simulated world's webhook secrets, and deliveries signed the way a real sender signs them.
//!
//! Every account's endpoint has three generations of secret: the current one the sender signs
//! with, the previous one the receiver still accepts while a rotation settles, and a retired one
//! the receiver no longer holds (an attacker who stole it, or a sender that never rotated, signs
//! with it). Secrets are derived from the account's name, so they need no randomness and no room
//! in seed files, and a schedule written before secrets existed replays with the same ones. They
//! are simulation secrets: nothing here is fit to protect a real endpoint.

use std::collections::BTreeMap;

use commitgap::receiver::{DEFAULT_BODY_BYTES_MAX, WebhookDelivery, secrets_setting};
use commitgap::signature::{self, DEFAULT_TOLERANCE_S, SigningSecret, WebhookHeaders};

use crate::faults::Attack;
use sha2::{Digest, Sha256};

/// The secret generation the sender signs with.
pub const CURRENT_GENERATION: u32 = 2;
/// The generation before it, still configured at the receiver.
pub const PREVIOUS_GENERATION: u32 = 1;
/// A generation the receiver no longer holds.
pub const RETIRED_GENERATION: u32 = 0;

/// The secret of generation `generation` of `account`'s endpoint.
pub fn secret(account: &str, generation: u32) -> SigningSecret {
    // Derived once per thread: the sender signs every attempt, and the secret of an account never
    // changes, so remembering it changes nothing a run sees.
    const REMEMBERED_MAX: usize = 1_024;
    thread_local! {
        static DERIVED: std::cell::RefCell<BTreeMap<String, BTreeMap<u32, SigningSecret>>> =
            const { std::cell::RefCell::new(BTreeMap::new()) };
    }
    DERIVED.with(|derived| {
        let mut derived = derived.borrow_mut();
        if let Some(secret) = derived
            .get(account)
            .and_then(|generations| generations.get(&generation))
        {
            return secret.clone();
        }
        let key = Sha256::digest(format!("commitgap-sim endpoint secret/{account}/{generation}").as_bytes());
        let secret = SigningSecret::from_bytes(&key);
        if derived.len() >= REMEMBERED_MAX {
            derived.clear();
        }
        derived
            .entry(account.to_owned())
            .or_default()
            .insert(generation, secret.clone());
        secret
    })
}

/// The receivers' configuration for these accounts: each endpoint holds its current and previous
/// secret, and the timestamp tolerance is written out at its documented default, as a deployment
/// that configures it would (so the reading of a configured number is simulated too; the body
/// limit is left to its default, so the default's path is as well).
pub fn receiver_settings<'a>(accounts: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    let mut settings: BTreeMap<String, String> = accounts
        .into_iter()
        .map(|account| {
            let secrets = format!(
                "{} {}",
                secret(account, CURRENT_GENERATION),
                secret(account, PREVIOUS_GENERATION)
            );
            (secrets_setting(account), secrets)
        })
        .collect();
    settings.insert(
        commitgap::receiver::TOLERANCE_SETTING.to_owned(),
        DEFAULT_TOLERANCE_S.to_string(),
    );
    settings
}

/// A delivery to `account`'s endpoint, signed with the secret of `generation` at `timestamp_s`
/// (the sender's clock, in seconds).
pub fn signed_delivery(
    account: &str,
    webhook_id: &str,
    timestamp_s: i64,
    body: Vec<u8>,
    generation: u32,
) -> WebhookDelivery {
    let mut delivery = unsigned_delivery(account, webhook_id, timestamp_s, body);
    delivery.headers.signature = signature::sign(
        &secret(account, generation),
        webhook_id,
        timestamp_s,
        &delivery.body,
    );
    delivery
}

/// [`signed_delivery`] with an empty `webhook-signature`: the genuine delivery an attack that
/// does not keep its signature is built from (see [`Attack::keeps_genuine_signature`]).
pub fn unsigned_delivery(
    account: &str,
    webhook_id: &str,
    timestamp_s: i64,
    body: Vec<u8>,
) -> WebhookDelivery {
    WebhookDelivery {
        endpoint: account.to_owned(),
        headers: WebhookHeaders {
            id: webhook_id.to_owned(),
            timestamp: timestamp_s.to_string(),
            signature: String::new(),
        },
        body,
    }
}

/// A hostile request built from `genuine`, a delivery the sender made to some account's endpoint:
/// what an attacker who saw it on the wire, or a buggy sender, would post (see
/// [`crate::faults::Attack`]). `other_account` is an account the cross-account request names.
/// Only an attack that [keeps the genuine signature](Attack::keeps_genuine_signature) reads
/// `genuine`'s signature.
pub fn hostile_request(
    attack: Attack,
    genuine: WebhookDelivery,
    other_account: &str,
    invalid: &dyn Fn(&serde_json::Value, u64) -> serde_json::Value,
) -> WebhookDelivery {
    let account = genuine.endpoint.clone();
    let id = genuine.headers.id.clone();
    let timestamp_s: i64 = genuine.headers.timestamp.parse().unwrap_or(0);
    let body_json = || serde_json::from_slice::<serde_json::Value>(&genuine.body).unwrap_or_default();
    let resign = |body: Vec<u8>, timestamp_s: i64, generation: u32| {
        signed_delivery(&account, &id, timestamp_s, body, generation)
    };
    let with_field = |field: &str, value: serde_json::Value| {
        let mut json = body_json();
        json[field] = value;
        json.to_string().into_bytes()
    };
    match attack {
        Attack::ForgedSignature => {
            // A well-formed `v1` entry made with a key the attacker guessed.
            let guess = SigningSecret::from_bytes(b"an attacker's guess at the secret");
            let mut forged = genuine.clone();
            forged.headers.signature = signature::sign(&guess, &id, timestamp_s, &genuine.body);
            forged
        }
        Attack::TamperedBody => {
            let json = body_json();
            let body = match json.get("amount_cents").and_then(serde_json::Value::as_i64) {
                Some(amount) => with_field("amount_cents", (amount + 1).into()),
                None => {
                    let order = json
                        .get("order")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("order");
                    with_field("order", format!("{order}-x").into())
                }
            };
            WebhookDelivery {
                body,
                ..genuine.clone()
            }
        }
        Attack::StaleReplay => resign(
            genuine.body.clone(),
            timestamp_s - DEFAULT_TOLERANCE_S - 3_600,
            CURRENT_GENERATION,
        ),
        Attack::RetiredSecret => resign(genuine.body.clone(), timestamp_s, RETIRED_GENERATION),
        Attack::CrossAccount => resign(
            with_field("account", other_account.into()),
            timestamp_s,
            CURRENT_GENERATION,
        ),
        Attack::MalformedBody => {
            let half = genuine.body.len() / 2;
            resign(genuine.body[..half].to_vec(), timestamp_s, CURRENT_GENERATION)
        }
        Attack::OversizedBody => resign(
            padded(with_field("padding", "".into()), DEFAULT_BODY_BYTES_MAX),
            timestamp_s,
            CURRENT_GENERATION,
        ),
        Attack::UnknownType => resign(
            with_field("type", "invoice.paid".into()),
            timestamp_s,
            CURRENT_GENERATION,
        ),
        Attack::InvalidEvent => resign(
            invalid_event(&body_json(), &id, invalid),
            timestamp_s,
            CURRENT_GENERATION,
        ),
        Attack::ReusedEventId => {
            let created_ms = body_json()
                .get("created_ms")
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0);
            resign(
                with_field("created_ms", (created_ms + 1).into()),
                timestamp_s,
                CURRENT_GENERATION,
            )
        }
    }
}

/// `event` made invalid by one of its domain's rules (`invalid`), each just past its limit;
/// which rule is chosen by the delivery's id, so a run's attacks try them all.
fn invalid_event(
    event: &serde_json::Value,
    webhook_id: &str,
    invalid: &dyn Fn(&serde_json::Value, u64) -> serde_json::Value,
) -> Vec<u8> {
    let rule = webhook_id.bytes().map(u64::from).sum::<u64>();
    invalid(event, rule).to_string().into_bytes()
}

/// `body` with `padding_bytes` of `x` written into its empty `"padding"` field: the bytes
/// serde_json writes for the padded value, without escaping 64 KiB one character at a time on every
/// oversized attack. Inside a JSON string a quote is escaped, so `"padding":""` occurs only as the
/// field itself.
fn padded(body: Vec<u8>, padding_bytes: usize) -> Vec<u8> {
    const EMPTY_FIELD: &[u8] = br#""padding":"""#;
    let Some(at) = body
        .windows(EMPTY_FIELD.len())
        .position(|window| window == EMPTY_FIELD)
    else {
        return body;
    };
    let split = at + EMPTY_FIELD.len() - 1;
    let mut out = Vec::with_capacity(body.len() + padding_bytes);
    out.extend_from_slice(&body[..split]);
    out.resize(split + padding_bytes, b'x');
    out.extend_from_slice(&body[split..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_writes_the_bytes_serde_json_writes() {
        let body =
            br#"{"account":"acct-a","note":"a \"padding\":\"\" lookalike","type":"payment.succeeded"}"#;
        let mut json: serde_json::Value = serde_json::from_slice(body).unwrap();
        json["padding"] = "".into();
        let empty = json.to_string().into_bytes();
        json["padding"] = "x".repeat(300).into();
        assert_eq!(padded(empty, 300), json.to_string().into_bytes());
    }

    #[test]
    fn the_receiver_holds_the_current_and_previous_secret_but_not_the_retired_one() {
        let settings = receiver_settings(["acct-a"]);
        let held = &settings[&secrets_setting("acct-a")];
        assert!(held.contains(&secret("acct-a", CURRENT_GENERATION).to_string()));
        assert!(held.contains(&secret("acct-a", PREVIOUS_GENERATION).to_string()));
        assert!(!held.contains(&secret("acct-a", RETIRED_GENERATION).to_string()));
        assert_ne!(
            secret("acct-a", CURRENT_GENERATION).to_string(),
            secret("acct-b", CURRENT_GENERATION).to_string(),
            "every endpoint has its own secret"
        );
    }

    #[test]
    fn a_signed_delivery_verifies_with_the_held_secrets() {
        let delivery = signed_delivery("acct-a", "msg_1", 1_000, b"{}".to_vec(), CURRENT_GENERATION);
        let held = [
            secret("acct-a", CURRENT_GENERATION),
            secret("acct-a", PREVIOUS_GENERATION),
        ];
        assert_eq!(
            signature::verify(&held, &delivery.headers, &delivery.body, 1_000, 300),
            Ok(())
        );
        let retired = signed_delivery("acct-a", "msg_1", 1_000, b"{}".to_vec(), RETIRED_GENERATION);
        assert!(signature::verify(&held, &retired.headers, &retired.body, 1_000, 300).is_err());
    }
}
