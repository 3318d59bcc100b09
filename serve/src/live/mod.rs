//! `live`: the simulator's invariants over real processes.
//!
//! A live check starts the served system as real OS processes on localhost, each through this
//! crate's adapter: receivers on their own ports (each behind a small proxy), relay workers, the
//! purge job and, after heal, the operator. A real sender signs every delivery with Standard
//! Webhooks and follows a preset's retry schedule in compressed time; a provider double speaks
//! the provider's wire contract. Faults come from a seed (`faults`). When the fault phase ends
//! it heals, waits for quiet within a bound, runs the operator's requeue, stops every process,
//! and judges the final database, the provider's ledger and the sender's books with the
//! simulator's own invariants ([`commitgap_sim::judge`]), and every commit of the run, which
//! triggers journal in the database as the processes write (`journal`,
//! [`commitgap_sim::judge`]), with those that judge one commit at a time.
//!
//! The seed decides the workload and the plan of faults; where each fault lands among the
//! processes' work is the operating system's choice. A run is therefore seeded, not
//! deterministic: the same seed runs the same plan, not the same interleaving. Time in the
//! relay's settings is real and short (a call timeout of a second, a lease of four), so that a
//! minute holds many retries, leases and reconciliations.
//!
//! This module must not judge anything itself: verdicts come from the invariants, and a bound
//! that was hit (no quiet in time) is reported as unsettled, never as an invariant's failure.

mod faults;
pub(crate) mod journal;
mod judge;
mod launch;
mod processes;
mod proxy;
mod report;
mod run;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use commitgap_sim::commitgap::relay::RelaySettings;
use commitgap_sim::invariants::Invariant;
use commitgap_sim::peers::SenderPreset;
use commitgap_sim::system::System;

use crate::service::{DescribedSystem, ServiceDescription};

pub use faults::LiveFault;

/// `live`'s options.
#[derive(Debug, Clone, clap::Args)]
pub struct LiveArgs {
    /// The seed: it decides the workload and the plan of faults
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How long faults are applied, in seconds; heal and the wait for quiet come after
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Receiver processes, each on its own port
    #[arg(long, default_value_t = 2)]
    pub receivers: usize,
    /// Relay worker processes
    #[arg(long, default_value_t = 2)]
    pub relay_workers: usize,
    /// Faults to apply: `all`, `none`, or names separated by commas (crash, kill, pause,
    /// connection-reset, lost-answer, early-purge, provider-slow, provider-reply-lost,
    /// key-expiry, duplicate-delivery, fan-out, twin-events; and provider-double-execute, which
    /// `all` leaves out)
    #[arg(long, default_value = "all")]
    pub faults: String,
    /// The sender's retry contract: stripe-like, svix, shopify-like or github
    #[arg(long, default_value = "svix")]
    pub preset: String,
    /// The sender's virtual time runs this many times faster than the wall clock (3600: an
    /// hour of the retry schedule per second)
    #[arg(long, default_value_t = 3600)]
    pub compression: u32,
    /// Tenants, each with one sender account
    #[arg(long, default_value_t = 4)]
    pub tenants: u32,
    /// Business entities per tenant
    #[arg(long, default_value_t = 12)]
    pub subjects_per_tenant: u32,
    /// Under `duplicate-delivery`, the share of attempts (in percent) the sender also posts, at
    /// the same moment, to the next receiver
    #[arg(long, default_value_t = 20)]
    pub duplicate_percent: u32,
    /// The provider's key lifetime the relay is told, in seconds; under `key-expiry` the provider
    /// double forgets keys at it. 30 minutes (the shortest real one, Qonto's) by default: a
    /// lifetime shorter than a system's own retry cadence breaks a promise the system was never
    /// given (the shop postpones a failed send by a minute), so lower it only for a system whose
    /// relay retries within seconds, as the reference's does here
    #[arg(long, default_value_t = 1800)]
    pub key_lifetime_s: u64,
    /// After heal, wait at most this long for the sender, the outbox and the provider to go
    /// quiet, in seconds; past it the run is unsettled
    #[arg(long, default_value_t = 120)]
    pub quiet_bound_s: u64,
    /// Where each run writes its directory (database, process logs, report.json)
    #[arg(long, default_value = "live-runs")]
    pub out: PathBuf,
}

