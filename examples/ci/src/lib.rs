//! A CI service's GitHub webhook receiver and check-run relay, and the domain that tells the
//! simulation what its webhooks mean: the second adopter of `commitgap-sim`, in a business unlike
//! payments.
//!
//! Map of the modules:
//! - [`domain`]: the `ci` domain: branches, pushes and pull requests, the state each branch must
//!   end in and the check runs owed, each rule stated in its module documentation.
//! - [`draw`]: how a seed becomes the domain's branches and events.
//! - [`system`]: the service as a system under test: its schema, its receipt and outbox tables
//!   declared to the pattern's machinery (which brings the receipt step, the relay, the purge, the
//!   operator's requeue and their rows' reading), and `ci-last-arrival-wins`, the same service
//!   with a planted flaw the simulation must catch.
//! - [`receiver`]: the business step the pattern's receiver runs: what a push or a pull request
//!   does to a branch, and the check run it owes.
//!
//! [`app`] puts them together; `src/bin/ci-sim.rs` runs it and `tests/simulation.rs` runs the same
//! as a `cargo test`. Nothing here uses the simulator's internals: only what a team outside the
//! workspace could use.

pub mod domain;
pub mod draw;
pub mod receiver;
pub mod system;

use std::sync::Arc;

use commitgap_sim::App;
use commitgap_sim::peers::SenderPreset;
use commitgap_sim::run::WorkloadShape;

/// How a person runs the CI service's simulation program from the workspace root.
pub const REPLAY_COMMAND: &str = "cargo run --release -p ci --bin ci-sim --";

/// The workload every sweep starts from: GitHub's sender, which retries nothing by itself (a
/// delivery that failed is redelivered by hand). A `--sender` flag or a shape file still narrows
/// it.
pub fn shape() -> WorkloadShape {
    WorkloadShape {
        sender: Some(SenderPreset::GitHub),
        ..WorkloadShape::default()
    }
}

/// The SQL mutants of the CI service's own statements that change nothing a sender, the
/// provider or an invariant can see, with why: `mutants --sql` reports them as equivalent rather
/// than as gaps. The relay's, the purge's and the requeue's statements are the pattern's, whose
/// equivalent mutants the simulator knows (`commitgap_sim::mutants::PATTERN_EQUIVALENT`).
pub const EQUIVALENT_SQL_MUTANTS: [(&str, &str, &str); 3] = [
    (
        "BEGIN IMMEDIATE",
        "BEGIN IMMEDIATE -> BEGIN",
        "the transaction's first statement is the receipt's insert, a write, so a deferred BEGIN takes the write lock there instead; a busy error there is answered 503 like one on BEGIN",
    ),
    (
        "UPDATE branches SET head_sha = ?3, head_created_ms = ?4 WHERE",
        "drop RETURNING",
        "RETURNING only saves the existence check and chooses between applied and no-transition; the branch is then looked up, the sender gets 200 either way and the rows are the same",
    ),
    (
        "CREATE TABLE accounts",
        "drop account from its key",
        "accounts are written once, at set-up, from fixtures with distinct accounts; nothing inserts one at run time",
    ),
];

/// The CI service's simulation program: its system, its planted bug, and its SQL mutants that
/// are equivalent.
pub fn app() -> App {
    let app = App::new("ci-sim")
        .replay_command(REPLAY_COMMAND)
        .workload(shape())
        .system(Arc::new(system::CiSystem {
            last_arrival_wins: false,
        }))
        .planted(Arc::new(system::CiSystem {
            last_arrival_wins: true,
        }));
    EQUIVALENT_SQL_MUTANTS
        .into_iter()
        .fold(app, |app, (statement, rewrite, why)| {
            app.equivalent_sql_mutant(statement, rewrite, why)
        })
}
