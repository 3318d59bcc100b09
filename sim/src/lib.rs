//! Deterministic simulation testing for webhook receivers and transactional-outbox relays on
//! SQLite.
//!
//! A seed decides everything: the world's size, which fault models are on and how often they
//! fire, the workload, and every scheduling choice. The simulator runs a real receiver and relay
//! (any [`system::System`]) on real SQLite, checks invariants after every step and after the
//! faults heal, and reports each failing seed with the one command that replays it.
//!
//! Plugging in a system and sweeping it, here the reference's receiver and relay with one step
//! written out (the idempotency key); a team overrides any step, or implements
//! [`system::System`] for a schema of its own and [`domain::Domain`] for a business of its own:
//!
//! ```
//! use std::sync::Arc;
//!
//! use commitgap_sim::commitgap::receiver::ReceiverSteps;
//! use commitgap_sim::commitgap::relay::{Claim, RelaySteps};
//! use commitgap_sim::harness::Check;
//! use commitgap_sim::systems::{ReferenceSystem, Variant};
//!
//! struct Steps;
//!
//! impl ReceiverSteps for Steps {}
//!
//! impl RelaySteps for Steps {
//!     // The provider recognises a retry by its key: the same one on every attempt.
//!     fn idempotency_key(&self, claim: &Claim) -> String {
//!         claim.operation_key.clone()
//!     }
//! }
//!
//! impl Variant for Steps {
//!     fn name(&self) -> &'static str {
//!         "my-system"
//!     }
//!     fn description(&self) -> String {
//!         "the reference's steps, one written out".to_owned()
//!     }
//! }
//!
//! let seeds_dir = std::env::temp_dir().join(format!("commitgap-doc-{}", std::process::id()));
//! let report = Check::new(Arc::new(ReferenceSystem::new(Steps)))
//!     .seeds_dir(&seeds_dir)
//!     .cases(20)
//!     .try_run()
//!     .expect("the reference's steps pass");
//! assert_eq!(report.seeds, 20);
//! ```
//!
//! `commitgap new DIR` writes such a crate, with its program and a harness test.
//!
//! The public modules, what a team uses:
//! - [`app`]: a team's own simulation program: its systems, planted bugs, fault models,
//!   invariants and workload behind every command.
//! - [`harness`]: the simulation as one `#[test]`: regressions from the seed directory, then a
//!   sweep, failures shrunk and written with the command that replays them; and simulations as
//!   a proptest `Strategy`, for a team's own property tests.
//! - [`system`]: the interface a system under test implements, and its rows as the invariants
//!   see them, whatever the system's schema.
//! - [`systems`]: the reference system, its steps a team overrides, and its planted bugs.
//! - [`domain`]: the business a system serves (its events, model and rules), apart from the
//!   webhook pattern; payments is the reference's.
//! - [`faults`]: the fault models, one file each, and the built-in list of them.
//! - [`invariants`]: the invariants, one file each, their registry, and the committed rows
//!   decoded and indexed for them.
//! - [`run`]: one run of one seed (the executor, the fault phase, heal, the liveness phase) and
//!   what it reads and records: the configuration and workload a seed draws, the shape a sweep
//!   asks for, the backend, the registry, scripted scenarios, schedules, and each step's record.
//! - [`trace`]: each step's record of what happened, and the run's digest over the records.
//! - [`explore`]: a search over runs that keeps those that reached something new and makes new
//!   runs from them; a team's own situations and boundaries to steer it.
//! - [`sweep`]: many seeds over several threads, within a time budget, with their reports for CI;
//!   the coverage of situations and fault models; seed files; and shrinking.
//! - [`mutants`]: the simulator's power: how fast each planted bug is caught, and SQL mutants of
//!   any system.
//! - [`judge`]: a final state or a commit journal from real processes, judged with the
//!   invariants that can judge one.
//! - [`peers`]: the upstream sender and its retry presets, signing, and the downstream provider.
//! - [`rng`]: seeded random streams and integer ratios.
//!
//! Inside, each module behind those (their items are re-exported where a team finds them):
//! - `schedule`, `config`, `shape`, `workload`, `backend`, `registry`, `record`: behind [`run`]
//!   (and `run`'s own `scenario`); `coverage`: behind [`sweep`] (and its own `seed_file` and
//!   `shrink`); `sql_mutants`: behind
//!   [`mutants`]; `final_state`, `commit_journal`: behind [`judge`]; `sender`, `signing`,
//!   `provider`: behind [`peers`]; `rows` behind [`system`]; `view` behind [`invariants`];
//!   `strategy` behind [`harness`]; `steering` (a team's situations and boundaries) behind
//!   [`explore`].
//! - `world`: the simulated world's state: processes, tasks, clock, queues, the current step.
//! - `sim_env`: the simulated `Env`, where every awaited call is a scheduling point.
//! - `sql`: the one reading of SQL text: a statement's verb, first table and ordering.
//! - `decision`: the typed decisions a run is made of, as schedules write them.
//! - `db`: the shared SQLite database, per-process connections, committed-change capture, and
//!   reuse of a database across a thread's runs.
//! - `limits`: the bounds every configuration and schedule is held to.
//! - `findings`: a sweep's failures, written the moment they are found, then shrunk and
//!   deduplicated.
//! - `files`: atomic, durable writes of regular files only, and the seed directory's safety
//!   checks.
//! - `bench`: the simulator's speed and memory, and its cost against SQLite replaying the same
//!   statements on a bare database.
//! - `timeline`: one run's trace drawn as a self-contained HTML page, for `replay --html`.
//! - `scaffold`: `commitgap new`, a team's first crate, ready to sweep.
//! - `cli`: the command-line program.

