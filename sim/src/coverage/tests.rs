//! The coverage module's unit tests: situation names and the fault models they need, and when
//! each probe counts a situation.

use super::*;

#[test]
fn names_are_unique_and_needs_name_registered_fault_models() {
    let names: BTreeSet<&str> = Situation::ALL.into_iter().map(Situation::name).collect();
    assert_eq!(names.len(), Situation::ALL.len());
    for situation in Situation::ALL {
        assert_eq!(Situation::from_name(situation.name()), Some(situation));
        for fault in situation.needs() {
            assert!(
                faults::built_in().iter().any(|kind| kind.name == *fault),
                "{}: {fault}",
                situation.name()
            );
        }
    }
}

#[test]
fn a_situation_of_one_domain_is_no_gap_in_a_sweep_of_another() {
    let mut coverage = SweepCoverage::default();
    let never_refunded = |coverage: &SweepCoverage| {
        coverage
            .warnings()
            .iter()
            .any(|warning| warning.starts_with("never reached: refund-before-payment"))
    };
    let no_settings = BTreeMap::new();
    let none = BTreeMap::new();
    let payments = crate::domain::payments().situations();
    let seed = |domain, domain_situations| SeedCoverage {
        faults: &no_settings,
        faults_fired: &none,
        situations: &none,
        invariants_left_out: &[],
        attacks_left_out: &[],
        domain_situations,
        domain,
    };
    coverage.add(seed("ci", &[]));
    assert!(!never_refunded(&coverage), "{:#?}", coverage.warnings());
    assert!(
        !coverage.lines()[1].contains("refund-before-payment"),
        "{:?}",
        coverage.lines()
    );
    coverage.add(seed("payments", &payments));
    assert!(never_refunded(&coverage), "{:#?}", coverage.warnings());
    assert!(
        coverage.lines()[1].ends_with("refund-before-payment 0 (in 0 seeds)"),
        "{:?}",
        coverage.lines()
    );
}

#[test]
fn an_attack_the_domain_cannot_make_is_a_note_that_says_why() {
    let mut coverage = SweepCoverage::default();
    let (no_settings, none) = (BTreeMap::new(), BTreeMap::new());
    let left_out = [(
        "unknown-type".to_owned(),
        "domain seats names no event type its receiver refuses".to_owned(),
    )];
    coverage.add(SeedCoverage {
        faults: &no_settings,
        faults_fired: &none,
        situations: &none,
        invariants_left_out: &[],
        attacks_left_out: &left_out,
        domain_situations: &[],
        domain: "seats",
    });
    assert!(
        coverage.notes().contains(
            &"not sent: the attacker's unknown-type request, since domain seats names no event type its receiver refuses".to_owned()
        ),
        "{:?}",
        coverage.notes()
    );
}

#[test]
fn the_payments_situations_need_built_in_fault_models() {
    for situation in crate::domain::payments().situations() {
        for fault in &situation.needs {
            assert!(
                faults::built_in().iter().any(|kind| kind.name == fault),
                "{}: {fault}",
                situation.name
            );
        }
    }
}

#[test]
fn a_situation_is_counted_among_the_seeds_that_had_a_fault_model_it_needs_on() {
    let mut coverage = SweepCoverage::default();
    let lost_ack_on: BTreeMap<String, serde_json::Value> = [(
        faults::lost_ack::KIND.name.to_owned(),
        serde_json::json!({"enabled": true}),
    )]
    .into();
    let lost_ack_off: BTreeMap<String, serde_json::Value> = [(
        faults::lost_ack::KIND.name.to_owned(),
        serde_json::json!({"enabled": false}),
    )]
    .into();
    let reached: BTreeMap<String, u64> = [(Situation::ProviderReplyLost.name().to_owned(), 2)].into();
    let none = BTreeMap::new();
    for (faults, situations) in [
        (&lost_ack_on, &reached),
        (&lost_ack_on, &none),
        (&lost_ack_on, &none),
        (&lost_ack_off, &none),
    ] {
        coverage.add(SeedCoverage {
            faults,
            faults_fired: &none,
            situations,
            invariants_left_out: &[],
            attacks_left_out: &[],
            domain_situations: &[],
            domain: "payments",
        });
    }
    let line = coverage
        .lines()
        .into_iter()
        .find(|line| line.starts_with("coverage: reached in the seeds"))
        .expect("the line is printed once a fault model was on");
    assert!(line.contains("provider-reply-lost 33% (1 of 3)"), "{line}");
    assert!(!line.contains("busy-on-begin"), "it needs no fault model: {line}");
}

#[test]
fn warnings_say_why_a_situation_was_never_reached() {
    let mut coverage = SweepCoverage {
        seeds: 3,
        ..SweepCoverage::default()
    };
    coverage.faults_fired.get_mut("crash").unwrap().on_in_seeds = 2;
    let warnings = coverage.warnings();
    assert!(
        warnings
            .contains(&"never reached: crash-inside-transaction (the crash fault fired 0 times)".to_owned()),
        "{warnings:#?}"
    );
    assert!(
        warnings.contains(
            &"never reached: purge-then-redelivery (the receipt-purge fault fired 0 times; it was off in every seed)"
                .to_owned()
        ),
        "{warnings:#?}"
    );
    coverage.faults_fired.get_mut("crash").unwrap().count = 4;
    coverage.faults_fired.get_mut("crash").unwrap().seeds = 1;
    assert!(
        coverage.warnings().contains(
            &"never reached: crash-inside-transaction (crash fired 4 times in 1 seed, but never led there)"
                .to_owned()
        ),
        "{:#?}",
        coverage.warnings()
    );
    assert!(
        coverage
            .warnings()
            .contains(&"never fired: lost-ack (a webhook answer or a provider reply is lost after the work was done; it was off in every seed)".to_owned())
    );
}

#[test]
fn a_model_that_acts_only_on_faulty_systems_gets_a_note_not_a_warning() {
    let mut coverage = SweepCoverage {
        seeds: 3,
        ..SweepCoverage::default()
    };
    coverage
        .faults_fired
        .get_mut("payload-mismatch")
        .unwrap()
        .on_in_seeds = 3;
    assert!(
        !coverage
            .warnings()
            .iter()
            .any(|warning| warning.contains("payload-mismatch")),
        "{:#?}",
        coverage.warnings()
    );
    // provider-double-execute, the other model of its kind, never fired either.
    assert_eq!(
        coverage.notes(),
        [
            "never fired: payload-mismatch (the provider silently replays the old response for a reused key with a new payload); it acts only on what a correct system never does, so a sweep of one never sees it fire",
            "never fired: provider-double-execute (the provider executes a request whose key is still in progress, and the first acts too); it acts only on what a correct system never does, so a sweep of one never sees it fire"
        ]
    );
    assert!(
        coverage
            .lines()
            .iter()
            .any(|line| line.starts_with("coverage: note: never fired: payload-mismatch"))
    );
    coverage.faults_fired.get_mut("payload-mismatch").unwrap().count = 1;
    coverage
        .faults_fired
        .get_mut("provider-double-execute")
        .unwrap()
        .count = 1;
    assert!(coverage.notes().is_empty());
    let noted: Vec<&str> = faults::built_in()
        .into_iter()
        .filter(|kind| kind.acts_only_on_faulty_systems)
        .map(|kind| kind.name)
        .collect();
    assert_eq!(
        noted,
        ["payload-mismatch", "provider-double-execute"],
        "every other model can fire against a correct system"
    );
}
