//! The CI service's own simulation program: `list` names its systems, and a sweep runs GitHub's
//! sender unless told otherwise and prints replay commands that name `ci-sim`.

use std::path::Path;
use std::process::{Command, Output};

fn ci_sim(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ci-sim"))
        .args(arguments)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("the program runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn list_names_the_ci_systems_and_not_the_reference() {
    let output = ci_sim(&["list"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let listed = text(&output.stdout);
    for line in [
        "system     ci ",
        "planted    ci-last-arrival-wins ",
        "invariant  final-state-matches-creation-order ",
    ] {
        assert!(listed.contains(line), "{line:?} in {listed}");
    }
    assert!(!listed.contains("system     reference"), "{listed}");
}

#[test]
fn a_sweep_runs_githubs_sender_and_names_the_program_in_its_replay_commands() {
    let directory = std::env::temp_dir().join(format!("ci-sim-seeds-{}", std::process::id()));
    let output = ci_sim(&[
        "sweep",
        "--system",
        "ci-last-arrival-wins",
        "--seeds",
        "4",
        "--no-shrink",
        "--seeds-dir",
        directory.to_str().unwrap(),
    ]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("final-state-matches-creation-order"), "{stdout}");
    let replay = format!("replay: {} replay --seed ", ci::REPLAY_COMMAND);
    assert!(stdout.contains(&replay), "{stdout}");
    assert!(
        stdout.contains("--sender github"),
        "GitHub's sender is the default: {stdout}"
    );
    std::fs::remove_dir_all(&directory).unwrap();
}