#![deny(missing_docs, missing_debug_implementations)]

pub mod app;
mod backend;
mod bench;
mod cli;
mod commit_journal;
mod config;
mod coverage;
mod db;
mod decision;
pub mod domain;
pub mod explore;
pub mod faults;
mod files;
mod final_state;
mod findings;
pub mod harness;
pub mod invariants;
pub mod judge;
mod limits;
pub mod mutants;
pub mod peers;
mod provider;
mod record;
mod registry;
pub mod rng;
mod rows;
pub mod run;
mod scaffold;
mod schedule;
mod sender;
mod shape;
mod signing;
mod sim_env;
mod sql;
mod sql_mutants;
mod steering;
mod strategy;
pub mod sweep;
pub mod system;
pub mod systems;
mod timeline;
pub mod trace;
mod view;
mod workload;
mod world;

pub use app::App;
/// The reference receiver and relay, and the runtime interface (`Env`) a system is written
/// against, re-exported so a team's crate needs no version of its own.
pub use commitgap;
/// The SQLite binding [`system::System::set_up`] receives a connection of, re-exported so a
/// team's crate uses the very version and features the simulator was built with.
pub use rusqlite;
/// The JSON values a domain's hooks take and give ([`domain::Domain::invalid_body`] and the
/// attacker's other bodies), re-exported so a team's crate needs no version of its own.
pub use serde_json;

/// The Rust examples of the README and of `docs/`, compiled and run as doc tests, so that every
/// example a reader copies builds against this version (`sim/tests/docs.rs` checks the rest of
/// those files).
#[cfg(doctest)]
mod docs_doctests {
    #[doc = include_str!("../../README.md")]
    struct Readme;

    #[doc = include_str!("../../docs/guide.md")]
    struct Guide;

    #[doc = include_str!("../../docs/extending.md")]
    struct Extending;

    #[doc = include_str!("../../docs/reference.md")]
    struct Reference;

    #[doc = include_str!("../../docs/power.md")]
    struct Power;

    #[doc = include_str!("../../docs/internals.md")]
    struct Internals;
}
