//! Tidy: reads the source of the system under test (`src/`) and of the simulator (`sim/src/`) and
//! fails on anything that could make a simulated run depend on more than its seed: unordered
//! collections, the wall clock, OS randomness, threads, environment variables, and SQL that reads
//! the clock or a random source. A few files are allowed what their job needs, and each allowance
//! says why. It also requires every module to open with a doc comment, modules that depend on
//! each other without circles, and a simulator with few public modules.

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
        "sim/src/sweep/shrink.rs",
        "thread::scope",
        "failures are shrunk in parallel, each shrink a sequence of whole runs on one thread",
    ),
    (
        "sim/src/harness.rs",
        "env::var",
        "COMMITGAP_CASES and the like choose which seeds a test runs, read before any run starts",
    ),
    (
        "sim/src/strategy.rs",
        "env::var",
        "PROPTEST_RNG_SEED and PROPTEST_CASES choose which cases a property suite explores, read \
         before any run starts",
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
        "sim/src/sweep/mod.rs",
        "Instant",
        "throughput figures, measured outside every run",
    ),
    (
        "sim/src/sweep/mod.rs",
        "thread::scope",
        "seeds run in parallel, each on its own world",
    ),
    (
        "sim/src/cli/sweep.rs",
        "Instant",
        "how long shrinking took, reported beside the sweep's wall time, measured outside every run",
    ),
    (
        "sim/src/sweep/shrink.rs",
        "Instant",
        "a shrink's time bound, checked between whole runs",
    ),
    (
        "sim/src/explore/mod.rs",
        "Instant",
        "the search's time budget, checked between batches of whole runs",
    ),
    (
        "sim/src/explore/mod.rs",
        "thread::scope",
        "runs go in parallel, each on its own world, and are taken in the order they were made",
    ),
    (
        "sim/src/cli/explore.rs",
        "Instant",
        "progress and how long shrinking took, measured outside every run",
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
    assert_eq!(
        violations("sim/src/sweep/mod.rs", "let t = Instant::now();").len(),
        0
    );
    assert_eq!(violations("sim/src/world.rs", "let t = Instant::now();").len(), 1);
    assert_eq!(
        violations("src/relay.rs", "\"SELECT * FROM t ORDER BY random()\"").len(),
        1
    );
}

/// The modules of a crate's `src/` (one per top-level file or directory) and, for each, the other
/// modules its code names as `crate::<module>` (comments and unit tests aside).
fn module_graph(source: &Path) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(source, &mut files);
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        std::collections::BTreeMap::new();
    for path in files {
        let relative = path.strip_prefix(source).unwrap();
        let first = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        let edges = graph.entry(module.clone()).or_default();
        for line in code.lines().map(|line| line.split("//").next().unwrap_or("")) {
            for (index, _) in line.match_indices("crate::") {
                let name: String = line[index + "crate::".len()..]
                    .chars()
                    .take_while(|character| character.is_ascii_lowercase() || *character == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    edges.insert(name);
                }
            }
        }
    }
    graph
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn find_cycle(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|on_path| on_path == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if graph.contains_key(next)
                && let Some(cycle) = visit(next, graph, path, done)
            {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(module, graph, &mut Vec::new(), &mut done))
}

#[test]
fn modules_depend_on_each_other_without_circles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for crate_source in ["src", "sim/src", "serve/src"] {
        let graph = module_graph(&root.join(crate_source));
        assert!(graph.len() > 5, "{crate_source}: found the modules");
        if let Some(cycle) = find_cycle(&graph) {
            panic!(
                "{crate_source}: modules depend on each other in a circle: {}; move what they share into a module of its own",
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn the_circle_finder_finds_circles() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
            std::collections::BTreeMap::new();
        for (from, to) in edges {
            graph
                .entry((*from).to_owned())
                .or_default()
                .insert((*to).to_owned());
            graph.entry((*to).to_owned()).or_default();
        }
        graph
    };
    assert_eq!(find_cycle(&graph(&[("a", "b"), ("b", "c")])), None);
    let cycle = find_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])).unwrap();
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4, "{cycle:?}");
}

