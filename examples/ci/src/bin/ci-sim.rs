//! The CI service's simulation program: every `commitgap` command (`sweep`, `replay`, `shrink`,
//! `list`, `mutants`, `bench`) for its receiver and relay. Try
//! `cargo run --release -p ci --bin ci-sim -- sweep --seeds 500`.

fn main() {
    ci::app().main()
}
