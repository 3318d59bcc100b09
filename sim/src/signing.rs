//! The simulated world's webhook secrets, and deliveries signed the way a real sender signs them.
//!
//! Every account's endpoint has three generations of secret: the current one the sender signs
//! with, the previous one the receiver still accepts while a rotation settles, and a retired one
//! the receiver no longer holds (an attacker who stole it, or a sender that never rotated, signs
//! with it). Secrets are derived from the account's name, so they need no randomness and no room
//! in seed files, and a schedule written before secrets existed replays with the same ones. They
//! are simulation secrets: nothing here is fit to protect a real endpoint.

use std::collections::BTreeMap;

use commitgap::receiver::{WebhookDelivery, secrets_setting};
use commitgap::signature::{self, DEFAULT_TOLERANCE_S, SigningSecret, WebhookHeaders};

use crate::domain::Domain;
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
/// `genuine`'s signature. Every attack that changes business data asks `domain` how (an
/// unknown type, a tampered value, another account, an invalid event); `None` when the domain
/// cannot make this attack, which is then off for it.
pub fn hostile_request(
    attack: Attack,
    genuine: WebhookDelivery,
    other_account: &str,
    domain: &dyn Domain,
    body_bytes_max: usize,
) -> Option<WebhookDelivery> {
    let account = genuine.endpoint.clone();
    let id = genuine.headers.id.clone();
    let timestamp_s: i64 = genuine.headers.timestamp.parse().unwrap_or(0);
    let body_json = || serde_json::from_slice::<serde_json::Value>(&genuine.body).unwrap_or_default();
    let resign = |body: Vec<u8>, timestamp_s: i64, generation: u32| {
        signed_delivery(&account, &id, timestamp_s, body, generation)
    };
    let resign_json =
        |json: serde_json::Value| resign(json.to_string().into_bytes(), timestamp_s, CURRENT_GENERATION);
    let request = match attack {
        Attack::ForgedSignature => {
            // A well-formed `v1` entry made with a key the attacker guessed.
            let guess = SigningSecret::from_bytes(b"an attacker's guess at the secret");
            let mut forged = genuine.clone();
            forged.headers.signature = signature::sign(&guess, &id, timestamp_s, &genuine.body);
            forged
        }
        Attack::TamperedBody => WebhookDelivery {
            body: domain.tampered_body(&body_json()).to_string().into_bytes(),
            ..genuine.clone()
        },
        Attack::StaleReplay => resign(
            genuine.body.clone(),
            timestamp_s - DEFAULT_TOLERANCE_S - 3_600,
            CURRENT_GENERATION,
        ),
        Attack::RetiredSecret => resign(genuine.body.clone(), timestamp_s, RETIRED_GENERATION),
        Attack::CrossAccount => resign_json(domain.cross_account_body(&body_json(), other_account)?),
        Attack::MalformedBody => resign(first_half(&genuine.body), timestamp_s, CURRENT_GENERATION),
        Attack::OversizedBody => resign(
            padded_to(genuine.body.clone(), body_bytes_max.saturating_add(1)),
            timestamp_s,
            CURRENT_GENERATION,
        ),
        Attack::UnknownType => resign_json(domain.unknown_type_body(&body_json())?),
        Attack::InvalidEvent => resign_json(invalid_event(&body_json(), &id, domain)),
        Attack::ReusedEventId => {
            let mut json = body_json();
            let created_ms = json
                .get("created_ms")
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0);
            json["created_ms"] = (created_ms + 1).into();
            resign_json(json)
        }
    };
    Some(request)
}

/// The attacks `domain` cannot make from `event`'s body, each with why, for the coverage
/// report: a domain declares no event type it refuses, or its bodies name no account.
pub fn attacks_left_out(domain: &dyn Domain, event: &crate::workload::EventSpec) -> Vec<(Attack, String)> {
    let body = serde_json::from_str::<serde_json::Value>(&domain.body(event)).unwrap_or_default();
    let mut left_out = Vec::new();
    if domain.unknown_type_body(&body).is_none() {
        left_out.push((
            Attack::UnknownType,
            format!(
                "domain {} names no event type its receiver refuses (Domain::unknown_type_body)",
                domain.name()
            ),
        ));
    }
    if domain.cross_account_body(&body, "acct-elsewhere").is_none() {
        left_out.push((
            Attack::CrossAccount,
            format!(
                "domain {} writes no account into its bodies (Domain::cross_account_body)",
                domain.name()
            ),
        ));
    }
    left_out
}

/// The first half of the JSON document in `body`: half of the document, not of a body padded
/// with whitespace after it, whose first half would still be the whole document.
fn first_half(body: &[u8]) -> Vec<u8> {
    let document = body.trim_ascii_end();
    document[..document.len() / 2].to_vec()
}

/// `event` made invalid by one of its domain's rules; which rule is chosen by the delivery's
/// id, so a run's attacks try them all.
fn invalid_event(event: &serde_json::Value, webhook_id: &str, domain: &dyn Domain) -> serde_json::Value {
    let rule = webhook_id.bytes().map(u64::from).sum::<u64>();
    domain.invalid_body(event, rule)
}

