//! The GitHub workflow (`.github/workflows/simulation.yml`) cannot run here, so this test reads
//! it the way GitHub would and checks what a broken workflow would get wrong: it parses as YAML,
//! it runs on push and on a schedule, the push job runs the tests and a short sweep, the nightly
//! job deals a large range over a matrix of shards with JUnit and JSON reports, every command
//! that calls the simulator uses flags and values the built binary accepts, and failing seeds and
//! reports are uploaded even when the sweep fails.

use std::path::Path;
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

const WORKFLOW: &str = "../.github/workflows/simulation.yml";

/// How the workflow calls the simulator; what follows is the command line.
const SIMULATOR: &str = "cargo run --release --";

fn workflow() -> Yaml {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(WORKFLOW);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let mut documents = YamlLoader::load_from_str(&text).expect("the workflow is valid YAML");
    assert_eq!(documents.len(), 1, "one YAML document");
    documents.pop().unwrap()
}

fn key(name: &str) -> Yaml {
    Yaml::String(name.to_owned())
}

fn string<'a>(value: &'a Yaml, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} should be a string, is {value:?}"))
}

fn jobs(document: &Yaml) -> Vec<(String, &Yaml)> {
    document["jobs"]
        .as_hash()
        .expect("a jobs map")
        .iter()
        .map(|(name, job)| (string(name, "a job name").to_owned(), job))
        .collect()
}

fn steps(job: &Yaml) -> &[Yaml] {
    job["steps"].as_vec().expect("a job has steps")
}

/// Every shell command line of a job, with `\` continuations joined.
fn run_lines(job: &Yaml) -> Vec<String> {
    steps(job)
        .iter()
        .filter_map(|step| step["run"].as_str())
        .flat_map(|script| {
            script
                .replace("\\\n", " ")
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.starts_with('#'))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The matrix's shard numbers, or an empty list for a job without a matrix.
fn shards(job: &Yaml) -> Vec<i64> {
    job["strategy"]["matrix"]["shard"]
        .as_vec()
        .map(|values| {
            values
                .iter()
                .map(|value| value.as_i64().expect("shard numbers are integers"))
                .collect()
        })
        .unwrap_or_default()
}

/// The simulator's arguments in each command that calls it, with the matrix expression replaced
/// by each shard number in turn.
fn simulator_calls(job: &Yaml) -> Vec<Vec<String>> {
    let shards = shards(job);
    let mut calls = Vec::new();
    for line in run_lines(job) {
        let Some((_, arguments)) = line.split_once(SIMULATOR) else {
            continue;
        };
        assert!(
            !arguments.contains(['"', '\'', '|', ';', '&', '$']) || arguments.contains("${{ matrix.shard }}"),
            "keep simulator calls to plain words so that this test reads them as the shell does: {line}"
        );
        if arguments.contains("${{") {
            assert!(!shards.is_empty(), "an expression outside a matrix job: {line}");
            assert_eq!(
                arguments.matches("${{").count(),
                arguments.matches("${{ matrix.shard }}").count(),
                "only the shard number is substituted: {line}"
            );
            for shard in &shards {
                let expanded = arguments.replace("${{ matrix.shard }}", &shard.to_string());
                calls.push(expanded.split_whitespace().map(str::to_owned).collect());
            }
        } else {
            calls.push(arguments.split_whitespace().map(str::to_owned).collect());
        }
    }
    calls
}

/// The value following `flag` in a call, if the flag is there.
fn flag_value<'a>(call: &'a [String], flag: &str) -> Option<&'a str> {
    call.iter()
        .position(|argument| argument == flag)
        .map(|at| call.get(at + 1).expect("the flag has a value").as_str())
}

fn upload_steps(job: &Yaml) -> Vec<&Yaml> {
    steps(job)
        .iter()
        .filter(|step| {
            step["uses"]
                .as_str()
                .is_some_and(|uses| uses.starts_with("actions/upload-artifact@"))
        })
        .collect()
}

fn push_job(document: &Yaml) -> &Yaml {
    &document["jobs"]["test"]
}

fn nightly_job(document: &Yaml) -> &Yaml {
    &document["jobs"]["nightly"]
}

