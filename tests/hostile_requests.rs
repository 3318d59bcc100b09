//! Nothing gets in: every kind of hostile request, and a genuine delivery with a clock a little
//! ahead or far off, as deterministic scenarios on the reference system, and on the planted bugs
//! that break the door (so that the invariants that judge it are shown to fail when they must).

use std::sync::Arc;

use commitgap::receiver::{Answer, DEFAULT_BODY_BYTES_MAX};
use commitgap_sim::domain::Domain;
#[allow(unused_imports)]
use commitgap_sim::domain::payments::{AMOUNT, CANCEL, PAYMENT, Payments, REFUND, UPDATE};
use commitgap_sim::faults::Attack;
use commitgap_sim::peers::{CURRENT_GENERATION, hostile_request, signed_delivery};
use commitgap_sim::run::EventSpec;
use commitgap_sim::run::Origin;
use commitgap_sim::run::{Scenario, ScenarioSetup};
use commitgap_sim::system::{Fixtures, SubjectFixture, System};
use commitgap_sim::systems::ReferenceSystem;
use commitgap_sim::systems::planted::{FutureTimestampRejected, UnverifiedSignature};

/// The request of `attack` copied from `genuine`, as the simulated attacker makes it for a
/// payments receiver.
fn hostile(
    attack: Attack,
    genuine: commitgap::receiver::WebhookDelivery,
) -> commitgap::receiver::WebhookDelivery {
    hostile_request(attack, genuine, "acct-b", &Payments, DEFAULT_BODY_BYTES_MAX)
        .expect("payments makes every attack")
}

fn payment() -> EventSpec {
    {
        let mut event = EventSpec::new("acct-a", "tenant-a", "order-1", PAYMENT, 0);
        event.event_id = String::from("evt-1");
        event.deliver_at_ms = 0;
        if commitgap_sim::domain::payments::carries_amount(&event.kind) {
            event = event.with(AMOUNT, 1250);
        }
        event
    }
}

fn scenario(system: impl System + 'static) -> Scenario {
    let fixtures = Fixtures {
        accounts: vec![
            ("acct-a".into(), "tenant-a".into()),
            ("acct-b".into(), "tenant-b".into()),
        ],
        subjects: ["tenant-a", "tenant-b"]
            .iter()
            .map(|tenant| SubjectFixture::new(tenant, "order-1").with(AMOUNT, 1250))
            .collect(),
    };
    Scenario::new(
        Arc::new(system),
        fixtures,
        vec![payment()],
        ScenarioSetup::default(),
    )
    .unwrap()
}

/// The sender's delivery of the payment, signed at `timestamp_s`.
fn genuine(timestamp_s: i64) -> commitgap::receiver::WebhookDelivery {
    signed_delivery(
        "acct-a",
        "msg_evt-1",
        timestamp_s,
        Payments.body(&payment()).into_bytes(),
        CURRENT_GENERATION,
    )
}

/// Sends `webhook` as coming from `origin`, runs to quiet, and returns the answer.
fn send(scenario: &mut Scenario, webhook: commitgap::receiver::WebhookDelivery, origin: Origin) -> Answer {
    let task = scenario
        .deliver_webhook(1, webhook, "acct-a", "evt-1", origin)
        .unwrap();
    scenario.run_until_quiet().unwrap();
    scenario.answer(task).expect("the handler answered")
}

fn rows_written(scenario: &Scenario) -> i64 {
    scenario.count("SELECT count(*) FROM receipts").unwrap()
        + scenario.count("SELECT count(*) FROM outbox").unwrap()
        + scenario
            .count("SELECT count(*) FROM orders WHERE status != 'awaiting_payment'")
            .unwrap()
}

#[test]
fn only_an_attack_that_keeps_the_genuine_signature_reads_it() {
    for attack in Attack::ALL {
        let signed = hostile(attack, genuine(0));
        let mut unsigned = genuine(0);
        unsigned.headers.signature = String::new();
        let from_unsigned = hostile(attack, unsigned);
        assert_eq!(
            signed == from_unsigned,
            !attack.keeps_genuine_signature(),
            "{}: the simulator builds this attack from an unsigned delivery unless it keeps the signature",
            attack.name()
        );
    }
}

