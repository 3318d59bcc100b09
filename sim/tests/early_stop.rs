//! A broken system stops early and reads short: `sweep --max-failures N` and the harness's
//! `max_failures` stop handing out seeds once N have failed, failures are printed one line per
//! invariant with the shortest seed and its replay command, and the step numbers a message gives
//! are the ones that replaying the file it names prints.

mod scratch;

use scratch::Scratch;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use commitgap_sim::harness::{Check, DEFAULT_MAX_FAILURES};
use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::sweep::{Expectation, SeedFile};

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_commitgap")
}

fn commitgap(arguments: &[&str]) -> Output {
    Command::new(binary())
        .args(arguments)
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("early-stop", name)
}

/// The number after `word` in `text`: `number_after("at step 14 (", "at step ")` is 14.
fn number_after(text: &str, word: &str) -> Option<u64> {
    let rest = &text[text.find(word)? + word.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Runs a printed command (the program, then its arguments, split on spaces) and returns the
/// step at which the run it replays failed, from replay's verdict line. The `commitgap` program
/// prints its commands as `cargo run --release -- ...`; they run here as the binary cargo built
/// for this test, which is what that prefix runs, without building again.
fn replayed_step(command: &str) -> u64 {
    let command = command
        .strip_prefix("cargo run --release -- ")
        .map_or_else(|| command.to_owned(), |rest| format!("{} {rest}", binary()));
    let mut words = command.split_whitespace();
    let program = words.next().expect("a command");
    let output = Command::new(program)
        .args(words)
        .output()
        .expect("the command runs");
    assert_eq!(output.status.code(), Some(1), "{command}: {}", stdout(&output));
    let text = stdout(&output);
    let verdict = text
        .lines()
        .find(|line| line.starts_with("replay: seed ") && line.contains(": FAILED "))
        .unwrap_or_else(|| panic!("{command} prints a verdict: {text}"));
    number_after(verdict, " at step ").unwrap_or_else(|| panic!("{verdict}"))
}

/// Seed files in `directory` per invariant they expect to fail.
fn files_per_invariant(directory: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for entry in std::fs::read_dir(directory).unwrap() {
        let file = SeedFile::read(&entry.unwrap().path()).unwrap();
        if let Expectation::Fails { invariant } = file.expect {
            *counts.entry(invariant).or_default() += 1;
        }
    }
    counts
}

#[test]
fn max_failures_stops_a_broken_systems_sweep_and_the_summary_is_grouped() {
    let directory = scratch("cli");
    let json_path = directory.join("sweep.json");
    let output = commitgap(&[
        "sweep",
        "--system",
        "receipt-first",
        "--seeds",
        "10000",
        "--max-failures",
        "5",
        "--jobs",
        "2",
        "--seeds-dir",
        directory.join("seeds").to_str().unwrap(),
        "--json",
        json_path.to_str().unwrap(),
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "failures still exit 1: {text}");
    let summary = text.lines().last().unwrap();
    let ran = number_after(summary, "sweep: ").unwrap_or_else(|| panic!("{summary}"));
    let failing = number_after(summary, "stopped after ").unwrap_or_else(|| panic!("{summary}"));
    assert!(
        summary.contains(&format!(
            "stopped after {failing} failing seeds (--max-failures 5), {ran} of 10000 seeds run"
        )),
        "{summary}"
    );
    // The seed the second job was running when the fifth failure came in finishes too.
    assert!((5..=6).contains(&failing), "{summary}");
    assert!(ran < 100, "receipt-first fails most seeds, so few run: {summary}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(json["seeds_run"], ran);
    assert_eq!(json["stopped_by_max_failures"], true, "{json}");
    assert_eq!(json["stopped_by_time_budget"], false, "{json}");
    let failures = json["failures"].as_array().unwrap();
    assert_eq!(failures.len() as u64, failing, "{json}");

    // One line per invariant, with the count of failing seeds and the shortest seed's replay.
    let mut per_invariant: BTreeMap<&str, usize> = BTreeMap::new();
    for failure in failures {
        *per_invariant
            .entry(failure["invariant"].as_str().unwrap())
            .or_default() += 1;
    }
    let grouped: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("failures: "))
        .collect();
    assert_eq!(grouped.len(), per_invariant.len(), "{text}");
    for (invariant, count) in &per_invariant {
        let line = grouped
            .iter()
            .find(|line| line.starts_with(&format!("failures: {invariant} in ")))
            .unwrap_or_else(|| panic!("a line for {invariant}: {text}"));
        assert!(
            line.contains(&format!(" in {count} seeds; shortest: seed ")),
            "{line}"
        );
        // The step the line names is the step that the command it names prints.
        let (said, command) = line.split_once("; replay: ").unwrap();
        let step = number_after(said, ", step ").unwrap_or_else(|| panic!("{line}"));
        assert_eq!(replayed_step(command), step, "{line}");
    }
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn a_long_failing_sweep_prints_the_first_failures_of_each_invariant_and_counts_the_rest() {
    let directory = scratch("bounded");
    let output = commitgap(&[
        "sweep",
        "--system",
        "receipt-first",
        "--seeds",
        "60",
        "--jobs",
        "2",
        "--seeds-dir",
        directory.to_str().unwrap(),
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let summary = text.lines().last().unwrap();
    // `sweep: 60 seeds, 55 failures, 3 unsettled, ...`: runs that did not settle have a group too.
    let failures = number_after(summary, " seeds, ").unwrap_or_else(|| panic!("{summary}"))
        + summary
            .find(" unsettled")
            .and_then(|end| summary[..end].rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0);
    assert!(
        !summary.contains("stopped after"),
        "no limit, no early stop: {summary}"
    );
    assert!(failures > 20, "receipt-first fails most seeds: {summary}");
    let printed = text.lines().filter(|line| line.starts_with("FAIL seed")).count();
    let replays = text.lines().filter(|line| line.starts_with("  replay: ")).count();
    assert_eq!(
        replays, printed,
        "every printed failure carries its replay command: {text}"
    );
    let grouped: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("failures: "))
        .collect();
    let counted: u64 = grouped
        .iter()
        .map(|line| number_after(line, " in ").unwrap_or_else(|| panic!("{line}")))
        .sum();
    assert_eq!(counted, failures, "the grouped lines count every failure: {text}");
    assert!(
        printed <= 10 * grouped.len(),
        "at most ten FAIL lines per invariant: {printed} for {} invariants",
        grouped.len()
    );
    let counted_not_printed = text
        .lines()
        .filter(|line| line.starts_with("further failures of ") && line.contains("are counted, not printed"))
        .count();
    assert!(
        counted_not_printed >= 1 && counted_not_printed <= grouped.len(),
        "each invariant past ten failures says so once: {text}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn bad_max_failures_exits_2_with_one_line_and_help_describes_it() {
    for value in ["0", "many", "-3"] {
        let output = commitgap(&["sweep", "--max-failures", value]);
        let message = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(2), "{value}: {message}");
        assert_eq!(message.lines().count(), 1, "{value}: {message}");
        assert!(message.starts_with("error: "), "{message}");
        if value != "-3" {
            assert!(message.contains("--max-failures"), "{message}");
        }
    }
    let help = stdout(&commitgap(&["sweep", "--help"]));
    assert!(
        help.contains("--max-failures <N>") && help.contains("[default: no limit]"),
        "{help}"
    );
}

/// The planted bug `receipt-first`, which fails most seeds, checked into `directory`.
fn receipt_first_check(directory: &Path) -> Check {
    Check::new(commitgap_sim::systems::by_name("receipt-first").unwrap())
        .seeds_dir(directory)
        .cases(10_000)
}

/// The `replay:` commands of a harness message.
fn replay_commands(message: &str) -> Vec<&str> {
    message
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("replay: "))
        .collect()
}

#[test]
fn the_harness_stops_early_caps_its_files_and_names_the_steps_replay_prints() {
    let directory = scratch("harness");
    let message = receipt_first_check(&directory)
        .replay_command(binary())
        .max_failures(8)
        .shrink_max(2)
        .try_run()
        .expect_err("receipt-first fails");
    assert!(message.contains("(stopped after "), "{message}");
    assert!(message.contains("max_failures 8;"), "{message}");
    let ran: u64 = message
        .find(" of 10000 seeds run")
        .and_then(|end| message[..end].rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("the headline says how many seeds ran: {message}"));
    assert!(ran < 100, "receipt-first fails most seeds, so few run: {message}");
    for (invariant, files) in files_per_invariant(&directory) {
        assert!(
            files <= 2,
            "{files} files of {invariant} with shrink_max 2: {message}"
        );
    }
    // One paragraph per invariant: its header line, its seed file, its replay command.
    let paragraphs: Vec<&str> = message
        .lines()
        .filter(|line| line.starts_with("  ") && !line.starts_with("    "))
        .collect();
    let commands = replay_commands(&message);
    assert_eq!(paragraphs.len(), commands.len(), "{message}");
    for (paragraph, command) in paragraphs.iter().zip(&commands) {
        assert!(paragraph.contains(" failing seeds ("), "{paragraph}");
        assert!(paragraph.contains(" of its shrunk run (step "), "{paragraph}");
        let shortest = &paragraph[paragraph.find("; shortest: seed ").unwrap()..];
        let step = number_after(shortest, ", step ").unwrap_or_else(|| panic!("{paragraph}"));
        assert_eq!(
            replayed_step(command),
            step,
            "replaying the file named gives the step the message names: {message}"
        );
    }
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn the_harness_stops_by_default_and_its_rerun_and_regression_commands_agree_with_their_steps() {
    let directory = scratch("harness-default");
    let message = receipt_first_check(&directory)
        .try_run()
        .expect_err("receipt-first fails");
    assert!(
        message.contains(&format!("max_failures {DEFAULT_MAX_FAILURES};")),
        "a broken system stops early without being told to: {message}"
    );
    for (invariant, files) in files_per_invariant(&directory) {
        assert!(files <= 5, "{files} files of {invariant}: {message}");
    }
    // Without a program to replay files, the command reruns the seed as drawn, and the message
    // leads with that run's step.
    let system = commitgap_sim::systems::by_name("receipt-first").unwrap();
    let mut checked = 0;
    for line in message.lines().filter(|line| line.contains("; shortest: seed ")) {
        let at = &line[line.find("; shortest: seed ").unwrap()..];
        let seed = number_after(at, "; shortest: seed ").unwrap();
        let step = number_after(at, ", step ").unwrap_or_else(|| panic!("{line}"));
        assert!(at.contains(&format!("of seed {seed} as drawn")), "{line}");
        let outcome = run_seed(&system, seed, &RunOptions::default()).unwrap();
        assert_eq!(outcome.failure.map(|failure| failure.step), Some(step), "{line}");
        assert!(
            message.contains(&format!("rerun: COMMITGAP_SEED={seed} cargo test --release")),
            "{message}"
        );
        checked += 1;
    }
    assert!(checked >= 1, "{message}");

    // The files are regressions now; each still fails, run from its seed as drawn, and the
    // command named runs the same run.
    let again = receipt_first_check(&directory)
        .replay_command(binary())
        .first_seed(1_000_000)
        .cases(1)
        .try_run()
        .expect_err("the regressions still fail");
    let regressions: Vec<&str> = again
        .lines()
        .filter(|line| line.starts_with("  regression "))
        .collect();
    assert!(!regressions.is_empty(), "{again}");
    let commands: Vec<&str> = replay_commands(&again)
        .into_iter()
        .filter(|command| command.ends_with(" --from seed"))
        .collect();
    assert_eq!(commands.len(), regressions.len(), "{again}");
    for (regression, command) in regressions.iter().zip(commands) {
        let step = number_after(regression, " at step ").unwrap_or_else(|| panic!("{regression}"));
        assert_eq!(replayed_step(command), step, "{regression}");
    }
    let _ = std::fs::remove_dir_all(&directory);
}
