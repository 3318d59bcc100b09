//! The reference system served: `init`, `run`, `relay`, `purge`, `requeue` and `live` for the
//! receiver and relay that `src/` defines, as `shop-serve` serves the shop. Every system of
//! `commitgap list` (the planted bugs among them) is served by name with `--system NAME`, so
//! that `live` measures them with this one binary. Try
//! `cargo run --release -p commitgap-serve --bin reference-serve -- --help`.

use std::sync::Arc;

use commitgap_serve::cli::Service;
use commitgap_sim::systems::{ReferenceSystem, by_name};

fn main() {
    Service::with_catalogue(Arc::new(ReferenceSystem::reference()), by_name).main()
}
