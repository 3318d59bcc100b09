//! Webhook signatures as the Standard Webhooks specification defines them: signing a delivery and
//! verifying one before the receiver acts on it.
//!
//! A delivery carries three headers. `webhook-id` names the message (the same id on every retry),
//! `webhook-timestamp` says when it was sent in Unix seconds, and `webhook-signature` holds one or
//! more space-separated `v1,<base64>` entries. A `v1` entry is the HMAC-SHA256 of
//! `{webhook-id}.{webhook-timestamp}.{body}` over the raw body bytes, keyed with a secret that the
//! sender and the receiver share and write as `whsec_<base64 of the key bytes>`. Several entries and
//! several configured secrets let either side rotate its secret without dropping deliveries. The
//! timestamp is signed too, so a tolerance window bounds how long a captured delivery can be replayed.
//!
//! This module must not read a clock: the caller passes `now_s`, so the same code runs under the
//! simulator's virtual clock and the real one. It must not compare signatures with `==` (the
//! comparison is the constant-time one of the `hmac` crate), must not hold cryptography of its own,
//! and must not panic on anything a sender can put in a header or a body.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The header that names the message; it stays the same across retries of one message.
pub const ID_HEADER: &str = "webhook-id";
/// The header with the time of sending, in Unix seconds, written in decimal.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// The header with the space-separated list of `version,signature` entries.
pub const SIGNATURE_HEADER: &str = "webhook-signature";
/// How a signing secret is written: this prefix, then the key bytes in base64.
pub const SECRET_PREFIX: &str = "whsec_";
/// The tolerance the specification's reference libraries use: five minutes either way.
pub const DEFAULT_TOLERANCE_S: i64 = 5 * 60;

/// The only signature scheme this module knows. Entries with any other version are skipped, so a
/// sender can add a newer scheme next to `v1` without breaking receivers that do not know it yet.
const V1_VERSION: &str = "v1";
/// An HMAC-SHA256 tag is 32 bytes.
const V1_SIGNATURE_BYTES: usize = 32;
/// 32 bytes in padded base64: 43 symbols and one `=`. Checking the length before decoding means an
/// oversized entry costs nothing to reject.
const V1_SIGNATURE_BASE64_CHARS: usize = 44;
/// The longest text any `i64` is written as: `-9223372036854775808`.
const LONGEST_I64_CHARS: usize = 20;

/// A shared key that signs and verifies deliveries.
///
/// `Debug` shows only the key's length, so a secret does not end up in logs by accident; `Display`
/// writes the full `whsec_` form, because that is how a secret is written into configuration.
#[derive(Clone)]
pub struct SigningSecret {
    key: Vec<u8>,
    /// The HMAC state after absorbing the key, worked out once: it costs two SHA-256 blocks, as
    /// much as signing a short delivery, and it is the same for every message.
    keyed: std::sync::OnceLock<HmacSha256>,
}

impl SigningSecret {
    /// Reads a secret written as `whsec_<base64 of the key bytes>` (standard alphabet, padded).
    ///
    /// Anything else is refused rather than guessed at: a secret without the prefix, with
    /// surrounding whitespace, or with no key bytes is almost always a configuration mistake, and
    /// accepting it would make every delivery fail to verify with no hint why.
    pub fn parse(text: &str) -> Result<SigningSecret, SecretError> {
        let encoded = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::MissingPrefix)?;
        let key = BASE64.decode(encoded).map_err(|_| SecretError::InvalidBase64)?;
        if key.is_empty() {
            return Err(SecretError::EmptyKey);
        }
        // Prepared on first use: a receiver parses every held secret but usually needs one.
        Ok(SigningSecret {
            key,
            keyed: std::sync::OnceLock::new(),
        })
    }

    /// Wraps raw key bytes, for example freshly generated ones. It does not judge the key's
    /// strength; the specification recommends 24 to 64 random bytes. An empty key is accepted here
    /// but its `whsec_` text is refused by [`SigningSecret::parse`].
    pub fn from_bytes(bytes: &[u8]) -> SigningSecret {
        let secret = SigningSecret {
            key: bytes.to_vec(),
            keyed: std::sync::OnceLock::new(),
        };
        // Prepared now, so that copies of a secret that is kept and reused share the work.
        secret.keyed_mac();
        secret
    }

    /// The HMAC-SHA256 state after the key, worked out on first use.
    fn keyed_mac(&self) -> &HmacSha256 {
        // HMAC takes a key of any length (longer ones are hashed first), so this cannot fail.
        self.keyed
            .get_or_init(|| HmacSha256::new_from_slice(&self.key).expect("HMAC takes a key of any length"))
    }

    /// An HMAC-SHA256 that has already absorbed `{id}.{timestamp}.{body}`, ready to be finalized
    /// or compared. The timestamp is passed as the exact text that goes into the signed content.
    fn mac_over(&self, id: &str, timestamp_text: &str, body: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed_mac().clone();
        // Feeding the parts one by one signs the same bytes as the joined string without copying
        // the body.
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp_text.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

impl fmt::Display for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SECRET_PREFIX}{}", BASE64.encode(&self.key))
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningSecret")
            .field("key_bytes", &self.key.len())
            .finish_non_exhaustive()
    }
}