/// The options, checked.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) args: LiveArgs,
    pub(crate) faults: BTreeSet<LiveFault>,
    pub(crate) preset: SenderPreset,
    /// The described service checked, or `None` for the served program's own system.
    pub(crate) service: Option<Arc<DescribedSystem>>,
}

impl Options {
    fn check(args: &LiveArgs, service: Option<Arc<DescribedSystem>>) -> Result<Options, String> {
        let mut faults = faults::parse(&args.faults)?;
        if service.is_some() && faults.contains(&LiveFault::Crash) {
            // A crash at a chosen statement needs crash points inside the process, which only
            // a served system has; `all` means every fault that applies.
            let named = args
                .faults
                .split(',')
                .any(|name| name.trim() == LiveFault::Crash.name());
            if named {
                return Err(
                    "--faults crash needs crash points inside the process and does not apply to a service; kill applies"
                        .to_owned(),
                );
            }
            faults.remove(&LiveFault::Crash);
        }
        let preset = SenderPreset::from_name(&args.preset).ok_or_else(|| {
            let names: Vec<&str> = SenderPreset::ALL.iter().map(|preset| preset.name()).collect();
            format!("--preset {}: the presets are {}", args.preset, names.join(", "))
        })?;
        let positive = [
            ("--seconds", args.seconds > 0),
            ("--receivers", args.receivers > 0),
            ("--relay-workers", args.relay_workers > 0),
            ("--compression", args.compression > 0),
            ("--tenants", args.tenants > 0),
            ("--subjects-per-tenant", args.subjects_per_tenant > 0),
            ("--quiet-bound-s", args.quiet_bound_s > 0),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, positive)| !positive) {
            return Err(format!("{name} must be at least 1"));
        }
        if args.duplicate_percent > 100 {
            return Err("--duplicate-percent is a share of attempts: at most 100".to_owned());
        }
        if args.key_lifetime_s < 10 {
            return Err(
                "--key-lifetime-s must be at least 10: the relay looks a key up about 6 s before its lifetime ends"
                    .to_owned(),
            );
        }
        if args.receivers > 16 || args.relay_workers > 16 {
            return Err("--receivers and --relay-workers take at most 16 each on one machine".to_owned());
        }
        Ok(Options {
            args: args.clone(),
            faults,
            preset,
            service,
        })
    }

    pub(crate) fn has(&self, fault: LiveFault) -> bool {
        self.faults.contains(&fault)
    }
}

/// The relay's settings in a live run: real time, short, so that a minute holds many retries,
/// with the provider's key lifetime `key_lifetime_ms` (see `--key-lifetime-s`).
/// Every bound the relay is promised holds: a pause is shorter than `stall_ms_max`, the
/// provider double's slow acts end within `provider_act_ms_max`, and it forgets a key no sooner
/// than `key_lifetime_ms`.
pub fn relay_settings(key_lifetime_ms: i64) -> RelaySettings {
    RelaySettings {
        call_timeout_ms: 1_000,
        lease_ms: 4_000,
        key_lifetime_ms,
        backoff_base_ms: 200,
        backoff_cap_ms: 3_000,
        idle_poll_min_ms: 50,
        idle_poll_max_ms: 500,
        attempts_max: 30,
        // Every process reads one machine's clock.
        clock_skew_ms_max: 500,
        stall_ms_max: i64::try_from(faults::PAUSE_MS_MAX).unwrap_or(3_000) + 1_000,
        provider_act_ms_max: 2_500,
    }
}

/// How long a slow send of the provider double takes before it acts, and how long it holds a
/// lost reply, in milliseconds: past the call timeout, within the processing bound.
pub const PROVIDER_SLOW_MS: i64 = 1_800;

