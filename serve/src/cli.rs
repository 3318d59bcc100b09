//! The command line of a served system: `init` creates its database, `run` serves it (the
//! receiver and relay workers, with the purge job on a timer) until SIGTERM or Ctrl-C, `relay`
//! runs relay workers alone, `purge` and `requeue` are one pass of the purge job and of the
//! operator, and `live` checks the system over real processes ([`crate::live`]). A team's binary
//! is one line: `Service::new(system).main()`.
//!
//! Bad input exits 2 with one line that says what is wrong; a service that stopped cleanly exits
//! 0. This module must not decide anything the system decides: it only wires the pieces of
//! [`crate::env`], [`crate::receiver`] and [`crate::workers`] together.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use commitgap_sim::commitgap::relay::RelaySettings;
use commitgap_sim::invariants::Invariant;
use commitgap_sim::system::{Fixtures, System};

use crate::env::{Connections, NoProvider, Pool, Stop};
use crate::provider::HttpProvider;
use crate::receiver::{Receiver, shutdown_signal};
use crate::workers::{create_database, run_purge, run_relay_worker, run_requeue};

/// Finds a system by name, for `--system NAME`.
pub type Lookup = fn(&str) -> Option<Arc<dyn System>>;

/// A system, served. See the module documentation.
pub struct Service {
    system: Arc<dyn System>,
    /// Other systems this program can serve by name (`--system NAME`), such as the planted bugs
    /// a `live` table measures.
    catalogue: Option<Lookup>,
    /// A team's own invariants, which `live` judges beside the built-in ones.
    added: Vec<Arc<dyn Invariant>>,
}

#[derive(Parser)]
#[command(about = "Serve a commitgap system: an HTTP webhook receiver and outbox relay workers on SQLite")]
struct Cli {
    /// Serve the system of this name instead of the program's own (only in programs with a
    /// catalogue, such as reference-serve, whose names are `commitgap list`'s systems)
    #[arg(long, global = true)]
    system: Option<String>,
    /// Kill this process at one statement in this many (a live check's crash points; see
    /// `env::arm_crash_points`)
    #[arg(long, global = true, hide = true)]
    crash_one_in: Option<u32>,
    /// The seed of the crash points
    #[arg(long, global = true, hide = true, default_value_t = 0)]
    crash_seed: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the database: WAL mode, then the system's own schema and fixtures
    Init {
        /// The SQLite file to create (it must not exist)
        #[arg(long)]
        database: PathBuf,
        /// A JSON file of fixtures (`accounts` and `subjects`) the system's set-up inserts
        #[arg(long)]
        fixtures: Option<PathBuf>,
    },
    /// Serve the receiver and relay workers until SIGTERM or Ctrl-C, then stop cleanly
    Run {
        /// The SQLite file `init` created
        #[arg(long)]
        database: PathBuf,
        /// A JSON object of settings every process reads (endpoint secrets, limits)
        #[arg(long)]
        settings: Option<PathBuf>,
        /// Where the receiver listens; port 0 picks a free port, printed at start
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// The provider's base URL (`http://host:port`); needed when relay workers run
        #[arg(long)]
        provider_url: Option<String>,
        /// Relay workers in this process
        #[arg(long, default_value_t = 2)]
        relay_workers: usize,
        /// The receiver's SQLite connections
        #[arg(long, default_value_t = 4)]
        pool: usize,
        /// Run the purge job this often, in seconds; 0 never runs it
        #[arg(long, default_value_t = 3600)]
        purge_every_s: u64,
        /// The purge job deletes receipts older than this, in milliseconds (a week by default)
        #[arg(long, default_value_t = 7 * 24 * 3_600_000)]
        receipt_retention_ms: i64,
        /// A JSON file of the relay's settings (timeouts, lease, backoff, the provider's key
        /// lifetime); the defaults when left out
        #[arg(long)]
        relay_settings: Option<PathBuf>,
    },
    /// Run relay workers only, with no receiver, until SIGTERM or Ctrl-C
    Relay {
        /// The SQLite file `init` created
        #[arg(long)]
        database: PathBuf,
        /// A JSON object of settings every process reads
        #[arg(long)]
        settings: Option<PathBuf>,
        /// The provider's base URL (`http://host:port`)
        #[arg(long)]
        provider_url: String,
        /// Relay workers in this process
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// A JSON file of the relay's settings; the defaults when left out
        #[arg(long)]
        relay_settings: Option<PathBuf>,
    },
    /// One pass of the purge job: delete receipts older than the retention, then exit
    Purge {
        /// The SQLite file the service runs on
        #[arg(long)]
        database: PathBuf,
        /// Receipts older than this, in milliseconds, are the system's to delete
        #[arg(long)]
        receipt_retention_ms: i64,
    },
    /// The operator's pass: move every dead obligation back to owed, once
    Requeue {
        /// The SQLite file the service runs on
        #[arg(long)]
        database: PathBuf,
    },
    /// Check the system over real processes: receivers, relay workers, the purge job and the
    /// operator on localhost, a signing sender and a provider double, with faults from a seed;
    /// then judge the final state with the simulator's invariants. Exit 0 when it passed, 1
    /// with the evidence, 2 for bad input, 130 when interrupted
    Live(crate::live::LiveArgs),
}

