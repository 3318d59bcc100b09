//! `replay --html`: the timeline page as a browser shows it.
//!
//! The pages are written by the built binary and loaded in headless Chromium with `--dump-dom`,
//! so every assertion is about the document a person's browser builds, after any script ran.
//! Chromium is required: a missing one is installed from Debian's archive on a Debian or Ubuntu
//! machine (as root, or with passwordless sudo); elsewhere these tests fail and say how to
//! install it. The page must reference nothing outside itself, and the same seed
//! file must give the same bytes every time.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one headless page load may take before the test gives up on the browser.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(120);

/// The failing seed file the browser tests draw, replayed from its seed (its shrunk run has
/// lost most of this): it has crashes, restarts, pauses, commits, lease claims and provider
/// calls.
const SEED_FILE: &str = "rebuild-payload";

fn commitgap(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_commitgap"))
        .args(arguments)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The seed file in `seeds/` of the planted bug `system` (its file name carries the seed, which
/// changes when the corpus is regenerated).
fn seed_file(system: &str) -> String {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds");
    std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            name.strip_prefix(system)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .min()
        .unwrap_or_else(|| panic!("seeds/ holds a file for {system}"))
        .display()
        .to_string()
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let directory =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("html-report-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("the scratch directory can be made");
    directory
}

/// Debian's Chromium, or else a Chromium or Chrome on the PATH (GitHub's Ubuntu runners come
/// with Chrome), or else Debian's Chromium installed now, once per test run: on a fresh Debian
/// or Ubuntu machine with network to its package archive, the README's test command needs
/// nothing installed by hand. Missing and not installable is a failure, never a skip: a browser
/// test that passes without a browser proves nothing.
fn chromium() -> PathBuf {
    static BROWSER: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BROWSER
        .get_or_init(|| find_chromium().map_or_else(install_chromium, Ok))
        .clone()
        .unwrap_or_else(|why| panic!("{why}"))
}

fn find_chromium() -> Option<PathBuf> {
    let debian = PathBuf::from("/usr/bin/chromium");
    if debian.is_file() {
        return Some(debian);
    }
    let names = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    std::env::var_os("PATH").and_then(|paths| {
        let directories: Vec<PathBuf> = std::env::split_paths(&paths).collect();
        names.iter().find_map(|name| {
            directories
                .iter()
                .map(|directory| directory.join(name))
                .find(|candidate| candidate.is_file())
        })
    })
}

/// Installs Debian's `chromium` package with apt-get, as root or through `sudo -n`.
fn install_chromium() -> Result<PathBuf, String> {
    let how = "install it with `apt-get update && apt-get install -y --no-install-recommends chromium` \
               (or put a Chromium or Chrome on the PATH)";
    let on_debian = Path::new("/etc/debian_version").is_file() && Path::new("/usr/bin/apt-get").is_file();
    if !on_debian {
        return Err(format!(
            "Chromium is not installed, and the HTML timeline tests need it; this is not a Debian or Ubuntu machine, so {how}"
        ));
    }
    // SAFETY: geteuid only reads the process's effective user id.
    let root = unsafe { libc::geteuid() } == 0;
    let apt = |arguments: &[&str]| -> Result<(), String> {
        let mut command = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        let output = command
            .args(arguments)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("apt-get could not start ({error}); {how}"))?;
        if output.status.success() {
            Ok(())
        } else {
            let said = String::from_utf8_lossy(&output.stderr);
            let last = said.lines().last().unwrap_or("no output").to_owned();
            Err(format!("apt-get {} failed ({last}); {how}", arguments.join(" ")))
        }
    };
    eprintln!("html_report: Chromium is missing; installing Debian's chromium package with apt-get");
    apt(&["update", "-qq"])?;
    apt(&["install", "-y", "-qq", "--no-install-recommends", "chromium"])?;
    find_chromium().ok_or_else(|| format!("apt-get installed chromium, but no browser was found; {how}"))
}

/// Loads `page` in headless Chromium and returns the document it built.
fn dump_dom(page: &Path, profile: &Path) -> String {
    let _ = std::fs::remove_dir_all(profile);
    let page = page.canonicalize().expect("the page exists");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("Chromium starts");
    // Read both pipes on their own threads, so that a full pipe never stalls the browser.
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the browser can be waited for") {
            break status;
        }
        if started.elapsed() > BROWSER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "Chromium did not finish loading {} within {BROWSER_TIMEOUT:?}",
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = text(&out.join().expect("the reader thread ends"));
    let log = text(&err.join().expect("the reader thread ends"));
    let _ = std::fs::remove_dir_all(profile);
    assert!(status.success(), "Chromium failed ({status}): {log}");
    assert!(dom.contains("</html>"), "Chromium returned no document: {log}");
    dom
}

/// The values of every `name="..."` attribute in a serialized document, in order.
fn attribute_values<'a>(dom: &'a str, name: &str) -> Vec<&'a str> {
    let needle = format!(" {name}=\"");
    dom.match_indices(&needle)
        .map(|(start, _)| {
            let rest = &dom[start + needle.len()..];
            &rest[..rest.find('"').expect("attribute values are closed")]
        })
        .collect()
}