/// Why a secret's text was refused. The messages never repeat the secret itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretError {
    /// The text does not start with `whsec_`.
    MissingPrefix,
    /// What follows `whsec_` is not padded standard base64.
    InvalidBase64,
    /// Nothing follows `whsec_`.
    EmptyKey,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::MissingPrefix => write!(f, "signing secret does not start with `{SECRET_PREFIX}`"),
            SecretError::InvalidBase64 => write!(
                f,
                "signing secret is not padded standard base64 after `{SECRET_PREFIX}` (stray whitespace?)"
            ),
            SecretError::EmptyKey => write!(f, "signing secret has no key bytes after `{SECRET_PREFIX}`"),
        }
    }
}

impl std::error::Error for SecretError {}

/// The values of the three signature headers as they arrived. A header that was not sent is an
/// empty string here; [`verify`] reports it as missing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookHeaders {
    /// The `webhook-id` value.
    pub id: String,
    /// The `webhook-timestamp` value: Unix seconds in decimal.
    pub timestamp: String,
    /// The `webhook-signature` value: space-separated `version,signature` entries.
    pub signature: String,
}

/// Signs one delivery and returns the `webhook-signature` entry, `v1,<base64>`.
///
/// To sign with several secrets during a rotation, call this once per secret and join the entries
/// with spaces.
pub fn sign(secret: &SigningSecret, id: &str, timestamp_s: i64, body: &[u8]) -> String {
    let timestamp_text = timestamp_s.to_string();
    let tag = secret.mac_over(id, &timestamp_text, body).finalize().into_bytes();
    format!("{V1_VERSION},{}", BASE64.encode(tag))
}

/// Why a delivery was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyError {
    /// No secret is configured, so no delivery could ever verify: a configuration mistake.
    NoSecrets,
    /// The tolerance is negative, so no timestamp could ever be accepted: a configuration mistake.
    NegativeTolerance { tolerance_s: i64 },
    /// A header was not sent, or was sent empty (only whitespace, for `webhook-signature`).
    MissingHeader { name: &'static str },
    /// `webhook-timestamp` is not an integer written plainly in decimal.
    InvalidTimestamp,
    /// The message was sent more than the tolerance before `now_s`. The age is exact: the distance
    /// between any two `i64` values fits in a `u64`.
    TooOld { age_s: u64, tolerance_s: i64 },
    /// The message claims to be sent more than the tolerance after `now_s`.
    TooNew { ahead_s: u64, tolerance_s: i64 },
    /// `webhook-signature` holds no entry with version `v1`.
    NoV1Signature,
    /// There were `v1` entries, but none matches any configured secret.
    NoMatch { v1_signatures: usize },
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::NoSecrets => write!(f, "no signing secret is configured, so nothing can verify"),
            VerifyError::NegativeTolerance { tolerance_s } => {
                write!(
                    f,
                    "timestamp tolerance is {tolerance_s} s; it must be zero or more"
                )
            }
            VerifyError::MissingHeader { name } => write!(f, "header `{name}` is missing or empty"),
            VerifyError::InvalidTimestamp => {
                write!(
                    f,
                    "header `{TIMESTAMP_HEADER}` is not a plain decimal number of Unix seconds"
                )
            }
            VerifyError::TooOld { age_s, tolerance_s } => {
                write!(
                    f,
                    "message was sent {age_s} s ago, beyond the tolerance of {tolerance_s} s"
                )
            }
            VerifyError::TooNew { ahead_s, tolerance_s } => write!(
                f,
                "message timestamp is {ahead_s} s in the future, beyond the tolerance of {tolerance_s} s"
            ),
            VerifyError::NoV1Signature => write!(f, "header `{SIGNATURE_HEADER}` has no `v1` signature"),
            VerifyError::NoMatch { v1_signatures } => write!(
                f,
                "none of the {v1_signatures} `v1` signature(s) matches a configured secret"
            ),
        }
    }
}