/// `body`, a JSON document, followed by as many spaces as make it exactly `length_bytes` long;
/// `body` as it is when it is not JSON or is that long already. Whitespace after a JSON value is
/// part of the document (RFC 8259), so every parser reads the same value, and a receiver with a
/// strict schema, one that refuses fields it does not know, still accepts it: only the size
/// changes.
pub fn padded_to(mut body: Vec<u8>, length_bytes: usize) -> Vec<u8> {
    if body.len() >= length_bytes || serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
        return body;
    }
    body.resize(length_bytes, b' ');
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_padded_to_exactly_the_length_asked_and_reads_as_the_same_json() {
        let body = br#"{"account":"acct-a","type":"payment.succeeded"}"#.to_vec();
        for length in [200, 65_536, 65_537] {
            let padded = padded_to(body.clone(), length);
            assert_eq!(padded.len(), length);
            let json: serde_json::Value = serde_json::from_slice(&padded).unwrap();
            assert_eq!(json["account"], "acct-a");
            assert_eq!(json["type"], "payment.succeeded");
        }
        assert_eq!(
            padded_to(body.clone(), 10),
            body,
            "too long already: left as it is"
        );
        assert_eq!(
            padded_to(b"{\"a\":".to_vec(), 100),
            b"{\"a\":".to_vec(),
            "not JSON"
        );
        let strict: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&padded_to(body.clone(), 500)).unwrap();
        assert_eq!(strict.len(), 2, "no field is added");
    }

    #[test]
    fn the_oversized_attack_is_one_byte_over_the_declared_limit() {
        let genuine = signed_delivery(
            "acct-a",
            "msg_1",
            1_000,
            br#"{"account":"acct-a","type":"payment.succeeded"}"#.to_vec(),
            CURRENT_GENERATION,
        );
        let payments = crate::domain::payments();
        for limit in [1_000, 65_536, 1 << 20] {
            let oversized = hostile_request(
                Attack::OversizedBody,
                genuine.clone(),
                "acct-b",
                &*payments,
                limit,
            )
            .unwrap();
            assert_eq!(oversized.body.len(), limit + 1);
        }
    }

    /// Payments, but a business whose bodies name the account under another field and that
    /// declares no event type it refuses: the framework must invent neither.
    struct Quiet;

    impl crate::domain::Domain for Quiet {
        fn name(&self) -> &str {
            "quiet"
        }
        fn description(&self) -> &str {
            "payments with an org field and no refused type"
        }
        fn rules(&self) -> Vec<String> {
            Vec::new()
        }
        fn draw(
            &self,
            seed: u64,
            settings: &crate::shape::WorkloadSettings,
        ) -> (crate::workload::Fixtures, Vec<crate::workload::EventSpec>) {
            crate::domain::payments().draw(seed, settings)
        }
        fn event_type(&self, event: &crate::workload::EventSpec) -> String {
            crate::domain::payments().event_type(event)
        }
        fn model(&self, workload: &crate::workload::Workload) -> crate::domain::Model {
            crate::domain::payments().model(workload)
        }
        fn may_become(&self, before: &crate::rows::EntityState, after: &crate::rows::EntityState) -> bool {
            crate::domain::payments().may_become(before, after)
        }
        fn refusal(
            &self,
            workload: &crate::workload::Workload,
            event: &crate::workload::EventSpec,
        ) -> Option<crate::domain::Refusal> {
            crate::domain::payments().refusal(workload, event)
        }
        fn operation_of(&self, payload: &str) -> Result<String, String> {
            crate::domain::payments().operation_of(payload)
        }
    }

    #[test]
    fn an_attack_the_domain_cannot_make_is_never_made_up() {
        let genuine = |body: &str| {
            signed_delivery(
                "acct-a",
                "msg_1",
                1_000,
                body.as_bytes().to_vec(),
                CURRENT_GENERATION,
            )
        };
        let with_account = r#"{"account":"acct-a","id":"evt-1","type":"invoice.paid"}"#;
        let with_org = r#"{"id":"evt-1","org":"acct-a","type":"invoice.paid"}"#;
        // No type is made up for a domain that names none, however common the genuine one is.
        assert_eq!(
            hostile_request(Attack::UnknownType, genuine(with_account), "acct-b", &Quiet, 100),
            None
        );
        // Another account goes where the body keeps its account, and nowhere else.
        let cross =
            hostile_request(Attack::CrossAccount, genuine(with_account), "acct-b", &Quiet, 100).unwrap();
        assert!(String::from_utf8_lossy(&cross.body).contains(r#""account":"acct-b""#));
        assert_eq!(
            hostile_request(Attack::CrossAccount, genuine(with_org), "acct-b", &Quiet, 100),
            None
        );
        // The rest need nothing of the business but what every body has.
        for attack in Attack::ALL {
            if ![Attack::UnknownType, Attack::CrossAccount].contains(&attack) {
                assert!(
                    hostile_request(attack, genuine(with_org), "acct-b", &Quiet, 100).is_some(),
                    "{}",
                    attack.name()
                );
            }
        }
        let mut event = crate::workload::EventSpec::new("acct-a", "tenant-a", "order-1", "payment", 5);
        event.event_id = "evt-1".to_owned();
        let left_out: Vec<Attack> = attacks_left_out(&Quiet, &event)
            .into_iter()
            .map(|(attack, _)| attack)
            .collect();
        assert_eq!(left_out, [Attack::UnknownType]);
        assert!(attacks_left_out(&crate::domain::payments::Payments, &event).is_empty());
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
