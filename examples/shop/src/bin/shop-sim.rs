//! The shop's simulation program: every `commitgap` command (`sweep`, `replay`, `shrink`,
//! `list`, `mutants`, `bench`) for the shop's own receiver and relay. Try
//! `cargo run --release -p shop --bin shop-sim -- sweep --seeds 500`.

fn main() {
    shop::app().main()
}
