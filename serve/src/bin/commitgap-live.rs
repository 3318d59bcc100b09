//! `commitgap-live`: the live check of a service commitgap did not build, in any language, read
//! from its service description (docs/services.md).

use std::path::PathBuf;

use clap::Parser;
use commitgap_serve::live::LiveArgs;

/// Checks a webhook service you already have: starts its own receiver, relay, purge and requeue
/// commands from a service description, delivers signed events with faults from a seed, and
/// judges its SQLite database with commitgap's invariants. Exit 0 passed, 1 failed or unsettled,
/// 2 bad input, 130 interrupted.
#[derive(Debug, Parser)]
#[command(name = "commitgap-live", version)]
struct Arguments {
    /// The service description (TOML): the commands that start the service, its schema, how its
    /// tables read, its domain. See docs/services.md
    #[arg(long, value_name = "FILE")]
    service: PathBuf,
    /// Print the contract the service is held to (every invariant that judges it, its domain's
    /// rules, what its description keeps from judging) and check its domain, instead of running
    #[arg(long)]
    contract: bool,
    #[command(flatten)]
    live: LiveArgs,
}

fn main() {
    let arguments = Arguments::parse();
    if arguments.contract {
        std::process::exit(commitgap_serve::live::print_contract(&arguments.service));
    }
    std::process::exit(commitgap_serve::live::main_service(
        &arguments.service,
        &arguments.live,
    ));
}
