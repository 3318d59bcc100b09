//! `axum-shop`: a shop's payment webhooks on axum and SQLite. It models the four processes a
//! small team runs for one business (payments: orders are paid, refunded, cancelled or change
//! amount, and a paid order owes one fulfillment at the provider):
//!
//! - `receiver`: the HTTP endpoint senders post signed events to;
//! - `relay`: a worker that ships owed fulfillments to the provider from the outbox;
//! - `purge`: the job that deletes old receipts;
//! - `requeue`: the operator's tool that gives abandoned fulfillments another chance.
//!
//! Each runs until it is done (the jobs) or until SIGTERM (the receiver finishes the requests in
//! flight, the relay the step in hand), then exits 0. Exit 1 is a failure while running, 2 a
//! configuration that cannot work. This file only reads the command line and starts the part
//! asked for; it must hold no business rule.

mod db;
mod event;
mod inbox;
mod ops;
mod planted;
mod provider;
mod receiver;
mod relay;
mod settings;
mod signature;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};

use crate::planted::PlantedBug;
use crate::settings::{ReceiverSettings, RelaySettings};

/// A shop's payment webhooks: receiver, outbox relay, receipt purge and operator requeue.
#[derive(Debug, Parser)]
#[command(name = "axum-shop", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Receive signed payment webhooks on POST /webhooks/{account} until SIGTERM
    Receiver {
        /// The address to listen on, such as 127.0.0.1:8080
        #[arg(long)]
        listen: SocketAddr,
        /// The shop's SQLite database file
        #[arg(long)]
        database: PathBuf,
        /// A JSON object of settings: webhook-secrets/<account> (whsec_ secrets separated by
        /// spaces), webhook-tolerance-s, and optionally webhook-body-bytes-max
        #[arg(long)]
        settings: PathBuf,
    },
    /// Ship owed fulfillments to the provider until SIGTERM
    Relay {
        /// The shop's SQLite database file
        #[arg(long)]
        database: PathBuf,
        /// The provider's base URL, such as http://127.0.0.1:9000
        #[arg(long)]
        provider_url: String,
        /// A JSON object with the relay's settings: call_timeout_ms, lease_ms, key_lifetime_ms,
        /// backoff_base_ms, backoff_cap_ms, attempts_max, clock_skew_ms_max, stall_ms_max,
        /// provider_act_ms_max
        #[arg(long)]
        relay_settings: PathBuf,
        /// This worker's name: the owner written on every lease it takes
        #[arg(long)]
        worker: String,
    },
    /// Delete the receipts older than the retention, once
    Purge {
        /// The shop's SQLite database file
        #[arg(long)]
        database: PathBuf,
        /// Delete receipts received more than this many milliseconds ago
        #[arg(long)]
        older_than_ms: i64,
    },
    /// Move every abandoned fulfillment back to owed, once
    Requeue {
        /// The shop's SQLite database file
        #[arg(long)]
        database: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Receiver {
            listen,
            database,
            settings,
        } => run_receiver(listen, database, &settings),
        Command::Relay {
            database,
            provider_url,
            relay_settings,
            worker,
        } => run_relay(&database, &provider_url, &relay_settings, worker),
        Command::Purge {
            database,
            older_than_ms,
        } => ops::purge(&database, "purge", older_than_ms.max(0))
            .map(|deleted| println!("purge: deleted {deleted} receipts older than {older_than_ms} ms"))
            .map_err(Failure::Running),
        Command::Requeue { database } => ops::requeue(&database, "operator")
            .map(|requeued| println!("requeue: {requeued} abandoned fulfillments are owed again"))
            .map_err(Failure::Running),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Configuration(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Running(message)) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Why a command ended badly: its configuration cannot work (exit 2), or it failed while running
/// (exit 1).
enum Failure {
    Configuration(String),
    Running(String),
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| Failure::Running(format!("cannot start the runtime: {error}")))
}

fn run_receiver(listen: SocketAddr, database: PathBuf, settings: &std::path::Path) -> Result<(), Failure> {
    let settings = ReceiverSettings::load(settings).map_err(Failure::Configuration)?;
    PlantedBug::from_environment().map_err(Failure::Configuration)?;
    let process = db::process_name("receiver");
    runtime()?
        .block_on(receiver::serve(listen, database, settings, process))
        .map_err(Failure::Running)
}

fn run_relay(
    database: &std::path::Path,
    provider_url: &str,
    relay_settings: &std::path::Path,
    worker: String,
) -> Result<(), Failure> {
    let settings = RelaySettings::load(relay_settings).map_err(Failure::Configuration)?;
    let planted = PlantedBug::from_environment().map_err(Failure::Configuration)?;
    if let Some(bug) = planted {
        eprintln!("{worker}: planted bug {bug:?} is on");
    }
    let provider =
        provider::Provider::new(provider_url, settings.call_timeout_ms).map_err(Failure::Configuration)?;
    let relay = relay::Relay::new(database, provider, settings, worker, planted).map_err(Failure::Running)?;
    // The relay's work is blocking (SQLite, a blocking HTTP client); the runtime only waits for
    // the signal and raises the flag the worker looks at between steps.
    let runtime = runtime()?;
    let stop = Arc::new(AtomicBool::new(false));
    let signalled = runtime
        .block_on(async { shutdown_signal() })
        .map_err(Failure::Running)?;
    runtime.spawn({
        let stop = Arc::clone(&stop);
        async move {
            signalled.await;
            stop.store(true, Ordering::SeqCst);
        }
    });
    relay.run(&stop);
    Ok(())
}

/// A future that ends at SIGTERM or Ctrl-C. The handlers are installed when this is called (in a
/// runtime), not when the future is first polled, so a signal that comes early is not missed.
fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|error| format!("cannot handle SIGTERM: {error}"))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|error| format!("cannot handle SIGINT: {error}"))?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}