/// How many timeline marks (one per column) list `kind` among their kinds.
fn marks_of_kind(dom: &str, kind: &str) -> usize {
    attribute_values(dom, "data-kinds")
        .iter()
        .filter(|kinds| kinds.split(' ').any(|name| name == kind))
        .count()
}

/// The `setup` value of `name`, as a count.
fn setup_count(trace: &[String], name: &str) -> u64 {
    let setup = trace
        .iter()
        .find_map(|line| line.strip_prefix("setup "))
        .expect("the trace starts with its setup line");
    setup
        .split(' ')
        .find_map(|setting| setting.strip_prefix(&format!("{name}=")))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("setup names {name}"))
}

/// A printed trace line of a step: `{step:>6} {time:>12} {actor:<13} {action}`, read back as
/// step, actor and action; `None` for the set-up line.
fn step_parts(line: &str) -> Option<(u64, &str, &str)> {
    let mut rest = line.trim_start();
    let mut field = || {
        let (word, after) = rest.split_once(' ')?;
        rest = after.trim_start();
        Some(word)
    };
    let step = field()?.parse().ok()?;
    let _time = field()?;
    let actor = field()?;
    Some((step, actor, rest))
}

/// Trace lines of steps (not heal, not a failed invariant) with at least one remark for which
/// `matches` holds.
fn steps_where(trace: &[String], matches: impl Fn(&str) -> bool) -> usize {
    trace
        .iter()
        .filter_map(|line| step_parts(line))
        .filter(|(_, actor, action)| {
            !matches!(*actor, "world" | "invariant") && action.split(" | ").any(&matches)
        })
        .count()
}

/// What the document must never contain: a way to load anything from elsewhere.
fn assert_self_contained(document: &str, what: &str) {
    for outside in ["http://", "https://", "@import", "<link", "src="] {
        assert!(!document.contains(outside), "{what} contains {outside:?}");
    }
}

