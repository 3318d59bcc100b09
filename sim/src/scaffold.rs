//! `commitgap new DIR`: a team's first crate, written so that it compiles, passes and has the next
//! three steps in its README.
//!
//! The crate holds a small system made of the reference's receiver and relay steps, each one its
//! own to replace (one step written out, with a one-line bug to plant in a comment), the program's
//! binary (every `commitgap` command for that system), a harness test, and a README. It depends on
//! `commitgap-sim` alone, by path when given a checkout, else by version. Given a checkout, it
//! starts from the checkout's `Cargo.lock`, so the crate builds the versions the checkout was
//! tested with instead of resolving them afresh; and it always writes the SQLite build flag the
//! checkout builds with (`.cargo/config.toml`). This module only writes files; it refuses a
//! directory that holds anything, so nothing a person wrote is replaced.

use std::path::PathBuf;

/// The version a scaffold depends on when it is given no checkout.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What to write: where, under which name, and how to depend on the simulator.
#[derive(Debug, Clone)]
pub struct Scaffold {
    /// The directory to create; its last component names the package unless `name` is set.
    pub directory: PathBuf,
    /// A checkout of this project to depend on by path (its root, holding `sim/`).
    pub path_dependency: Option<PathBuf>,
}

impl Scaffold {
    /// The package's name: the directory's name, in lower case, with anything but letters,
    /// digits, `-` and `_` made `-`.
    pub fn package_name(&self) -> Result<String, String> {
        let base = self
            .directory
            .file_name()
            .map(|name| name.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        let name: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let name = name.trim_matches('-').to_owned();
        if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(format!(
                "{} does not name a package (it must start with a letter); choose a directory such as ./my-webhooks",
                self.directory.display()
            ));
        }
        Ok(name)
    }

    /// Writes the crate. `Err` says in one line what is wrong: a directory that holds files, a
    /// checkout without `sim/Cargo.toml`, a directory that cannot be written.
    pub fn write(&self) -> Result<Vec<PathBuf>, String> {
        let package = self.package_name()?;
        let dependency = self.dependency_line()?;
        if self.directory.exists() {
            let mut entries = std::fs::read_dir(&self.directory).map_err(|error| {
                format!(
                    "{} cannot be read ({error}); choose another directory",
                    self.directory.display()
                )
            })?;
            if entries.next().is_some() {
                return Err(format!(
                    "{} already holds files, and new writes only into an empty or new directory; choose another",
                    self.directory.display()
                ));
            }
        }
        let library = package.replace('-', "_");
        let files = [
            ("Cargo.toml", cargo_toml(&package, &dependency)),
            ("src/lib.rs", lib_rs(&package)),
            ("src/system.rs", SYSTEM_RS.replace("__NAME__", &package)),
            (
                "src/main.rs",
                format!(
                    "//! The simulation program of {package}: `cargo run --release -- --help`.\n\nfn main() {{\n    {library}::app().main()\n}}\n"
                ),
            ),
            ("tests/simulation.rs", simulation_rs(&library)),
            ("README.md", readme(&package)),
            ("seeds/.gitkeep", String::new()),
            (".cargo/config.toml", CARGO_CONFIG.to_owned()),
        ];
        let mut files = Vec::from(files);
        if let Some(lock) = self.checkout_lock()? {
            files.push(("Cargo.lock", lock));
        }
        let mut written = Vec::new();
        for (relative, contents) in files {
            let path = self.directory.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|error| format!("cannot create {} ({error})", parent.display()))?;
            }
            std::fs::write(&path, contents)
                .map_err(|error| format!("cannot write {} ({error})", path.display()))?;
            written.push(path);
        }
        Ok(written)
    }

    /// The checkout's `Cargo.lock`, when there is a checkout and it has one. Cargo keeps every
    /// version it pins that the new crate's graph still has, and drops the rest.
    fn checkout_lock(&self) -> Result<Option<String>, String> {
        let Some(checkout) = &self.path_dependency else {
            return Ok(None);
        };
        let lock = checkout.join("Cargo.lock");
        if !lock.is_file() {
            return Ok(None);
        }
        std::fs::read_to_string(&lock)
            .map(Some)
            .map_err(|error| format!("cannot read {} ({error})", lock.display()))
    }

    /// `commitgap-sim = { path = ".../sim" }` for a checkout, else the version.
    fn dependency_line(&self) -> Result<String, String> {
        let Some(checkout) = &self.path_dependency else {
            return Ok(format!("commitgap-sim = \"{VERSION}\""));
        };
        let sim = checkout.join("sim");
        if !sim.join("Cargo.toml").is_file() {
            return Err(format!(
                "--path-dependency {} has no sim/Cargo.toml; give the root of a commitgap checkout",
                checkout.display()
            ));
        }
        let absolute = std::fs::canonicalize(&sim)
            .map_err(|error| format!("cannot resolve {} ({error})", sim.display()))?;
        Ok(format!(
            "commitgap-sim = {{ path = {:?} }}",
            absolute.to_string_lossy()
        ))
    }
}

