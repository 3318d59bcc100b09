//! The seed corpus: the directory of seed files, kept to one file per distinct failure.
//!
//! A failure's signature is its system, its invariant and the shape of its smallest known run
//! (the kinds of event and fault, see [`Schedule::shape`]). When a new file has the signature of
//! one already in the directory, the shorter reproduction is kept: the new file is dropped, or it
//! replaces the longer one. Files that expect to pass (fixed bugs kept as regressions), files
//! without a schedule (format version 1) and files that cannot be read are never touched: the
//! corpus only ever removes a file it can show is a longer copy of another. Every file is written
//! atomically.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::schedule::Schedule;
use crate::sweep::seed_file::{self, Expectation, SeedFile};

/// What makes two failures the same.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Signature {
    /// Name of the system under test that failed.
    pub system: String,
    /// Name of the invariant that failed.
    pub invariant: String,
    /// Kinds of event and fault in the smallest known run, as [`Schedule::shape`] writes them.
    pub shape: String,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} / {} / {}", self.system, self.invariant, self.shape)
    }
}

/// The signature of a file that expects a failure and holds a schedule; `None` otherwise.
pub fn signature(file: &SeedFile) -> Option<Signature> {
    let Expectation::Fails { invariant } = &file.expect else {
        return None;
    };
    let schedule: &Schedule = match &file.shrunk {
        Some(shrunk) => &shrunk.schedule,
        None => file.schedule.as_ref()?,
    };
    Some(Signature {
        system: file.system.clone(),
        invariant: invariant.clone(),
        shape: schedule.shape(),
    })
}

/// What became of a file offered to the corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// Written at this path; no other file had its signature.
    New(PathBuf),
    /// Written at this path, and the longer file with the same signature was removed.
    Replaced {
        /// Where the new file was written.
        path: PathBuf,
        /// The longer file with the same signature, now deleted.
        removed: PathBuf,
    },
    /// Not written: this file, with the same signature, is as short or shorter.
    Duplicate(PathBuf),
}

impl Kept {
    /// The file that now holds this failure.
    pub fn path(&self) -> &Path {
        match self {
            Kept::New(path) | Kept::Replaced { path, .. } | Kept::Duplicate(path) => path,
        }
    }
}

/// A seed directory and the signatures of the files in it.
#[derive(Debug)]
pub struct Corpus {
    directory: PathBuf,
    /// The program that replays a seed file, as its replay command names it.
    replay_prefix: String,
    by_signature: BTreeMap<Signature, (PathBuf, (u64, usize))>,
}

impl Corpus {
    /// Reads every seed file in `directory` (which need not exist yet). Files that cannot be read
    /// are left alone and take no part in deduplication. Files written name the program
    /// `replay_prefix` runs in their replay command.
    pub fn open(directory: &Path, replay_prefix: &str) -> Result<Corpus, String> {
        let mut corpus = Corpus {
            directory: directory.to_path_buf(),
            replay_prefix: replay_prefix.to_owned(),
            by_signature: BTreeMap::new(),
        };
        for path in seed_file::list(directory)? {
            let Ok(file) = SeedFile::read(&path) else {
                continue;
            };
            if let Some(signature) = signature(&file) {
                corpus.remember(signature, path, file.smallest());
            }
        }
        Ok(corpus)
    }

    fn remember(&mut self, signature: Signature, path: PathBuf, size: (u64, usize)) {
        match self.by_signature.get(&signature) {
            // Two files already in the directory with one signature (written by hand, or by
            // two sweeps at once): both stay, and the shorter stands for them.
            Some((_, known)) if *known <= size => {}
            _ => {
                self.by_signature.insert(signature, (path, size));
            }
        }
    }

    /// Adds `file`, keeping the shortest reproduction of its signature.
    pub fn add(&mut self, file: &SeedFile) -> Result<Kept, String> {
        let Some(signature) = signature(file) else {
            return file.write(&self.directory, &self.replay_prefix).map(Kept::New);
        };
        let size = file.smallest();
        let existing = self.by_signature.get(&signature).cloned();
        if let Some((path, known)) = &existing
            && *known <= size
            && path.exists()
        {
            return Ok(Kept::Duplicate(path.clone()));
        }
        let path = file.write(&self.directory, &self.replay_prefix)?;
        self.by_signature.insert(signature, (path.clone(), size));
        match existing {
            Some((removed, _)) if removed != path && removed.exists() => {
                fs::remove_file(&removed).map_err(|error| {
                    format!(
                        "cannot remove the longer duplicate {}: {error}",
                        removed.display()
                    )
                })?;
                Ok(Kept::Replaced { path, removed })
            }
            _ => Ok(Kept::New(path)),
        }
    }
}
