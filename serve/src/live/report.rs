//! What a live run ends with: the verdict, the counts a person reads in the summary, and the
//! JSON report written beside the run's database and logs.
//!
//! The summary is a few lines; a failure carries its evidence and the one command that runs the
//! same seed again. This module must not decide the verdict: it writes down what the run and
//! the invariants decided.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every invariant judged held.
    Pass,
    /// At least one invariant failed.
    Fail,
    /// The sender, the outbox or the provider did not go quiet within the bound; the liveness
    /// invariants were not judged.
    Unsettled,
    /// Ctrl-C stopped the run before its verdict.
    Interrupted,
}

/// What happened, counted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    /// Streams (an event for one subscription) the sender delivered.
    pub deliveries: usize,
    /// Attempts the sender made, duplicates not counted.
    pub attempts: usize,
    /// Concurrent duplicates posted beside an attempt.
    pub duplicates: usize,
    /// The operator's manual redeliveries, after heal, of streams the sender gave up on.
    pub redeliveries: usize,
    /// Attempts that got no answer (refused, reset, dropped, timed out).
    pub unanswered: usize,
    /// Processes that killed themselves at a statement (crash points).
    pub crashes: usize,
    /// Processes killed with SIGKILL from outside.
    pub kills: usize,
    /// Processes paused with SIGSTOP.
    pub pauses: usize,
    /// Connections the proxies reset.
    pub resets: u64,
    /// Answers the proxies dropped after the receiver did its work.
    pub dropped_answers: u64,
    /// Purge runs with a short retention.
    pub early_purges: usize,
    /// Purge runs on the job's own schedule.
    pub purges: usize,
    /// Processes that ended on their own during the run (each was started again).
    pub unplanned_exits: usize,
    /// Obligations the operator's requeue found dead.
    pub requeued: usize,
    /// Effects the provider double performed.
    pub effects: usize,
    /// Committed transactions the commit journal held, each judged.
    pub commits: usize,
}

/// One invariant's failure.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// The invariant's name.
    pub invariant: String,
    /// Its evidence.
    pub evidence: String,
}

/// The whole outcome, as the report writes it.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub system: String,
    pub seed: u64,
    pub seconds: u64,
    pub receivers: usize,
    pub relay_workers: usize,
    pub faults: Vec<String>,
    pub preset: String,
    pub compression: u32,
    pub verdict: Verdict,
    pub failures: Vec<Failure>,
    /// Why the run is unsettled, when it is.
    pub unsettled: Option<String>,
    /// The invariants judged.
    pub judged: Vec<String>,
    /// The invariants not judged, each with why.
    pub left_out: Vec<(String, String)>,
    pub counts: Counts,
    /// What the faults did and when, one line each, in seconds from the start.
    pub fault_log: Vec<String>,
    /// The command that runs this seed again.
    pub reproduce: String,
    /// The run's directory: database, process logs, this report.
    pub directory: PathBuf,
    /// How long the run took, in seconds.
    pub elapsed_s: f64,
}

impl Outcome {
    /// The exit status of this outcome.
    pub fn exit_code(&self) -> i32 {
        match self.verdict {
            Verdict::Pass => 0,
            Verdict::Fail | Verdict::Unsettled => 1,
            Verdict::Interrupted => 130,
        }
    }

    /// Writes `report.json` in the run's directory; its path.
    pub fn write(&self) -> Result<PathBuf, String> {
        let path = self.directory.join("report.json");
        let text = serde_json::to_string_pretty(self)
            .map_err(|error| format!("cannot write the report: {error}"))?;
        write_file(&path, &text)?;
        Ok(path)
    }

    /// The summary a person reads.
    pub fn summary(&self, report: &Path) -> String {
        let counts = &self.counts;
        let mut lines = vec![
            format!(
                "live {}: seed {}, {} s of faults ({}), {} receivers, {} relay workers, sender {} at {}x",
                self.system,
                self.seed,
                self.seconds,
                if self.faults.is_empty() {
                    "none".to_owned()
                } else {
                    self.faults.join(", ")
                },
                self.receivers,
                self.relay_workers,
                self.preset,
                self.compression
            ),
            format!(
                "  deliveries {}: {} attempts, {} duplicates, {} redeliveries after heal, {} unanswered",
                counts.deliveries, counts.attempts, counts.duplicates, counts.redeliveries, counts.unanswered
            ),
            format!(
                "  faults: {} crashes at a statement, {} kills, {} pauses, {} connections reset, {} answers lost, {} early purges ({} on schedule), {} unplanned exits",
                counts.crashes,
                counts.kills,
                counts.pauses,
                counts.resets,
                counts.dropped_answers,
                counts.early_purges,
                counts.purges,
                counts.unplanned_exits
            ),
            format!(
                "  effects {} at the provider; {} commits judged one by one; {} obligations requeued by the operator; {:.1} s in all",
                counts.effects, counts.commits, counts.requeued, self.elapsed_s
            ),
        ];
        let verdict = match self.verdict {
            Verdict::Pass => format!("  verdict: pass ({} invariants judged)", self.judged.len()),
            Verdict::Fail => format!(
                "  verdict: FAIL ({} of {} invariants)",
                self.failures.len(),
                self.judged.len()
            ),
            Verdict::Unsettled => format!(
                "  verdict: unsettled: {}",
                self.unsettled.as_deref().unwrap_or("no quiet within the bound")
            ),
            Verdict::Interrupted => "  verdict: interrupted".to_owned(),
        };
        lines.push(verdict);
        for failure in &self.failures {
            lines.push(format!("  {}: {}", failure.invariant, failure.evidence));
        }
        lines.push(format!("  report: {}", report.display()));
        if self.verdict != Verdict::Pass {
            lines.push(format!("  reproduce: {}", self.reproduce));
        }
        lines.join("\n")
    }
}

/// Writes `text` to `path`, with a full disk named as such.
pub fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|error| file_error("write", path, &error))
}

/// The one line for a file that could not be written or created: a full disk says so and what
/// to do.
pub fn file_error(action: &str, path: &Path, error: &std::io::Error) -> String {
    if error.raw_os_error() == Some(libc::ENOSPC) {
        format!(
            "cannot {action} {}: the disk is full; free some space or choose another --out",
            path.display()
        )
    } else {
        format!("cannot {action} {}: {error}", path.display())
    }
}
