//! The shop's own simulation program has every command, for the shop's systems, fault model and
//! invariant: `list` names them, `mutants` measures the shop's own planted bug, a sweep writes
//! seed files that name `shop-sim`'s command, and the committed seed file replays with it.

use std::path::Path;
use std::process::{Command, Output};

fn shop_sim(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shop-sim"))
        .args(arguments)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("the program runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn list_names_the_shops_systems_model_and_invariant_beside_the_built_in_ones() {
    let output = shop_sim(&["list"]);
    assert_eq!(output.status.code(), Some(0));
    let listed = text(&output.stdout);
    for line in [
        "system     shop ",
        "planted    shop-inbox-first ",
        "fault      jobs-table-busy ",
        "fault      crash ",
        "invariant  account-shops-unchanged ",
        "invariant  one-effect-per-operation ",
    ] {
        assert!(listed.contains(line), "{line:?} in {listed}");
    }
    assert!(
        !listed.contains("system     reference"),
        "the shop's program tests the shop"
    );
}

#[test]
fn mutants_measures_the_shops_own_planted_bug() {
    let output = shop_sim(&["mutants", "--budget", "6"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("shop-inbox-first"), "{stdout}");
    assert!(stdout.contains("mutants: 1 of 1 planted bugs caught"), "{stdout}");
}

#[test]
fn seed_files_name_the_program_that_wrote_them_and_replay_with_it() {
    let directory = std::env::temp_dir().join(format!("shop-sim-seeds-{}", std::process::id()));
    let output = shop_sim(&[
        "sweep",
        "--system",
        "shop-inbox-first",
        "--seeds",
        "2",
        "--no-shrink",
        "--seeds-dir",
        directory.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains(
            "replay: cargo run --release -p shop --bin shop-sim -- replay --seed 0 --system shop-inbox-first"
        ),
        "{stdout}"
    );
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(directory.join("shop-inbox-first-0.json")).unwrap()).unwrap();
    let replay = file["replay"].as_str().unwrap();
    assert!(
        replay.starts_with("cargo run --release -p shop --bin shop-sim -- replay "),
        "{replay}"
    );
    std::fs::remove_dir_all(&directory).unwrap();

    let committed = shop_sim(&["replay", "examples/shop/seeds/shop-inbox-first-0.json"]);
    assert_eq!(committed.status.code(), Some(1), "{}", text(&committed.stderr));
    let stdout = text(&committed.stdout);
    assert!(
        stdout.contains("FAILED receipt-commits-with-its-work"),
        "{stdout}"
    );
    assert!(!stdout.contains("differs"), "{stdout}");
}
