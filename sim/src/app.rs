//! A team's own simulation program in a few lines: the systems it tests, the planted bugs that
//! prove the simulation can catch what matters to it, its own fault models and invariants, and
//! its workload's shape, behind every command `commitgap` has.
//!
//! ```no_run
//! use std::sync::Arc;
//! # use commitgap_sim::systems::ReferenceSystem as ShopSystem;
//! fn main() {
//!     commitgap_sim::App::new("shop-sim")
//!         .replay_command("cargo run --release -p shop --bin shop-sim --")
//!         .system(Arc::new(ShopSystem::reference()))
//!         .main()
//! }
//! ```
//!
//! `commitgap` itself is [`App::commitgap`]: the reference system and its planted bugs. Running
//! an app (`App::run` and `App::main`, in [`crate::cli`], which this module must not import)
//! installs it for the process (the seed files it writes then name its own
//! replay command, and its fault models and invariants join the registries every run reads); it
//! must not be run twice in one process with different fault models of one name, which
//! [`App::run`] refuses.

use std::sync::{Arc, PoisonError, RwLock};

use crate::faults::{self, FaultKind};
use crate::invariants::{self, Invariant};
use crate::shape::WorkloadShape;
use crate::system::System;
use crate::systems;

/// A simulation program: what it tests and how a person replays what it finds.
#[derive(Clone)]
pub struct App {
    name: String,
    replay_prefix: String,
    systems: Vec<Arc<dyn System>>,
    planted: Vec<Arc<dyn System>>,
    faults: Vec<FaultKind>,
    invariants: Vec<Arc<dyn Invariant>>,
    shape: WorkloadShape,
    equivalent_sql: Vec<crate::sql_mutants::Equivalent>,
}

impl App {
    /// A program called `name` with the built-in fault models and invariants and no systems yet.
    /// Its printed commands start `cargo run --release --bin NAME --` until
    /// [`App::replay_command`] says otherwise.
    pub fn new(name: &str) -> App {
        App {
            name: name.to_owned(),
            replay_prefix: format!("cargo run --release --bin {name} --"),
            systems: Vec::new(),
            planted: Vec::new(),
            faults: Vec::new(),
            invariants: Vec::new(),
            shape: WorkloadShape::default(),
            equivalent_sql: Vec::new(),
        }
    }

    /// The `commitgap` program: the reference system and every planted bug.
    pub fn commitgap() -> App {
        let mut app = App::new("commitgap").replay_command("cargo run --release --");
        app.systems.push(Arc::new(systems::ReferenceSystem::reference()));
        app.planted.extend(systems::planted::all());
        app.equivalent_sql
            .extend_from_slice(crate::sql_mutants::REFERENCE_EQUIVALENT);
        app
    }

    /// How a person runs this program from the crate's directory, up to the command name:
    /// `cargo run --release --example shop --`. Every printed replay command and every seed file
    /// starts with it.
    pub fn replay_command(mut self, prefix: &str) -> App {
        prefix.trim().clone_into(&mut self.replay_prefix);
        self
    }

    /// A system under test: it must pass every invariant on every seed. The first one added is
    /// what `sweep` and `replay --seed` run when no `--system` is given.
    pub fn system(mut self, system: Arc<dyn System>) -> App {
        self.systems.push(system);
        self
    }

    /// A planted bug: a copy of a system with one flaw, which `mutants` expects the simulation to
    /// catch within its budget. It can be swept and replayed like any system.
    pub fn planted(mut self, system: Arc<dyn System>) -> App {
        self.planted.push(system);
        self
    }

    /// A fault model of the team's own, drawn per seed like the built-in ones and after them.
    pub fn fault(mut self, kind: FaultKind) -> App {
        self.faults.push(kind);
        self
    }

    /// An invariant of the team's own, checked after the built-in ones.
    pub fn invariant(mut self, invariant: Arc<dyn Invariant>) -> App {
        self.invariants.push(invariant);
        self
    }

    /// The workload every sweep of this program starts from; a config file (`--shape FILE`) and
    /// the command line's flags narrow it further.
    pub fn workload(mut self, shape: WorkloadShape) -> App {
        self.shape = shape;
        self
    }

    /// A SQL mutant that survives `mutants --sql` because it changes nothing observable: the
    /// start of the statement (on one line), the rewrite as the table shows it, and why. It is
    /// then reported as equivalent and not counted.
    pub fn equivalent_sql_mutant(
        mut self,
        statement_start: &'static str,
        rewrite: &'static str,
        why: &'static str,
    ) -> App {
        self.equivalent_sql.push((statement_start, rewrite, why));
        self
    }

    /// The SQL mutants listed as equivalent.
    pub fn equivalent_sql_mutants(&self) -> &[crate::sql_mutants::Equivalent] {
        &self.equivalent_sql
    }

    /// The program's name, as `--help` shows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The systems under test, then the planted bugs.
    pub fn every_system(&self) -> impl Iterator<Item = &Arc<dyn System>> {
        self.systems.iter().chain(&self.planted)
    }

    /// The systems under test.
    pub fn systems(&self) -> &[Arc<dyn System>] {
        &self.systems
    }

    /// The planted bugs.
    pub fn planted_bugs(&self) -> &[Arc<dyn System>] {
        &self.planted
    }

    /// The system called `name`, if the program has one.
    pub fn find(&self, name: &str) -> Option<Arc<dyn System>> {
        self.every_system().find(|system| system.name() == name).cloned()
    }

    /// Whether `name` is one of the planted bugs.
    pub fn is_planted(&self, name: &str) -> bool {
        self.planted.iter().any(|system| system.name() == name)
    }

    /// The workload shape the program starts from.
    pub fn shape(&self) -> &WorkloadShape {
        &self.shape
    }

    /// The command prefix printed commands start with.
    pub fn prefix(&self) -> &str {
        &self.replay_prefix
    }

    /// Registers the program's fault models and invariants and makes it the process's program,
    /// so that everything printed and written names its commands. Fails when a name is taken.
    pub fn install(&self) -> Result<(), String> {
        if self.systems.is_empty() {
            return Err(format!(
                "{} has no system to test; add one with App::system",
                self.name
            ));
        }
        let mut names: Vec<&str> = Vec::new();
        for system in self.every_system() {
            if names.contains(&system.name()) {
                return Err(format!(
                    "two systems are called {:?}; give each its own name",
                    system.name()
                ));
            }
            names.push(system.name());
        }
        for kind in &self.faults {
            faults::register(*kind)?;
        }
        for invariant in &self.invariants {
            invariants::register(Arc::clone(invariant))?;
        }
        *CURRENT.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(self.clone()));
        Ok(())
    }
}

/// The program this process runs: the one installed last, or `commitgap`.
static CURRENT: RwLock<Option<Arc<App>>> = RwLock::new(None);

/// The process's program (see [`App::install`]); `commitgap` when none was installed.
pub fn current() -> Arc<App> {
    CURRENT
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_else(|| Arc::new(App::commitgap()))
}

/// The start of every printed command: `cargo run --release --` for `commitgap`.
pub fn command_prefix() -> String {
    CURRENT
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map_or_else(
            || "cargo run --release --".to_owned(),
            |app| app.replay_prefix.clone(),
        )
}
