//! A declared domain judges as the Rust one it declares: the payments file's model matches the
//! payments domain's on the Rust domain's own workloads, its draws pass the domain checks, and
//! every bad file is said in one line that names the field.

use std::collections::BTreeSet;

use super::DeclaredDomain;
use crate::domain::payments::Payments;
use crate::domain::{Domain, EntityState, Model, Owing, WorkloadSettings, check_domain};
use crate::rng::Ratio;
use crate::workload::Workload;

const PAYMENTS: &str = include_str!("../../../../examples/domains/payments.toml");
const CI: &str = include_str!("../../../../examples/domains/ci.toml");

fn settings(variant: u64) -> WorkloadSettings {
    WorkloadSettings {
        tenants: 1 + (variant % 3) as u32,
        subjects_per_tenant: 4 + (variant % 7) as u32,
        emit_window_ms: 60_000,
        completed_subjects: Ratio::new(4, 5),
        updates_per_subject: (variant % 5 == 0).then_some((0, 4)),
        racing_subjects: if variant % 2 == 0 {
            Ratio::new(1, 2)
        } else {
            Ratio::new(0, 1)
        },
        edge_values: variant % 4 == 0,
    }
}

/// The declared model against the Rust one on one workload: the same final states, the same
/// operations owed as surely, and every payload the declared model allows one the Rust model
/// allows (the Rust model allows any amount the order ever had; the file, the amount the
/// payment carried or the order's when the payment was applied).
fn same_judgement(declared: &Model, rust: &Model, seed: u64) {
    assert_eq!(
        declared.final_states, rust.final_states,
        "seed {seed}: final states"
    );
    let keys = |model: &Model| model.owed.keys().cloned().collect::<BTreeSet<String>>();
    assert_eq!(keys(declared), keys(rust), "seed {seed}: operations owed");
    for (key, owed) in &declared.owed {
        let expected = &rust.owed[key];
        assert_eq!(owed.owing, expected.owing, "seed {seed}: {key} owed as surely");
        assert_eq!(
            owed.events, expected.events,
            "seed {seed}: {key} owed by the same events"
        );
        for payload in &owed.payloads {
            let allowed = expected
                .payloads
                .iter()
                .any(|rust_payload| crate::provider::same_payload(rust_payload, payload));
            assert!(
                allowed,
                "seed {seed}: {key}: {payload} is not among {:?}",
                expected.payloads
            );
        }
    }
}

#[test]
fn the_declared_payments_model_matches_the_rust_one_on_its_workloads() {
    let declared = DeclaredDomain::parse(PAYMENTS).unwrap();
    let mut possibly = 0;
    for seed in 0..400 {
        let (fixtures, events) = Payments.draw(seed, &settings(seed));
        let workload = Workload::new(fixtures, events);
        let rust = Payments.model(&workload);
        same_judgement(&declared.model(&workload), &rust, seed);
        possibly += rust
            .owed
            .values()
            .filter(|owed| owed.owing == Owing::Possibly)
            .count();
    }
    // The comparison reached the races, where arrival order decides.
    assert!(possibly > 20, "only {possibly} operations owed possibly");
}

#[test]
fn the_declared_domains_pass_the_domain_checks() {
    for text in [PAYMENTS, CI] {
        let domain = DeclaredDomain::parse(text).unwrap();
        check_domain(&domain).unwrap_or_else(|error| panic!("{}: {error}", domain.name()));
    }
}

#[test]
fn transitions_and_payloads_read_as_the_rust_domain_reads_them() {
    let declared = DeclaredDomain::parse(PAYMENTS).unwrap();
    let states = ["awaiting_payment", "paid", "refunded", "cancelled"];
    for before in states {
        for after in states {
            let (before, after) = (EntityState::named(before), EntityState::named(after));
            assert_eq!(
                declared.may_become(&before, &after),
                Payments.may_become(&before, &after),
                "{before} -> {after}"
            );
        }
    }
    let payload =
        r#"{"amount_cents":1250,"operation":"fulfill","order":"order-1","tenant":"tenant-a","version":1}"#;
    assert_eq!(declared.operation_of(payload), Payments.operation_of(payload));
    assert!(
        declared
            .operation_of(r#"{"operation":"ship","order":"o","tenant":"t","version":1,"amount_cents":1}"#)
            .is_err()
    );
    assert!(declared.operation_of("[1]").is_err());
    let ci = DeclaredDomain::parse(CI).unwrap();
    let check_run = r#"{"head_sha":"abc1234","operation":"check-run","repository":"tenant-a/repo-1"}"#;
    assert_eq!(
        ci.operation_of(check_run).as_deref(),
        Ok("tenant-a/repo-1/check-run/abc1234")
    );
}

/// Every bad file: what it changes, and words its one-line error must hold.
#[test]
fn every_bad_domain_file_is_said_in_one_line_that_names_the_field() {
    let cases = [
        ("not TOML", "name = \n".to_owned(), "TOML parse error"),
        ("an unknown field", PAYMENTS.replace("subject_key = \"order\"", "subject_key = \"order\"\ncolour = 1"), "colour"),
        ("an initial state not listed", PAYMENTS.replace("initial = \"awaiting_payment\"", "initial = \"new\""), "initial"),
        ("a move to an unknown state", PAYMENTS.replace("to = \"cancelled\"", "to = \"void\""), "events.cancel"),
        ("an unknown operation owed", PAYMENTS.replace("owes = \"fulfill\"", "owes = \"ship\""), "events.payment"),
        ("a field set but not declared", PAYMENTS.replace("sets_newest = [\"amount_cents\"]", "sets_newest = [\"total\"]"), "total"),
        ("a key from a field no payload has", PAYMENTS.replace("/v{version}\"", "/v{revision}\""), "operations.fulfill"),
        ("an unknown placeholder in a payload", PAYMENTS.replace("order = \"{subject}\", operation = \"fulfill\", version = 1, amount_cents = \"{event.amount_cents}\"", "order = \"{order}\", operation = \"fulfill\", version = 1, amount_cents = \"{event.amount_cents}\""), "{order}"),
        ("a story of an unknown event", PAYMENTS.replace("events = [\"cancel\"]", "events = [\"void\"]"), "draw.stories"),
        ("a carried field never drawn", PAYMENTS.replace("\"update.amount_cents\" = { between = [100, 100000] }", ""), "draw.values"),
        ("a chance over one", PAYMENTS.replace("share = [1, 4]", "share = [5, 4]"), "draw.extras.share"),
        ("a subject name without its number", PAYMENTS.replace("subject = \"order-{n}\"", "subject = \"order\""), "draw.subject"),
    ];
    for (what, text, says) in cases {
        let error = DeclaredDomain::parse(&text).expect_err(what);
        assert!(!error.contains('\n'), "{what}: more than one line: {error}");
        assert!(error.contains(says), "{what}: {error:?} does not say {says:?}");
    }
}
