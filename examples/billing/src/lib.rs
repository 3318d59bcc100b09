//! A subscription-billing webhook receiver and its relay to a provisioning API, tested with
//! commitgap's simulator.
//!
//! The billing provider (Stripe-like) posts subscription and invoice events; the receiver keeps
//! each subscription's state (active with a plan version and seats, past due, canceled) and owes
//! the provisioning API one call per business operation: `set-seats` per plan version,
//! `restore-access` once a failed invoice is followed by a paid one, `deprovision` per deletion.
//!
//! - [`domain`]: what the events mean and what a run must end in (the simulator's model).
//! - [`business`]: the business step the pattern's receiver runs inside each receipt's
//!   transaction.
//! - [`system`]: the schema, the receipt and outbox tables declared to the framework, and the
//!   decoder of the subscription rows.
//! - [`planted`]: three bugs a billing team could write, which the simulation must keep catching.
//!
//! [`app`] is the `billing-sim` program and the `cargo test` check alike. This crate must depend
//! on the simulator's public API alone.

pub mod business;
pub mod domain;
pub mod planted;
pub mod system;

use std::sync::Arc;

use commitgap_sim::App;

use crate::planted::{LastArrivalWins, ReceiptOutside, RestoreOnFirst};
use crate::system::{BillingService, Correct};

/// The command that replays what `billing-sim` finds, up to its command name.
pub const REPLAY_COMMAND: &str = "cargo run --release -p billing --bin billing-sim --";

/// The `billing-sim` program: the correct service under test, then its planted bugs.
pub fn app() -> App {
    App::new("billing-sim")
        .replay_command(REPLAY_COMMAND)
        .system(Arc::new(BillingService::new(Correct)))
        .planted(Arc::new(BillingService::new(LastArrivalWins)))
        .planted(Arc::new(BillingService::new(RestoreOnFirst)))
        .planted(Arc::new(BillingService::new(ReceiptOutside)))
        // What `mutants --sql` cannot tell apart, and why (judged from the traces of its runs).
        .equivalent_sql_mutant(
            "BEGIN IMMEDIATE",
            "BEGIN IMMEDIATE -> BEGIN",
            "the receipt's INSERT is the first statement of every receiver transaction, so a deferred \
             BEGIN takes the write lock there, before the business step reads the subscription",
        )
        .equivalent_sql_mutant(
            "CREATE TABLE customers",
            "drop sender_account from its key",
            "only the fixtures write customers, one row per account, so its key guards nothing a run \
             does; it stays for production, where customers are added while the service runs",
        )
}
