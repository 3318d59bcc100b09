//! The shop served: the same `ShopSystem` the simulation tests, behind an HTTP receiver on a
//! SQLite file, with relay workers calling the provider over HTTP. Try
//! `cargo run --release -p shop --bin shop-serve -- --help`.

use std::sync::Arc;

use commitgap_serve::cli::Service;
use shop::invariant::AccountShopsUnchanged;
use shop::system::ShopSystem;

fn main() {
    Service::new(Arc::new(ShopSystem::CORRECT))
        // The shop's own invariant judges `live` runs too.
        .invariant(Arc::new(AccountShopsUnchanged))
        .main()
}