#[test]
fn every_hostile_request_is_refused_with_its_status_and_changes_nothing() {
    for attack in Attack::ALL {
        let mut scenario = scenario(ReferenceSystem::reference());
        let mut rows_before = 0;
        if attack == Attack::ReusedEventId {
            // Reusing an id is an attack only once the receiver holds the id's receipt.
            let answer = send(&mut scenario, genuine(0), Origin::Sender { timestamp_s: 0 });
            assert!(answer.is_success(), "{answer}");
            rows_before = rows_written(&scenario);
        }
        let request = hostile(attack, genuine(0));
        let answer = send(
            &mut scenario,
            request,
            Origin::Hostile {
                attack: attack.name().into(),
            },
        );
        let expected = match attack {
            Attack::CrossAccount => 403,
            Attack::OversizedBody => 413,
            Attack::MalformedBody | Attack::UnknownType | Attack::InvalidEvent | Attack::ReusedEventId => 422,
            _ => 401,
        };
        assert_eq!(answer.status(), expected, "{}: {answer}", attack.name());
        assert_eq!(
            rows_written(&scenario),
            rows_before,
            "{}: nothing is written",
            attack.name()
        );
        assert!(
            scenario.failures().is_empty(),
            "{}: {:?}",
            attack.name(),
            scenario.failures()
        );
        // The genuine delivery still gets through afterwards.
        let answer = send(&mut scenario, genuine(0), Origin::Sender { timestamp_s: 0 });
        assert!(answer.is_success(), "{}: {answer}", attack.name());
    }
}

#[test]
fn every_rule_an_invalid_event_breaks_is_refused_for_its_own_reason() {
    // The rule an `invalid-event` request breaks follows from the delivery's id; ids that differ
    // in their last character walk through all six. An empty id and an empty order share a reason.
    let mut reasons = std::collections::BTreeSet::new();
    let mut bodies = std::collections::BTreeSet::new();
    for last in b'0'..=b'9' {
        let webhook_id = format!("msg_evt-{}", char::from(last));
        let genuine = signed_delivery(
            "acct-a",
            &webhook_id,
            0,
            Payments.body(&payment()).into_bytes(),
            CURRENT_GENERATION,
        );
        let mut scenario = scenario(ReferenceSystem::reference());
        let request = hostile(Attack::InvalidEvent, genuine);
        bodies.insert(String::from_utf8_lossy(&request.body).into_owned());
        let answer = send(
            &mut scenario,
            request,
            Origin::Hostile {
                attack: Attack::InvalidEvent.name().into(),
            },
        );
        assert_eq!(answer.status(), 422, "{webhook_id}: {answer}");
        assert_eq!(rows_written(&scenario), 0, "{webhook_id}: nothing is written");
        assert!(scenario.failures().is_empty(), "{:?}", scenario.failures());
        reasons.insert(answer.to_string());
    }
    assert_eq!(bodies.len(), 6, "every rule is tried: {bodies:#?}");
    assert_eq!(
        reasons.len(),
        5,
        "each rule is refused for its reason: {reasons:#?}"
    );
}

#[test]
fn a_receiver_that_skips_verification_is_caught_by_the_invariants() {
    let mut caught = Vec::new();
    for attack in [
        Attack::ForgedSignature,
        Attack::StaleReplay,
        Attack::RetiredSecret,
        Attack::CrossAccount,
    ] {
        let mut scenario = scenario(ReferenceSystem::new(UnverifiedSignature));
        let request = hostile(attack, genuine(0));
        send(
            &mut scenario,
            request,
            Origin::Hostile {
                attack: attack.name().into(),
            },
        );
        let failure = scenario
            .failures()
            .first()
            .map(|failure| failure.invariant.clone());
        caught.push((attack.name(), failure));
    }
    for (attack, failure) in &caught {
        assert!(
            matches!(
                failure.as_deref(),
                Some("hostile-delivery-changes-nothing" | "hostile-delivery-refused")
            ),
            "{attack}: {caught:?}"
        );
    }
}

#[test]
fn a_sender_clock_within_the_tolerance_is_accepted_and_beyond_it_refused() {
    // 200 s ahead: within the five minutes, so it must be taken.
    let mut reference = scenario(ReferenceSystem::reference());
    let answer = send(&mut reference, genuine(200), Origin::Sender { timestamp_s: 200 });
    assert!(answer.is_success(), "{answer}");
    assert!(reference.failures().is_empty(), "{:?}", reference.failures());

    // 400 s ahead: beyond it, refused, and that is no invariant's failure.
    let mut reference = scenario(ReferenceSystem::reference());
    let answer = send(&mut reference, genuine(400), Origin::Sender { timestamp_s: 400 });
    assert_eq!(answer.status(), 401, "{answer}");
    assert_eq!(rows_written(&reference), 0);
    assert!(reference.failures().is_empty(), "{:?}", reference.failures());

    // A receiver that allows no clock ahead of its own refuses the first and is caught.
    let mut strict = scenario(ReferenceSystem::new(FutureTimestampRejected));
    let answer = send(&mut strict, genuine(200), Origin::Sender { timestamp_s: 200 });
    assert_eq!(answer.status(), 401, "{answer}");
    let failure = strict.failures().first().expect("the refusal is caught");
    assert_eq!(
        failure.invariant, "genuine-delivery-accepted",
        "{}",
        failure.message
    );
}