#[test]
fn the_workflow_runs_on_push_and_every_night() {
    let document = workflow();
    let triggers = document["on"]
        .as_hash()
        .expect("`on:` is a map (a YAML 1.2 parser keeps `on` a string key)");
    assert!(triggers.contains_key(&key("push")), "{triggers:?}");
    let schedule = document["on"]["schedule"].as_vec().expect("a schedule list");
    assert!(!schedule.is_empty());
    for entry in schedule {
        let cron = string(&entry["cron"], "cron");
        assert_eq!(cron.split_whitespace().count(), 5, "cron has five fields: {cron}");
    }

    let names: Vec<String> = jobs(&document).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["test", "nightly", "mutants"]);
    for (name, job) in jobs(&document) {
        assert_eq!(string(&job["runs-on"], "runs-on"), "ubuntu-latest", "{name}");
        assert!(job["timeout-minutes"].as_i64().is_some(), "{name} has a timeout");
        assert!(
            steps(job)[0]["uses"]
                .as_str()
                .is_some_and(|uses| uses.starts_with("actions/checkout@")),
            "{name} checks the code out first"
        );
    }
    assert!(string(&push_job(&document)["if"], "the test job's condition").contains("'push'"));
    assert!(string(&nightly_job(&document)["if"], "the nightly job's condition").contains("'schedule'"));
}

/// The test command of the README's "The two commands", without its comment.
fn readme_test_command() -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    readme
        .lines()
        .skip_while(|line| !line.starts_with("## The two commands"))
        .find(|line| line.starts_with("cargo test"))
        .expect("the README names a test command")
        .split('#')
        .next()
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn ci_runs_the_readme_test_command() {
    let ci = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/run")).unwrap();
    let test_command = readme_test_command();
    assert!(
        ci.lines().any(|line| line.trim() == test_command),
        ".ci/run runs {test_command:?}"
    );
}

#[test]
fn the_push_job_runs_the_tests_and_a_short_deterministic_sweep() {
    let document = workflow();
    let job = push_job(&document);
    let test_command = readme_test_command();
    assert!(
        run_lines(job).contains(&test_command),
        "the push job runs the README's test command {test_command:?}: {:?}",
        run_lines(job)
    );
    let calls = simulator_calls(job);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert_eq!(call[0], "sweep");
    assert_eq!(flag_value(call, "--seeds"), Some("2000"));
    assert!(call.iter().any(|argument| argument == "--check-determinism"));
}

#[test]
fn the_nightly_mutants_job_runs_cargo_mutants_over_every_shard() {
    let document = workflow();
    let job = &document["jobs"]["mutants"];
    assert!(string(&job["if"], "the mutants job's condition").contains("'schedule'"));
    let shards = shards(job);
    assert_eq!(shards, (1..=shards.len() as i64).collect::<Vec<_>>());
    let runs: Vec<&str> = steps(job)
        .iter()
        .filter_map(|step| step["run"].as_str())
        .collect();
    assert!(
        runs.iter()
            .any(|run| run.starts_with("cargo install cargo-mutants")),
        "{runs:?}"
    );
    let mutants = runs
        .iter()
        .find(|run| {
            run.lines()
                .any(|line| line.trim_start().starts_with("cargo mutants"))
        })
        .expect("a cargo mutants step");
    assert!(
        mutants.contains(&format!("--shard ${{{{ matrix.shard }}}}/{}", shards.len())),
        "{mutants}"
    );
    // cargo-mutants' exit code for a timeout hides the one for a survivor, so the verdict must
    // come from the list of survivors it writes.
    assert!(
        mutants.contains("mutants.out/missed.txt") && mutants.contains("exit 2"),
        "{mutants}"
    );
    let config =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cargo/mutants.toml"))
            .unwrap();
    assert!(
        config.contains("\"mutants_sweep\""),
        "the mutants judge each mutant by the sweep test"
    );
    assert!(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/mutants_sweep.rs")
            .exists()
    );
}

#[test]
fn the_nightly_job_deals_a_large_range_over_a_matrix_of_shards() {
    let document = workflow();
    let job = nightly_job(&document);
    let shards = shards(job);
    assert_eq!(
        shards,
        (1..=shards.len() as i64).collect::<Vec<_>>(),
        "shards 1..=N"
    );
    assert!(shards.len() >= 2, "{shards:?}");
    assert_eq!(
        job["strategy"]["fail-fast"].as_bool(),
        Some(false),
        "one failing shard does not cancel the others"
    );
    let calls = simulator_calls(job);
    assert_eq!(calls.len(), shards.len(), "one sweep per shard: {calls:?}");
    for (call, shard) in calls.iter().zip(&shards) {
        assert_eq!(call[0], "sweep");
        assert_eq!(
            flag_value(call, "--shard"),
            Some(format!("{shard}/{}", shards.len()).as_str()),
            "the shard count matches the matrix"
        );
        let seeds: u64 = flag_value(call, "--seeds").unwrap().parse().unwrap();
        assert!(seeds >= 100_000, "a large range: {seeds}");
        let junit = flag_value(call, "--junit").expect("a JUnit report");
        let json = flag_value(call, "--json").expect("a JSON report");
        assert_ne!(junit, json);
    }
    let distinct_reports: std::collections::BTreeSet<_> = calls
        .iter()
        .map(|call| flag_value(call, "--junit").unwrap())
        .collect();
    assert_eq!(
        distinct_reports.len(),
        shards.len(),
        "each shard names its own report"
    );
}