/// Code outside `#[cfg(test)] mod tests` and outside test-only files.
fn non_test_code(path: &Path, text: &str) -> Option<String> {
    if path.file_name().is_some_and(|name| name == "tests.rs") {
        return None;
    }
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    Some(
        code.lines()
            .map(|line| line.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// A fault model owns its rules: its name is written once, in its own file, and every other
/// file reaches it through the model's registry entry, so a rule about a model cannot hide in
/// the configuration, the coverage report or the world.
/// `(file, quoted word, why it is not the fault model's name there)`.
const NAME_LIKE_WORDS: &[(&str, &str, &str)] = &[
    (
        "sim/src/faults/mod.rs",
        "\"crash\"",
        "the action word of a schedule value (`MODEL crash MS`), whatever model took the action",
    ),
    (
        "sim/src/timeline/line.rs",
        "\"crash\"",
        "a kind of mark on the timeline page, a class its stylesheet styles",
    ),
    (
        "sim/src/timeline/line.rs",
        "\"key-expiry\"",
        "a kind of mark on the timeline page, a class its stylesheet styles",
    ),
    (
        "sim/src/timeline/line.rs",
        "\"clock-jump\"",
        "a kind of mark on the timeline page, a class its stylesheet styles",
    ),
    (
        "sim/src/domain/payments/mod.rs",
        "\"reorder\"",
        "a domain names the fault models its own situation needs, as a team's domain does (coverage checks that they exist)",
    ),
    (
        "sim/src/domain/payments/mod.rs",
        "\"late-delivery\"",
        "a domain names the fault models its own situation needs, as a team's domain does (coverage checks that they exist)",
    ),
];

#[test]
fn a_fault_models_name_appears_only_in_its_own_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("sim/src"), &mut files);
    rust_files(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for kind in commitgap_sim::faults::built_in() {
        let own = format!("sim/src/faults/{}.rs", kind.name.replace('-', "_"));
        let quoted = format!("\"{}\"", kind.name);
        for path in &files {
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if relative == own
                || NAME_LIKE_WORDS
                    .iter()
                    .any(|(file, word, _)| *file == relative && *word == quoted)
            {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap();
            if non_test_code(path, &text).is_some_and(|code| code.contains(&quoted)) {
                found.push(format!("{relative}: {quoted} (use the model's KIND.name)"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "fault model names outside their files:\n{}",
        found.join("\n")
    );
}

/// Files by job: no source file of the system or the simulator grows past this many lines, so a
/// contributor finds one job per file (split a file by job before it gets here).
const FILE_LINES_MAX: usize = 1_000;

#[test]
fn every_source_file_has_a_module_doc_and_at_most_a_thousand_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("sim/src"), &mut files);
    rust_files(&root.join("src"), &mut files);
    // The service runs on real time and is left out of the determinism check, but not out of
    // these rules: a module starts with its doc and stays short.
    rust_files(&root.join("serve/src"), &mut files);
    let undocumented: Vec<String> = files
        .iter()
        .filter(|path| !std::fs::read_to_string(path).unwrap().starts_with("//!"))
        .map(|path| path.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(
        undocumented.is_empty(),
        "modules without a module doc (//!): {undocumented:?}"
    );
    let long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).unwrap().lines().count();
            (lines > FILE_LINES_MAX)
                .then(|| format!("{}: {lines} lines", path.strip_prefix(root).unwrap().display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {FILE_LINES_MAX} lines; split each by job:\n{}",
        long.join("\n")
    );
}

/// The most public modules `commitgap-sim` may have: a newcomer reads the crate's map before
/// anything else, and each module on it is one more place to look for a type. What a team uses
/// from a module behind these is re-exported where the team looks for it.
const SIM_PUBLIC_MODULES_MAX: usize = 15;

#[test]
fn the_simulator_keeps_a_small_public_surface() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("sim/src/lib.rs")).unwrap();
    let public: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .map(|rest| rest.trim_end_matches(';'))
        .collect();
    assert!(public.len() >= 5, "found the public modules: {public:?}");
    assert!(
        public.len() <= SIM_PUBLIC_MODULES_MAX,
        "commitgap-sim has {} public modules, more than {SIM_PUBLIC_MODULES_MAX}: {public:?}; make the new one crate-private and re-export what a team uses from the module it belongs with",
        public.len()
    );
    // The crate's map names every public module, so that none is found only by accident.
    for module in &public {
        assert!(
            lib.contains(&format!("//! - [`{module}`]")),
            "sim/src/lib.rs's map does not name `{module}`"
        );
    }
}
