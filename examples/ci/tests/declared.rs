//! The CI domain declared in a file (`examples/domains/ci.toml`) judges as this crate's Rust
//! domain: the same model on the Rust domain's own workloads, and the same verdicts on the
//! service and on its planted flaw when the file's domain is put in place of the Rust one.

use std::collections::BTreeSet;
use std::sync::Arc;

use ci::domain::Ci;
use ci::system::CiSystem;
use commitgap_sim::domain::declared::DeclaredDomain;
use commitgap_sim::domain::{Domain, Workload};
use commitgap_sim::harness::Check;
use commitgap_sim::rng::Ratio;
use commitgap_sim::run::WorkloadSettings;
use commitgap_sim::system::{System, WithDomain};

fn declared() -> Arc<DeclaredDomain> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../domains/ci.toml");
    Arc::new(DeclaredDomain::load(std::path::Path::new(path)).unwrap_or_else(|error| panic!("{error}")))
}

#[test]
fn the_declared_model_is_the_rust_model_on_the_rust_domains_workloads() {
    let declared = declared();
    let mut owed = 0;
    for seed in 0..300 {
        let settings = WorkloadSettings {
            tenants: 1 + (seed % 3) as u32,
            subjects_per_tenant: 3 + (seed % 6) as u32,
            emit_window_ms: 60_000,
            completed_subjects: Ratio::new(4, 5),
            updates_per_subject: None,
            racing_subjects: Ratio::new(1, 4),
            edge_values: seed % 4 == 0,
        };
        let (fixtures, events) = Ci.draw(seed, &settings);
        let workload = Workload::new(fixtures, events);
        let rust = Ci.model(&workload);
        let from_file = declared.model(&workload);
        assert_eq!(
            from_file.final_states, rust.final_states,
            "seed {seed}: final states"
        );
        assert_eq!(from_file.owed, rust.owed, "seed {seed}: check runs owed");
        owed += rust.owed.len();
        for event in &workload.events {
            assert_eq!(
                declared.refusal(&workload, event),
                Ci.refusal(&workload, event),
                "seed {seed}"
            );
            assert_eq!(
                declared.body(event),
                Ci.body(event),
                "seed {seed}: the body on the wire"
            );
        }
        let payloads: BTreeSet<&String> = rust.owed.values().flat_map(|owed| &owed.payloads).collect();
        for payload in payloads {
            assert_eq!(
                declared.operation_of(payload),
                Ci.operation_of(payload),
                "seed {seed}"
            );
        }
    }
    assert!(owed > 1_000, "the comparison owed only {owed} check runs");
}

fn check(system: CiSystem) -> Check {
    let in_file: Arc<dyn System> = Arc::new(WithDomain::new(Arc::new(system), declared()));
    Check::new(in_file).ignore_environment().workload(ci::shape())
}

#[test]
fn the_service_passes_and_its_flaw_fails_under_the_declared_domain() {
    let directory = std::env::temp_dir().join(format!("ci-declared-{}", std::process::id()));
    check(CiSystem {
        last_arrival_wins: false,
    })
    .seeds_dir(&directory)
    .cases(300)
    .run();
    let message = check(CiSystem {
        last_arrival_wins: true,
    })
    .seeds_dir(&directory)
    .cases(60)
    .max_failures(1)
    .try_run()
    .expect_err("a late push overwriting a newer head is caught under the declared domain too");
    assert!(
        message.contains("final-state-matches-creation-order"),
        "{message}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}
