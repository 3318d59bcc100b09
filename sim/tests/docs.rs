//! The documentation against the code, so that the README and `docs/` cannot drift from what the
//! simulator is and prints:
//!
//! - the tables of sender presets, fault models, invariants, systems and coverage situations hold
//!   every registered name, no other, and each one's own description, in registry order;
//! - every ```` ```console ```` block is real output: each `$ cargo run --release -- ARGS` line
//!   is run (as the `commitgap` binary with ARGS, in a scratch copy of `seeds/`) and what it
//!   prints is compared line by line, wall times, seeds per second and the number of jobs aside
//!   (and every number, in a block opened with ```` ```console numbers-vary ````: output whose
//!   figures every fault model moves, such as a sweep's coverage, shows its form there, not a
//!   contract on each count);
//! - the table of shrunk planted bugs matches the committed seed files;
//! - every link between the README and `docs/` leads to a file and a heading that exist;
//! - the README stays a newcomer's page: short, with its two commands, glossary and a link to
//!   every file in `docs/`.
//!
//! Rust examples in the same files are compiled as doc tests of `commitgap-sim` (the end of
//! `sim/src/lib.rs`). Each failure says what to change. With `COMMITGAP_BLESS=1` set, a table
//! the code decides and a console block without elisions that differ are rewritten in place from
//! the code and the real output instead (review the diff before committing it): adding a fault
//! model or a planted bug changes the tables and the recorded runs, never by hand.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use commitgap_sim::domain;
use commitgap_sim::faults;
use commitgap_sim::invariants;
use commitgap_sim::peers::SenderPreset;
use commitgap_sim::sweep::SeedFile;
use commitgap_sim::sweep::Situation;
use commitgap_sim::systems;

/// The files this test reads, from the checkout's root.
const DOCS: [&str; 7] = [
    "README.md",
    "docs/guide.md",
    "docs/extending.md",
    "docs/reference.md",
    "docs/power.md",
    "docs/internals.md",
    "docs/services.md",
];

/// The README's most lines: past this it is no longer a page a newcomer reads to the end.
const README_LINES_MAX: usize = 250;

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("sim/ is inside the checkout")
        .to_path_buf()
}

/// Whether this run rewrites what differs instead of failing (`COMMITGAP_BLESS=1`).
fn blessing() -> bool {
    std::env::var_os("COMMITGAP_BLESS").is_some_and(|value| !value.is_empty() && value != "0")
}

/// Replaces the lines `from..to` (0-based, end excluded) of `file` with `lines`.
///
/// Tests run in parallel and several read the same files, so a rewrite holds one lock and lands
/// by rename: a reader sees the old text or the new, never half of it. A rewrite that moved the
/// lines another test had counted is caught by running the blessing again, which then finds
/// nothing to change.
fn rewrite_lines(file: &str, from: usize, to: usize, lines: &[String]) {
    static REWRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = REWRITING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let text = read(file);
    let mut all: Vec<&str> = text.lines().collect();
    all.splice(from..to, lines.iter().map(String::as_str));
    let mut new = all.join("\n");
    new.push('\n');
    let path = checkout().join(file);
    let staged = path.with_extension("blessing");
    std::fs::write(&staged, new).unwrap_or_else(|error| panic!("cannot write {}: {error}", staged.display()));
    std::fs::rename(&staged, &path).unwrap_or_else(|error| panic!("cannot write {file}: {error}"));
}

fn read(file: &str) -> String {
    std::fs::read_to_string(checkout().join(file))
        .unwrap_or_else(|error| panic!("cannot read {file}: {error}"))
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((index + 1, line));
        }
    }
    lines
}

// ---------------------------------------------------------------------------------------------
// Tables checked against the registries

/// A Markdown table: its header cells and rows of cells, and the 0-based lines its rows span.
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    row_lines: std::ops::Range<usize>,
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|cell| cell.trim().to_owned()).collect()
}

