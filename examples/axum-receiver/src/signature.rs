//! Verifying a delivery's Standard Webhooks signature before anything reads its body.
//!
//! The sender signs `"{webhook-id}.{webhook-timestamp}.{body}"` with HMAC-SHA256 under the
//! endpoint's secret and sends `v1,<base64 tag>` in `webhook-signature`, several separated by
//! spaces while it rotates secrets. A delivery is genuine when one of its tags matches one of the
//! endpoint's keys and its timestamp is within the tolerance of this clock, either way (a sender's
//! clock may run ahead as well as behind). This module must not touch the database or parse the
//! body: a delivery it refuses leaves no trace.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The three Standard Webhooks headers of one delivery, as text.
#[derive(Debug, Clone, Copy)]
pub struct SignedHeaders<'a> {
    pub id: &'a str,
    pub timestamp: &'a str,
    pub signature: &'a str,
}

/// Checks the signature of `body` under any of `keys`, at `now_s` with `tolerance_s`. The error
/// says why, for the log and the 401's body; it names no key.
pub fn verify(
    keys: &[Vec<u8>],
    headers: SignedHeaders<'_>,
    body: &[u8],
    now_s: i64,
    tolerance_s: i64,
) -> Result<(), String> {
    if keys.is_empty() {
        return Err("no signing secret is configured for this endpoint".to_owned());
    }
    if headers.id.is_empty() || headers.timestamp.is_empty() || headers.signature.trim().is_empty() {
        return Err("webhook-id, webhook-timestamp and webhook-signature are all required".to_owned());
    }
    // Digits only: the sender writes whole seconds, and a sign or spaces would let two texts
    // stand for one time while signing different bytes.
    if !headers.timestamp.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err("webhook-timestamp is not a whole number of seconds".to_owned());
    }
    let timestamp_s: i64 = headers
        .timestamp
        .parse()
        .map_err(|_| "webhook-timestamp is out of range".to_owned())?;
    if now_s.abs_diff(timestamp_s) > tolerance_s.unsigned_abs() {
        return Err(format!(
            "webhook-timestamp {timestamp_s} is more than {tolerance_s} s from this clock ({now_s})"
        ));
    }
    let tags: Vec<Vec<u8>> = headers
        .signature
        .split_whitespace()
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|encoded| BASE64.decode(encoded).ok())
        .collect();
    if tags.is_empty() {
        return Err("webhook-signature holds no readable v1 signature".to_owned());
    }
    for key in keys {
        let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
            continue;
        };
        mac.update(headers.id.as_bytes());
        mac.update(b".");
        mac.update(headers.timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        // verify_slice compares in constant time, so a forger learns nothing from how long a
        // wrong tag took to refuse.
        if tags.iter().any(|tag| mac.clone().verify_slice(tag).is_ok()) {
            return Ok(());
        }
    }
    Err("no signature matches any of the endpoint's secrets".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> String {
        let mut mac = HmacSha256::new_from_slice(key).unwrap();
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn a_genuine_delivery_passes_and_a_changed_one_does_not() {
        let (current, previous) = (b"current".to_vec(), b"previous".to_vec());
        let keys = [current.clone(), previous.clone()];
        let body = br#"{"id":"evt-1"}"#;
        let signed = |signature: &str| {
            verify(
                &keys,
                SignedHeaders {
                    id: "msg_1",
                    timestamp: "1000",
                    signature,
                },
                body,
                1_100,
                300,
            )
        };
        let by_previous = sign(&previous, "msg_1", "1000", body);
        assert!(signed(&format!("v1,AAAA {by_previous}")).is_ok());
        assert!(signed(&sign(b"retired", "msg_1", "1000", body)).is_err());
        let genuine = sign(&current, "msg_1", "1000", body);
        assert!(signed(&genuine).is_ok());
        let tampered = verify(
            &keys,
            SignedHeaders {
                id: "msg_1",
                timestamp: "1000",
                signature: &genuine,
            },
            br#"{"id":"evt-2"}"#,
            1_100,
            300,
        );
        assert!(tampered.is_err());
        let stale = verify(
            &keys,
            SignedHeaders {
                id: "msg_1",
                timestamp: "1000",
                signature: &genuine,
            },
            body,
            1_301,
            300,
        );
        assert!(stale.unwrap_err().contains("more than 300 s"));
    }
}
