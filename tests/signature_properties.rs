//! Properties of `commitgap::signature` over generated inputs: `verify` refuses garbage without
//! panicking, accepts what `sign` produced within the tolerance, and refuses it once any body byte,
//! the secret or the clock is wrong. These tests must not depend on anything but the generated input.

use commitgap::signature::{SigningSecret, VerifyError, WebhookHeaders, sign, verify};
use proptest::prelude::*;
use proptest::sample::Index;

/// A signature header built from entries that look almost right, so that generation reaches the
/// `v1` decoding and comparison and not only the "no comma" path: each entry is a version (known,
/// unknown or empty), a comma or not, and a value that is sometimes a well-formed tag (made by
/// signing something else with an unrelated key), sometimes of the right length, sometimes junk.
fn near_miss_signature_header() -> impl Strategy<Value = String> {
    let version = prop_oneof![
        4 => Just(String::from("v1")),
        1 => Just(String::from("v1a")),
        1 => Just(String::from("v2")),
        1 => Just(String::from("")),
        1 => "[a-zA-Z0-9]{0,3}"
    ];
    let well_formed_tag = prop::collection::vec(any::<u8>(), 1..8)
        .prop_map(|key| sign(&SigningSecret::from_bytes(&key), "other", 0, b"")["v1,".len()..].to_string());
    let value = prop_oneof![
        well_formed_tag,
        "[A-Za-z0-9+/]{43}=",
        "[A-Za-z0-9+/=_-]{0,60}",
        any::<String>()
    ];
    let separator = prop_oneof![
        Just(String::from(" ")),
        Just(String::from("  ")),
        Just(String::from("\t")),
        Just(String::from("")),
        Just(String::from("\u{a0}"))
    ];
    prop::collection::vec((version, prop::bool::weighted(0.8), value, separator), 0..6).prop_map(|entries| {
        entries
            .into_iter()
            .map(|(version, comma, value, separator)| {
                format!("{version}{}{value}{separator}", if comma { "," } else { "" })
            })
            .collect()
    })
}

/// Header values a sender could put on the wire, from plausible to arbitrary.
fn arbitrary_timestamp_header() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|seconds| seconds.to_string()),
        "[-+ 0-9]{0,25}",
        any::<String>(),
    ]
}

/// A non-empty message id of any characters, dots and whitespace included.
fn message_id() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 1..40).prop_map(String::from_iter)
}

proptest! {
    // Each case costs microseconds, and most are refused early; more cases reach the comparison.
    #![proptest_config(commitgap_sim::harness::repeatable_config(2048))]

    #[test]
    fn verify_never_panics_on_generated_input_and_never_accepts_it(
        id in any::<String>(),
        timestamp in arbitrary_timestamp_header(),
        signature in prop_oneof![4 => near_miss_signature_header(), 1 => any::<String>()],
        body in prop::collection::vec(any::<u8>(), 0..256),
        keys in prop_oneof![
            1 => Just(Vec::new()),
            6 => prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 1..4),
        ],
        now_s in any::<i64>(),
        // Half of the time the timestamp is the clock itself, and most tolerances are not negative,
        // so that generation often gets past the clock check and into the signatures.
        timestamp_is_now in any::<bool>(),
        tolerance_s in prop_oneof![any::<i64>(), Just(i64::MAX), 0i64..=600],
    ) {
        let secrets: Vec<SigningSecret> = keys.iter().map(|key| SigningSecret::from_bytes(key)).collect();
        let timestamp = if timestamp_is_now { now_s.to_string() } else { timestamp };
        let headers = WebhookHeaders { id, timestamp, signature };
        // Generated signatures match only by astronomical chance, so acceptance is a bug to report.
        let outcome = verify(&secrets, &headers, &body, now_s, tolerance_s);
        prop_assert!(outcome.is_err(), "accepted a generated header: {headers:?}");
    }

    #[test]
    fn parsing_any_secret_text_never_panics_and_round_trips_when_accepted(
        text in prop_oneof![any::<String>(), "whsec_[A-Za-z0-9+/=]{0,48}", "(whsec_)?[ -~]{0,40}"],
    ) {
        if let Ok(secret) = SigningSecret::parse(&text) {
            prop_assert_eq!(secret.to_string(), text);
        }
    }

    #[test]
    fn signed_deliveries_verify_within_the_tolerance_and_fail_when_tampered(
        id in message_id(),
        timestamp_s in any::<i64>(),
        body in prop::collection::vec(any::<u8>(), 0..512),
        key in prop::collection::vec(any::<u8>(), 1..80),
        tolerance_s in 0i64..=3_600,
        clock_offset_fraction in -1.0f64..=1.0,
        flipped_byte in any::<Index>(),
        flip_mask in 1u8..=255,
    ) {
        let secret = SigningSecret::from_bytes(&key);
        let secrets = [secret.clone()];
        // The clock is somewhere within the tolerance of the timestamp, either side. Saturation
        // near the ends of the `i64` range only moves it closer.
        let offset_s = (clock_offset_fraction * tolerance_s as f64) as i64;
        let now_s = timestamp_s.saturating_add(offset_s);
        let headers = WebhookHeaders {
            id: id.clone(),
            timestamp: timestamp_s.to_string(),
            signature: sign(&secret, &id, timestamp_s, &body),
        };
        prop_assert_eq!(verify(&secrets, &headers, &body, now_s, tolerance_s), Ok(()));

        if !body.is_empty() {
            let mut tampered = body.clone();
            tampered[flipped_byte.index(body.len())] ^= flip_mask;
            prop_assert_eq!(
                verify(&secrets, &headers, &tampered, now_s, tolerance_s),
                Err(VerifyError::NoMatch { v1_signatures: 1 })
            );
        }
    }

    #[test]
    fn a_different_secret_or_a_stale_clock_is_refused(
        id in message_id(),
        timestamp_s in -4_000_000_000i64..=4_000_000_000,
        body in prop::collection::vec(any::<u8>(), 0..256),
        key in prop::collection::vec(any::<u8>(), 1..80),
        other_key in prop::collection::vec(any::<u8>(), 1..80),
        tolerance_s in 0i64..=3_600,
        beyond_s in 1i64..=1_000_000,
    ) {
        prop_assume!(key != other_key);
        let secret = SigningSecret::from_bytes(&key);
        let headers = WebhookHeaders {
            id: id.clone(),
            timestamp: timestamp_s.to_string(),
            signature: sign(&secret, &id, timestamp_s, &body),
        };
        prop_assert_eq!(
            verify(&[SigningSecret::from_bytes(&other_key)], &headers, &body, timestamp_s, tolerance_s),
            Err(VerifyError::NoMatch { v1_signatures: 1 })
        );
        let distance_s = tolerance_s + beyond_s;
        prop_assert_eq!(
            verify(std::slice::from_ref(&secret), &headers, &body, timestamp_s + distance_s, tolerance_s),
            Err(VerifyError::TooOld { age_s: distance_s as u64, tolerance_s })
        );
        prop_assert_eq!(
            verify(&[secret], &headers, &body, timestamp_s - distance_s, tolerance_s),
            Err(VerifyError::TooNew { ahead_s: distance_s as u64, tolerance_s })
        );
    }
}
