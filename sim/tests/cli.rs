//! The command-line contract: exit 0 when every invariant held, 1 when one failed, 2 for bad
//! usage or input with one line that says what is wrong; every failure printed with the command
//! that replays it; replay traces identical on every run.

use std::path::{Path, PathBuf};
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

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("commitgap-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

/// Asserts exit code 2 and a single `error:` line mentioning `expected`.
fn assert_usage_error(arguments: &[&str], expected: &str) {
    let output = commitgap(arguments);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{arguments:?}: {}",
        stderr(&output)
    );
    let message = stderr(&output);
    assert_eq!(
        message.lines().count(),
        1,
        "{arguments:?}: one line, got {message:?}"
    );
    assert!(message.starts_with("error: "), "{message}");
    assert!(
        message.contains(expected),
        "{arguments:?}: {message:?} should mention {expected:?}"
    );
}

#[test]
fn list_names_every_system_fault_and_invariant() {
    let output = commitgap(&["list"]);
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    for name in [
        "reference",
        "receipt-first",
        "key-per-attempt",
        "blind-retry-after-expiry",
        "crash",
        "lost-ack",
        "duplicate-delivery",
        "receipt-purge",
        "key-expiry",
        "one-effect-per-operation",
        "outbox-drains",
    ] {
        assert!(text.contains(name), "list lacks {name}");
    }
}

#[test]
fn bad_usage_exits_2_with_one_line() {
    let not_a_directory = scratch("not-a-directory").join("file");
    std::fs::write(&not_a_directory, b"").unwrap();
    let below_a_file = not_a_directory.join("seeds");
    assert_usage_error(&["sweep", "--system", "nope"], "unknown system");
    assert_usage_error(&["sweep", "--seeds", "0"], "--seeds");
    assert_usage_error(&["sweep", "--seeds", "many"], "--seeds");
    assert_usage_error(&["sweep", "--backend", "postgres"], "unknown backend");
    assert_usage_error(
        &[
            "sweep",
            "--seeds",
            "2",
            "--seeds-dir",
            below_a_file.to_str().unwrap(),
        ],
        "--seeds-dir",
    );
    assert_usage_error(
        &["sweep", "--first-seed", "18446744073709551615", "--seeds", "2"],
        "--first-seed",
    );
    assert_usage_error(&["replay"], "replay needs a seed file or --seed");
    assert_usage_error(&["replay", "/no/such/file.json"], "cannot read seed file");
    assert_usage_error(&["frobnicate"], "frobnicate");
}

#[test]
fn corrupt_and_foreign_seed_files_exit_2() {
    let directory = scratch("corrupt");
    let corrupt = directory.join("corrupt.json");
    std::fs::write(&corrupt, b"{\"format_version\": 1, \"seed\": ").unwrap();
    assert_usage_error(&["replay", corrupt.to_str().unwrap()], "not valid JSON");
    let future = directory.join("future.json");
    std::fs::write(&future, b"{\"format_version\": 99}").unwrap();
    assert_usage_error(&["replay", future.to_str().unwrap()], "format version 99");
}

#[test]
fn help_is_available_for_every_command() {
    for arguments in [
        &["--help"][..],
        &["sweep", "--help"],
        &["replay", "--help"],
        &["list", "--help"],
    ] {
        let output = commitgap(arguments);
        assert_eq!(output.status.code(), Some(0), "{arguments:?}");
        assert!(stdout(&output).contains("Usage"), "{arguments:?}");
    }
}

#[test]
fn a_failing_sweep_writes_seed_files_that_replay_the_same_way() {
    let directory = scratch("failing-sweep");
    let output = commitgap(&[
        "sweep",
        "--system",
        "receipt-first",
        "--seeds",
        "3",
        "--seeds-dir",
        directory.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("sweep: 3 seeds, 3 failures"),
        "{text}"
    );
    let replays: Vec<&str> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("replay: "))
        .collect();
    assert_eq!(
        replays.len(),
        3,
        "every failure carries its replay command: {text}"
    );
    let file = replays[0].split_whitespace().last().unwrap();
    assert!(Path::new(file).exists(), "{file}");

    let first = commitgap(&["replay", file, "--trace"]);
    let second = commitgap(&["replay", file, "--trace"]);
    assert_eq!(first.status.code(), Some(1));
    assert_eq!(
        stdout(&first),
        stdout(&second),
        "a replayed trace is identical on every run"
    );
    let first_text = stdout(&first);
    let lines: Vec<&str> = first_text.lines().collect();
    assert!(lines.len() > 3);
    assert!(
        lines
            .last()
            .unwrap()
            .contains("FAILED receipt-commits-with-its-work"),
        "{:?}",
        lines.last()
    );
    assert!(
        !stdout(&first).contains("differs from the file"),
        "the digest matches the file"
    );

    // The same seed against the reference: the fix holds, exit 0.
    let fixed = commitgap(&["replay", file, "--system", "reference"]);
    assert_eq!(fixed.status.code(), Some(0), "{}", stdout(&fixed));
}

#[test]
fn a_passing_sweep_exits_0_and_replay_by_seed_works() {
    let directory = scratch("passing-sweep");
    let output = commitgap(&[
        "sweep",
        "--seeds",
        "4",
        "--jobs",
        "2",
        "--seeds-dir",
        directory.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(stdout(&output).starts_with("sweep: 4 seeds, 0 failures"));
    assert_eq!(
        std::fs::read_dir(&directory).unwrap().count(),
        0,
        "no seed file for passing seeds"
    );
    let replay = commitgap(&["replay", "--seed", "3"]);
    assert_eq!(replay.status.code(), Some(0));
    assert!(stdout(&replay).contains("passed every invariant"));
}
