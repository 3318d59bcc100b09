//! A team's own receiver and relay, and what the team adds to the simulation to test them.
//!
//! Map of the modules:
//! - [`system`]: the receiver and relay, with a schema of their own, and `shop-inbox-first`, the
//!   same code with the classic flaw (the inbox row commits before the work), kept as a planted
//!   bug that the simulation must keep catching.
//! - [`invariant`]: `account-shops-unchanged`, an invariant over one of the team's own tables.
//! - [`fault`]: `jobs-table-busy`, a fault model for the team's own contention: statements on the
//!   job queue fail with `SQLITE_BUSY`.
//!
//! [`app`] puts them together; `src/bin/shop-sim.rs` runs it and `tests/simulation.rs` runs the
//! same as a `cargo test`.

pub mod fault;
pub mod invariant;
pub mod system;

use std::sync::Arc;

use commitgap_sim::App;

/// How a person runs the shop's simulation program from the workspace root.
pub const REPLAY_COMMAND: &str = "cargo run --release -p shop --bin shop-sim --";

/// The shop's simulation program: its system, its planted bug, its fault model and invariant.
pub fn app() -> App {
    App::new("shop-sim")
        .replay_command(REPLAY_COMMAND)
        .system(Arc::new(system::ShopSystem {
            receipt_in_own_transaction: false,
        }))
        .planted(Arc::new(system::ShopSystem {
            receipt_in_own_transaction: true,
        }))
        .fault(fault::KIND)
        .invariant(Arc::new(invariant::AccountShopsUnchanged))
}