/// The build flag this project builds its bundled SQLite with (its own `.cargo/config.toml`
/// says why), so that a team's sweeps run as fast as the project's.
const CARGO_CONFIG: &str = r#"# Build settings for this crate, written by `commitgap new`.

[env]
# SQLite's bundled build counts page-cache overflow under one process-wide mutex on every page it
# allocates or frees, which makes parallel sweeps queue on that mutex. Nothing reads the counter.
LIBSQLITE3_FLAGS = "-DSQLITE_DISABLE_PAGECACHE_OVERFLOW_STATS"
"#;

fn cargo_toml(package: &str, dependency: &str) -> String {
    format!(
        r#"[package]
name = "{package}"
version = "0.1.0"
edition = "2024"
publish = false

# A workspace of its own, so that the crate builds where it stands, even inside another.
[workspace]

[dependencies]
# Everything the crate needs comes through the simulator: the runtime interface, the reference's
# steps and the SQLite binding are re-exported by it.
{dependency}
# A fault model of your own keeps its settings in a serde struct, which seed files record.
serde = {{ version = "1", features = ["derive"] }}

# Sweeps run thousands of simulated steps; unoptimised SQLite would make them several times slower.
[profile.dev]
opt-level = 1

[profile.dev.package."*"]
opt-level = 3

[profile.release]
debug = "line-tables-only"
"#
    )
}

fn lib_rs(package: &str) -> String {
    format!(
        r#"//! {package}: a webhook receiver and outbox relay on SQLite, and its simulation program.
//!
//! - [`system`]: the receiver and relay (the reference's steps, each one yours to replace).
//! - [`app`]: the simulation program, every `commitgap` command for the system.

pub mod system;

use std::sync::Arc;

use commitgap_sim::App;

/// The simulation program: `cargo run --release -- sweep`. It is the one place where the crate's
/// fault models (`.fault(KIND)`) and invariants (`.invariant(...)`) are registered: the program and
/// `tests/simulation.rs` (through `app().check()`) both read them from here.
pub fn app() -> App {{
    App::new("{package}")
        .replay_command("cargo run --release --")
        .system(Arc::new(system::system()))
}}
"#
    )
}

const SYSTEM_RS: &str = r#"//! The system under test: a webhook receiver and an outbox relay on SQLite.
//!
//! It starts as the reference's steps (`commitgap_sim::commitgap::receiver::ReceiverSteps` and
//! `commitgap_sim::commitgap::relay::RelaySteps`): override any step below to make it yours, and
//! the simulation judges it by the webhook pattern and the payments domain. For a system of your
//! own schema and business, implement `commitgap_sim::system::System` and
//! `commitgap_sim::domain::Domain` (the project's docs/extending.md, "Domains", and its examples/).

use commitgap_sim::commitgap::receiver::ReceiverSteps;
use commitgap_sim::commitgap::relay::{Claim, RelaySteps};
use commitgap_sim::systems::{ReferenceSystem, Variant};

/// The receiver's and the relay's steps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Steps;

/// The system, as the simulation program runs it.
pub fn system() -> ReferenceSystem<Steps> {
    ReferenceSystem::new(Steps)
}

impl Variant for Steps {
    fn name(&self) -> &'static str {
        "__NAME__"
    }

    fn description(&self) -> String {
        "the reference's receiver and relay steps, ready to edit".to_owned()
    }
}

/// The receiver's steps: every one the reference's until you override it.
impl ReceiverSteps for Steps {}