#[test]
fn every_simulator_call_uses_flags_the_binary_accepts() {
    let document = workflow();
    let help = Command::new(env!("CARGO_BIN_EXE_commitgap"))
        .args(["sweep", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let mut checked = 0;
    for (name, job) in jobs(&document) {
        for call in simulator_calls(job) {
            assert_eq!(call[0], "sweep", "{name}: {call:?}");
            for flag in call.iter().filter(|argument| argument.starts_with("--")) {
                assert!(
                    help.contains(&format!("{flag} ")),
                    "{name}: `sweep --help` does not list {flag}"
                );
            }
            // Parsing stops at the first bad flag or value, before `--help` is reached, so an
            // exit of 0 means the whole command line parses.
            let output = Command::new(env!("CARGO_BIN_EXE_commitgap"))
                .args(&call)
                .arg("--help")
                .output()
                .unwrap();
            assert_eq!(
                output.status.code(),
                Some(0),
                "{name}: {call:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 5, "the push sweep and every shard's sweep: {checked}");
}

#[test]
fn failing_seeds_and_reports_are_uploaded_even_when_the_sweep_fails() {
    let document = workflow();
    for (name, job) in jobs(&document) {
        let uploads = upload_steps(job);
        assert_eq!(uploads.len(), 1, "{name} uploads its findings once");
        let upload = uploads[0];
        let condition = string(&upload["if"], "the upload's condition");
        assert!(
            condition.contains("always()") || condition.contains("failure()"),
            "{name}: a failed sweep must still upload: {condition}"
        );
        let paths: Vec<&str> = string(&upload["with"]["path"], "the upload's path")
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect();
        let uploaded = |file: &str| {
            paths.iter().any(|path| {
                let directory = path.trim_end_matches('/');
                file == directory || Path::new(file).starts_with(directory)
            })
        };
        for call in simulator_calls(job) {
            let seeds_dir = flag_value(&call, "--seeds-dir").unwrap_or("seeds");
            assert!(
                uploaded(seeds_dir),
                "{name}: {seeds_dir} is not uploaded: {paths:?}"
            );
            for flag in ["--junit", "--json"] {
                if let Some(report) = flag_value(&call, flag) {
                    assert!(uploaded(report), "{name}: {report} is not uploaded: {paths:?}");
                }
            }
        }
        if !shards(job).is_empty() {
            assert!(
                string(&upload["with"]["name"], "the artifact name").contains("${{ matrix.shard }}"),
                "{name}: each shard's artifact has a name of its own"
            );
        }
    }
}

#[test]
fn the_nightly_job_explores_new_property_cases_from_a_seed_it_prints() {
    let document = workflow();
    let job = nightly_job(&document);
    let step = steps(job)
        .iter()
        .find(|step| {
            step["run"]
                .as_str()
                .is_some_and(|run| run.contains("--test seed_file_properties"))
        })
        .expect("a step that runs the property suites");
    let seed = string(&step["env"]["PROPTEST_RNG_SEED"], "the generator seed");
    assert!(
        seed.contains("${{ matrix.shard }}"),
        "each shard explores its own cases: {seed}"
    );
    assert!(
        seed.contains("${{ github.run_id }}"),
        "each night explores new cases: {seed}"
    );
    let run = string(&step["run"], "the property step");
    assert!(
        run.lines()
            .next()
            .is_some_and(|line| line.contains("echo") && line.contains("$PROPTEST_RNG_SEED")),
        "the seed is printed before any case runs: {run}"
    );
    assert!(
        upload_steps(job)
            .iter()
            .any(|upload| string(&upload["with"]["path"], "the upload's paths")
                .contains(".proptest-regressions")),
        "the shrunk cases are uploaded"
    );
}
