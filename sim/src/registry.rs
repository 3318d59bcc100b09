//! The registry a run reads: the fault models a seed draws, the invariants that judge it beside
//! the built-in ones, and the command that replays what it finds.
//!
//! It is a value, carried by the run options ([`crate::run::RunOptions::registry`]) from the
//! program ([`crate::App`]) or the test ([`crate::harness::Check`]) that built it, so that what a
//! seed draws depends on nothing else in the process: two programs with different models of one
//! name can run side by side. This module must not hold global state.

use std::path::Path;
use std::sync::Arc;

use crate::domain::Domain;
use crate::faults::{self, FaultKind};
use crate::invariants::{self, Invariant, Judging};
use crate::shape::InvariantChoice;
use crate::system::Workflows;

/// The command prefix of the `commitgap` program itself, run from its checkout.
pub const COMMITGAP_REPLAY_PREFIX: &str = "cargo run --release --";

/// Fault models, added invariants and the replay command of one program or test.
#[derive(Clone)]
pub struct Registry {
    faults: Vec<FaultKind>,
    invariants: Vec<Arc<dyn Invariant>>,
    replay_prefix: String,
    notices: Vec<String>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field(
                "faults",
                &self.faults.iter().map(|kind| kind.name).collect::<Vec<_>>(),
            )
            .field(
                "invariants",
                &self
                    .invariants
                    .iter()
                    .map(|invariant| invariant.name())
                    .collect::<Vec<_>>(),
            )
            .field("replay_prefix", &self.replay_prefix)
            .field("notices", &self.notices)
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            faults: faults::built_in(),
            invariants: Vec::new(),
            replay_prefix: COMMITGAP_REPLAY_PREFIX.to_owned(),
            notices: Vec::new(),
        }
    }
}

impl Registry {
    /// The built-in fault models and invariants, replayed with `commitgap`'s command.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a fault model after every one already here, so it takes precedence over none of
    /// them; it draws from streams of its own, so it changes no other model's settings or
    /// decisions. Adding the same model again changes nothing. A built-in model of its name
    /// gives way to it, with a notice (see [`Registry::notices`]): a built-in added in a later
    /// release never breaks a program. Refused when another added model has its name.
    pub fn add_fault(&mut self, kind: FaultKind) -> Result<(), String> {
        match faults::check_addition(&self.faults, &kind)? {
            faults::Addition::Joins => self.faults.push(kind),
            faults::Addition::AlreadyThere => {}
            faults::Addition::ReplacesBuiltIn => {
                self.faults.retain(|existing| existing.name != kind.name);
                self.notices.push(format!(
                    "the fault model {:?} added here replaces the built-in one of that name; rename yours to run both",
                    kind.name
                ));
                self.faults.push(kind);
            }
        }
        Ok(())
    }

    /// Adds an invariant, checked after the built-in ones (so a failure a built-in invariant
    /// names keeps its name); adding one of a name already added changes nothing. A built-in
    /// invariant of its name gives way to it, with a notice (see [`Registry::notices`]).
    pub fn add_invariant(&mut self, invariant: Arc<dyn Invariant>) -> Result<(), String> {
        if invariants::check_addition(&self.invariants, &*invariant)? {
            if invariants::replaces_built_in(invariant.name()) {
                self.notices.push(format!(
                    "the invariant {:?} added here replaces the built-in one of that name; rename yours to check both",
                    invariant.name()
                ));
            }
            self.invariants.push(invariant);
        }
        Ok(())
    }

    /// What a person should know about how the models and invariants were added (one of a
    /// built-in's name replaced it), one line each; programs print them before they run.
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// Sets the command a person runs the program with, up to the command name; every printed
    /// replay command and every seed file starts with it.
    pub fn set_replay_prefix(&mut self, prefix: &str) {
        prefix.trim().clone_into(&mut self.replay_prefix);
    }

    /// The fault models, in precedence order.
    pub fn faults(&self) -> &[FaultKind] {
        &self.faults
    }

    /// The fault model called `name`.
    pub fn fault(&self, name: &str) -> Option<&FaultKind> {
        self.faults.iter().find(|kind| kind.name == name)
    }

    /// The invariants added to the built-in ones.
    pub fn added_invariants(&self) -> &[Arc<dyn Invariant>] {
        &self.invariants
    }

    /// Every invariant of a system in `domain`, the added ones last.
    pub fn invariants(&self, domain: &dyn Domain) -> Vec<Box<dyn Invariant>> {
        invariants::registry(domain, &self.invariants)
    }

    /// The invariants that judge a system in `domain` with `workflows`, as `choice` narrows them,
    /// and those left out with the reason (see [`invariants::judging`]).
    pub fn judging(
        &self,
        domain: &dyn Domain,
        workflows: Workflows,
        choice: &InvariantChoice,
    ) -> Result<Judging, String> {
        invariants::judging(domain, &self.invariants, workflows, choice)
    }

    /// The start of every printed command: `cargo run --release --` for `commitgap`.
    pub fn replay_prefix(&self) -> &str {
        &self.replay_prefix
    }

    /// The command that replays the seed file at `path`.
    pub fn replay_command(&self, path: &Path) -> String {
        format!("{} replay {}", self.replay_prefix, path.display())
    }
}
