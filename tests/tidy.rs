//! Tidy: reads the source of the system under test (`src/`) and of the simulator (`sim/src/`) and
//! fails on anything that could make a simulated run depend on more than its seed: unordered
//! collections, the wall clock, OS randomness, threads, environment variables, and SQL that reads
//! the clock or a random source. A few files are allowed what their job needs, and each allowance
//! says why. It also requires every module to open with a doc comment.

use std::path::{Path, PathBuf};

/// `(pattern, why it is banned)`.
const BANNED: &[(&str, &str)] = &[
    ("HashMap", "iteration order is random per process; use BTreeMap"),
    ("HashSet", "iteration order is random per process; use BTreeSet"),
    ("SystemTime", "the wall clock; use the Env's virtual clock"),
    ("Instant", "the wall clock; use the Env's virtual clock"),
    ("thread_rng", "OS-seeded randomness; draw from a SimRng stream"),
    ("rand::rng(", "OS-seeded randomness; draw from a SimRng stream"),
    ("OsRng", "OS randomness; draw from a SimRng stream"),
    ("from_entropy", "OS-seeded randomness; draw from a SimRng stream"),
    ("from_os_rng", "OS-seeded randomness; draw from a SimRng stream"),
    ("thread::spawn", "real threads interleave outside the scheduler"),
    ("thread::scope", "real threads interleave outside the scheduler"),
    ("thread::sleep", "real sleeping; use Env::sleep_ms"),
    ("env::var", "a run must not depend on the machine's environment"),
    ("random()", "SQL randomness; pass values drawn from the seed"),
    ("randomblob(", "SQL randomness; pass values drawn from the seed"),
    (
        "CURRENT_TIMESTAMP",
        "SQL reads the wall clock; pass the Env's time",
    ),
    ("'now'", "SQL reads the wall clock; pass the Env's time"),
];

/// `(file, pattern, why it is allowed there)`.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "sim/src/mutants.rs",
        "Instant",
        "time to first failure, measured outside every run",
    ),
    (
        "sim/src/shrink.rs",
        "thread::scope",
        "failures are shrunk in parallel, each shrink a sequence of whole runs on one thread",
    ),
    (
        "src/realtime.rs",
        "SystemTime",
        "the real-time Env is the production clock",
    ),
    (
        "src/realtime.rs",
        "thread::sleep",
        "the real-time Env sleeps for real",
    ),
    (
        "sim/src/sweep.rs",
        "Instant",
        "throughput figures, measured outside every run",
    ),
    (
        "sim/src/sweep.rs",
        "thread::scope",
        "seeds run in parallel, each on its own world",
    ),
    (
        "sim/src/bench.rs",
        "Instant",
        "the time a whole run and its bare replay take, measured outside every run",
    ),
    (
        "sim/src/bench.rs",
        "thread::scope",
        "seeds are measured in parallel, each run and replay on one thread with its own database",
    ),
];

fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// Lines of `text` (outside comments) that use a banned pattern not allowed for `file`.
fn violations(file: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for (pattern, why) in BANNED {
            let allowed = ALLOWED
                .iter()
                .any(|(path, allowed, _)| *path == file && allowed == pattern);
            if code.contains(pattern) && !allowed {
                found.push(format!("{file}:{}: `{pattern}`: {why}", number + 1));
            }
        }
    }
    found
}

#[test]
fn simulated_code_uses_no_nondeterministic_api() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("sim/src"), &mut files);
    files.sort();
    assert!(files.len() > 20, "found the sources");
    let mut problems = Vec::new();
    for path in &files {
        let relative = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        problems.extend(violations(&relative, &text));
        if !text.starts_with("//!") {
            problems.push(format!("{relative}: does not start with a module doc (//!)"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_checker_flags_what_it_should_and_honours_allowances() {
    let code = "let map = std::collections::HashMap::new();\n// a HashSet in a comment is fine\n";
    assert_eq!(violations("sim/src/world.rs", code).len(), 1);
    assert_eq!(violations("sim/src/sweep.rs", "let t = Instant::now();").len(), 0);
    assert_eq!(violations("sim/src/world.rs", "let t = Instant::now();").len(), 1);
    assert_eq!(
        violations("src/relay.rs", "\"SELECT * FROM t ORDER BY random()\"").len(),
        1
    );
}
