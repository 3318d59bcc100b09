//! The reference system served: `init`, `run` and `requeue` for the receiver and relay that
//! `src/` defines, as `shop-serve` serves the shop. Try
//! `cargo run --release -p commitgap-serve --bin reference-serve -- --help`.

use std::sync::Arc;

use commitgap_serve::cli::Service;
use commitgap_sim::systems::ReferenceSystem;

fn main() {
    Service::new(Arc::new(ReferenceSystem::reference())).main()
}
