//! The provider double keeps the wire contract the HTTP client speaks, and misbehaves as real
//! providers do: keys forgotten at their lifetime, 409 while a key is in progress, slow acts and
//! lost replies that leave the caller with an ambiguous timeout while the effect exists.

mod common;

use std::time::Duration;

use commitgap_serve::provider::HttpProvider;
use commitgap_serve::provider_double::{LedgerEffect, Misbehaviour, ProviderDouble};
use commitgap_sim::commitgap::provider::{CallError, ProviderReply, ProviderRequest};
use commitgap_sim::commitgap::realtime::ProviderClient;
use commitgap_sim::rng::Ratio;
use common::Server;

/// Serves `double` on a free port while `test` runs with a client for it.
fn with_double(double: &ProviderDouble, test: impl FnOnce(&HttpProvider, &str)) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = Server::start(&runtime, double.router());
    test(&HttpProvider::new(&server.base).unwrap(), &server.base);
    server.stop(&runtime);
}

fn send(key: &str, payload: &str) -> ProviderRequest {
    ProviderRequest::Send {
        idempotency_key: key.to_owned(),
        payload: payload.to_owned(),
    }
}

fn lookup(key: &str) -> ProviderRequest {
    ProviderRequest::Lookup {
        idempotency_key: key.to_owned(),
    }
}

fn accepted(effect_id: &str, replayed: bool) -> Result<ProviderReply, CallError> {
    Ok(ProviderReply::Accepted {
        effect_id: effect_id.to_owned(),
        replayed,
    })
}

#[test]
fn a_key_is_kept_for_its_lifetime_a_retry_after_it_is_a_second_effect_and_a_lookup_still_finds_the_first() {
    let double = ProviderDouble::new(
        Misbehaviour {
            key_lifetime_ms: 1_000,
            ..Misbehaviour::default()
        },
        1,
    );
    with_double(&double, |provider, base| {
        assert_eq!(provider.call(&lookup("k-1"), 1_000), Ok(ProviderReply::NotFound));
        assert_eq!(provider.call(&send("k-1", "{}"), 1_000), accepted("eff-1", false));
        assert_eq!(provider.call(&send("k-1", "{}"), 1_000), accepted("eff-1", true));
        assert_eq!(
            provider.call(&lookup("k-1"), 1_000),
            Ok(ProviderReply::Found {
                effect_id: "eff-1".to_owned()
            })
        );
        std::thread::sleep(Duration::from_millis(1_200));
        // The key is forgotten, the effect is not: a lookup still finds it, as the simulator's
        // provider's does, and a send performs it again.
        assert_eq!(
            provider.call(&lookup("k-1"), 1_000),
            Ok(ProviderReply::Found {
                effect_id: "eff-1".to_owned()
            })
        );
        assert_eq!(provider.call(&send("k-1", "{}"), 1_000), accepted("eff-2", false));
        let ledger: Vec<LedgerEffect> = serde_json::from_str(
            &ureq::get(&format!("{base}/ledger"))
                .call()
                .unwrap()
                .into_string()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(ledger, double.effects());
        assert_eq!(ledger.len(), 2, "the forgotten key's retry was performed again");
    });
}

#[test]
fn a_slow_send_times_out_its_caller_meets_a_retry_with_409_and_still_acts() {
    let double = ProviderDouble::new(
        Misbehaviour {
            slow: Ratio::new(1, 1),
            slow_ms: 1_000,
            ..Misbehaviour::default()
        },
        2,
    );
    with_double(&double, |provider, _| {
        assert_eq!(provider.call(&send("k-1", "{}"), 100), Err(CallError::Timeout));
        assert_eq!(
            provider.call(&send("k-1", "{}"), 100),
            Ok(ProviderReply::Conflict)
        );
        std::thread::sleep(Duration::from_millis(1_500));
        assert_eq!(
            double.effects().len(),
            1,
            "the provider acted after its caller gave up"
        );
        assert_eq!(provider.call(&send("k-1", "{}"), 1_000), accepted("eff-1", true));
    });
}

#[test]
fn a_lost_reply_leaves_the_effect_and_an_ambiguous_timeout() {
    let double = ProviderDouble::new(
        Misbehaviour {
            lost_reply: Ratio::new(1, 1),
            slow_ms: 400,
            ..Misbehaviour::default()
        },
        3,
    );
    with_double(&double, |provider, _| {
        assert_eq!(provider.call(&send("k-1", "{}"), 100), Err(CallError::Timeout));
        assert_eq!(double.effects().len(), 1);
        assert_eq!(provider.call(&send("k-1", "{}"), 1_000), accepted("eff-1", true));
    });
}

#[test]
fn without_a_key_lock_a_request_that_overtakes_one_in_progress_acts_too() {
    let double = ProviderDouble::new(
        Misbehaviour {
            slow: Ratio::new(1, 1),
            slow_ms: 600,
            double_execute: true,
            ..Misbehaviour::default()
        },
        3,
    );
    with_double(&double, |provider, _| {
        assert_eq!(provider.call(&send("k-1", "{}"), 100), Err(CallError::Timeout));
        // The first request is still in progress: this one is executed instead of refused.
        assert_eq!(provider.call(&send("k-1", "{}"), 100), Err(CallError::Timeout));
        std::thread::sleep(Duration::from_millis(1_500));
        let keys: Vec<String> = double
            .effects()
            .into_iter()
            .map(|effect| effect.idempotency_key)
            .collect();
        assert_eq!(keys, ["k-1", "k-1"], "two effects under one key");
        // The store kept the first result; once nothing is in progress a retry replays it.
        assert_eq!(provider.call(&send("k-1", "{}"), 1_000), accepted("eff-1", true));
        double.heal();
        assert!(double.keys_in_progress().is_empty());
    });
}