impl std::error::Error for VerifyError {}

/// Checks that a delivery was signed with one of `secrets` and sent within `tolerance_s` seconds of
/// `now_s`, in either direction. The boundary is inclusive: a message exactly `tolerance_s` old
/// passes.
///
/// The checks run in the order that gives the most useful error: configuration, headers present,
/// timestamp readable, timestamp fresh, then signatures. Unknown signature versions and `v1`
/// entries that are not 32 bytes of padded base64 are skipped, not errors, since one bad entry
/// must not hide a good one next to it.
pub fn verify(
    secrets: &[SigningSecret],
    headers: &WebhookHeaders,
    body: &[u8],
    now_s: i64,
    tolerance_s: i64,
) -> Result<(), VerifyError> {
    if secrets.is_empty() {
        return Err(VerifyError::NoSecrets);
    }
    let tolerance_magnitude_s =
        u64::try_from(tolerance_s).map_err(|_| VerifyError::NegativeTolerance { tolerance_s })?;
    if headers.id.is_empty() {
        return Err(VerifyError::MissingHeader { name: ID_HEADER });
    }
    if headers.timestamp.is_empty() {
        return Err(VerifyError::MissingHeader {
            name: TIMESTAMP_HEADER,
        });
    }
    if headers.signature.trim_ascii().is_empty() {
        return Err(VerifyError::MissingHeader {
            name: SIGNATURE_HEADER,
        });
    }

    let timestamp_s = parse_timestamp_s(&headers.timestamp).ok_or(VerifyError::InvalidTimestamp)?;
    // `abs_diff` is exact for any two `i64` values, so huge or negative timestamps cannot overflow.
    let distance_s = now_s.abs_diff(timestamp_s);
    if distance_s > tolerance_magnitude_s {
        return Err(if timestamp_s < now_s {
            VerifyError::TooOld {
                age_s: distance_s,
                tolerance_s,
            }
        } else {
            VerifyError::TooNew {
                ahead_s: distance_s,
                tolerance_s,
            }
        });
    }

    let (v1_signatures, candidate_tags) = parse_signature_header(&headers.signature);
    if v1_signatures == 0 {
        return Err(VerifyError::NoV1Signature);
    }
    // With nothing decodable to compare against, hashing the body would be wasted work.
    if !candidate_tags.is_empty() {
        for secret in secrets {
            // One pass over the body per secret; each candidate then costs only a finalization.
            // The header text is signed as received: `parse_timestamp_s` accepted it only in the
            // one form that `sign` writes, so this is the same content the sender signed.
            let mac = secret.mac_over(&headers.id, &headers.timestamp, body);
            for tag in &candidate_tags {
                // `verify_slice` compares in constant time, so the time taken does not reveal how
                // many leading bytes of a forged signature were right.
                if mac.clone().verify_slice(tag).is_ok() {
                    return Ok(());
                }
            }
        }
    }
    Err(VerifyError::NoMatch { v1_signatures })
}

/// Reads `webhook-timestamp`, accepting only the form `i64`'s `Display` writes (an optional `-`,
/// then digits with no leading zero). The signed content holds the timestamp as text, and senders
/// write that text from the number; were a second spelling of one value accepted (`+5`, `05`,
/// ` 5`), the text a receiver hashes and the number it checks for freshness could disagree with
/// what the sender signed.
fn parse_timestamp_s(text: &str) -> Option<i64> {
    // The length check comes first so that an enormous header is refused without being scanned.
    if text.len() > LONGEST_I64_CHARS {
        return None;
    }
    let value: i64 = text.parse().ok()?;
    (value.to_string() == text).then_some(value)
}

