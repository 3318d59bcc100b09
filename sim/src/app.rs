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
//! an app (`App::run` and `App::main`, in `cli`, which this module must not import)
//! hands its [`Registry`] (its fault models, invariants and replay command) to every run it
//! starts; nothing is installed for the process, so two programs with different fault models of
//! one name can run in one process. The same program is a test with [`App::check`].

use std::sync::Arc;

use crate::faults::FaultKind;
use crate::invariants::Invariant;
use crate::registry::Registry;
use crate::shape::WorkloadShape;
use crate::system::System;
use crate::systems;

/// A simulation program: what it tests and how a person replays what it finds.
#[derive(Clone)]
pub struct App {
    name: String,
    systems: Vec<Arc<dyn System>>,
    planted: Vec<Arc<dyn System>>,
    registry: Registry,
    /// The first fault model or invariant that could not be added (a name taken), reported when
    /// the program runs.
    refused: Option<String>,
    shape: WorkloadShape,
    equivalent_sql: Vec<crate::sql_mutants::Equivalent>,
    /// The team's situations and boundaries for `explore`.
    steering: crate::explore::Steering,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |systems: &[Arc<dyn System>]| {
            systems
                .iter()
                .map(|system| system.name().to_owned())
                .collect::<Vec<_>>()
        };
        f.debug_struct("App")
            .field("name", &self.name)
            .field("systems", &names(&self.systems))
            .field("planted", &names(&self.planted))
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl App {
    /// A program called `name` with the built-in fault models and invariants and no systems yet.
    /// Its printed commands start `cargo run --release --bin NAME --` until
    /// [`App::replay_command`] says otherwise.
    pub fn new(name: &str) -> App {
        let mut registry = Registry::new();
        registry.set_replay_prefix(&format!("cargo run --release --bin {name} --"));
        App {
            name: name.to_owned(),
            systems: Vec::new(),
            planted: Vec::new(),
            registry,
            refused: None,
            shape: WorkloadShape::default(),
            equivalent_sql: Vec::new(),
            steering: crate::explore::Steering::default(),
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
        self.registry.set_replay_prefix(prefix);
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
    /// One of a built-in model's name replaces that model, and the program says so in one line
    /// when it starts; a name another of the team's models has is refused when the program runs.
    pub fn fault(mut self, kind: FaultKind) -> App {
        if let Err(why) = self.registry.add_fault(kind) {
            self.refused.get_or_insert(why);
        }
        self
    }

    /// An invariant of the team's own, checked after the built-in ones. One of a built-in
    /// invariant's name replaces that invariant, and the program says so in one line when it
    /// starts.
    pub fn invariant(mut self, invariant: Arc<dyn Invariant>) -> App {
        if let Err(why) = self.registry.add_invariant(invariant) {
            self.refused.get_or_insert(why);
        }
        self
    }

    /// A situation of the team's own that `explore` should reach (a "sometimes" assertion): a
    /// run that reaches it first is kept and built on, and the summary says how many reached it.
    /// A name taken is refused when the program runs.
    pub fn sometimes(mut self, situation: crate::explore::Sometimes) -> App {
        if let Err(why) = self.steering.add_sometimes(situation) {
            self.refused.get_or_insert(why);
        }
        self
    }

    /// A boundary of the team's own rules that `explore` should come close to: a run that
    /// comes closer than any before is kept and built on. A name taken is refused when the
    /// program runs.
    pub fn boundary(mut self, boundary: crate::explore::BoundaryMeasure) -> App {
        if let Err(why) = self.steering.add_boundary(boundary) {
            self.refused.get_or_insert(why);
        }
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

    /// The situations and boundaries the program steers `explore` toward.
    pub fn steering(&self) -> &crate::explore::Steering {
        &self.steering
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
        self.registry.replay_prefix()
    }

    /// The fault models, added invariants and replay command every run of the program reads.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The program as a `#[test]`: a [`crate::harness::Check`] of its first system with its
    /// fault models, invariants, workload and replay command.
    ///
    /// # Panics
    ///
    /// If the program has no system.
    pub fn check(&self) -> crate::harness::Check {
        let system = self
            .systems
            .first()
            .expect("App::check needs a system; add one with App::system");
        crate::harness::Check::of_app(self, Arc::clone(system))
    }

    /// The first fault model or invariant that could not be added, if any.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Checks that the program can run: it has a system, its systems have names of their own,
    /// and its fault models and invariants were all added.
    pub fn validate(&self) -> Result<(), String> {
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
        match &self.refused {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }
}