/// The first table after the heading line `heading` (exactly) in `file`, before the next heading.
fn table_under(file: &str, heading: &str) -> Table {
    let text = read(file);
    let lines = prose_lines(&text);
    let start = lines
        .iter()
        .position(|(_, line)| *line == heading)
        .unwrap_or_else(|| panic!("{file} has no heading {heading:?}; this test looks for its table there"));
    let table_lines: Vec<(usize, &str)> = lines[start + 1..]
        .iter()
        .take_while(|(_, line)| !line.starts_with('#'))
        .skip_while(|(_, line)| !line.starts_with('|'))
        .take_while(|(_, line)| line.starts_with('|'))
        .copied()
        .collect();
    let header = cells(
        table_lines
            .first()
            .unwrap_or_else(|| panic!("{file} has no table under {heading:?}"))
            .1,
    );
    // Line numbers are 1-based; the rows follow the header and its separator.
    let first_row = table_lines[0].0 + 1;
    let rows: Vec<Vec<String>> = table_lines.iter().skip(2).map(|(_, line)| cells(line)).collect();
    Table {
        header,
        row_lines: first_row..first_row + rows.len(),
        rows,
    }
}

fn unquoted(cell: &str) -> &str {
    cell.trim_matches('`')
}

/// One row the registry expects: its name and the cells the registry decides, by column.
struct Expected {
    name: String,
    columns: Vec<(&'static str, String)>,
}

/// Holds the table under `heading` to `expected`, in order, and panics with every difference and
/// the rows the table should have (columns the registry does not decide kept as written).
fn check_table(file: &str, heading: &str, expected: &[Expected]) {
    let table = table_under(file, heading);
    let column = |name: &str| {
        table
            .header
            .iter()
            .position(|cell| cell == name)
            .unwrap_or_else(|| {
                panic!(
                    "{file}, table under {heading:?}: no column {name:?} in {:?}",
                    table.header
                )
            })
    };
    let written: Vec<&str> = table.rows.iter().map(|row| unquoted(&row[0])).collect();
    let wanted: Vec<&str> = expected.iter().map(|row| row.name.as_str()).collect();
    let mut problems = Vec::new();
    for name in &wanted {
        if !written.contains(name) {
            problems.push(format!("`{name}` is registered and has no row"));
        }
    }
    for name in &written {
        if !wanted.contains(name) {
            problems.push(format!("`{name}` has a row and is not registered"));
        }
    }
    if problems.is_empty() && written != wanted {
        problems.push("the rows are not in registry order".to_owned());
    }
    for row in &table.rows {
        let Some(expected_row) = expected
            .iter()
            .find(|expected| expected.name == unquoted(&row[0]))
        else {
            continue;
        };
        for (name, value) in &expected_row.columns {
            let cell = row.get(column(name)).map_or("", String::as_str);
            if cell != value {
                problems.push(format!(
                    "`{}`, column {name:?}: {cell:?} should be {value:?}",
                    expected_row.name
                ));
            }
        }
    }
    if problems.is_empty() {
        return;
    }
    let mut fix = String::new();
    for expected_row in expected {
        let written_row = table
            .rows
            .iter()
            .find(|row| unquoted(&row[0]) == expected_row.name);
        let mut row_cells = vec![format!("`{}`", expected_row.name)];
        for (index, header) in table.header.iter().enumerate().skip(1) {
            let decided = expected_row.columns.iter().find(|(name, _)| name == header);
            row_cells.push(match (decided, written_row) {
                (Some((_, value)), _) => value.clone(),
                (None, Some(row)) => row.get(index).cloned().unwrap_or_default(),
                (None, None) => String::new(),
            });
        }
        // An empty cell is written `| |`, as a person writes it.
        writeln!(fix, "| {} |", row_cells.join(" | ").replace("|  |", "| |")).unwrap();
    }
    if blessing() {
        let rows: Vec<String> = fix.lines().map(str::to_owned).collect();
        rewrite_lines(file, table.row_lines.start, table.row_lines.end, &rows);
        eprintln!("{file}: rewrote the table under {heading:?} from the code");
        return;
    }
    panic!(
        "{file}, the table under {heading:?} differs from the code:\n- {}\n\nIts rows should read (columns the code does not decide kept as written; COMMITGAP_BLESS=1 writes them):\n{fix}",
        problems.join("\n- ")
    );
}

fn duration(ms: i64) -> String {
    const SECOND: i64 = 1_000;
    const MINUTE: i64 = 60 * SECOND;
    const HOUR: i64 = 60 * MINUTE;
    if ms % HOUR == 0 {
        format!("{} h", ms / HOUR)
    } else if ms % MINUTE == 0 {
        format!("{} min", ms / MINUTE)
    } else if ms % SECOND == 0 {
        format!("{} s", ms / SECOND)
    } else {
        format!("{ms} ms")
    }
}

#[test]
fn the_sender_preset_table_matches_the_presets() {
    let expected: Vec<Expected> = SenderPreset::ALL
        .into_iter()
        .map(|preset| {
            let delays = preset.retry_delays_ms();
            let retries = if delays.is_empty() {
                "none".to_owned()
            } else {
                delays
                    .iter()
                    .map(|delay| duration(*delay))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let horizon = match preset.horizon_ms() {
                0 => "—".to_owned(),
                ms => duration(ms),
            };
            Expected {
                name: preset.name().to_owned(),
                columns: vec![
                    ("retries after a failure", retries),
                    ("gives up after", horizon),
                    ("timeout", duration(preset.timeout_ms())),
                ],
            }
        })
        .collect();
    check_table("docs/reference.md", "## Sender presets", &expected);
}

#[test]
fn the_fault_model_table_matches_the_registry() {
    let expected: Vec<Expected> = faults::built_in()
        .into_iter()
        .map(|kind| Expected {
            name: kind.name.to_owned(),
            columns: vec![
                ("what it models", kind.description.to_owned()),
                ("details", kind.details.to_owned()),
            ],
        })
        .collect();
    check_table("docs/reference.md", "## Fault models", &expected);
}

#[test]
fn the_invariant_table_matches_the_registry() {
    let expected: Vec<Expected> = invariants::registry(&*domain::payments(), &[])
        .into_iter()
        .map(|invariant| Expected {
            name: invariant.name().to_owned(),
            columns: vec![
                ("layer", invariant.layer().name().to_owned()),
                ("kind", invariant.kind().name().to_owned()),
                ("asserts", invariant.description().to_owned()),
            ],
        })
        .collect();
    check_table("docs/reference.md", "## Invariants", &expected);
}

#[test]
fn the_system_table_matches_the_registry() {
    let expected: Vec<Expected> = systems::all()
        .iter()
        .map(|system| {
            let description = system.description();
            Expected {
                name: system.name().to_owned(),
                columns: vec![(
                    "what it is",
                    description
                        .strip_prefix("planted bug: ")
                        .unwrap_or(description)
                        .to_owned(),
                )],
            }
        })
        .collect();
    check_table("docs/reference.md", "## Systems", &expected);
}

#[test]
fn the_coverage_situation_table_matches_the_probes() {
    // The pattern's situations, then the reference's domain's own.
    let expected: Vec<Expected> = Situation::ALL
        .into_iter()
        .map(|situation| Expected {
            name: situation.name().to_owned(),
            columns: vec![("what reaching it means", situation.description().to_owned())],
        })
        .chain(
            commitgap_sim::domain::payments()
                .situations()
                .into_iter()
                .map(|situation| Expected {
                    name: situation.name,
                    columns: vec![("what reaching it means", situation.description)],
                }),
        )
        .collect();
    check_table("docs/guide.md", "## Coverage: what a sweep reached", &expected);
}

#[test]
fn the_shrinking_table_matches_the_committed_seed_files() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(checkout().join("seeds"))
        .expect("seeds/ is committed")
        .map(|entry| entry.expect("seeds/ lists").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "json"))
        .collect();
    files.sort();
    let mut expected = Vec::new();
    for path in files {
        let file = SeedFile::read(&path).unwrap_or_else(|error| panic!("{error}"));
        let (Some(shrunk), Some(schedule)) = (&file.shrunk, &file.schedule) else {
            continue;
        };
        expected.push(Expected {
            name: path.file_name().unwrap().to_string_lossy().into_owned(),
            columns: vec![
                ("invariant", format!("`{}`", shrunk.failure.invariant)),
                (
                    "steps before → after",
                    format!("{} → {}", file.steps, shrunk.steps),
                ),
                (
                    "faults before → after",
                    format!("{} → {}", schedule.fault_count(), shrunk.faults),
                ),
            ],
        });
    }
    check_table("docs/power.md", "### Shrinking the planted bugs", &expected);
}

