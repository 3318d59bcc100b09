//! The receiver against anything a network can deliver: arbitrary bytes, headers and JSON, signed
//! or not, for any endpoint, at any clock distance. It never panics, and it never changes state
//! or answers success for anything but a genuine, authorized, valid event.
//!
//! The receiver runs on a small `Env` of this test's own: an in-memory SQLite database with the
//! reference schema, a fixed clock and a fixed configuration. The receiver never sleeps or calls
//! the provider, and this `Env` fails the test if it tries.

use std::collections::BTreeMap;

use commitgap::env::{DbError, Env, LocalBoxFuture, Row, Value, int, text};
use commitgap::provider::{CallError, ProviderCall, ProviderReply};
use commitgap::realtime::{block_on, query_rows};
use commitgap::receiver::{
    CHARGE_REFUNDED, ORDER_CANCELLED, ORDER_UPDATED, PAYMENT_SUCCEEDED, WebhookDelivery, WebhookEvent,
    receive, secrets_setting,
};
use commitgap::schema::{INSERT_ACCOUNT_SQL, INSERT_ORDER_SQL, SCHEMA_SQL};
use commitgap::signature::{DEFAULT_TOLERANCE_S, SigningSecret, WebhookHeaders, sign};
use proptest::prelude::*;
use rusqlite::Connection;

const NOW_S: i64 = 1_760_000_000;

fn secret(account: &str) -> SigningSecret {
    SigningSecret::from_bytes(format!("secret of {account}").as_bytes())
}

struct TestEnv {
    connection: Connection,
    settings: BTreeMap<String, String>,
}

impl TestEnv {
    fn new() -> TestEnv {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(SCHEMA_SQL).unwrap();
        for (account, tenant) in [("acct-a", "tenant-a"), ("acct-b", "tenant-b")] {
            query_rows(&connection, INSERT_ACCOUNT_SQL, &[text(account), text(tenant)]).unwrap();
            query_rows(
                &connection,
                INSERT_ORDER_SQL,
                &[text(tenant), text("order-1"), int(1250), int(0)],
            )
            .unwrap();
        }
        let settings = ["acct-a", "acct-b"]
            .iter()
            .map(|account| (secrets_setting(account), secret(account).to_string()))
            .collect();
        TestEnv { connection, settings }
    }

    /// Everything the receiver can change, as text.
    fn state(&self) -> String {
        let mut state = String::new();
        for sql in [
            "SELECT account, event_id FROM receipts ORDER BY account, event_id",
            "SELECT tenant, id, status, amount_cents FROM orders ORDER BY tenant, id",
            "SELECT operation_key, payload, status FROM outbox ORDER BY operation_key",
        ] {
            state.push_str(&format!(
                "{:?}\n",
                query_rows(&self.connection, sql, &[]).unwrap()
            ));
        }
        state
    }
}

impl Env for TestEnv {
    fn process_id(&self) -> &str {
        "receiver-1#1"
    }

    fn now_ms(&self) -> i64 {
        NOW_S * 1_000 + 500
    }

    fn execute<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<usize, DbError>> {
        let result = self
            .connection
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute(rusqlite::params_from_iter(params)))
            .map_err(DbError::from);
        Box::pin(std::future::ready(result))
    }

    fn query<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<Vec<Row>, DbError>> {
        Box::pin(std::future::ready(query_rows(&self.connection, sql, params)))
    }

    fn sleep_ms(&self, _duration_ms: i64) -> LocalBoxFuture<'_, ()> {
        panic!("the receiver slept")
    }

    fn call_provider<'a>(
        &'a self,
        call: &'a ProviderCall,
    ) -> LocalBoxFuture<'a, Result<ProviderReply, CallError>> {
        panic!("the receiver called the provider: {call:?}")
    }

    fn log(&self, _message: &str) {}

    fn setting(&self, name: &str) -> Option<String> {
        self.settings.get(name).cloned()
    }
}