impl Service {
    /// The service of `system`.
    pub fn new(system: Arc<dyn System>) -> Service {
        Service {
            system,
            catalogue: None,
            added: Vec::new(),
        }
    }

    /// Adds a team's own invariant, which `live` judges on the final state when it says it can
    /// ([`Invariant::judges_final_state`]), as the simulator's `App::invariant` adds it to sweeps.
    pub fn invariant(mut self, invariant: Arc<dyn Invariant>) -> Service {
        self.added.push(invariant);
        self
    }

    /// The service of `system`, which can also serve any system `lookup` finds by name
    /// (`--system NAME`): the program's `live` table then measures them with the same binary.
    pub fn with_catalogue(system: Arc<dyn System>, lookup: Lookup) -> Service {
        Service {
            system,
            catalogue: Some(lookup),
            added: Vec::new(),
        }
    }

    /// Parses the command line, runs the command and exits: 0 when it ended as asked, 2 with one
    /// line for bad input.
    pub fn main(&self) -> ! {
        let cli = Cli::parse();
        let service = match self.chosen(cli.system.as_deref()) {
            Ok(service) => service,
            Err(message) => {
                eprintln!("error: {message}");
                std::process::exit(2);
            }
        };
        if let Some(one_in) = cli.crash_one_in.filter(|one_in| *one_in > 0) {
            let process = match &cli.command {
                Command::Relay { .. } => "relay",
                _ => "receiver",
            };
            crate::env::arm_crash_points(cli.crash_seed, process, commitgap_sim::rng::Ratio::new(1, one_in));
        }
        if let Command::Live(args) = cli.command {
            let code = crate::live::main(&service.system, &service.added, &args);
            std::process::exit(code);
        }
        match service.run(cli.command) {
            Ok(()) => std::process::exit(0),
            Err(message) => {
                eprintln!("error: {message}");
                std::process::exit(2);
            }
        }
    }

    /// The service `--system` names, or this one.
    fn chosen(&self, name: Option<&str>) -> Result<Service, String> {
        let Some(name) = name else {
            return Ok(Service {
                system: Arc::clone(&self.system),
                catalogue: self.catalogue,
                added: self.added.clone(),
            });
        };
        if name == self.system.name() {
            return self.chosen(None);
        }
        let Some(lookup) = self.catalogue else {
            return Err(format!(
                "--system {name}: this program serves only {}; leave --system out",
                self.system.name()
            ));
        };
        match lookup(name) {
            Some(system) => Ok(Service {
                system,
                catalogue: self.catalogue,
                added: self.added.clone(),
            }),
            None => Err(format!(
                "--system {name}: no system of that name; `commitgap list` shows them"
            )),
        }
    }

