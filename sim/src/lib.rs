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
//! `commitgap new DIR` writes such a crate, with its program and a harness test ([`scaffold`]).
//!
//! Map of the modules:
//! - [`run`]: one run of one seed: the executor, the fault phase, heal, the liveness phase.
//! - [`scenario`]: scripted, deterministic tests that say exactly what happens when.
//! - [`schedule`]: a run written down as its decisions: readable, editable, replayable.
//! - `world` (internal): the simulated world's state: processes, tasks, clock, queues, the current step.
//! - `sim_env` (internal): the simulated `Env`, where every awaited call is a scheduling point.
//! - `sql` (internal): the one reading of SQL text: a statement's verb, first table and ordering.
//! - `decision` (internal): the typed decisions a run is made of, as schedules write them.
//! - [`backend`]: where a run's database lives (memdb or a WAL file).
//! - `db` (internal): the shared SQLite database, per-process connections, committed-change capture, and reuse of a database across a thread's runs.
//! - [`view`]: the committed rows, decoded and indexed for the invariants.
//! - [`sender`]: the upstream webhook sender and its retry presets.
//! - [`signing`]: the endpoints' secrets and deliveries signed as a real sender signs them.
//! - [`provider`]: the downstream provider: idempotency-key store and ledger of effects.
//! - [`final_state`]: a final state the simulator did not produce (a real database's rows, a real
//!   provider's ledger, a real sender's books) judged with the invariants that can judge one.
//! - [`commit_journal`]: every commit of a run over real processes, replayed and judged one
//!   commit at a time with the invariants that can judge a commit alone.
//! - [`faults`]: the fault models, one file each, and the built-in list of them.
//! - [`registry`]: what a run reads besides its seed: fault models, added invariants and the
//!   replay command, as a value.
//! - [`invariants`]: the invariants, one file each, and their registry.
//! - [`coverage`]: the interesting situations each run reached, and a sweep's coverage of them
//!   and of the fault models.
//! - [`system`]: the interface a system under test implements.
//! - [`rows`]: rows as the invariants see them, whatever the system's schema.
//! - [`domain`]: the business a system serves (its events, model and rules), apart from the
//!   webhook pattern; payments is the reference's.
//! - [`systems`]: the reference system and its planted bugs.
//! - [`mutants`]: the simulator's power: how fast each planted bug is caught.
//! - [`sql_mutants`]: SQL mutants of any system: each statement rewritten, swept until caught.
//! - [`config`]: the configuration and workload drawn from a seed.
//! - [`shape`]: the workload's shape a sweep chooses: counts, sender preset, durations, fault models.
//! - [`workload`]: the ground truth of a run: fixtures, events and how each is delivered.
//! - `limits` (internal): the bounds every configuration and schedule is held to.
//! - [`record`]: what the simulator observed in a step and over a run, for invariants and probes.
//! - [`rng`]: seeded random streams and integer ratios.
//! - [`trace`]: each step's record of what happened, and the run's digest over the records.
//! - [`shrink`]: a failing run reduced to the few decisions that matter.
//! - [`seed_file`]: the JSON file a failing seed is written to, and the seed directory kept to
//!   the shortest file per distinct failure.
//! - `findings` (internal): a sweep's failures, written the moment they are found, then shrunk and deduplicated.
//! - `files` (internal): atomic, durable writes of regular files only, and the seed directory's safety checks.
//! - [`sweep`]: many seeds over several threads, one shard of a range, within a time budget, and
//!   the sweep's JUnit XML and JSON reports for CI systems and scripts.
//! - `bench` (internal): the simulator's speed and memory, and its cost against SQLite replaying the same
//!   statements on a bare database.
//! - [`harness`]: the simulation as one `#[test]`: regressions from the seed directory, then a
//!   sweep, failures shrunk and written with the command that replays them.
//! - [`strategy`]: simulations as a proptest `Strategy`, for users' own property tests.
//! - `timeline` (internal): one run's trace drawn as a self-contained HTML page, for `replay --html`.
//! - [`app`]: a team's own simulation program: its systems, planted bugs, fault models,
//!   invariants and workload behind every command.
//! - [`scaffold`]: `commitgap new`, a team's first crate, ready to sweep.
//! - `cli` (internal): the command-line program.

#![deny(missing_docs, missing_debug_implementations)]

pub mod app;
pub mod backend;
mod bench;
mod cli;
pub mod commit_journal;
pub mod config;
pub mod coverage;
mod db;
mod decision;
pub mod domain;
pub mod faults;
mod files;
pub mod final_state;
mod findings;
pub mod harness;
pub mod invariants;
mod limits;
pub mod mutants;
pub mod provider;
pub mod record;
pub mod registry;
pub mod rng;
pub mod rows;
pub mod run;
pub mod scaffold;
pub mod scenario;
pub mod schedule;
pub mod seed_file;
pub mod sender;
pub mod shape;
pub mod shrink;
pub mod signing;
mod sim_env;
mod sql;
pub mod sql_mutants;
pub mod strategy;
pub mod sweep;
pub mod system;
pub mod systems;
mod timeline;
pub mod trace;
pub mod view;
pub mod workload;
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
