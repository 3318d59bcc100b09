//! A team's own receiver and relay, and what the team adds to the simulation to test them.
//!
//! Map of the modules:
//! - [`system`]: the receiver, with a schema of its own, its inbox and job queue declared to the
//!   pattern's machinery (which brings the relay, the purge, the operator's requeue and those
//!   tables' reading), and `shop-inbox-first`, the same code with the classic flaw (the inbox row
//!   commits before the work), and `shop-impatient-relay`, whose relay gives a throttled job up
//!   after three immediate retries, kept as planted bugs that the simulation must keep catching.
//! - [`invariant`]: `account-shops-unchanged`, an invariant over one of the team's own tables.
//! - [`fault`]: `jobs-table-busy`, a fault model for the team's own contention: statements on the
//!   job queue fail with `SQLITE_BUSY`.
//! - [`throttle`]: `partner-throttle`, a fault model for the team's fulfilment partner, which
//!   answers 429 with a `Retry-After` for a while.
//!
//! [`app`] puts them together; `src/bin/shop-sim.rs` runs it and `tests/simulation.rs` runs the
//! same as a `cargo test`.

pub mod fault;
pub mod invariant;
pub mod system;
pub mod throttle;

use std::sync::Arc;

use commitgap_sim::App;

/// How a person runs the shop's simulation program from the workspace root.
pub const REPLAY_COMMAND: &str = "cargo run --release -p shop --bin shop-sim --";

/// The SQL mutants of the shop's own statements that change nothing a sender, the provider or an
/// invariant can see, with why: `mutants --sql` reports them as equivalent rather than as gaps.
/// The relay's, the purge's and the requeue's statements are the pattern's, whose equivalent
/// mutants the simulator knows (`commitgap_sim::mutants::PATTERN_EQUIVALENT`).
pub const EQUIVALENT_SQL_MUTANTS: [(&str, &str, &str); 6] = [
    (
        "BEGIN IMMEDIATE",
        "BEGIN IMMEDIATE -> BEGIN",
        "the transaction's first statement is the inbox insert, a write, so a deferred BEGIN takes the write lock there, waiting for it as long as BEGIN IMMEDIATE would; no read comes first, so no upgrade can be refused, and a busy error there is answered 503 like one on BEGIN",
    ),
    (
        "INSERT OR IGNORE INTO jobs",
        "INSERT OR IGNORE -> INSERT",
        "a job is inserted only when its order moves from open to paid, which happens once per order under the write lock, and the job key is the order's; the insert never meets an existing key",
    ),
    (
        "UPDATE shop_orders SET state = 'cancelled'",
        "drop RETURNING",
        "the returned row only tells 200 applied from 200 no-transition, and no job follows a cancellation; the rows are the same",
    ),
    (
        "UPDATE shop_orders SET state = 'refunded'",
        "drop RETURNING",
        "the returned row only tells 200 applied from 200 no-transition, and no job follows a refund; the rows are the same",
    ),
    (
        "UPDATE shop_orders SET total_cents = ?3",
        "drop RETURNING",
        "the returned row only tells 200 applied from 200 no-transition, and no job follows a new total; the rows are the same",
    ),
    (
        "CREATE TABLE account_shops",
        "drop sender_account from its key",
        "account_shops is written once, at set-up, from fixtures with distinct accounts; nothing inserts into it at run time",
    ),
];

/// The shop's simulation program: its system, its planted bugs, its fault models and invariant,
/// and its SQL mutants that are equivalent.
pub fn app() -> App {
    let app = App::new("shop-sim")
        .replay_command(REPLAY_COMMAND)
        .system(Arc::new(system::ShopSystem::CORRECT))
        .planted(Arc::new(system::ShopSystem {
            receipt_in_own_transaction: true,
            ..system::ShopSystem::CORRECT
        }))
        .planted(Arc::new(system::ShopSystem {
            impatient_relay: true,
            ..system::ShopSystem::CORRECT
        }))
        .fault(fault::KIND)
        .fault(throttle::KIND)
        .invariant(Arc::new(invariant::AccountShopsUnchanged));
    EQUIVALENT_SQL_MUTANTS
        .into_iter()
        .fold(app, |app, (statement, rewrite, why)| {
            app.equivalent_sql_mutant(statement, rewrite, why)
        })
}