    fn run(&self, command: Command) -> Result<(), String> {
        match command {
            Command::Live(_) => Err("live runs through Service::main".to_owned()),
            Command::Purge {
                database,
                receipt_retention_ms,
            } => self.purge_once(database, receipt_retention_ms),
            Command::Relay {
                database,
                settings,
                provider_url,
                workers,
                relay_settings,
            } => {
                let connections = self.connections(database, settings.as_deref())?;
                let relay = relay_settings_from(relay_settings.as_deref())?;
                self.relay_only(&connections, &provider_url, workers, &relay)
            }
            Command::Init { database, fixtures } => {
                let fixtures = match fixtures {
                    Some(path) => read_json::<Fixtures>(&path)?,
                    None => Fixtures::default(),
                };
                create_database(&database, &*self.system, &fixtures)?;
                println!("created {}", database.display());
                Ok(())
            }
            Command::Requeue { database } => {
                let connections = self.connections(database, None)?;
                let stop = Stop::new();
                let env = connections
                    .open("operator", Box::new(NoProvider), &stop)
                    .map_err(|error| error.to_string())?;
                run_requeue(&self.system, env, &stop);
                Ok(())
            }
            Command::Run {
                database,
                settings,
                listen,
                provider_url,
                relay_workers,
                pool,
                purge_every_s,
                receipt_retention_ms,
                relay_settings,
            } => {
                let connections = self.connections(database, settings.as_deref())?;
                let provider = match (&provider_url, relay_workers) {
                    (_, 0) => None,
                    (Some(url), _) => Some(HttpProvider::new(url)?),
                    (None, _) => {
                        return Err(
                            "--provider-url is needed for relay workers (or pass --relay-workers 0)"
                                .to_owned(),
                        );
                    }
                };
                let plan = Plan {
                    listen,
                    relay_workers,
                    pool,
                    purge_every: Duration::from_secs(purge_every_s),
                    receipt_retention_ms,
                    relay: relay_settings_from(relay_settings.as_deref())?,
                };
                self.serve(&connections, provider, &plan)
            }
        }
    }

    fn connections(&self, database: PathBuf, settings: Option<&Path>) -> Result<Connections, String> {
        if !database.exists() {
            return Err(format!(
                "{} does not exist; create it with `init --database {}`",
                database.display(),
                database.display()
            ));
        }
        let settings = match settings {
            Some(path) => read_json::<BTreeMap<String, String>>(path)?.into_iter().collect(),
            None => Vec::new(),
        };
        Ok(Connections {
            database,
            busy_timeout_ms: self.system.busy_timeout_ms(),
            settings,
        })
    }

    fn serve(
        &self,
        connections: &Connections,
        provider: Option<HttpProvider>,
        plan: &Plan,
    ) -> Result<(), String> {
        let stop = Stop::new();
        let runtime =
            tokio::runtime::Runtime::new().map_err(|error| format!("cannot start the runtime: {error}"))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(plan.listen))
            .map_err(|error| format!("cannot listen on {}: {error}", plan.listen))?;
        let address = listener
            .local_addr()
            .map_err(|error| format!("cannot read the listening address: {error}"))?;
        let pool =
            Pool::open(connections, "receiver", plan.pool, &stop).map_err(|error| error.to_string())?;
        let receiver = Receiver::new(Arc::clone(&self.system), pool);
        let mut threads = match provider {
            Some(provider) => {
                self.start_relay_workers(connections, &provider, plan.relay_workers, &plan.relay, &stop)?
            }
            None => Vec::new(),
        };
        if !plan.purge_every.is_zero() {
            let (system, connections, stop) = (Arc::clone(&self.system), connections.clone(), stop.clone());
            let (every, retention_ms) = (plan.purge_every, plan.receipt_retention_ms);
            threads.push(std::thread::spawn(move || {
                purge_on_timer(&system, &connections, every, retention_ms, &stop);
            }));
        }
        println!("listening on {address}");
        let stopping = stop.clone();
        let served = runtime.block_on(receiver.serve(listener, async move {
            shutdown_signal().await;
            stopping.request();
        }));
        stop.request();
        for thread in threads {
            let _ = thread.join();
        }
        served.map_err(|error| format!("the receiver failed: {error}"))
    }
}

