//! `new`: writes a new crate that plugs its own receiver and relay into the simulation.
//!
//! What the crate holds is `crate::scaffold`'s; this file only passes the arguments on and says
//! what was written.

use std::path::PathBuf;

use clap::Args;

use super::{UsageError, say};

#[derive(Args)]
pub(super) struct NewArgs {
    /// The directory to create (new or empty); its name names the package.
    directory: PathBuf,
    /// Depend on the commitgap checkout at CHECKOUT (its root) by path, instead of by version.
    #[arg(long, value_name = "CHECKOUT")]
    path_dependency: Option<PathBuf>,
}

pub(super) fn run_new(args: &NewArgs) -> Result<i32, UsageError> {
    let scaffold = crate::scaffold::Scaffold {
        directory: args.directory.clone(),
        path_dependency: args.path_dependency.clone(),
    };
    let written = scaffold.write().map_err(UsageError)?;
    for path in &written {
        say!("wrote {}", path.display());
    }
    say!(
        "next: cd {} && cargo run --release -- sweep --seeds 200 (then see its README.md)",
        args.directory.display()
    );
    Ok(0)
}
