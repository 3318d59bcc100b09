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

mod corpus;

/// The seed directory, kept to the shortest file per distinct failure.
pub use corpus::{Corpus, Kept};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::SimConfig;
use crate::files::{clip, clip_quoted};
use crate::run::{Failure, RunOutcome, Unsettled};
use crate::schedule::Schedule;
use crate::sweep::shrink::Shrunk;

/// The version this build writes. Version 3 takes the trace digest over the step records rather
/// than over trace text, so a digest in an older file cannot be compared with this build's.
/// Version 4 names the fault model in every fault decision of a schedule, and keeps on every
/// model its schedule names (older files read as before: an unnamed decision credits the
/// built-in that alone made it then).
pub const FORMAT_VERSION: u32 = 4;

/// The first version whose schedules keep on every fault model they name.
pub const NAMED_FAULTS_VERSION: u32 = 4;

/// The first version whose digests this build computes the same way.
pub const DIGEST_VERSION: u32 = 3;

/// The oldest version this build still reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;

/// The largest file read as a seed file: room for the schedule of the longest run the limits
/// allow, and a refusal, not an allocation, for anything larger.
pub const SEED_FILE_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// What a seed file expects its replay to conclude.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Expectation {
    /// The run must fail this invariant.
    Fails {
        /// The name of the invariant the run must fail.
        invariant: String,
    },
    /// The run must pass every invariant (a fixed bug kept as a regression).
    Passes,
    /// The run must reach its liveness bound before the world settles (see
    /// [`crate::run::Unsettled`]).
    DoesNotSettle,
}

impl Expectation {
    /// What a run concluded, as an expectation a seed file can hold.
    pub fn of(outcome: &RunOutcome) -> Expectation {
        match (&outcome.failure, &outcome.unsettled) {
            (Some(failure), _) => Expectation::Fails {
                invariant: failure.invariant.clone(),
            },
            (None, Some(_)) => Expectation::DoesNotSettle,
            (None, None) => Expectation::Passes,
        }
    }

    /// Whether `failure` is what this expectation asks for (a run that did not settle has no
    /// failure; see [`Expectation::is_met_by_outcome`]).
    pub fn is_met_by(&self, failure: Option<&Failure>) -> bool {
        match (self, failure) {
            (Expectation::Passes, None) => true,
            (Expectation::Fails { invariant }, Some(failure)) => &failure.invariant == invariant,
            _ => false,
        }
    }

    /// Whether `outcome` concluded what this expectation asks for.
    pub fn is_met_by_outcome(&self, outcome: &RunOutcome) -> bool {
        *self == Expectation::of(outcome)
    }
}

impl std::fmt::Display for Expectation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expectation::Fails { invariant } => write!(f, "fails {invariant}"),
            Expectation::Passes => write!(f, "passes"),
            Expectation::DoesNotSettle => write!(f, "does not settle within its bounds"),
        }
    }
}

/// The contents of a seed file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedFile {
    /// The version of the seed file format this file is written in.
    pub format_version: u32,
    /// The seed that was run.
    pub seed: u64,
    /// The name of the system the seed ran against.
    pub system: String,
    /// What a replay of this file must conclude.
    pub expect: Expectation,
    /// The failure as found when the file was written.
    pub failure: Option<Failure>,
    /// Set when the run, as found, reached its liveness bound before the world settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsettled: Option<Unsettled>,
    /// How many simulation steps the run took as found.
    pub steps: u64,
    /// The digest of the run's trace as found, which a replay must match.
    pub trace_digest: String,
    /// The command that replays this file.
    pub replay: String,
    /// How often each fault model fired in the run as found.
    pub faults_fired: BTreeMap<String, u64>,
    /// The fault decisions that mattered in the run as found, in order.
    pub fault_log: Vec<String>,
    /// The configuration the seed drew.
    pub config: SimConfig,
    /// The run as found, written down step by step (absent from version 1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// The smallest run found that fails the same way, if the file was shrunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrunk: Option<ShrunkRun>,
    /// Set when `explore` made the run from another one: only its schedule holds it, and its
    /// seed, run as drawn, is another run. Replays and regressions then run the schedule.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub explored: bool,
}

