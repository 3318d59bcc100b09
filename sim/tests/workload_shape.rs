//! The workload is the user's: `--sender`, `--tenants`, `--subjects` (or `--orders`) and the other shape flags
//! narrow what each seed draws, bad values are one line with exit 2, the configuration drawn is
//! what seed files record (so a file replays with no flags), and every printed `replay --seed`
//! command carries the flags that draw the same configuration again.

mod scratch;

use scratch::Scratch;

use std::path::Path;
use std::process::{Command, Output};

fn commitgap(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_commitgap"))
        .args(arguments)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("shape", name)
}

#[test]
fn a_large_workload_against_a_sender_without_retries_passes() {
    let directory = scratch("large");
    let output = commitgap(&[
        "sweep",
        "--sender",
        "github",
        "--tenants",
        "4..8",
        "--orders",
        "5..8",
        "--seeds",
        "40",
        "--seeds-dir",
        directory.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
    assert!(text(&output.stdout).contains("sweep: 40 seeds, 0 failures"));
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn a_seed_file_records_the_shaped_configuration_and_replays_without_flags() {
    let directory = scratch("file");
    let output = commitgap(&[
        "sweep",
        "--system",
        "receipt-first",
        "--sender",
        "github",
        "--tenants",
        "4..5",
        "--orders",
        "2",
        "--without-faults",
        "crash,lost-ack",
        "--seeds",
        "2",
        "--no-shrink",
        "--seeds-dir",
        directory.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("replay --seed 0 --system receipt-first --backend memdb --sender github --tenants 4..5 --subjects 2 --without-faults crash,lost-ack"),
        "{stdout}"
    );
    let path = directory.join("receipt-first-0.json");
    let file: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let config = &file["config"];
    assert_eq!(config["sender_preset"], "git-hub");
    assert!((4..=5).contains(&config["tenants"].as_u64().unwrap()));
    assert_eq!(config["orders_per_tenant"], 2);
    assert_eq!(config["faults"]["crash"]["enabled"], false);
    assert_eq!(config["faults"]["lost-ack"]["enabled"], false);
    // The file alone replays the run as found; by seed, the printed flags draw the same run.
    let from_file = commitgap(&["replay", path.to_str().unwrap(), "--from", "seed"]);
    assert_eq!(from_file.status.code(), Some(1));
    assert!(
        !text(&from_file.stdout).contains("differs"),
        "{}",
        text(&from_file.stdout)
    );
    let by_seed = commitgap(&[
        "replay",
        "--seed",
        "0",
        "--system",
        "receipt-first",
        "--sender",
        "github",
        "--tenants",
        "4..5",
        "--subjects",
        "2",
        "--without-faults",
        "crash,lost-ack",
    ]);
    let digest = |output: &Output| {
        let stdout = text(&output.stdout);
        let start = stdout.find("digest ").expect("a digest is printed") + 7;
        stdout[start..start + 32].to_owned()
    };
    assert_eq!(digest(&by_seed), digest(&from_file));
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn bad_shapes_exit_2_with_one_line() {
    for (arguments, expected) in [
        (&["sweep", "--tenants", "8..4"][..], "empty range"),
        (&["sweep", "--tenants", "0..2"], "allowed 1..26"),
        (&["sweep", "--updates", "2..4"], "allowed 0..3"),
        (&["sweep", "--tenants", "27"], "allowed 1..26"),
        (&["sweep", "--tenants", "8", "--orders", "9"], "72 subjects"),
        (
            &["sweep", "--sender", "gitlab"],
            "unknown sender preset \"gitlab\"",
        ),
        (
            &["sweep", "--faults", "crash,nonesuch"],
            "no fault model is called \"nonesuch\"",
        ),
        (&["sweep", "--lease-ms", "1000"], "lease-ms 1000"),
        (&["replay", "--seed", "1", "--orders", "x"], "not a count"),
        (
            &["sweep", "--shape", "/nonexistent/shape.json"],
            "cannot read --shape",
        ),
    ] {
        let output = commitgap(arguments);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{arguments:?}: {stderr:?}");
        assert!(
            stderr.contains(expected),
            "{arguments:?}: {stderr:?} should say {expected:?}"
        );
    }
}

#[test]
fn a_shape_file_is_read_and_the_flags_override_it() {
    let directory = scratch("shape-file");
    let shape = directory.join("shape.json");
    std::fs::write(
        &shape,
        r#"{"tenants": "2", "orders": {"min": 1, "max": 2}, "sender": "svix", "faults": ["crash"]}"#,
    )
    .unwrap();
    let output = commitgap(&[
        "sweep",
        "--system",
        "receipt-first",
        "--shape",
        shape.to_str().unwrap(),
        "--tenants",
        "3",
        "--seeds",
        "1",
        "--no-shrink",
        "--seeds-dir",
        directory.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(directory.join("receipt-first-0.json")).unwrap()).unwrap();
    assert_eq!(file["config"]["tenants"], 3, "the flag wins over the file");
    assert_eq!(
        file["config"]["sender_preset"], "svix",
        "the file's setting holds"
    );
    assert_eq!(file["config"]["faults"]["lost-ack"]["enabled"], false);
    std::fs::write(&shape, r#"{"tennants": 2}"#).unwrap();
    let output = commitgap(&["sweep", "--shape", shape.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("unknown field `tennants`"),
        "{}",
        text(&output.stderr)
    );
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn the_liveness_bounds_grow_with_the_streams_unless_a_file_turns_that_off() {
    let directory = scratch("bounds");
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds/receipt-first-0.json");
    let mut file: serde_json::Value = serde_json::from_slice(&std::fs::read(committed).unwrap()).unwrap();
    file["system"] = "reference".into();
    file["expect"] = serde_json::json!({"outcome": "passes"});
    file["config"]["liveness_steps_max"] = 20.into();
    let write = |file: &serde_json::Value, name: &str| {
        let path = directory.join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(file).unwrap()).unwrap();
        path
    };
    let scaled = write(&file, "scaled.json");
    let output = commitgap(&["replay", scaled.to_str().unwrap(), "--from", "seed"]);
    let stdout = text(&output.stdout);
    assert!(stdout.contains("passed every invariant"), "{stdout}");
    assert_eq!(output.status.code(), Some(0), "{stdout}");

    file["config"]["liveness_steps_per_stream"] = 0.into();
    let fixed = write(&file, "fixed.json");
    let output = commitgap(&["replay", fixed.to_str().unwrap(), "--from", "seed"]);
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("UNSETTLED: did not settle within 20 steps taken while work was due after heal"),
        "{stdout}"
    );
    assert!(stdout.contains("still pending: "), "{stdout}");
    assert_eq!(
        output.status.code(),
        Some(1),
        "a bound that was hit is its own verdict"
    );
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn sql_mutants_rewrite_each_statement_and_count_what_was_caught() {
    let output = commitgap(&["mutants", "--sql", "--budget", "8"]);
    let stdout = text(&output.stdout);
    for rewrite in [
        "BEGIN IMMEDIATE -> BEGIN",
        "COMMIT -> ROLLBACK",
        "drop WHERE conjunct 1",
        "drop ON CONFLICT",
        "drop RETURNING",
        "drop the statement",
        "drop operation_key from its key",
    ] {
        assert!(stdout.contains(rewrite), "{rewrite:?} in {stdout}");
    }
    assert!(
        stdout.contains("equivalent: the transaction's first statement is the receipt's insert"),
        "{stdout}"
    );
    // Without ON CONFLICT a redelivered event's receipt insert fails the same way on every
    // attempt: a receiver stuck on one event, named as such rather than left unsettled.
    let stuck_receiver = stdout
        .lines()
        .find(|line| line.contains("INSERT INTO receipts") && line.contains("drop ON CONFLICT"))
        .expect("the receipt insert's ON CONFLICT is mutated");
    assert!(
        stuck_receiver.contains("work-progresses-after-heal"),
        "{stuck_receiver}"
    );
    // A purge that deletes every receipt, or none, is judged against its cutoff.
    for rewrite in ["drop WHERE", "drop the statement"] {
        let purge = stdout
            .lines()
            .find(|line| line.contains("DELETE FROM receipts") && line.contains(rewrite))
            .expect("the purge is mutated");
        assert!(purge.contains("purge-keeps-retention"), "{purge}");
    }
    let tally = stdout
        .lines()
        .find(|line| line.starts_with("sql mutants: ") && line.contains(" caught, "))
        .expect("a tally line");
    let numbers: Vec<u64> = tally
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect();
    let (caught, counted) = (numbers[0], numbers[1]);
    assert!(caught >= 30 && caught <= counted, "{tally}");
    // Some of the reference's mutants survive (see docs/power.md, "SQL mutants"), so the command says
    // which and fails, as it must until each is caught or shown equivalent.
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("sql mutants: survived: #"), "{stdout}");
}