impl RelaySteps for Steps {
    /// The idempotency key the provider sees: the persisted operation key, the same on every
    /// attempt, so that the provider recognises a retry.
    fn idempotency_key(&self, claim: &Claim) -> String {
        // To plant a bug, uncomment the next line: every attempt gets a key of its own, and a retry after a lost reply is performed twice.
        // return format!("{}#{}", claim.operation_key, claim.attempts);
        claim.operation_key.clone()
    }
}
"#;

fn simulation_rs(library: &str) -> String {
    format!(
        r#"//! The simulation as a `cargo test`: the seed files in `seeds/` replay first, as regressions,
//! then a sweep runs; a failure names the command that replays it.

use commitgap_sim::domain::check_domain;
use commitgap_sim::system::System;

#[test]
fn the_system_survives_the_simulation() {{
    // The program's first system, with every fault model and invariant the program registers.
    {library}::app()
        .check()
        .seeds_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/seeds"))
        .run();
}}

#[test]
fn the_domain_keeps_its_own_rules() {{
    // Before any system runs: the business the system serves is consistent on its own (see
    // `commitgap_sim::domain::check_domain`), so a sweep never blames the system for it.
    let domain = {library}::system::system().domain();
    check_domain(&*domain).unwrap();
}}
"#
    )
}

fn readme(package: &str) -> String {
    format!(
        r#"# {package}

A webhook receiver and outbox relay on SQLite (`src/system.rs`), and its deterministic simulation
(`cargo run --release -- --help`).

## The next three steps

1. Sweep it: `cargo run --release -- sweep --seeds 200`. It passes: the system is the reference's
   steps.
2. Plant a bug and watch it caught: in `src/system.rs`, uncomment the line under "To plant a bug",
   then sweep again. It fails, names the invariant, and writes a seed file to `seeds/`;
   `cargo run --release -- replay seeds/<file>.json` replays it step for step (add `--trace`, or
   `--html timeline.html` for a page). Put the line back, and the same replay passes.
3. Make it yours: override the steps of `ReceiverSteps` and `RelaySteps` in `src/system.rs` with
   your own receiver and relay, and run `cargo test --release` (`tests/simulation.rs` replays
   every seed file in `seeds/`, then sweeps). Undo step 2's bug first: the seed file it wrote is
   now a regression test, and fails while the bug is there. `--release` reuses the build the
   sweeps made; a plain `cargo test` builds everything again in the test profile.
   `cargo run --release -- list --contract` prints every rule the system is held to.
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scaffold(directory: &str) -> Scaffold {
        Scaffold {
            directory: PathBuf::from(directory),
            path_dependency: None,
        }
    }

    #[test]
    fn the_directory_names_the_package_and_a_name_that_cannot_be_one_is_refused() {
        assert_eq!(scaffold("/tmp/My Hooks").package_name().unwrap(), "my-hooks");
        assert_eq!(scaffold("ci_hooks").package_name().unwrap(), "ci_hooks");
        let error = scaffold("/tmp/9lives").package_name().unwrap_err();
        assert!(error.contains("must start with a letter"), "{error}");
    }

    #[test]
    fn a_directory_with_files_is_refused_and_left_alone() {
        let directory = std::env::temp_dir().join(format!("commitgap-scaffold-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        std::fs::write(directory.join("notes.txt"), "mine").unwrap();
        let error = Scaffold {
            directory: directory.clone(),
            path_dependency: None,
        }
        .write()
        .unwrap_err();
        assert!(error.contains("already holds files"), "{error}");
        assert_eq!(
            std::fs::read_to_string(directory.join("notes.txt")).unwrap(),
            "mine"
        );
        assert!(!directory.join("Cargo.toml").exists());
        let _ = std::fs::remove_dir_all(&directory);
    }

    #[test]
    fn a_checkout_without_the_simulator_is_refused_and_a_version_is_the_default() {
        let error = Scaffold {
            directory: PathBuf::from("/tmp/x"),
            path_dependency: Some(PathBuf::from("/nonexistent-checkout")),
        }
        .dependency_line()
        .unwrap_err();
        assert!(error.contains("sim/Cargo.toml"), "{error}");
        assert_eq!(
            scaffold("x").dependency_line().unwrap(),
            format!("commitgap-sim = \"{VERSION}\"")
        );
    }
}