impl Service {
    /// `purge`: one pass of the purge job.
    fn purge_once(&self, database: PathBuf, receipt_retention_ms: i64) -> Result<(), String> {
        use commitgap_sim::commitgap::env::Env;
        let connections = self.connections(database, None)?;
        let stop = Stop::new();
        let env = connections
            .open("purge", Box::new(NoProvider), &stop)
            .map_err(|error| error.to_string())?;
        let older_than_ms = env.now_ms() - receipt_retention_ms;
        run_purge(&self.system, env, older_than_ms, &stop);
        Ok(())
    }

    /// `relay`: relay workers with no receiver, until SIGTERM or Ctrl-C.
    fn relay_only(
        &self,
        connections: &Connections,
        provider_url: &str,
        workers: usize,
        relay: &RelaySettings,
    ) -> Result<(), String> {
        let provider = HttpProvider::new(provider_url)?;
        let stop = Stop::new();
        let threads = self.start_relay_workers(connections, &provider, workers.max(1), relay, &stop)?;
        println!("relay workers running");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| format!("cannot start the runtime: {error}"))?;
        runtime.block_on(shutdown_signal());
        stop.request();
        for thread in threads {
            let _ = thread.join();
        }
        Ok(())
    }

    /// Starts `count` relay workers, each on a thread and a connection of its own.
    fn start_relay_workers(
        &self,
        connections: &Connections,
        provider: &HttpProvider,
        count: usize,
        relay: &RelaySettings,
        stop: &Stop,
    ) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
        let mut threads = Vec::new();
        for index in 1..=count {
            // A worker's name is its lease owner, so it must differ between relay processes (two
            // processes each with a `relay-1` would each take the other's lease for its own) and
            // between one process's incarnations, as a restarted worker holds no lease.
            let name = format!("relay-{index}@{}", std::process::id());
            let env = connections
                .open(&name, Box::new(provider.clone()), stop)
                .map_err(|error| error.to_string())?;
            let (system, stop, relay) = (Arc::clone(&self.system), stop.clone(), relay.clone());
            threads.push(std::thread::spawn(move || {
                run_relay_worker(&system, env, relay, &stop);
            }));
        }
        Ok(threads)
    }
}

/// The relay's settings from a JSON file, or the defaults.
fn relay_settings_from(path: Option<&Path>) -> Result<RelaySettings, String> {
    match path {
        Some(path) => read_json(path),
        None => Ok(RelaySettings::default()),
    }
}

/// What `run` starts.
struct Plan {
    listen: SocketAddr,
    relay_workers: usize,
    pool: usize,
    purge_every: Duration,
    receipt_retention_ms: i64,
    relay: RelaySettings,
}

/// Runs the purge job every `every`, on a connection opened for each run, until a stop is
/// requested.
fn purge_on_timer(
    system: &Arc<dyn System>,
    connections: &Connections,
    every: Duration,
    retention_ms: i64,
    stop: &Stop,
) {
    use commitgap_sim::commitgap::env::Env;
    loop {
        let mut left = every;
        while !left.is_zero() {
            if stop.is_requested() {
                return;
            }
            let slice = left.min(Duration::from_millis(50));
            std::thread::sleep(slice);
            left -= slice;
        }
        match connections.open("purge", Box::new(NoProvider), stop) {
            Ok(env) => {
                let older_than_ms = env.now_ms() - retention_ms;
                run_purge(system, env, older_than_ms, stop);
            }
            Err(error) => eprintln!("purge: cannot open the database: {error}"),
        }
    }
}

/// Reads a JSON file, with the file and the reason in the error.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("{}: {error}", path.display()))?;
    serde_json::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))
}
