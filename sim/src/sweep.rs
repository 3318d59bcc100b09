//! Sweeps: many seeds against one system, over several threads.
//!
//! Each thread takes the next seed from a shared counter and runs it on its own database, so the
//! order in which seeds finish varies but each seed's outcome does not: results are sorted by seed
//! before anyone sees them. With the determinism check on, every seed runs twice and the two
//! digests must agree; on a mismatch both runs are repeated with their traces kept, and the first
//! differing line is reported. This is the one module that reads the wall clock (for throughput
//! figures) and starts threads, both strictly outside any simulated run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::db::Backend;
use crate::run::{RunOptions, RunOutcome, run_seed};
use crate::system::System;

/// What to sweep.
#[derive(Clone)]
pub struct SweepOptions {
    pub system: Arc<dyn System>,
    pub first_seed: u64,
    pub seeds: u64,
    pub jobs: usize,
    pub backend: Backend,
    pub check_determinism: bool,
}

/// Two runs of one seed that disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The first trace line (0 is the set-up line) where the runs differ.
    pub line: usize,
    pub first: String,
    pub second: String,
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct SeedResult {
    pub outcome: RunOutcome,
    pub divergence: Option<Divergence>,
}

impl SeedResult {
    pub fn failed(&self) -> bool {
        self.outcome.failure.is_some() || self.divergence.is_some()
    }
}

/// What a sweep found.
#[derive(Debug)]
pub struct SweepReport {
    pub seeds_run: u64,
    /// Failing seeds (invariant or determinism), sorted by seed.
    pub failures: Vec<SeedResult>,
    /// Seeds that could not run at all, with the reason, sorted by seed.
    pub errors: Vec<(u64, String)>,
    pub steps: u64,
    pub wall: Duration,
    /// Every seed's digest, sorted by seed (for determinism tests).
    pub digests: Vec<(u64, String)>,
}

impl SweepReport {
    pub fn seeds_per_second(&self) -> f64 {
        self.seeds_run as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Runs the sweep. `on_seed_done(done, failures)` is called after each seed, from any thread.
pub fn sweep(options: &SweepOptions, on_seed_done: &(dyn Fn(u64, u64) + Sync)) -> SweepReport {
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let steps = AtomicU64::new(0);
    let results: Mutex<Vec<Result<SeedResult, (u64, String)>>> = Mutex::new(Vec::new());
    let jobs = options.jobs.max(1).min(options.seeds.max(1) as usize);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= options.seeds {
                        break;
                    }
                    let seed = options.first_seed.wrapping_add(index);
                    let result = run_one(options, seed);
                    if let Ok(result) = &result {
                        steps.fetch_add(result.outcome.steps, Ordering::Relaxed);
                    }
                    if !matches!(&result, Ok(result) if !result.failed()) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    results
                        .lock()
                        .expect("no thread panics while holding the results")
                        .push(result);
                    let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                    on_seed_done(finished, failed.load(Ordering::Relaxed));
                }
            });
        }
    });
    let mut results = results.into_inner().expect("threads have finished");
    results.sort_by_key(|result| match result {
        Ok(result) => result.outcome.seed,
        Err((seed, _)) => *seed,
    });
    let mut report = SweepReport {
        seeds_run: options.seeds,
        failures: Vec::new(),
        errors: Vec::new(),
        steps: steps.into_inner(),
        wall: started.elapsed(),
        digests: Vec::new(),
    };
    for result in results {
        match result {
            Ok(result) => {
                report
                    .digests
                    .push((result.outcome.seed, result.outcome.digest.clone()));
                if result.failed() {
                    report.failures.push(result);
                }
            }
            Err(error) => report.errors.push(error),
        }
    }
    report
}

fn run_one(options: &SweepOptions, seed: u64) -> Result<SeedResult, (u64, String)> {
    let run_options = RunOptions {
        backend: options.backend,
        keep_trace: false,
        config: None,
    };
    let outcome = run_seed(&options.system, seed, &run_options).map_err(|error| (seed, error))?;
    let divergence = if options.check_determinism {
        let again = run_seed(&options.system, seed, &run_options).map_err(|error| (seed, error))?;
        if again.digest == outcome.digest {
            None
        } else {
            Some(locate_divergence(options, seed).map_err(|error| (seed, error))?)
        }
    } else {
        None
    };
    Ok(SeedResult { outcome, divergence })
}

/// Runs `seed` twice with traces kept and finds the first line where they differ.
fn locate_divergence(options: &SweepOptions, seed: u64) -> Result<Divergence, String> {
    let run_options = RunOptions {
        backend: options.backend,
        keep_trace: true,
        config: None,
    };
    let first = run_seed(&options.system, seed, &run_options)?
        .trace
        .unwrap_or_default();
    let second = run_seed(&options.system, seed, &run_options)?
        .trace
        .unwrap_or_default();
    Ok(first_difference(&first, &second).unwrap_or(Divergence {
        line: first.len().min(second.len()),
        first: "(the traces agreed when repeated: the divergence is intermittent)".to_owned(),
        second: String::new(),
    }))
}

/// The first line where two traces differ, if they do.
pub fn first_difference(first: &[String], second: &[String]) -> Option<Divergence> {
    let length = first.len().max(second.len());
    (0..length).find_map(|line| {
        let (left, right) = (first.get(line), second.get(line));
        (left != right).then(|| Divergence {
            line,
            first: left.cloned().unwrap_or_else(|| "(trace ended)".to_owned()),
            second: right.cloned().unwrap_or_else(|| "(trace ended)".to_owned()),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_finds_changes_and_truncation() {
        let lines = |items: &[&str]| items.iter().map(|item| (*item).to_owned()).collect::<Vec<_>>();
        assert_eq!(first_difference(&lines(&["a", "b"]), &lines(&["a", "b"])), None);
        let changed = first_difference(&lines(&["a", "b", "c"]), &lines(&["a", "x", "c"])).unwrap();
        assert_eq!(
            (changed.line, changed.first.as_str(), changed.second.as_str()),
            (1, "b", "x")
        );
        let shorter = first_difference(&lines(&["a", "b"]), &lines(&["a"])).unwrap();
        assert_eq!((shorter.line, shorter.second.as_str()), (1, "(trace ended)"));
    }
}