/// Splits `webhook-signature` once and returns how many entries had version `v1`, and the decoded
/// tags of those that are well-formed. Work and memory are linear in the header's length.
fn parse_signature_header(header: &str) -> (usize, Vec<[u8; V1_SIGNATURE_BYTES]>) {
    let mut v1_signatures = 0;
    let mut candidate_tags = Vec::new();
    // The specification separates entries with single spaces; accepting any run of ASCII
    // whitespace costs nothing and tolerates senders and proxies that fold headers differently.
    for entry in header.split_ascii_whitespace() {
        let Some((version, encoded)) = entry.split_once(',') else {
            continue;
        };
        if version != V1_VERSION {
            continue;
        }
        v1_signatures += 1;
        if encoded.len() != V1_SIGNATURE_BASE64_CHARS {
            continue;
        }
        let mut tag = [0u8; V1_SIGNATURE_BYTES];
        if BASE64.decode_slice(encoded, &mut tag) == Ok(V1_SIGNATURE_BYTES) {
            candidate_tags.push(tag);
        }
    }
    (v1_signatures, candidate_tags)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key bytes 0, 1, …, 31; its `whsec_` form and the known-answer signatures below were
    /// computed separately with Python's `hmac`, `hashlib` and `base64` modules.
    fn counting_secret() -> SigningSecret {
        SigningSecret::from_bytes(&(0u8..32).collect::<Vec<u8>>())
    }

    const COUNTING_SECRET_TEXT: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const NOW_S: i64 = 1_700_000_000;
    const BODY: &[u8] = br#"{"tenant":"tenant-a","order":"order-1","amount_cents":1250}"#;

    fn headers(id: &str, timestamp_s: i64, signature: &str) -> WebhookHeaders {
        WebhookHeaders {
            id: id.into(),
            timestamp: timestamp_s.to_string(),
            signature: signature.into(),
        }
    }

    fn signed(secret: &SigningSecret, id: &str, timestamp_s: i64, body: &[u8]) -> WebhookHeaders {
        headers(id, timestamp_s, &sign(secret, id, timestamp_s, body))
    }

    #[test]
    fn known_answers_pin_the_wire_format() {
        let secret = counting_secret();
        assert_eq!(secret.to_string(), COUNTING_SECRET_TEXT);
        assert_eq!(
            sign(&secret, "evt_commitgap_0001", NOW_S, BODY),
            "v1,yEuM2d0rWFZ84CGt/BLGmTcgGpxR9bsIMVD0+szeXfE="
        );
        // A body that is not UTF-8 and contains the separator: the raw bytes are what is signed.
        assert_eq!(
            sign(&secret, "evt_raw", 0, &[0xff, 0x00, b'.', 0x80]),
            "v1,GNASOHPbghFCmNuDYFdR0sbRG74owm1kpyzXI4kTh4E="
        );
        // The example message used across Standard Webhooks implementations, recomputed in Python,
        // so that interoperability with other senders is pinned and not only self-consistency.
        let example_secret = SigningSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let example_body = br#"{"test": 2432232314}"#;
        let example_signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        assert_eq!(
            sign(
                &example_secret,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                example_body
            ),
            example_signature
        );
        let example = headers("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, example_signature);
        assert_eq!(
            verify(
                &[example_secret],
                &example,
                example_body,
                1_614_265_330 + 10,
                DEFAULT_TOLERANCE_S
            ),
            Ok(())
        );
    }

    #[test]
    fn a_signed_delivery_verifies() {
        let secret = counting_secret();
        let delivery = signed(&secret, "evt_1", NOW_S, BODY);
        assert_eq!(
            verify(
                std::slice::from_ref(&secret),
                &delivery,
                BODY,
                NOW_S,
                DEFAULT_TOLERANCE_S
            ),
            Ok(())
        );
        let empty_body = signed(&secret, "evt_2", NOW_S, b"");
        assert_eq!(
            verify(&[secret], &empty_body, b"", NOW_S, DEFAULT_TOLERANCE_S),
            Ok(())
        );
    }

    #[test]
    fn secrets_round_trip_through_their_text() {
        let parsed = SigningSecret::parse(COUNTING_SECRET_TEXT).unwrap();
        assert_eq!(parsed.key, counting_secret().key);
        assert_eq!(parsed.to_string(), COUNTING_SECRET_TEXT);
    }

    #[test]
    fn tampering_with_the_body_id_or_timestamp_fails() {
        let secret = counting_secret();
        let secrets = [secret.clone()];
        let delivery = signed(&secret, "evt_1", NOW_S, BODY);
        let no_match = Err(VerifyError::NoMatch { v1_signatures: 1 });

        let mut tampered_body = BODY.to_vec();
        tampered_body[30] ^= 0x01;
        assert_eq!(
            verify(&secrets, &delivery, &tampered_body, NOW_S, DEFAULT_TOLERANCE_S),
            no_match
        );
        let mut longer_body = BODY.to_vec();
        longer_body.push(b' ');
        assert_eq!(
            verify(&secrets, &delivery, &longer_body, NOW_S, DEFAULT_TOLERANCE_S),
            no_match
        );

        let other_id = WebhookHeaders {
            id: "evt_2".into(),
            ..delivery.clone()
        };
        assert_eq!(
            verify(&secrets, &other_id, BODY, NOW_S, DEFAULT_TOLERANCE_S),
            no_match
        );

        // One second later is still fresh, so it is the signature that refuses it.
        let later = WebhookHeaders {
            timestamp: (NOW_S + 1).to_string(),
            ..delivery.clone()
        };
        assert_eq!(
            verify(&secrets, &later, BODY, NOW_S, DEFAULT_TOLERANCE_S),
            no_match
        );

        // Moving the separator between id and timestamp signs different bytes.
        let shifted = WebhookHeaders {
            id: "evt_1.1".into(),
            timestamp: "700000000".into(),
            signature: delivery.signature.clone(),
        };
        assert_eq!(
            verify(&secrets, &shifted, BODY, 700_000_000, DEFAULT_TOLERANCE_S),
            no_match
        );
    }

    #[test]
    fn a_rotated_out_secret_verifies_only_while_still_configured() {
        let old_secret = SigningSecret::from_bytes(b"the secret before the rotation");
        let new_secret = SigningSecret::from_bytes(b"the secret after the rotation");
        let delivery = signed(&old_secret, "evt_1", NOW_S, BODY);

        let during_rotation = [new_secret.clone(), old_secret.clone()];
        assert_eq!(
            verify(&during_rotation, &delivery, BODY, NOW_S, DEFAULT_TOLERANCE_S),
            Ok(())
        );
        assert_eq!(
            verify(
                std::slice::from_ref(&new_secret),
                &delivery,
                BODY,
                NOW_S,
                DEFAULT_TOLERANCE_S
            ),
            Err(VerifyError::NoMatch { v1_signatures: 1 })
        );

        // A sender in the middle of a rotation signs with both; either secret alone then verifies.
        let both = format!(
            "{} {}",
            sign(&old_secret, "evt_1", NOW_S, BODY),
            sign(&new_secret, "evt_1", NOW_S, BODY)
        );
        let delivery = headers("evt_1", NOW_S, &both);
        assert_eq!(
            verify(&[old_secret], &delivery, BODY, NOW_S, DEFAULT_TOLERANCE_S),
            Ok(())
        );
        assert_eq!(
            verify(&[new_secret], &delivery, BODY, NOW_S, DEFAULT_TOLERANCE_S),
            Ok(())
        );
    }

    #[test]
    fn one_matching_entry_among_several_is_enough() {
        let secret = counting_secret();
        let stranger = SigningSecret::from_bytes(b"someone else's key");
        let good = sign(&secret, "evt_1", NOW_S, BODY);
        let wrong = sign(&stranger, "evt_1", NOW_S, BODY);
        let header = format!(
            "v1,not-base64 {wrong}\t v1,AAAA  garbage v1a,{}  {good} ",
            &good[3..]
        );
        let delivery = headers("evt_1", NOW_S, &header);
        assert_eq!(
            verify(
                &[stranger.clone(), secret],
                &delivery,
                BODY,
                NOW_S,
                DEFAULT_TOLERANCE_S
            ),
            Ok(())
        );

        let without_good = headers("evt_1", NOW_S, &format!("v1,not-base64 {wrong} v1,AAAA"));
        assert_eq!(
            verify(
                &[counting_secret()],
                &without_good,
                BODY,
                NOW_S,
                DEFAULT_TOLERANCE_S
            ),
            Err(VerifyError::NoMatch { v1_signatures: 3 })
        );
    }

    #[test]
    fn the_tolerance_is_inclusive_in_both_directions() {
        let secret = counting_secret();
        let secrets = [secret.clone()];
        let tolerance_s = DEFAULT_TOLERANCE_S;

        let oldest = signed(&secret, "evt_old", NOW_S - tolerance_s, BODY);
        assert_eq!(verify(&secrets, &oldest, BODY, NOW_S, tolerance_s), Ok(()));
        let too_old = signed(&secret, "evt_old", NOW_S - tolerance_s - 1, BODY);
        assert_eq!(
            verify(&secrets, &too_old, BODY, NOW_S, tolerance_s),
            Err(VerifyError::TooOld {
                age_s: 301,
                tolerance_s
            })
        );

        let newest = signed(&secret, "evt_new", NOW_S + tolerance_s, BODY);
        assert_eq!(verify(&secrets, &newest, BODY, NOW_S, tolerance_s), Ok(()));
        let too_new = signed(&secret, "evt_new", NOW_S + tolerance_s + 1, BODY);
        assert_eq!(
            verify(&secrets, &too_new, BODY, NOW_S, tolerance_s),
            Err(VerifyError::TooNew {
                ahead_s: 301,
                tolerance_s
            })
        );

        // A zero tolerance accepts only the current second.
        let exact = signed(&secret, "evt_now", NOW_S, BODY);
        assert_eq!(verify(&secrets, &exact, BODY, NOW_S, 0), Ok(()));
        assert_eq!(
            verify(&secrets, &exact, BODY, NOW_S + 1, 0),
            Err(VerifyError::TooOld {
                age_s: 1,
                tolerance_s: 0
            })
        );
    }

    #[test]
    fn unknown_versions_are_ignored() {
        let secret = counting_secret();
        let good = sign(&secret, "evt_1", NOW_S, BODY);
        let tag = &good["v1,".len()..];
        // The right tag under another version name is not a `v1` signature and must not count.
        let only_unknown = headers("evt_1", NOW_S, &format!("v1a,{tag} v2,{tag} V1,{tag} {tag}"));
        assert_eq!(
            verify(
                std::slice::from_ref(&secret),
                &only_unknown,
                BODY,
                NOW_S,
                DEFAULT_TOLERANCE_S
            ),
            Err(VerifyError::NoV1Signature)
        );
        let unknown_then_v1 = headers("evt_1", NOW_S, &format!("v2,whatever v1a,{tag} {good}"));
        assert_eq!(
            verify(&[secret], &unknown_then_v1, BODY, NOW_S, DEFAULT_TOLERANCE_S),
            Ok(())
        );
    }

    #[test]
    fn malformed_secrets_are_refused_with_the_reason() {
        let cases = [
            (
                "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
                SecretError::MissingPrefix,
            ),
            (
                "WHSEC_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
                SecretError::MissingPrefix,
            ),
            (
                " whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
                SecretError::MissingPrefix,
            ),
            ("", SecretError::MissingPrefix),
            ("whsec_", SecretError::EmptyKey),
            (
                "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
                SecretError::InvalidBase64,
            ),
            (
                "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
                SecretError::InvalidBase64,
            ),
            (
                "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8-",
                SecretError::InvalidBase64,
            ),
            ("whsec_not base64!", SecretError::InvalidBase64),
        ];
        for (text, expected) in cases {
            assert_eq!(
                SigningSecret::parse(text).map(|_| ()),
                Err(expected),
                "secret text {text:?}"
            );
        }
        let message = SecretError::InvalidBase64.to_string();
        assert!(message.contains("whsec_") && !message.contains('\n'), "{message}");
    }

    #[test]
    fn malformed_headers_give_the_right_error() {
        let secret = counting_secret();
        let secrets = [secret.clone()];
        let good = signed(&secret, "evt_1", NOW_S, BODY);
        let check = |headers: WebhookHeaders| verify(&secrets, &headers, BODY, NOW_S, DEFAULT_TOLERANCE_S);

        assert_eq!(
            check(WebhookHeaders {
                id: String::new(),
                ..good.clone()
            }),
            Err(VerifyError::MissingHeader { name: ID_HEADER })
        );
        assert_eq!(
            check(WebhookHeaders {
                timestamp: String::new(),
                ..good.clone()
            }),
            Err(VerifyError::MissingHeader {
                name: TIMESTAMP_HEADER
            })
        );
        assert_eq!(
            check(WebhookHeaders {
                signature: " \t ".into(),
                ..good.clone()
            }),
            Err(VerifyError::MissingHeader {
                name: SIGNATURE_HEADER
            })
        );
        assert_eq!(
            check(WebhookHeaders {
                signature: "v1".into(),
                ..good.clone()
            }),
            Err(VerifyError::NoV1Signature)
        );
        assert_eq!(
            check(WebhookHeaders {
                signature: "v1,".into(),
                ..good.clone()
            }),
            Err(VerifyError::NoMatch { v1_signatures: 1 })
        );

        let unreadable_timestamps = [
            "now",
            "1700000000.5",
            "+1700000000",
            "01700000000",
            " 1700000000",
            "1700000000 ",
            "-0",
            "9223372036854775808",
            "1e9",
            "١٧٠٠٠٠٠٠٠٠",
        ];
        for timestamp in unreadable_timestamps {
            assert_eq!(
                check(WebhookHeaders {
                    timestamp: timestamp.into(),
                    ..good.clone()
                }),
                Err(VerifyError::InvalidTimestamp),
                "timestamp {timestamp:?}"
            );
        }
        let huge = "9".repeat(100_000);
        assert_eq!(
            check(WebhookHeaders {
                timestamp: huge,
                ..good.clone()
            }),
            Err(VerifyError::InvalidTimestamp)
        );
    }

    #[test]
    fn extreme_clocks_and_timestamps_do_not_overflow() {
        let secret = counting_secret();
        let ancient = signed(&secret, "evt_1", i64::MIN, BODY);
        assert_eq!(
            verify(
                std::slice::from_ref(&secret),
                &ancient,
                BODY,
                i64::MAX,
                DEFAULT_TOLERANCE_S
            ),
            Err(VerifyError::TooOld {
                age_s: u64::MAX,
                tolerance_s: DEFAULT_TOLERANCE_S
            })
        );
        let far_future = signed(&secret, "evt_1", i64::MAX, BODY);
        assert_eq!(
            verify(
                std::slice::from_ref(&secret),
                &far_future,
                BODY,
                i64::MIN,
                DEFAULT_TOLERANCE_S
            ),
            Err(VerifyError::TooNew {
                ahead_s: u64::MAX,
                tolerance_s: DEFAULT_TOLERANCE_S
            })
        );
        // The widest tolerance reaches exactly from the oldest timestamp to one second before the
        // epoch; there the signature decides.
        assert_eq!(
            verify(std::slice::from_ref(&secret), &ancient, BODY, -1, i64::MAX),
            Ok(())
        );
        assert_eq!(
            verify(&[secret], &ancient, BODY, 0, i64::MAX),
            Err(VerifyError::TooOld {
                age_s: 1 << 63,
                tolerance_s: i64::MAX
            })
        );
    }

    #[test]
    fn configuration_mistakes_are_reported_as_such() {
        let secret = counting_secret();
        let delivery = signed(&secret, "evt_1", NOW_S, BODY);
        assert_eq!(
            verify(&[], &delivery, BODY, NOW_S, DEFAULT_TOLERANCE_S),
            Err(VerifyError::NoSecrets)
        );
        assert_eq!(
            verify(&[secret], &delivery, BODY, NOW_S, -1),
            Err(VerifyError::NegativeTolerance { tolerance_s: -1 })
        );
    }

    #[test]
    fn errors_read_as_one_line_and_debug_hides_the_key() {
        let errors = [
            VerifyError::NoSecrets,
            VerifyError::NegativeTolerance { tolerance_s: -5 },
            VerifyError::MissingHeader { name: ID_HEADER },
            VerifyError::InvalidTimestamp,
            VerifyError::TooOld {
                age_s: 301,
                tolerance_s: 300,
            },
            VerifyError::TooNew {
                ahead_s: 301,
                tolerance_s: 300,
            },
            VerifyError::NoV1Signature,
            VerifyError::NoMatch { v1_signatures: 2 },
        ];
        for error in errors {
            let message = error.to_string();
            assert!(
                !message.is_empty() && !message.contains('\n'),
                "{error:?}: {message:?}"
            );
        }
        assert_eq!(
            VerifyError::TooOld {
                age_s: 301,
                tolerance_s: 300
            }
            .to_string(),
            "message was sent 301 s ago, beyond the tolerance of 300 s"
        );
        let debug = format!("{:?}", counting_secret());
        assert!(debug.contains("32") && !debug.contains("AAECAw"), "{debug}");
    }
}
