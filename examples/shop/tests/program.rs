//! The shop's own simulation program has every command, for the shop's systems, fault models and
//! invariant: `list` names them, `mutants` measures the shop's own planted bugs, a sweep writes
//! seed files that name `shop-sim`'s command, the committed seed file replays with it, and what
//! the shop's own fault does is credited to it by name, in coverage and in shrunk seed files.

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
        "fault      partner-throttle ",
        "planted    shop-impatient-relay ",
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
fn mutants_measures_the_shops_own_planted_bugs() {
    // shop-impatient-relay took 5.5 seeds on average, at worst 15, over ten starts.
    let output = shop_sim(&["mutants", "--budget", "30"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("shop-inbox-first"), "{stdout}");
    assert!(stdout.contains("mutants: 2 of 2 planted bugs caught"), "{stdout}");
}

/// With only the shop's own `partner-throttle` on, the failure it causes is credited to it: its
/// 429s count under its name and no built-in's, and the shrunk seed file keeps it on, with its
/// settings, beside the schedule lines it wrote. A file whose schedule holds its answers while its
/// configuration turns it off is refused with one line.
#[test]
fn the_shops_own_fault_is_credited_by_name_and_stays_in_the_shrunk_file() {
    let directory = std::env::temp_dir().join(format!("shop-sim-throttle-{}", std::process::id()));
    let output = shop_sim(&[
        "sweep",
        "--system",
        "shop-impatient-relay",
        "--faults",
        "partner-throttle",
        "--seeds",
        "40",
        "--seeds-dir",
        directory.to_str().unwrap(),
    ]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let fired = stdout
        .lines()
        .find_map(|line| line.strip_prefix("coverage: faults fired: "))
        .unwrap_or_else(|| panic!("no coverage line in {stdout}"));
    for entry in fired.split(", ") {
        let (name, count) = entry.rsplit_once(' ').unwrap();
        let count: u64 = count.parse().unwrap();
        if name == "partner-throttle" {
            assert!(count > 0, "{fired}");
        } else {
            assert_eq!(
                count, 0,
                "{name} is credited with the shop's fault's work: {fired}"
            );
        }
    }
    assert!(!stdout.contains("never fired: partner-throttle"), "{stdout}");

    let path = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|extension| extension == "json"))
        .expect("the failure's seed file is written");
    let mut file: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let shrunk = &file["shrunk"];
    let throttle = &shrunk["config"]["faults"]["partner-throttle"];
    assert_eq!(throttle["enabled"], serde_json::json!(true), "{throttle}");
    assert!(
        throttle["window_ms"].is_array(),
        "its settings are kept: {throttle}"
    );
    let schedule = shrunk["schedule"].to_string();
    assert!(schedule.contains("answer=429/"), "{schedule}");
    assert!(schedule.contains("@partner-throttle"), "{schedule}");

    file["shrunk"]["config"]["faults"]["partner-throttle"]["enabled"] = serde_json::json!(false);
    std::fs::write(&path, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    let refused = shop_sim(&["replay", path.to_str().unwrap(), "--from", "shrunk"]);
    let stderr = text(&refused.stderr);
    std::fs::remove_dir_all(&directory).unwrap();
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("partner-throttle"), "{stderr}");
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
