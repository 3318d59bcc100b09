//! A CI service's GitHub webhook receiver and check-run relay, and the domain that tells the
//! simulation what its webhooks mean: the second adopter of `commitgap-sim`, in a business unlike
//! payments.
//!
//! Map of the modules:
//! - [`domain`]: the `ci` domain: branches, pushes and pull requests, the state each branch must
//!   end in and the check runs owed, each rule stated in its module documentation.
//! - [`draw`]: how a seed becomes the domain's branches and events.
//! - [`system`]: the service as a system under test (schema, purge, operator requeue, decoder),
//!   and `ci-last-arrival-wins`, the same service with a planted flaw the simulation must catch.
//! - [`receiver`]: one delivery in, one `BEGIN IMMEDIATE` transaction, one answer out.
//! - [`relay`]: claim a build under a fenced lease, create its check run, record the outcome.
//!
//! [`app`] puts them together; `src/bin/ci-sim.rs` runs it and `tests/simulation.rs` runs the same
//! as a `cargo test`. Nothing here uses the simulator's internals: only what a team outside the
//! workspace could use.

pub mod domain;
pub mod draw;
pub mod receiver;
pub mod relay;
pub mod system;

use std::sync::Arc;

use commitgap_sim::App;
use commitgap_sim::sender::SenderPreset;
use commitgap_sim::shape::WorkloadShape;

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

/// The SQL mutants of the CI service that change nothing a sender, the provider or an invariant
/// can see, with why: `mutants --sql` reports them as equivalent rather than as gaps.
pub const EQUIVALENT_SQL_MUTANTS: [(&str, &str, &str); 8] = [
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
        "UPDATE builds SET lease_expires_ms = ?1 WHERE",
        "drop WHERE conjunct 3",
        "the token check still admits only the current holder, which renews only while the build is owed; the expiry of a settled build is never read",
    ),
    (
        "UPDATE builds SET next_attempt_ms = ?1, last_error = ?2",
        "drop WHERE conjunct 3",
        "the token check still admits only the current holder, and a holder never backs off a build it has just settled",
    ),
    (
        "UPDATE builds SET next_attempt_ms = ?1, last_error = ?2",
        "drop the statement",
        "the lease, which outlasts the provider's processing bound, then holds the build back and the next attempt comes at its expiry instead of after the backoff; the relay falls back on that whenever the write fails, and no outcome changes",
    ),
    (
        "UPDATE builds SET status = 'dead', dead_reason = ?1",
        "drop WHERE conjunct 3",
        "the token check still admits only the current holder, and a holder settles a build once",
    ),
    (
        "UPDATE builds SET status = 'done', check_run_id = ?1",
        "drop WHERE conjunct 3",
        "the token check still admits only the current holder, and a holder settles a build once",
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