// ---------------------------------------------------------------------------------------------
// Output shown in the docs, run and compared

/// The prefix of a command a `console` block runs; what follows it is the binary's arguments.
const COMMAND_PREFIX: &str = "$ cargo run --release -- ";

/// Marks text left out: a whole line of it stands for any number of lines, and inside a line for
/// any text.
const ELISION: &str = "[...]";

/// A seed file that blocks use beside the committed ones: a committed file with values changed,
/// made in the scratch directory of a block that names it.
struct Fixture {
    name: &'static str,
    from: &'static str,
    /// JSON pointers and the values set there.
    edits: Vec<(&'static str, serde_json::Value)>,
}

fn fixtures() -> Vec<Fixture> {
    use serde_json::json;
    let edited = |name, edits| Fixture {
        name,
        from: "receipt-first-0.json",
        edits,
    };
    vec![
        edited("fixed.json", vec![("/system", json!("reference"))]),
        edited(
            "x.json",
            vec![("/config/faults/crash/rate/denominator", json!(0))],
        ),
        edited("y.json", vec![("/config/relay/lease_ms", json!(5000))]),
        edited(
            "short-liveness.json",
            vec![
                ("/config/liveness_steps_max", json!(20)),
                ("/config/liveness_steps_per_stream", json!(0)),
            ],
        ),
    ]
}

/// One command of a `console` block and the output the block shows for it.
struct Transcript {
    file: &'static str,
    /// The command's line in its file, 1-based.
    line: usize,
    arguments: Vec<String>,
    expected: Vec<String>,
    /// Every line of the block, to tell which fixtures it names.
    block: String,
    /// The block was opened with ```` ```console numbers-vary ````: numbers are masked.
    numbers_vary: bool,
}

fn transcripts(file: &'static str) -> Vec<Transcript> {
    let text = read(file);
    let mut transcripts: Vec<Transcript> = Vec::new();
    for (start, block, numbers_vary) in console_blocks(&text) {
        let first = transcripts.len();
        for (offset, line) in block.lines().enumerate() {
            let number = start + 1 + offset;
            if let Some(arguments) = line.strip_prefix(COMMAND_PREFIX) {
                assert!(
                    !arguments.contains(['"', '\'', '\\', '|', '>', '<']),
                    "{file}:{number}: a console block runs its commands without a shell; write arguments without quotes, pipes or redirections"
                );
                transcripts.push(Transcript {
                    file,
                    line: number,
                    arguments: arguments.split_whitespace().map(str::to_owned).collect(),
                    expected: Vec::new(),
                    block: block.clone(),
                    numbers_vary,
                });
            } else if line.starts_with('$') || transcripts.len() == first {
                panic!(
                    "{file}:{number}: each command of a console block starts with {COMMAND_PREFIX:?} (this test runs them); show other commands in a sh block"
                );
            } else {
                transcripts.last_mut().unwrap().expected.push(line.to_owned());
            }
        }
    }
    transcripts
}

/// The info string that opens a console block whose numbers are not compared.
const NUMBERS_VARY: &str = "```console numbers-vary";

/// Every `console` block of `text`: the line number of its opening fence, its text, and whether
/// its numbers vary.
fn console_blocks(text: &str) -> Vec<(usize, String, bool)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String, bool)> = None;
    for (index, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_end() == "```console" => current = Some((index + 1, String::new(), false)),
            None if line.trim_end() == NUMBERS_VARY => current = Some((index + 1, String::new(), true)),
            None => {}
            Some((start, block, numbers_vary)) => {
                if line.starts_with("```") {
                    blocks.push((*start, std::mem::take(block), *numbers_vary));
                    current = None;
                } else {
                    block.push_str(line);
                    block.push('\n');
                }
            }
        }
    }
    blocks
}

