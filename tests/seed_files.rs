//! Every file in `seeds/` replays and ends as the file says it expects, from every run it holds
//! (its seed, its recorded schedule, its shrunk schedule): a planted bug's seed still fails its
//! invariant, and a fixed bug's seed (expecting `passes`) still passes. A changed trace digest is
//! reported but does not fail the test: code changes move traces, and the expectation is what
//! the file promises.

use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::sweep::{self, SeedFile};
use commitgap_sim::systems;

#[test]
fn every_seed_file_ends_as_it_expects() {
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let paths = sweep::list(&directory).unwrap();
    assert!(!paths.is_empty(), "seeds/ holds at least the planted bugs' seeds");
    let mut broken = Vec::new();
    for path in paths {
        let file = SeedFile::read(&path).unwrap_or_else(|error| panic!("{error}"));
        let system = systems::by_name(&file.system)
            .unwrap_or_else(|| panic!("{}: unknown system {}", path.display(), file.system));
        let mut runs = vec![("seed", file.config.clone(), None, file.trace_digest.clone())];
        if let Some(schedule) = &file.schedule {
            runs.push((
                "schedule",
                file.config.clone(),
                Some(schedule.clone()),
                file.trace_digest.clone(),
            ));
        }
        if let Some(shrunk) = &file.shrunk {
            runs.push((
                "shrunk",
                shrunk.config.clone(),
                Some(shrunk.schedule.clone()),
                shrunk.trace_digest.clone(),
            ));
        }
        for (from, config, schedule, digest) in runs {
            let options = RunOptions {
                config: Some(config),
                schedule,
                ..RunOptions::default()
            };
            let outcome = run_seed(&system, file.seed, &options).unwrap();
            if outcome.digest != digest {
                eprintln!(
                    "note: {} replays from its {from} with a different trace digest than recorded",
                    path.display()
                );
            }
            if !file.expect.is_met_by(outcome.failure.as_ref()) {
                broken.push(format!(
                    "{} expects to {} but from its {from} got {:?}; run: {} --from {from}",
                    path.display(),
                    file.expect,
                    outcome.failure.map(|failure| failure.invariant),
                    file.replay
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
