//! Seed files: one JSON file per failing seed, replayed by `replay FILE` and by `cargo test`.
//!
//! A file records the format version, the seed, the system, what the file expects (`fails` with
//! an invariant, or `passes` for a fixed bug kept as a regression), the failure as found, the trace
//! digest, the command that replays it, the fault decisions that mattered and the full
//! configuration. The configuration is what a replay runs, so a file stays meaningful after the
//! way configurations are drawn from seeds changes. Files are written atomically (a temporary file
//! renamed into place), so an interrupted sweep never leaves a partial file, and a file is never
//! overwritten by a different run. Reading never panics: every problem is an error message that
//! names the file and says how to fix it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::SimConfig;
use crate::run::{Failure, RunOutcome};

/// The version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

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
            Some(version) if version == u64::from(FORMAT_VERSION) => {}
            Some(version) => {
                return Err(format!(
                    "format version {version}, but this build reads version {FORMAT_VERSION}; replay it with the build that wrote it, or re-create it with a sweep"
                ));
            }
            None => return Err("no format_version field: this is not a seed file".to_owned()),
        }
        let file: SeedFile = serde_json::from_value(value)
            .map_err(|error| format!("malformed ({error}); restore it from version control or delete it"))?;
        file.config.validate()?;
        Ok(file)
    }

    /// Writes the file into `directory` atomically. Returns its path. A file of the same seed and
    /// system from a different run is kept, and this one gets a name of its own.
    pub fn write(&self, directory: &Path) -> Result<PathBuf, String> {
        fs::create_dir_all(directory)
            .map_err(|error| format!("cannot create seed directory {}: {error}", directory.display()))?;
        let base = format!("{}-{}", self.system, self.seed);
        let mut path = directory.join(format!("{base}.json"));
        if let Ok(existing) = SeedFile::read(&path)
            && existing.trace_digest != self.trace_digest
        {
            let short = self.trace_digest.get(..8).unwrap_or(&self.trace_digest);
            path = directory.join(format!("{base}-{short}.json"));
        }
        let text = serde_json::to_string_pretty(self).expect("seed files are plain data") + "\n";
        let temporary = directory.join(format!(".{base}.json.tmp-{}", std::process::id()));
        fs::write(&temporary, text)
            .map_err(|error| format!("cannot write seed file into {}: {error}", directory.display()))?;
        fs::rename(&temporary, &path).map_err(|error| {
            let _ = fs::remove_file(&temporary);
            format!("cannot move seed file into place at {}: {error}", path.display())
        })?;
        Ok(path)
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
