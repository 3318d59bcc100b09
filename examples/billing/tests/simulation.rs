//! The billing service's simulation as part of `cargo test`: the domain is consistent on its own,
//! the correct service passes every seed file kept in `seeds/` and then 200 fresh seeds, and each
//! planted bug fails a check within 100 seeds.
//!
//! These tests must never make the simulation easier for the correct service (no invariant or
//! fault model turned off, no narrowed workload): a failure here is a finding, replayed with the
//! command its message prints. Planted bugs write their seed files to a scratch directory, since
//! `seeds/` holds regressions the correct service must pass.

use commitgap_sim::domain::check_domain;
use commitgap_sim::harness::Check;

use billing::domain::Subscriptions;

/// Seeds the correct service must pass on every `cargo test`.
const CASES: u64 = 200;

/// Seeds within which every planted bug must be caught.
const PLANTED_BUDGET: u64 = 100;

#[test]
fn the_domain_is_consistent_on_its_own() {
    assert_eq!(check_domain(&Subscriptions), Ok(()));
}

#[test]
fn the_billing_service_survives_the_simulation() {
    billing::app()
        .check()
        .seeds_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/seeds"))
        .cases(CASES)
        .run();
}

/// Checks planted bug `name` over [`PLANTED_BUDGET`] seeds and returns the failure message;
/// panics if it passes.
fn failure_of(name: &str) -> String {
    let app = billing::app();
    let system = app
        .find(name)
        .unwrap_or_else(|| panic!("billing-sim has no system {name}"));
    assert!(app.is_planted(name), "{name} is not registered as a planted bug");
    let seeds_dir = std::env::temp_dir().join(format!("billing-planted-{name}-{}", std::process::id()));
    // One failure is the proof; stopping there keeps the test to a second or so. The budget is
    // this test's own, whatever COMMITGAP_SEED says for another test's sake.
    let outcome = Check::of_app(&app, system)
        .ignore_environment()
        .seeds_dir(&seeds_dir)
        .cases(PLANTED_BUDGET)
        .max_failures(1)
        .shrink_max(1)
        .try_run();
    let _ = std::fs::remove_dir_all(&seeds_dir);
    match outcome {
        Ok(report) => panic!(
            "planted bug {name} passed {} seeds: the simulation lost its power over it",
            report.seeds
        ),
        Err(message) => message,
    }
}

/// Asserts that the failure of planted bug `name` names one of `invariants`.
fn assert_caught_by(name: &str, invariants: &[&str]) {
    let message = failure_of(name);
    assert!(
        invariants.iter().any(|invariant| message.contains(invariant)),
        "{name} failed, but not by any of {invariants:?}:\n{message}"
    );
}

#[test]
fn last_arrival_wins_is_caught() {
    // An older plan version arriving late moves the plan back.
    assert_caught_by(
        "billing-last-arrival-wins",
        &[
            "state-moves-along-allowed-transitions",
            "final-state-matches-creation-order",
        ],
    );
}

#[test]
fn restore_on_first_is_caught() {
    // A payment arriving before the failure it follows never restores access; a payment created
    // before a failure that arrived first restores it for nothing.
    assert_caught_by(
        "billing-restore-on-first",
        &[
            "receipt-commits-with-its-work",
            "owed-operation-settles",
            "only-owed-operations-take-effect",
        ],
    );
}

#[test]
fn receipt_outside_is_caught() {
    // The receipt commits alone, before the business step's transaction.
    assert_caught_by(
        "billing-receipt-outside",
        &["receipt-commits-with-its-work", "every-event-processed"],
    );
}