/// Text as the browser serializes it inside an element.
fn as_text_node(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[test]
// One page loaded once and read from top to bottom against its trace: lanes, verdict, marks, rows.
#[allow(clippy::too_many_lines)]
fn a_failing_seed_file_renders_in_a_browser_with_its_lanes_marks_and_failure() {
    let directory = scratch("failing");
    let page = directory.join("timeline.html");
    let seed = seed_file(SEED_FILE);
    let output = commitgap(&[
        "replay",
        &seed,
        "--from",
        "seed",
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "the seed still fails: {}",
        text(&output.stderr)
    );
    assert!(text(&output.stdout).contains("replay: timeline written to"));
    let traced = commitgap(&["replay", &seed, "--from", "seed", "--trace"]);
    let trace: Vec<String> = text(&traced.stdout).lines().map(str::to_owned).collect();
    let html = std::fs::read_to_string(&page).expect("the page was written");
    assert_self_contained(&html, "the page");

    let dom = dump_dom(&page, &directory.join("profile"));
    assert_self_contained(&dom, "the browser's document");

    let lanes = attribute_values(&dom, "data-lane");
    let mut expected_lanes = vec!["sender".to_owned(), "provider".to_owned(), "purge".to_owned()];
    expected_lanes.push("operator".to_owned());
    for index in 1..=setup_count(&trace, "receivers") {
        expected_lanes.push(format!("receiver-{index}"));
    }
    for index in 1..=setup_count(&trace, "relay-workers") {
        expected_lanes.push(format!("relay-{index}"));
    }
    for lane in &expected_lanes {
        assert!(
            dom.contains(&format!("<g class=\"lane-label\" data-lane=\"{lane}\">")),
            "no lane for {lane}; lanes: {lanes:?}"
        );
    }

    let (step, invariant, evidence) = trace
        .iter()
        .filter_map(|line| step_parts(line))
        .find_map(|(step, actor, action)| {
            let (invariant, evidence) = action.strip_prefix("FAILED ")?.split_once(": ")?;
            (actor == "invariant").then(|| (step, invariant.to_owned(), evidence.to_owned()))
        })
        .expect("the trace of a failing seed has a FAILED line");
    assert!(dom.contains("<section id=\"verdict\" class=\"verdict failed\">"));
    assert!(dom.contains(&format!("<span class=\"invariant\">{invariant}</span>")));
    assert!(
        dom.contains(&format!("<p class=\"evidence\">{}</p>", as_text_node(&evidence))),
        "the evidence is shown in full"
    );
    let band = &dom[dom
        .find("id=\"failure\"")
        .expect("the failing step is highlighted")..];
    assert!(band[..band.find('>').unwrap()].contains(&format!("data-step=\"{step}\"")));
    assert!(dom.contains(&format!(">FAILED {invariant} at step {step}</text>")));

    // Every step that crashed, committed or called the provider has its mark.
    let crashes = steps_where(&trace, |remark| remark.starts_with("crash "));
    let commits = steps_where(&trace, |remark| remark.starts_with("commit "));
    let calls = steps_where(&trace, |remark| remark.starts_with("call "));
    let restarts = steps_where(&trace, |remark| remark.starts_with("restart as "));
    let claims = steps_where(&trace, |remark| {
        remark.starts_with("commit ") && remark.contains(" taken (token ")
    });
    assert!(crashes > 0 && commits > 0 && calls > 0 && restarts > 0 && claims > 0);
    assert_eq!(marks_of_kind(&dom, "crash"), crashes);
    assert_eq!(marks_of_kind(&dom, "commit"), commits);
    assert_eq!(marks_of_kind(&dom, "call"), calls);
    assert_eq!(marks_of_kind(&dom, "restart"), restarts);
    assert_eq!(marks_of_kind(&dom, "lease-claim"), claims);
    assert!(
        marks_of_kind(&dom, "provider") >= calls,
        "each call shows on the provider's lane"
    );

    // The key moments below the chart list each crash, each new effect and the failure.
    // (A `reply` repeats what the provider said; only the provider's acting is a new effect.)
    let new_effects = steps_where(&trace, |remark| {
        (remark.starts_with("call ") || remark.starts_with("provider finishes"))
            && remark.contains("(new effect)")
    });
    assert!(new_effects > 0);
    assert_eq!(dom.matches("<tr class=\"moment-crash\">").count(), crashes);
    assert_eq!(
        dom.matches("<tr class=\"moment-new-effect\">").count(),
        new_effects
    );
    assert_eq!(dom.matches("<tr class=\"moment-failure\">").count(), 1);

    // Each mark carries its full trace line for hovering.
    let crash_line = trace
        .iter()
        .find(|line| line.contains(" crash "))
        .expect("a crash line");
    assert!(
        dom.contains(&as_text_node(crash_line)),
        "the crash's full line is its hover text"
    );
    // Idle polls were folded, and every step is still accounted for.
    let columns = attribute_values(&dom, "data-kinds").len();
    let idle: usize = attribute_values(&dom, "data-steps")
        .iter()
        .map(|steps| steps.parse::<usize>().expect("a count"))
        .sum();
    let step_lines = trace
        .iter()
        .filter_map(|line| step_parts(line))
        .filter(|(_, actor, _)| !matches!(*actor, "world" | "invariant"))
        .count();
    assert_eq!(
        columns + idle,
        step_lines,
        "every step is a column or folded into an idle line"
    );
    assert!(idle > 0);
}

#[test]
fn a_passing_seed_shows_the_heal_and_the_operator() {
    let directory = scratch("passing");
    let page = directory.join("nested/timeline.html");
    let output = commitgap(&[
        "replay",
        "--seed",
        "2",
        "--system",
        "reference",
        "--all-faults",
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "the reference passes: {}",
        text(&output.stdout)
    );
    let dom = dump_dom(&page, &directory.join("profile"));
    assert_self_contained(&dom, "the browser's document");
    assert!(dom.contains("<section id=\"verdict\" class=\"verdict passed\">"));
    assert!(!dom.contains("id=\"failure\""));
    assert!(
        dom.contains("<g id=\"heal\" class=\"heal\""),
        "the end of the fault phase is drawn"
    );
    assert!(dom.contains("<tr class=\"moment-heal\">"));
    assert!(
        marks_of_kind(&dom, "operator") > 0,
        "the operator acts after heal"
    );
    assert!(dom.contains("<svg class=\"timeline\""));
}

#[test]
fn the_same_seed_file_gives_the_same_page() {
    let directory = scratch("determinism");
    let seed = seed_file("unfenced-completion");
    let pages: Vec<Vec<u8>> = ["first.html", "second.html"]
        .iter()
        .map(|name| {
            let page = directory.join(name);
            let output = commitgap(&["replay", &seed, "--html", page.to_str().unwrap()]);
            assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
            std::fs::read(&page).expect("the page was written")
        })
        .collect();
    assert!(pages[0].len() > 10_000);
    assert!(pages[0] == pages[1], "two renderings of one seed file differ");
    let leftovers: Vec<_> = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind: {leftovers:?}");
}

#[test]
fn an_unwritable_html_path_is_a_usage_error_before_the_run() {
    let directory = scratch("unwritable");
    let file = directory.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let seed = seed_file(SEED_FILE);
    for (path, expected) in [
        (file.join("timeline.html"), "cannot be created"),
        (directory.clone(), "is a directory"),
    ] {
        let output = commitgap(&["replay", &seed, "--html", path.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
        let message = text(&output.stderr);
        assert_eq!(message.lines().count(), 1, "one line: {message:?}");
        assert!(message.starts_with("error: --html "), "{message}");
        assert!(message.contains(expected), "{message}");
        assert!(
            text(&output.stdout).is_empty(),
            "nothing ran: {}",
            text(&output.stdout)
        );
    }
}