/// A fresh directory holding a copy of the committed seed files and the fixtures `block` names.
fn scratch(block: &str, label: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("commitgap-docs-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    let seeds = directory.join("seeds");
    std::fs::create_dir_all(&seeds).unwrap();
    for entry in std::fs::read_dir(checkout().join("seeds")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, seeds.join(path.file_name().unwrap())).unwrap();
    }
    for Fixture { name, from, edits } in fixtures() {
        if !block.contains(&format!("seeds/{name}")) {
            continue;
        }
        let text = std::fs::read_to_string(checkout().join("seeds").join(from)).unwrap();
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        for (pointer, new) in edits {
            // The field is set, or added to the object that holds it.
            let (parent, field) = pointer.rsplit_once('/').unwrap();
            value
                .pointer_mut(parent)
                .and_then(serde_json::Value::as_object_mut)
                .unwrap_or_else(|| panic!("fixture {name}: {from} has no object at {parent:?}"))
                .insert(field.to_owned(), new);
        }
        std::fs::write(seeds.join(name), serde_json::to_string_pretty(&value).unwrap()).unwrap();
    }
    directory
}

/// Runs the binary with `arguments` in `directory`, standard output and error in one stream, in
/// the order they were written.
fn run(directory: &Path, arguments: &[String]) -> String {
    let capture = directory.join("output.txt");
    let file = std::fs::File::create(&capture).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_commitgap"))
        .args(arguments)
        .current_dir(directory)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .expect("the commitgap binary runs");
    assert!(status.code().is_some(), "{arguments:?} was killed by a signal");
    let output = std::fs::read_to_string(&capture).unwrap();
    std::fs::remove_file(&capture).unwrap();
    output
}

