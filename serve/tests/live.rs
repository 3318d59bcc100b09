//! `live` as a team runs it: real processes on localhost, faults from a seed, the simulator's
//! invariants on the final state and on every commit. A short run of the reference passes with
//! every fault on; a planted bug whose window a duplicate reaches fails with the evidence, and one
//! that breaks a rule between two commits fails at the commit; bad input exits 2 with
//! one line; Ctrl-C stops the run with no process left behind. Every process a test starts is
//! stopped by the test.

#[path = "../../sim/tests/scratch/mod.rs"]
mod scratch;

mod processes;

use processes::{Stopped, processes_mentioning};

use scratch::Scratch;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const PROGRAM: &str = env!("CARGO_BIN_EXE_reference-serve");

fn scratch(name: &str) -> Scratch {
    Scratch::new("live", name)
}

fn live(arguments: &[&str], out: &Path) -> Output {
    Command::new(PROGRAM)
        .args(arguments)
        .arg("--out")
        .arg(out)
        .output()
        .expect("reference-serve runs")
}

/// The one report a run wrote under `out`.
fn report(out: &Path) -> serde_json::Value {
    let run = std::fs::read_dir(out)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.is_dir())
        .expect("the run wrote its directory");
    let text = std::fs::read_to_string(run.join("report.json")).expect("the run wrote report.json");
    serde_json::from_str(&text).unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs planted bug `system` live for `seconds` of `faults` from `seed` into `out`, asserts that
/// it failed (exit 1), and returns what it printed.
fn failing_run(system: &str, seed: &str, seconds: &str, faults: &str, out: &Path) -> String {
    let output = live(
        &[
            "--system",
            system,
            "live",
            "--seed",
            seed,
            "--seconds",
            seconds,
            "--faults",
            faults,
        ],
        out,
    );
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    printed
}

#[test]
fn the_reference_passes_a_short_run_with_every_fault_on() {
    let out = scratch("reference");
    let output = live(&["live", "--seed", "3", "--seconds", "12"], &out);
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(0), "{printed}");
    assert!(printed.contains("verdict: pass"), "{printed}");
    let report = report(&out);
    assert_eq!(report["verdict"], "pass");
    let counts = &report["counts"];
    assert!(counts["deliveries"].as_u64().unwrap() > 10, "{counts}");
    assert!(counts["effects"].as_u64().unwrap() > 0, "{counts}");
    let faults_applied = ["kills", "pauses", "resets", "dropped_answers", "early_purges"]
        .iter()
        .map(|name| counts[name].as_u64().unwrap())
        .sum::<u64>();
    assert!(
        faults_applied >= 5,
        "twelve seconds of faults applied only {faults_applied}: {counts}"
    );
    let judged: Vec<&str> = report["judged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    assert!(counts["commits"].as_u64().unwrap() > 10, "{counts}");
    for name in [
        "one-effect-per-operation",
        "receipt-commits-with-its-work",
        "completion-by-lease-holder",
        "outbox-drains",
        "sender-converges",
        "every-event-processed",
    ] {
        assert!(judged.contains(&name), "{name} not judged: {judged:?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_receipt_committed_apart_from_its_work_fails_at_that_commit() {
    // The final state of receipt-after is as consistent as the reference's; only the journal of
    // commits shows the work committed in one transaction and its receipt in the next.
    let out = scratch("journal");
    let printed = failing_run("receipt-after", "2", "4", "none", &out);
    assert!(
        printed.contains("receipt-commits-with-its-work: at commit ")
            && printed.contains("without a receipt in the same transaction"),
        "{printed}"
    );
    let report = report(&out);
    let failed: Vec<&str> = report["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|failure| failure["invariant"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["receipt-commits-with-its-work"], "{report}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_claim_of_a_live_lease_fails_at_that_commit() {
    // A worker that crashed after its claim leaves a live lease; a claim that ignores it takes the
    // lease from the dead worker's process at once. Each relay process names its workers apart,
    // so the journal tells the two holders apart. Whether a second worker comes to claim while
    // the lease is live depends on how the real processes are scheduled, which a busy machine
    // changes: a seed that happens not to line them up is no failure of live, so seeds are
    // tried until one does, within a bound far above what measurement needs (3 of 3 first seeds
    // caught it on an idle machine).
    const SEEDS: [&str; 4] = ["1", "2", "3", "4"];
    let mut missed = Vec::new();
    for seed in SEEDS {
        let out = scratch(&format!("lease-{seed}"));
        let output = live(
            &[
                "--system",
                "claim-ignores-live-lease",
                "live",
                "--seed",
                seed,
                "--seconds",
                "12",
                "--faults",
                "crash,kill,provider-slow",
            ],
            &out,
        );
        let printed = text(&output);
        let _ = std::fs::remove_dir_all(&out);
        match output.status.code() {
            Some(1) if printed.contains("one-live-lease-per-obligation: at commit ") => {
                assert!(printed.contains("'s lease was live"), "{printed}");
                return;
            }
            // A run that passed, or went unsettled, did not line the workers up; any other
            // failure, or an error, is a finding.
            Some(0) => missed.push(format!("seed {seed}: passed")),
            Some(1) if printed.contains("verdict: unsettled") => {
                missed.push(format!("seed {seed}: unsettled"))
            }
            code => panic!("seed {seed} ended with {code:?}: {printed}"),
        }
    }
    panic!("no seed of {SEEDS:?} caught claim-ignores-live-lease: {missed:?}");
}

#[test]
fn a_receiver_without_a_receipt_check_fails_with_the_evidence_and_the_command() {
    let out = scratch("planted");
    let printed = failing_run(
        "no-receipt-dedup",
        "1",
        "12",
        "duplicate-delivery,lost-answer",
        &out,
    );
    assert!(printed.contains("verdict: FAIL"), "{printed}");
    assert!(
        printed.contains("reproduce: ") && printed.contains("--system no-receipt-dedup live --seed 1"),
        "{printed}"
    );
    let report = report(&out);
    assert_eq!(report["verdict"], "fail");
    assert!(!report["failures"].as_array().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let out = scratch("bad-input");
    for (arguments, expected) in [
        (vec!["live", "--faults", "explode"], "explode"),
        (vec!["live", "--preset", "carrier-pigeon"], "carrier-pigeon"),
        (vec!["live", "--receivers", "0"], "--receivers"),
        (vec!["live", "--duplicate-percent", "101"], "--duplicate-percent"),
        (vec!["live", "--key-lifetime-s", "3"], "--key-lifetime-s"),
        (vec!["--system", "no-such-system", "live"], "no-such-system"),
    ] {
        let output = live(&arguments, &out);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{arguments:?}: {stderr}");
        assert!(stderr.contains(expected), "{arguments:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn ctrl_c_stops_the_run_and_leaves_no_process_behind() {
    let out = scratch("interrupted");
    let child = Command::new(PROGRAM)
        .args(["live", "--seed", "2", "--seconds", "60", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Stopped(child);
    let marker = out.display().to_string();
    let started = Instant::now();
    while processes_mentioning(&marker).len() < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the run's processes did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: kill has no memory effects; the pid is this test's own child.
    unsafe {
        libc::kill(child.0.id() as libc::pid_t, libc::SIGINT);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "live did not stop within 60 s of Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(130));
    let left: Vec<String> = processes_mentioning(&marker)
        .into_iter()
        .filter(|command| !command.contains(" live "))
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
    assert_eq!(report(&out)["verdict"], "interrupted");
    let _ = std::fs::remove_dir_all(&out);
}