/// Runs `live` for `system`, judged also by `added` (a team's own invariants), prints the summary, writes the report and returns the exit status: 0 passed, 1 failed or unsettled (with the evidence), 2 bad input or
/// an environment that cannot run the check, 130 interrupted.
pub fn main(system: &Arc<dyn System>, added: &[Arc<dyn Invariant>], args: &LiveArgs) -> i32 {
    match Options::check(args, None) {
        Ok(options) => run_and_report(system, added, &options),
        Err(message) => {
            eprintln!("error: {message}");
            2
        }
    }
}

/// Runs `live` for the service the description at `path` describes (docs/services.md): its own
/// commands are started in place of the served program. The exit status is as [`main`]'s; a
/// description that cannot be read or run is exit 2 with one line.
pub fn main_service(path: &std::path::Path, args: &LiveArgs) -> i32 {
    let checked = ServiceDescription::load(path).and_then(|description| {
        let service = description.system();
        Options::check(args, Some(Arc::clone(&service))).map(|options| (service, options))
    });
    match checked {
        Ok((service, options)) => {
            let system: Arc<dyn System> = service;
            run_and_report(&system, &[], &options)
        }
        Err(message) => {
            eprintln!("error: {message}");
            2
        }
    }
}

/// Prints the contract the service described at `path` is held to: every invariant that judges
/// it, its domain's rules, what its description keeps from judging, and whether its domain keeps
/// its own properties on drawn workloads ([`commitgap_sim::domain::check_domain`], which a
/// domain written in a file may not). Exit 0, 1 when the domain check fails, 2 for a description
/// that cannot be read.
pub fn print_contract(path: &std::path::Path) -> i32 {
    let description = match ServiceDescription::load(path) {
        Ok(description) => description,
        Err(message) => {
            eprintln!("error: {message}");
            return 2;
        }
    };
    let service = description.system();
    let domain = service.domain();
    let without = service.not_judged().into_iter().map(|(name, _)| name).collect();
    let choice = commitgap_sim::invariants::InvariantChoice { only: None, without };
    let judging = commitgap_sim::run::Registry::default().judging(&*domain, service.workflows(), &choice);
    let (judging, left_out) = match judging {
        Ok(judging) => judging,
        Err(message) => {
            eprintln!("error: {message}");
            return 2;
        }
    };
    println!(
        "contract of {} ({} domain: {})",
        service.name(),
        domain.name(),
        domain.description()
    );
    for invariant in &judging {
        println!(
            "{:<9} {:<42} {}",
            invariant.kind().name(),
            invariant.name(),
            invariant.description()
        );
    }
    for rule in domain.rules() {
        println!("{:<9} {:<42} {rule}", "rule", domain.name());
    }
    for (name, why) in service.not_judged().into_iter().chain(left_out) {
        println!("not checked: {name}, since {why}");
    }
    println!("live judges what it can see from outside the processes; its report lists the rest");
    match commitgap_sim::domain::check_domain(&*domain) {
        Ok(()) => {
            println!(
                "domain check: {} keeps {} on {} drawn workloads",
                domain.name(),
                commitgap_sim::domain::PROPERTIES.join(", "),
                commitgap_sim::domain::DEFAULT_CASES
            );
            0
        }
        Err(why) => {
            println!("domain check: FAILED: {why}");
            1
        }
    }
}

fn run_and_report(system: &Arc<dyn System>, added: &[Arc<dyn Invariant>], options: &Options) -> i32 {
    match run::run(system, added, options) {
        Ok(outcome) => match outcome.write() {
            Ok(report) => {
                println!("{}", outcome.summary(&report));
                outcome.exit_code()
            }
            Err(message) => {
                println!("{}", outcome.summary(&outcome.directory.join("report.json")));
                eprintln!("error: {message}");
                2
            }
        },
        Err(message) => {
            eprintln!("error: {message}");
            2
        }
    }
}