fn is_decimal(word: &str) -> bool {
    let mut parts = word.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let fraction = parts.next().unwrap_or("");
    !whole.is_empty()
        && !fraction.is_empty()
        && whole.bytes().all(|byte| byte.is_ascii_digit())
        && fraction.bytes().all(|byte| byte.is_ascii_digit())
}

/// A line as compared: whitespace runs made one space, and what differs from machine to machine
/// masked: a time in seconds (`1.6 s`), a rate (`122.3 seeds/s`) and a number of jobs.
fn normalized(line: &str) -> String {
    let mut words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    for index in 0..words.len().saturating_sub(1) {
        let next = words[index + 1].trim_end_matches([')', ',', ';', ':']).to_owned();
        if is_decimal(&words[index]) && (next == "s" || next == "seeds/s") {
            words[index] = "#".to_owned();
        }
        if words[index].bytes().all(|byte| byte.is_ascii_digit()) && (next == "job" || next == "jobs") {
            words[index] = "#".to_owned();
            let tail = &words[index + 1][next.len()..];
            words[index + 1] = format!("jobs{tail}");
        }
    }
    words.join(" ")
}

/// A normalized line with every run of digits (and the decimal points and commas between them)
/// made one `#`: what a block opened with ```` ```console numbers-vary ```` compares.
fn numbers_masked(line: &str) -> String {
    let mut masked = String::with_capacity(line.len());
    let mut characters = line.chars().peekable();
    while let Some(character) = characters.next() {
        if character.is_ascii_digit() {
            while characters
                .peek()
                .is_some_and(|next| next.is_ascii_digit() || matches!(next, '.' | ','))
            {
                let mut ahead = characters.clone();
                ahead.next();
                // A point or comma is part of the number only with a digit after it.
                let next = characters.peek().copied();
                if next.is_some_and(|next| !next.is_ascii_digit())
                    && !ahead.peek().is_some_and(char::is_ascii_digit)
                {
                    break;
                }
                characters.next();
            }
            masked.push('#');
        } else {
            masked.push(character);
        }
    }
    masked
}

