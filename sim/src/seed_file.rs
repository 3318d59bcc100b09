//! Seed files: one JSON file per failing seed, replayed by `replay FILE` and by `cargo test`.
//!
//! A file records the format version, the seed, the system, what the file expects (`fails` with
//! an invariant, or `passes` for a fixed bug kept as a regression), the failure as found, the trace
//! digest, the command that replays it, the fault decisions that mattered and the full
//! configuration. The configuration is what a replay runs, so a file stays meaningful after the
//! way configurations are drawn from seeds changes. From format version 2 a file also holds the
//! run written down as a schedule, and, once shrunk, the shrunk run beside it; version 1 files
//! (seed and configuration only) are still read. Files are written atomically (a temporary file
//! renamed into place), so an interrupted sweep never leaves a partial file, and a file is never
//! overwritten by a different run. Reading never panics: every problem is an error message that
//! names the file and says how to fix it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::SimConfig;
use crate::run::{Failure, RunOutcome};
use crate::schedule::Schedule;
use crate::shrink::Shrunk;

/// The version this build writes.
pub const FORMAT_VERSION: u32 = 2;

/// The oldest version this build still reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;

/// What a seed file expects its replay to conclude.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Expectation {
    /// The run must fail this invariant.
    Fails { invariant: String },
    /// The run must pass every invariant (a fixed bug kept as a regression).
    Passes,
}

impl Expectation {
    /// Whether `failure` is what this expectation asks for.
    pub fn is_met_by(&self, failure: Option<&Failure>) -> bool {
        match (self, failure) {
            (Expectation::Passes, None) => true,
            (Expectation::Fails { invariant }, Some(failure)) => &failure.invariant == invariant,
            _ => false,
        }
    }
}

impl std::fmt::Display for Expectation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expectation::Fails { invariant } => write!(f, "fails {invariant}"),
            Expectation::Passes => write!(f, "passes"),
        }
    }
}

/// The contents of a seed file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedFile {
    pub format_version: u32,
    pub seed: u64,
    pub system: String,
    pub expect: Expectation,
    /// The failure as found when the file was written.
    pub failure: Option<Failure>,
    pub steps: u64,
    pub trace_digest: String,
    /// The command that replays this file.
    pub replay: String,
    pub faults_fired: BTreeMap<String, u64>,
    pub fault_log: Vec<String>,
    pub config: SimConfig,
    /// The run as found, written down step by step (absent from version 1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// The smallest run found that fails the same way, if the file was shrunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrunk: Option<ShrunkRun>,
}

/// A shrunk run: its own configuration and schedule, replayed without the seed's randomness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShrunkRun {
    pub failure: Failure,
    pub steps: u64,
    /// Fault choices left in the schedule.
    pub faults: usize,
    pub trace_digest: String,
    /// Candidate runs the shrinker tried.
    pub runs: usize,
    pub config: SimConfig,
    pub schedule: Schedule,
}

impl ShrunkRun {
    pub fn from_shrunk(shrunk: &Shrunk) -> ShrunkRun {
        let best = &shrunk.shrunk;
        ShrunkRun {
            failure: best.failure.clone(),
            steps: best.steps,
            faults: best.faults(),
            trace_digest: best.digest.clone(),
            runs: shrunk.runs,
            config: best.config.clone(),
            schedule: best.schedule.clone(),
        }
    }
}

impl SeedFile {
    /// The file for a failing (or passing) run.
    pub fn from_outcome(outcome: &RunOutcome, replay: String) -> SeedFile {
        let expect = match &outcome.failure {
            Some(failure) => Expectation::Fails {
                invariant: failure.invariant.clone(),
            },
            None => Expectation::Passes,
        };
        SeedFile {
            format_version: FORMAT_VERSION,
            seed: outcome.seed,
            system: outcome.system.clone(),
            expect,
            failure: outcome.failure.clone(),
            steps: outcome.steps,
            trace_digest: outcome.digest.clone(),
            replay,
            faults_fired: outcome.faults_fired.clone(),
            fault_log: outcome.fault_log.clone(),
            config: outcome.config.clone(),
            schedule: outcome.schedule.clone(),
            shrunk: None,
        }
    }

    /// The run a replay or a reader should look at first: the shrunk one if there is one.
    pub fn smallest(&self) -> (u64, usize) {
        match &self.shrunk {
            Some(shrunk) => (shrunk.steps, shrunk.faults),
            None => (
                self.steps,
                self.schedule.as_ref().map_or(0, Schedule::fault_count),
            ),
        }
    }

    /// Reads and checks a seed file.
    pub fn read(path: &Path) -> Result<SeedFile, String> {
        let text =
            fs::read(path).map_err(|error| format!("cannot read seed file {}: {error}", path.display()))?;
        SeedFile::parse(&text).map_err(|error| format!("seed file {}: {error}", path.display()))
    }

