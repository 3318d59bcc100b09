//! Any bytes as a seed file: reading never panics, and a file the reader accepts runs against the
//! reference system without a panic, within its bounds, and without an invariant failure (a file
//! the reader accepts describes a world in which the reference is correct).
//!
//! Run from the repository root with `cargo fuzz run seed_file fuzz/corpus/seed_file seeds`, so
//! that the committed seed files seed the corpus. Phases are cut to a few thousand steps to keep
//! the fuzzer fast; a shorter run is still one the reference must pass, and a run cut off before
//! it settles is not a failure.

#![no_main]

use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::sweep::SeedFile;
use commitgap_sim::systems;

/// The most steps of each phase a fuzzed run takes.
const PHASE_STEPS_MAX: u64 = 4_000;

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let Ok(file) = SeedFile::parse(bytes) else {
        return;
    };
    let reference = systems::by_name("reference").expect("the reference is registered");
    let mut runs = vec![(file.config.clone(), None)];
    if let Some(shrunk) = &file.shrunk {
        runs.push((shrunk.config.clone(), Some(shrunk.schedule.clone())));
    }
    for (mut config, schedule) in runs {
        config.fault_phase_steps_max = config.fault_phase_steps_max.min(PHASE_STEPS_MAX);
        config.liveness_steps_max = config.liveness_steps_max.min(PHASE_STEPS_MAX);
        let options = RunOptions {
            config: Some(config),
            schedule,
            ..RunOptions::default()
        };
        let outcome = run_seed(&reference, file.seed, &options).expect("an accepted file runs");
        assert!(outcome.steps <= 2 * PHASE_STEPS_MAX + 1, "{} steps", outcome.steps);
        if let Some(failure) = outcome.failure {
            panic!(
                "a file the reader accepted fails the reference: {} at step {}: {}",
                failure.invariant, failure.step, failure.message
            );
        }
    }
});
