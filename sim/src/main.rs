//! The `commitgap` command: `sweep` runs seeds and keeps every failure, `replay` re-runs one,
//! `shrink` reduces a failing run, `list` names the systems, fault models and invariants,
//! `mutants` measures how fast each planted bug is caught, and `bench` measures speed and
//! memory. See `cli` for the arguments of each.

fn main() {
    commitgap_sim::App::commitgap().main()
}
