//! Choosing what judges a system: `list` marks each invariant as the pattern's or the domain's,
//! `list --contract` prints the rules a system is held to, `--invariants` and
//! `--without-invariants` narrow them on every command that runs seeds, and the choice travels
//! in the seed file so that a replay judges the same way.

mod scratch;

use scratch::Scratch;

use std::process::{Command, Output};

fn commitgap(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_commitgap"))
        .args(arguments)
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("judging", name)
}

#[test]
fn list_marks_each_invariant_as_the_patterns_or_the_domains_and_names_the_domain() {
    let output = commitgap(&["list"]);
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    for line in [
        "invariant  one-effect-per-operation                   pattern safety",
        "invariant  final-state-matches-creation-order         domain liveness",
        "invariant  refund-first-never-ships                   domain safety",
        "domain     payments ",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    assert!(text.contains("[payments domain]"), "{text}");
}

#[test]
fn the_contract_lists_every_judging_invariant_then_the_domains_rules() {
    let output = commitgap(&["list", "--contract"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with("contract of reference (payments domain"),
        "{text}"
    );
    assert!(
        text.contains("pattern  safety    one-effect-per-operation "),
        "{text}"
    );
    assert!(
        text.contains("domain   liveness  owed-operation-settles "),
        "{text}"
    );
    assert!(text.contains("domain   rule      payments "), "{text}");
    let narrowed = stdout(&commitgap(&[
        "list",
        "--contract",
        "--without-invariants",
        "one-effect-per-operation,refund-first-never-ships",
    ]));
    assert!(!narrowed.contains(" one-effect-per-operation "), "{narrowed}");
    assert!(!narrowed.contains(" refund-first-never-ships "), "{narrowed}");
    assert!(narrowed.contains(" outbox-drains "), "{narrowed}");
    let only = stdout(&commitgap(&[
        "list",
        "--contract",
        "--invariants",
        "outbox-drains",
    ]));
    let judged = only
        .lines()
        .filter(|line| line.starts_with("pattern") || line.starts_with("domain   s"))
        .count();
    assert_eq!(judged, 1, "{only}");
}

#[test]
fn an_unknown_invariant_name_is_one_line_and_exit_2() {
    for arguments in [
        &["sweep", "--seeds", "1", "--invariants", "no-such-rule"][..],
        &[
            "replay",
            "--seed",
            "1",
            "--without-invariants",
            "one-efect-per-operation",
        ][..],
        &["list", "--contract", "--invariants", "nope"][..],
    ] {
        let output = commitgap(arguments);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}");
        let message = stderr(&output);
        assert_eq!(message.lines().count(), 1, "{arguments:?}: {message}");
        assert!(message.contains("no invariant of this program"), "{message}");
        assert!(message.contains("`list`"), "{message}");
    }
}

/// With the invariant that catches receipt-first first turned off, another one judges it; the
/// seed file records the choice, and its replay judges the same way without being told.
#[test]
fn a_narrowed_sweep_writes_its_choice_into_the_seed_file_and_the_replay_keeps_it() {
    let directory = scratch("narrowed");
    let seeds_dir = directory.to_str().unwrap();
    let output = commitgap(&[
        "sweep",
        "--system",
        "receipt-first",
        "--seeds",
        "20",
        "--without-invariants",
        "receipt-commits-with-its-work",
        "--seeds-dir",
        seeds_dir,
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(!text.contains("FAIL receipt-commits-with-its-work"), "{text}");
    let file = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|extension| extension == "json"))
        .expect("a seed file was written");
    let contents = std::fs::read_to_string(&file).unwrap();
    let json: serde_json::Value = serde_json::from_str(&contents).unwrap();
    assert_eq!(
        json["config"]["invariants"]["without"],
        serde_json::json!(["receipt-commits-with-its-work"]),
        "{contents}"
    );
    let invariant = json["failure"]["invariant"].as_str().unwrap().to_owned();
    assert_ne!(invariant, "receipt-commits-with-its-work");
    let replay = commitgap(&["replay", file.to_str().unwrap(), "--from", "seed"]);
    assert_eq!(replay.status.code(), Some(1), "{}", stderr(&replay));
    assert!(
        stdout(&replay).contains(&format!("FAILED {invariant}")),
        "{}",
        stdout(&replay)
    );
    let _ = std::fs::remove_dir_all(&directory);
}