fn line_matches(expected: &str, actual: &str) -> bool {
    if !expected.contains(ELISION) {
        return expected == actual;
    }
    let pieces: Vec<&str> = expected.split(ELISION).collect();
    let (first, last) = (pieces[0].trim_end(), pieces[pieces.len() - 1].trim_start());
    if !actual.starts_with(first) || !actual.ends_with(last) || actual.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        let piece = piece.trim();
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `actual` is what `expected` shows, and if not, how many of `expected`'s lines some
/// reading of `actual` matched before it went wrong.
fn matches(expected: &[String], actual: &[String]) -> Result<(), usize> {
    fn go(
        expected: &[String],
        actual: &[String],
        (i, j): (usize, usize),
        memo: &mut HashMap<(usize, usize), bool>,
        deepest: &mut usize,
    ) -> bool {
        if let Some(known) = memo.get(&(i, j)) {
            return *known;
        }
        *deepest = (*deepest).max(i);
        let result = if i == expected.len() {
            j == actual.len()
        } else if expected[i] == ELISION {
            go(expected, actual, (i + 1, j), memo, deepest)
                || (j < actual.len() && go(expected, actual, (i, j + 1), memo, deepest))
        } else {
            j < actual.len()
                && line_matches(&expected[i], &actual[j])
                && go(expected, actual, (i + 1, j + 1), memo, deepest)
        };
        memo.insert((i, j), result);
        result
    }
    let mut deepest = 0;
    if go(expected, actual, (0, 0), &mut HashMap::new(), &mut deepest) {
        Ok(())
    } else {
        Err(deepest)
    }
}

/// A progress line a sweep prints off a terminal every 10 s: a slow machine may print one.
fn is_progress(line: &str) -> bool {
    line.split_once(": ").is_some_and(|(_, rest)| {
        rest.split_once(' ').is_some_and(|(count, tail)| {
            count.contains('/') && tail.starts_with("seeds, ") && tail.ends_with(" left")
        })
    })
}

fn check_transcripts(file: &'static str) {
    let mut problems = Vec::new();
    // Blessed blocks, as (first line, end, new lines), rewritten last to first.
    let mut blessed: Vec<(usize, usize, Vec<String>)> = Vec::new();
    for (index, transcript) in transcripts(file).iter().enumerate() {
        let directory = scratch(&transcript.block, &format!("{}-{index}", file.replace('/', "-")));
        let output = run(&directory, &transcript.arguments);
        let _ = std::fs::remove_dir_all(&directory);
        let shown: Vec<&str> = output.lines().filter(|line| !is_progress(line)).collect();
        let compared = |line: &str| {
            let line = normalized(line);
            if transcript.numbers_vary {
                numbers_masked(&line)
            } else {
                line
            }
        };
        let actual: Vec<String> = shown.iter().map(|line| compared(line)).collect();
        let expected: Vec<String> = transcript.expected.iter().map(|line| compared(line)).collect();
        let Err(matched) = matches(&expected, &actual) else {
            continue;
        };
        let elided = transcript.expected.iter().any(|line| line.contains(ELISION));
        if blessing() && !elided {
            blessed.push((
                transcript.line,
                transcript.line + transcript.expected.len(),
                shown.iter().map(|line| (*line).to_owned()).collect(),
            ));
            continue;
        }
        let mut problem = format!(
            "{}:{}: `{}{}` printed something else",
            transcript.file,
            transcript.line,
            COMMAND_PREFIX,
            transcript.arguments.join(" ")
        );
        match transcript.expected.get(matched) {
            Some(line) => write!(
                problem,
                "; the block's line {:?} was not found where it stands",
                line
            )
            .unwrap(),
            None => problem.push_str("; it printed more lines than the block shows"),
        }
        let how = if elided {
            "replace the block's lines with these, eliding with [...] as needed"
        } else {
            "replace the block's lines with these, or run with COMMITGAP_BLESS=1 to write them"
        };
        write!(problem, "\nIt printed ({how}):\n{output}").unwrap();
        problems.push(problem);
    }
    for (from, to, lines) in blessed.into_iter().rev() {
        rewrite_lines(file, from, to, &lines);
        eprintln!("{file}:{from}: rewrote the block's output from the real run");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn the_readme_output_is_real() {
    check_transcripts("README.md");
}

#[test]
fn the_guide_output_is_real() {
    check_transcripts("docs/guide.md");
}

#[test]
fn the_reference_output_is_real() {
    check_transcripts("docs/reference.md");
}

#[test]
fn the_power_output_is_real() {
    check_transcripts("docs/power.md");
}

#[test]
fn every_file_shows_real_output_only_in_files_this_test_reads() {
    for file in ["docs/extending.md", "docs/internals.md"] {
        assert!(
            transcripts(file).is_empty(),
            "{file} has a console block: add a test that runs it, like the_guide_output_is_real"
        );
    }
}

#[test]
fn the_output_matcher_masks_timings_and_elides() {
    assert_eq!(
        normalized(
            "sweep: 3 seeds, 1 failure, 2396 steps, 0.1 s wall, 31.7 seeds/s (system x, seeds 25..28, 1 job)"
        ),
        "sweep: 3 seeds, 1 failure, 2396 steps, # s wall, # seeds/s (system x, seeds 25..28, # jobs)"
    );
    assert_eq!(
        normalized("   17  0:01:11.511 sender  deliver"),
        "17 0:01:11.511 sender deliver"
    );
    assert_eq!(
        numbers_masked("crash 981, lost-ack 1807, clock-jump 1.5 s (95 of 198), 47%"),
        "crash #, lost-ack #, clock-jump # s (# of #), #%"
    );
    assert_eq!(numbers_masked("1,234 steps, 0..200"), "# steps, #..#");
    assert!(line_matches("a [...] c [...] e", "a b c d e"));
    assert!(!line_matches("a [...] c", "a b d"));
    let lines = |text: &str| text.lines().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(matches(&lines("a\n[...]\nd"), &lines("a\nb\nc\nd")), Ok(()));
    assert_eq!(matches(&lines("a\n[...]\nd"), &lines("a\nb")), Err(2));
    assert!(is_progress(
        "sweep: 1200/20000 seeds, 0 failures, 398 seeds/s, 47 s left"
    ));
    assert!(!is_progress("sweep: 200 seeds, 0 failures, 346017 steps"));
}

// ---------------------------------------------------------------------------------------------
// Links and the README's shape

/// A heading's anchor as GitHub makes it: lower case, spaces made hyphens, other punctuation
/// dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .chars()
        .filter_map(|character| match character {
            ' ' => Some('-'),
            '-' | '_' => Some(character),
            _ if character.is_alphanumeric() => Some(character.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(file: &str) -> Vec<String> {
    let text = read(file);
    prose_lines(&text)
        .into_iter()
        .filter(|(_, line)| line.starts_with('#'))
        .map(|(_, line)| anchor(line))
        .collect()
}

/// Every `[text](target)` link in the prose of `text`, with its line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    for (number, line) in prose_lines(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            links.push((number, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    links
}

#[test]
fn every_link_between_the_files_leads_somewhere() {
    let mut broken = Vec::new();
    for file in DOCS {
        let text = read(file);
        let directory = Path::new(file).parent().unwrap_or(Path::new(""));
        for (line, target) in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let linked = if path.is_empty() {
                file.to_owned()
            } else {
                directory.join(path).to_string_lossy().into_owned()
            };
            if !checkout().join(&linked).exists() {
                broken.push(format!("{file}:{line}: {target} (no file {linked})"));
            } else if !fragment.is_empty()
                && linked.ends_with(".md")
                && !anchors(&linked).contains(&fragment.to_owned())
            {
                broken.push(format!(
                    "{file}:{line}: {target} (no heading of {linked} has the anchor #{fragment}; it has {:?})",
                    anchors(&linked)
                ));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_newcomers_page() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_LINES_MAX,
        "README.md has {lines} lines; keep it to {README_LINES_MAX} and move the rest to docs/"
    );
    let headings: Vec<&str> = prose_lines(&readme)
        .into_iter()
        .filter(|(_, line)| line.starts_with("## "))
        .map(|(_, line)| line)
        .collect();
    for heading in ["## The two commands", "## Glossary", "## Where to go next"] {
        assert!(
            headings.iter().any(|found| found.starts_with(heading)),
            "README.md has no {heading:?}"
        );
    }
    assert!(
        headings
            .iter()
            .any(|heading| heading.starts_with("## Quickstart")),
        "README.md has no quickstart"
    );

    let two_commands = readme.split("## The two commands").nth(1).unwrap();
    let block: Vec<&str> = two_commands
        .lines()
        .skip_while(|line| *line != "```sh")
        .skip(1)
        .take_while(|line| !line.starts_with("```"))
        .collect();
    assert_eq!(
        block.len(),
        2,
        "The two commands is one sh block of two commands: {block:?}"
    );
    assert!(block[0].starts_with("cargo run --release -- sweep "), "{block:?}");
    assert!(
        block[1].starts_with("cargo test --release --no-fail-fast --workspace "),
        "{block:?}"
    );

    let glossary = table_under("README.md", "## Glossary");
    let terms: Vec<&str> = glossary.rows.iter().map(|row| row[0].as_str()).collect();
    for term in ["delivery", "attempt", "receipt", "obligation", "effect", "lease"] {
        assert!(
            terms.contains(&term),
            "the README's glossary has no {term:?}: {terms:?}"
        );
    }

    let next = readme.split("## Where to go next").nth(1).unwrap();
    let linked: Vec<String> = links(next).into_iter().map(|(_, target)| target).collect();
    let mut documents: BTreeMap<String, bool> = BTreeMap::new();
    for entry in std::fs::read_dir(checkout().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let path = format!("docs/{name}");
        documents.insert(path.clone(), linked.contains(&path));
    }
    let unlinked: Vec<&String> = documents
        .iter()
        .filter(|(_, linked)| !**linked)
        .map(|(path, _)| path)
        .collect();
    assert!(
        unlinked.is_empty(),
        "\"Where to go next\" links no line to {unlinked:?}"
    );
    for document in documents.keys() {
        assert!(
            DOCS.contains(&document.as_str()),
            "{document} is not among the files this test checks (DOCS) nor included as doc tests in sim/src/lib.rs"
        );
    }
}