/// Bodies from raw bytes through arbitrary JSON to events that are almost, or exactly, valid.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        Just("acct-a".to_owned()),
        Just("acct-b".to_owned()),
        Just("order-1".to_owned()),
        Just("evt-1".to_owned()),
        Just(String::new()),
        ".{0,8}",
        "[a-z]{129}",
    ];
    let kind = prop_oneof![
        Just(PAYMENT_SUCCEEDED.to_owned()),
        Just(CHARGE_REFUNDED.to_owned()),
        Just(ORDER_CANCELLED.to_owned()),
        Just(ORDER_UPDATED.to_owned()),
        ".{0,12}",
    ];
    let amount = prop_oneof![
        Just(None),
        any::<i64>().prop_map(Some),
        (1i64..100_000).prop_map(Some)
    ];
    let event = (
        name.clone(),
        kind,
        name.clone(),
        name,
        amount,
        any::<i64>(),
        0i64..1_000_000,
    )
        .prop_map(
            |(id, kind, account, order, amount, wild_created_ms, created_ms)| {
                let mut json = serde_json::json!({
                    "id": id, "type": kind, "account": account, "order": order,
                    "created_ms": if wild_created_ms % 4 == 0 { wild_created_ms } else { created_ms },
                });
                if let Some(amount) = amount {
                    json["amount_cents"] = amount.into();
                }
                json.to_string().into_bytes()
            },
        );
    let json = any::<BTreeMap<String, Option<i64>>>().prop_map(|map| serde_json::to_vec(&map).unwrap());
    prop_oneof![
        6 => event,
        1 => json,
        1 => proptest::collection::vec(any::<u8>(), 0..300),
        1 => Just(vec![b'x'; 70_000]),
    ]
}

/// Headers either made correctly for the endpoint's account (at a clock distance), or arbitrary.
#[derive(Debug, Clone)]
enum Signing {
    Genuine { offset_s: i64 },
    WrongSecret,
    Arbitrary(WebhookHeaders),
}

fn signing() -> impl Strategy<Value = Signing> {
    prop_oneof![
        4 => (-2 * DEFAULT_TOLERANCE_S..2 * DEFAULT_TOLERANCE_S).prop_map(|offset_s| Signing::Genuine { offset_s }),
        1 => Just(Signing::WrongSecret),
        1 => (".{0,20}", ".{0,12}", ".{0,80}")
            .prop_map(|(id, timestamp, signature)| Signing::Arbitrary(WebhookHeaders { id, timestamp, signature })),
    ]
}

fn endpoint() -> impl Strategy<Value = String> {
    prop_oneof![4 => Just("acct-a".to_owned()), 1 => Just("acct-b".to_owned()), 1 => ".{0,10}"]
}

proptest! {
    #![proptest_config(commitgap_sim::harness::repeatable_config(400))]

    #[test]
    fn only_a_genuine_authorized_valid_event_changes_anything(
        endpoint in endpoint(),
        signing in signing(),
        body in body(),
    ) {
        let env = TestEnv::new();
        let before = env.state();
        let headers = match &signing {
            Signing::Genuine { offset_s } => {
                let timestamp_s = NOW_S + offset_s;
                let account = if endpoint == "acct-b" { "acct-b" } else { "acct-a" };
                WebhookHeaders {
                    id: "msg_1".into(),
                    timestamp: timestamp_s.to_string(),
                    signature: sign(&secret(account), "msg_1", timestamp_s, &body),
                }
            }
            Signing::WrongSecret => WebhookHeaders {
                id: "msg_1".into(),
                timestamp: NOW_S.to_string(),
                signature: sign(&secret("someone else"), "msg_1", NOW_S, &body),
            },
            Signing::Arbitrary(headers) => headers.clone(),
        };
        let delivery = WebhookDelivery { endpoint: endpoint.clone(), headers, body: body.clone() };
        let answer = block_on(receive(&env, &delivery));
        let genuine = matches!(signing, Signing::Genuine { offset_s } if offset_s.abs() <= DEFAULT_TOLERANCE_S)
            && (endpoint == "acct-a" || endpoint == "acct-b")
            && body.len() <= commitgap::receiver::DEFAULT_BODY_BYTES_MAX;
        let authorized_event = genuine
            && WebhookEvent::parse_bytes(&body).is_ok_and(|event| event.account == endpoint);
        if !authorized_event {
            prop_assert_eq!(env.state(), before, "answer {}", answer);
            prop_assert!(!answer.is_success(), "answer {}", answer);
            prop_assert!(answer.is_permanent_failure(), "refused for good, not retried: {}", answer);
        }
        if !genuine {
            prop_assert!(answer.is_refused_at_the_door() || answer.status() == 422, "answer {}", answer);
        }
    }
}

#[test]
fn the_genuine_case_the_property_allows_does_change_state() {
    let env = TestEnv::new();
    let before = env.state();
    let body = br#"{"id":"evt-1","type":"payment.succeeded","account":"acct-a","order":"order-1","amount_cents":1250,"created_ms":1}"#.to_vec();
    let headers = WebhookHeaders {
        id: "msg_1".into(),
        timestamp: (NOW_S + DEFAULT_TOLERANCE_S).to_string(),
        signature: sign(&secret("acct-a"), "msg_1", NOW_S + DEFAULT_TOLERANCE_S, &body),
    };
    let answer = block_on(receive(
        &env,
        &WebhookDelivery {
            endpoint: "acct-a".into(),
            headers,
            body,
        },
    ));
    assert!(answer.is_success(), "{answer}");
    assert_ne!(env.state(), before, "the payment was applied");
}