/// A shrunk run: its own configuration and schedule, replayed without the seed's randomness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShrunkRun {
    /// The failure the shrunk run ends in.
    pub failure: Failure,
    /// How many simulation steps the shrunk run takes.
    pub steps: u64,
    /// Fault choices left in the schedule.
    pub faults: usize,
    /// The digest of the shrunk run's trace, which a replay must match.
    pub trace_digest: String,
    /// Candidate runs the shrinker tried.
    pub runs: usize,
    /// The configuration the shrunk run replays with.
    pub config: SimConfig,
    /// The shrunk run, written down step by step.
    pub schedule: Schedule,
}

impl ShrunkRun {
    /// The shrunk run that the shrinker found as the smallest failing candidate.
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
        let expect = Expectation::of(outcome);
        SeedFile {
            format_version: FORMAT_VERSION,
            seed: outcome.seed,
            system: outcome.system.clone(),
            expect,
            failure: outcome.failure.clone(),
            unsettled: outcome.unsettled.clone(),
            steps: outcome.steps,
            trace_digest: outcome.digest.clone(),
            replay,
            faults_fired: outcome.faults_fired.clone(),
            fault_log: outcome.fault_log.clone(),
            config: outcome.config.clone(),
            schedule: outcome.schedule.clone(),
            shrunk: None,
            explored: false,
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
        let size = fs::metadata(path)
            .map_err(|error| format!("cannot read seed file {}: {error}", path.display()))?
            .len();
        if size > SEED_FILE_BYTES_MAX {
            return Err(format!(
                "seed file {} is {size} bytes; a seed file is at most {SEED_FILE_BYTES_MAX} bytes, so this is not one",
                path.display()
            ));
        }
        let text =
            fs::read(path).map_err(|error| format!("cannot read seed file {}: {error}", path.display()))?;
        SeedFile::parse(&text).map_err(|error| format!("seed file {}: {error}", path.display()))
    }