    /// Parses seed-file bytes.
    pub fn parse(bytes: &[u8]) -> Result<SeedFile, String> {
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|error| {
            format!("not valid JSON ({error}); restore it from version control or delete it")
        })?;
        let version = value.get("format_version").and_then(serde_json::Value::as_u64);
        match version {
            Some(version)
                if (u64::from(OLDEST_READABLE_VERSION)..=u64::from(FORMAT_VERSION)).contains(&version) => {}
            Some(version) => {
                return Err(format!(
                    "format version {version}, but this build reads versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}; replay it with the build that wrote it, or re-create it with a sweep"
                ));
            }
            None => return Err("no format_version field: this is not a seed file".to_owned()),
        }
        let file: SeedFile = serde_json::from_value(value)
            .map_err(|error| format!("malformed ({error}); restore it from version control or delete it"))?;
        file.config.validate()?;
        if let Some(shrunk) = &file.shrunk {
            shrunk
                .config
                .validate()
                .map_err(|error| format!("shrunk run: {error}"))?;
        }
        Ok(file)
    }

    /// Writes the file into `directory` atomically. Returns its path. A file of the same seed and
    /// system from a different run is kept, and this one gets a name of its own.
    pub fn write(&self, directory: &Path) -> Result<PathBuf, String> {
        fs::create_dir_all(directory)
            .map_err(|error| format!("cannot create seed directory {}: {error}", directory.display()))?;
        let base = format!("{}-{}", self.system, self.seed);
        let mut path = directory.join(format!("{base}.json"));
        let mut contents = self.clone();
        if let Ok(existing) = SeedFile::read(&path) {
            if existing.trace_digest != self.trace_digest {
                let short = self.trace_digest.get(..8).unwrap_or(&self.trace_digest);
                path = directory.join(format!("{base}-{short}.json"));
            } else if contents.shrunk.is_none() {
                // The same run written again without shrinking keeps the shrunk run it had.
                contents.shrunk = existing.shrunk;
            }
        }
        contents.replay = replay_command(&path);
        contents.write_to(&path)?;
        Ok(path)
    }

    /// Writes the file at `path` atomically: a temporary file beside it, flushed to disk, then
    /// renamed into place, so a reader sees the old file or the new one, never a part.
    pub fn write_to(&self, path: &Path) -> Result<(), String> {
        use std::io::Write;
        let text = serde_json::to_string_pretty(self).expect("seed files are plain data") + "\n";
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path
            .file_name()
            .map_or_else(|| "seed".into(), |name| name.to_string_lossy().into_owned());
        let temporary = directory.join(format!(".{name}.tmp-{}", std::process::id()));
        let written = fs::File::create(&temporary)
            .and_then(|mut file| file.write_all(text.as_bytes()).and_then(|()| file.sync_all()));
        if let Err(error) = written {
            let _ = fs::remove_file(&temporary);
            return Err(format!(
                "cannot write seed file into {}: {error}",
                directory.display()
            ));
        }
        fs::rename(&temporary, path).map_err(|error| {
            let _ = fs::remove_file(&temporary);
            format!("cannot move seed file into place at {}: {error}", path.display())
        })
    }
}

/// The command that replays the seed file at `path`.
pub fn replay_command(path: &Path) -> String {
    format!("cargo run --release -- replay {}", path.display())
}

/// Every `*.json` file directly in `directory`, sorted by name.
pub fn list(directory: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = match fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(format!("cannot list {}: {error}", directory.display())),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "json"))
        .collect();
    paths.sort();
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_give_messages_not_panics() {
        assert!(SeedFile::parse(b"").unwrap_err().contains("not valid JSON"));
        assert!(
            SeedFile::parse(b"{\"seed\": 1}")
                .unwrap_err()
                .contains("format_version")
        );
        assert!(
            SeedFile::parse(b"{\"format_version\": 99}")
                .unwrap_err()
                .contains("version 99")
        );
        assert!(
            SeedFile::parse(b"{\"format_version\": 1, \"seed\": 1}")
                .unwrap_err()
                .contains("malformed")
        );
    }

    #[test]
    fn expectations_match_failures_by_invariant() {
        let failure = Failure {
            invariant: "a".into(),
            kind: "safety".into(),
            step: 1,
            time_ms: 1,
            message: String::new(),
        };
        assert!(
            Expectation::Fails {
                invariant: "a".into()
            }
            .is_met_by(Some(&failure))
        );
        assert!(
            !Expectation::Fails {
                invariant: "b".into()
            }
            .is_met_by(Some(&failure))
        );
        assert!(!Expectation::Passes.is_met_by(Some(&failure)));
        assert!(Expectation::Passes.is_met_by(None));
    }
}
