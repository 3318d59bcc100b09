//! The `commitgap` command: sweep, replay, list. See `cli`.

fn main() {
    std::process::exit(commitgap_sim::cli::main());
}