    /// Parses seed-file bytes and checks every value (see [`SeedFile::validate`]). An error is one
    /// line that names the field, quotes at most 80 characters of the value and says how to fix it.
    pub fn parse(bytes: &[u8]) -> Result<SeedFile, String> {
        // Editors on some systems save UTF-8 with a byte-order mark; JSON forbids it, people do not.
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|error| {
            format!(
                "not valid JSON ({}); restore it from version control or delete it",
                clip_quoted(&error.to_string(), 80)
            )
        })?;
        if !value.is_object() {
            return Err(
                "not a JSON object, so not a seed file; restore it from version control or delete it"
                    .to_owned(),
            );
        }
        match value.get("format_version") {
            None => return Err("no format_version field: this is not a seed file".to_owned()),
            Some(version) => match version.as_u64() {
                Some(version)
                    if (u64::from(OLDEST_READABLE_VERSION)..=u64::from(FORMAT_VERSION))
                        .contains(&version) => {}
                Some(version) => {
                    return Err(format!(
                        "format version {version}, but this build reads versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}; replay it with the build that wrote it, or re-create it with a sweep"
                    ));
                }
                None => {
                    return Err(format!(
                        "format_version is {}; it must be a whole number from {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}, written without quotes or a decimal point (such as {FORMAT_VERSION})",
                        clip(&version.to_string(), 80)
                    ));
                }
            },
        }
        let file: SeedFile = serde_path_to_error::deserialize(&value).map_err(|error| {
            let path = error.path().to_string();
            let message = clip_quoted(&error.inner().to_string(), 80);
            let at = if path == "." {
                String::new()
            } else {
                format!("{path}: ")
            };
            format!("{at}{message}; fix the field, or restore the file from version control")
        })?;
        file.validate()?;
        Ok(file)
    }

    /// Checks every value a run will use against the configuration's limits (see
    /// the limits): the configuration, the schedule and the shrunk run's. The error names the
    /// field as a path from the top of the file. A fault model no built-in one is named like is
    /// taken to be the program's own: the run that replays the file checks its settings with the
    /// program's registry.
    pub fn validate(&self) -> Result<(), String> {
        if self.explored && self.schedule.is_none() {
            return Err(
                "explored is true but the file holds no schedule: an explored run is held by its schedule alone; set explored to false or restore the schedule".to_owned(),
            );
        }
        self.config
            .validate_without_registry()
            .map_err(|error| format!("config.{error}"))?;
        let named = self.format_version >= NAMED_FAULTS_VERSION;
        if let Some(schedule) = &self.schedule {
            schedule
                .validate(&self.config)
                .map_err(|error| format!("schedule.{error}"))?;
            if named {
                schedule
                    .check_fault_models_on(&self.config)
                    .map_err(|error| format!("schedule.{error}"))?;
            }
        }
        if let Some(shrunk) = &self.shrunk {
            shrunk
                .config
                .validate_without_registry()
                .map_err(|error| format!("shrunk.config.{error}"))?;
            shrunk
                .schedule
                .validate(&shrunk.config)
                .map_err(|error| format!("shrunk.schedule.{error}"))?;
            if named {
                shrunk
                    .schedule
                    .check_fault_models_on(&shrunk.config)
                    .map_err(|error| format!("shrunk.schedule.{error}"))?;
            }
        }
        Ok(())
    }

    /// Reads the file at `path` and checks its fault models' settings with `registry`, the
    /// program that replays it: a model no registry has is an error naming the field.
    pub fn read_with(path: &Path, registry: &crate::registry::Registry) -> Result<SeedFile, String> {
        let file = SeedFile::read(path)?;
        let check = |config: &SimConfig, field: &str| {
            config
                .validate_with(registry.faults())
                .map_err(|error| format!("seed file {}: {field}.{error}", path.display()))
        };
        check(&file.config, "config")?;
        if let Some(shrunk) = &file.shrunk {
            check(&shrunk.config, "shrunk.config")?;
        }
        Ok(file)
    }

    /// Writes the file into `directory` atomically. Returns its path. A file of the same seed and
    /// system from a different run is kept, and this one gets a name of its own. A file of the
    /// same run keeps what it holds and this one lacks (its schedule, its shrunk run) and what it
    /// promises (its `expect`, which a person may have changed to keep a fixed bug as a
    /// regression); unless this file adds a schedule or a smaller shrunk run, the existing file
    /// is left exactly as it is.
    ///
    /// The file's replay command starts with `replay_prefix`, the program that wrote it.
    pub fn write(&self, directory: &Path, replay_prefix: &str) -> Result<PathBuf, String> {
        fs::create_dir_all(directory)
            .map_err(|error| format!("cannot create seed directory {}: {error}", directory.display()))?;
        let base = format!("{}-{}", self.system, self.seed);
        let mut path = directory.join(format!("{base}.json"));
        let mut existing = SeedFile::read(&path).ok();
        if existing
            .as_ref()
            .is_some_and(|existing| existing.trace_digest != self.trace_digest)
        {
            let short = self.trace_digest.get(..8).unwrap_or(&self.trace_digest);
            path = directory.join(format!("{base}-{short}.json"));
            existing = SeedFile::read(&path)
                .ok()
                .filter(|existing| existing.trace_digest == self.trace_digest);
        }
        let mut contents = self.clone();
        contents.replay = replay_command(replay_prefix, &path);
        if let Some(existing) = existing {
            let adds_schedule = contents.schedule.is_some() && existing.schedule.is_none();
            let adds_shrunk = match (&contents.shrunk, &existing.shrunk) {
                (Some(new), Some(old)) => (new.steps, new.faults) < (old.steps, old.faults),
                (Some(_), None) => true,
                (None, _) => false,
            };
            if !adds_schedule && !adds_shrunk {
                return Ok(path);
            }
            contents.expect = existing.expect.clone();
            if contents.schedule.is_none() {
                contents.schedule = existing.schedule.clone();
            }
            if !adds_shrunk {
                contents.shrunk = existing.shrunk.clone();
            }
        }
        contents.write_to(&path)?;
        Ok(path)
    }

    /// Writes the file at `path` atomically and durably (see `write_atomically`),
    /// so a reader sees the old file or the new one, never a part, even after a crash.
    pub fn write_to(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).expect("seed files are plain data") + "\n";
        crate::files::write_atomically(path, text.as_bytes())
    }
}

/// The command that replays the seed file at `path` with the program run by `prefix` (see
/// [`crate::registry::Registry::replay_prefix`]).
pub fn replay_command(prefix: &str, path: &Path) -> String {
    format!("{prefix} replay {}", path.display())
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
        let missing = SeedFile::parse(b"{\"format_version\": 1, \"seed\": 1}").unwrap_err();
        assert!(missing.contains("missing field"), "{missing}");
        for (text, expected) in [
            (
                &b"{\"format_version\": \"2\"}"[..],
                "format_version is \"2\"; it must be a whole number",
            ),
            (
                b"{\"format_version\": 2.0}",
                "format_version is 2.0; it must be a whole number",
            ),
            (b"[1, 2]", "not a JSON object"),
            (b"\xEF\xBB\xBF{\"seed\": 1}", "no format_version field"),
        ] {
            let error = SeedFile::parse(text).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
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
