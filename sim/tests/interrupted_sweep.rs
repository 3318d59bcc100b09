//! Nothing a sweep finds is lost: not when it is killed, interrupted or short of disk.
//!
//! The first failures of each invariant are printed the moment their seed finishes, each FAIL
//! line with its `replay --seed` command, and the rest are counted in the closing lines. A
//! failure's seed file (the run as found) is written atomically and flushed before the sweep goes
//! on. SIGINT and SIGTERM stop the sweep gracefully: no new seeds, the running ones finish, the
//! summary says it was interrupted, and the exit code is 1 when something failed, else 130. A
//! seed file that cannot be written leaves the failure reported and counted. These tests run the
//! built binary and send it real signals.

mod scratch;

use scratch::Scratch;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use commitgap_sim::sweep::{self, SeedFile};

/// A path that does not exist yet: the sweep makes its seed directory itself.
fn scratch(name: &str) -> Scratch {
    let scratch = Scratch::new("interrupted", name);
    std::fs::remove_dir(&*scratch).unwrap();
    scratch
}

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_commitgap")
}

/// Starts a sweep with its standard output piped.
fn start_sweep(arguments: &[&str], directory: &Path) -> Child {
    Command::new(binary())
        .args(arguments)
        .arg("--seeds-dir")
        .arg(directory)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs")
}

/// A sweep of a planted bug that fails most seeds, long enough to be stopped while it runs.
fn start_long_receipt_first_sweep(directory: &Path) -> Child {
    let arguments = [
        "sweep",
        "--system",
        "receipt-first",
        "--seeds",
        "100000",
        "--jobs",
        "1",
    ];
    start_sweep(&arguments, directory)
}

/// Reads standard output until a line starts with `prefix`; returns the lines read so far.
fn read_until(child: &mut Child, prefix: &str) -> (BufReader<std::process::ChildStdout>, Vec<String>) {
    let mut reader = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let read = reader.read_line(&mut line).expect("stdout reads");
        assert!(read > 0, "the sweep ended before printing `{prefix}`: {lines:?}");
        let line = line.trim_end().to_owned();
        let found = line.starts_with(prefix);
        lines.push(line);
        if found {
            return (reader, lines);
        }
    }
}

#[cfg(unix)]
fn signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("a process id fits");
    // SAFETY: sends a signal to a child this test started and has not yet waited for.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// Waits for the child to exit, at most `limit`; the test fails if it does not.
fn wait_at_most(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait works") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the sweep did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rest_of(mut reader: BufReader<std::process::ChildStdout>) -> String {
    let mut rest = String::new();
    reader.read_to_string(&mut rest).expect("stdout reads");
    rest
}

#[test]
fn killing_a_sweep_at_any_moment_leaves_only_whole_seed_files() {
    let mut files_seen = 0;
    // Kills are timed from the first file to appear, so they land while files are being written
    // however fast or slow the machine is.
    for delay_ms in [0, 5, 20, 60, 150] {
        let directory = scratch(&delay_ms.to_string());
        let mut sweep = Command::new(binary())
            .args([
                "sweep",
                "--system",
                "no-receipt-dedup",
                "--seeds",
                "300",
                "--jobs",
                "1",
                "--no-shrink",
            ])
            .arg("--seeds-dir")
            .arg(&directory)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary runs");
        let deadline = Instant::now() + Duration::from_secs(300);
        while std::fs::read_dir(&directory).map_or(true, |mut entries| entries.next().is_none())
            && sweep.try_wait().unwrap().is_none()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = sweep.kill();
        let _ = sweep.wait();
        for path in sweep::list(&directory).unwrap() {
            SeedFile::read(&path).unwrap_or_else(|error| panic!("killed after {delay_ms} ms: {error}"));
            files_seen += 1;
        }
        let _ = std::fs::remove_dir_all(&directory);
    }
    assert!(files_seen > 0, "the kills came after the sweep started writing");
}

#[test]
fn a_failure_is_on_disk_the_moment_its_line_is_printed() {
    let directory = scratch("sigkill");
    let mut sweep = start_long_receipt_first_sweep(&directory);
    let (_, lines) = read_until(&mut sweep, "  seed file: ");
    // No chance to clean up or finish anything.
    sweep.kill().expect("the sweep is running");
    let _ = sweep.wait();
    let fail = lines
        .iter()
        .find(|line| line.starts_with("FAIL seed"))
        .expect("a FAIL line came first");
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with("  replay: ") && line.contains("replay --seed")),
        "the FAIL line comes with a command that needs no file: {lines:?}"
    );
    let path = lines
        .last()
        .unwrap()
        .trim_start_matches("  seed file: ")
        .trim_end_matches(" (as found)")
        .to_owned();
    let file = SeedFile::read(Path::new(&path)).expect("the file is whole");
    assert!(
        fail.contains(&format!("FAIL seed {} ", file.seed)),
        "{fail} / {path}"
    );
    let replay = Command::new(binary()).args(["replay", &path]).output().unwrap();
    assert_eq!(replay.status.code(), Some(1), "the file replays its failure");
    let _ = std::fs::remove_dir_all(&directory);
}

#[cfg(unix)]
#[test]
fn an_interrupted_sweep_reports_what_it_found_and_exits_1() {
    let directory = scratch("sigint");
    let mut sweep = start_long_receipt_first_sweep(&directory);
    let (reader, mut lines) = read_until(&mut sweep, "FAIL seed");
    signal(&sweep, libc::SIGINT);
    let status = wait_at_most(&mut sweep, Duration::from_secs(60));
    lines.extend(rest_of(reader).lines().map(str::to_owned));
    assert_eq!(status.code(), Some(1), "{lines:?}");
    let summary = lines.last().unwrap();
    assert!(
        summary.starts_with("sweep: ") && summary.contains("interrupted after "),
        "{summary}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with("not shrunk: the sweep was interrupted")),
        "{lines:?}"
    );
    let written = lines
        .iter()
        .filter(|line| line.starts_with("  seed file: "))
        .count();
    let files = sweep::list(&directory).unwrap();
    assert!(
        written >= 1 && files.len() == written,
        "{written} announced, {files:?}"
    );
    for path in files {
        SeedFile::read(&path).unwrap();
    }
    let _ = std::fs::remove_dir_all(&directory);
}

#[cfg(unix)]
#[test]
fn a_terminated_sweep_that_found_nothing_exits_130() {
    let directory = scratch("sigterm");
    let mut sweep = start_sweep(&["sweep", "--seeds", "1000000", "--jobs", "1"], &directory);
    std::thread::sleep(Duration::from_millis(300));
    signal(&sweep, libc::SIGTERM);
    let status = wait_at_most(&mut sweep, Duration::from_secs(60));
    let output = rest_of(BufReader::new(sweep.stdout.take().unwrap()));
    assert_eq!(status.code(), Some(130), "{output}");
    assert!(
        output.lines().last().unwrap().contains("interrupted after "),
        "{output}"
    );

    let _ = std::fs::remove_dir_all(&directory);
}

#[cfg(unix)]
#[test]
fn a_second_signal_exits_at_once_without_waiting_for_the_running_seed() {
    let directory = scratch("second-signal");
    // One job on a large workload with every fault on, one receiver, a WAL file and every seed
    // run twice: a seed takes most of a second here, so the first signal leaves a seed running,
    // which a graceful stop would wait for.
    let mut sweep = start_sweep(
        &[
            "sweep",
            "--seeds",
            "1000",
            "--jobs",
            "1",
            "--all-faults",
            "--sender",
            "github",
            "--tenants",
            "2",
            "--orders",
            "32",
            "--updates",
            "3",
            "--receivers",
            "1",
            "--backend",
            "wal-file",
            "--check-determinism",
        ],
        &directory,
    );
    std::thread::sleep(Duration::from_millis(300));
    signal(&sweep, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(30));
    signal(&sweep, libc::SIGINT);
    let status = wait_at_most(&mut sweep, Duration::from_secs(60));
    let output = rest_of(BufReader::new(sweep.stdout.take().unwrap()));
    assert_eq!(status.code(), Some(130), "{output}");
    assert!(
        !output.contains("interrupted after "),
        "the second signal does not wait for the summary: {output}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

#[cfg(unix)]
#[test]
fn temporary_files_of_killed_writers_are_cleaned_up_by_the_next_sweep() {
    let directory = scratch("stale");
    std::fs::create_dir_all(&directory).unwrap();
    // Process ids stay below 2^22 on Linux, so these writers cannot be alive.
    let stale = [
        ".receipt-first-0.json.tmp-9999999",
        ".receipt-first-1.json.tmp-9999998-Ab12Cd",
    ];
    for name in stale {
        std::fs::write(directory.join(name), b"{\"format_ver").unwrap();
    }
    let live = format!(".report.json.tmp-{}-Zz99", std::process::id());
    std::fs::write(directory.join(&live), b"").unwrap();
    let output = Command::new(binary())
        .args(["sweep", "--seeds", "1"])
        .arg("--seeds-dir")
        .arg(&directory)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("removed 2 temporary files"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let left: Vec<String> = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, [live], "a live writer's file stays");
    let _ = std::fs::remove_dir_all(&directory);
}

/// Runs a sweep in a shell that limits the size of any file it writes, as a full disk would
/// refuse the write: `ulimit -f`, with SIGXFSZ ignored so that the write fails instead of the
/// process dying. Standard output is a pipe, which the limit does not touch.
#[cfg(unix)]
fn sweep_on_a_full_disk(directory: &Path, report: &Path) -> Output {
    let script = format!(
        "trap '' XFSZ; ulimit -f 2; exec '{}' sweep --system receipt-first --seeds 40 --jobs 2 --seeds-dir '{}' --json '{}'",
        binary(),
        directory.display(),
        report.display()
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .output()
        .expect("sh runs")
}

#[cfg(unix)]
#[test]
fn on_a_full_disk_every_failure_is_still_reported_and_the_exit_code_is_the_sweeps() {
    let directory = scratch("full-disk");
    std::fs::create_dir_all(&directory).unwrap();
    let report = directory.join("report.json");
    let output = sweep_on_a_full_disk(&directory, &report);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let errors = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{text}\n{errors}");
    let summary = text.lines().last().unwrap();
    let failures: usize = summary
        .strip_prefix("sweep: 40 seeds, ")
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("a summary of 40 seeds: {text}"));
    assert!(failures >= 20, "receipt-first fails most seeds: {text}");
    // The first failures of each invariant are printed as they are found, each with its replay
    // command; the rest are counted, and the grouped lines at the end count every one.
    let printed = text.lines().filter(|line| line.starts_with("FAIL seed")).count();
    let replays = text
        .lines()
        .filter(|line| line.starts_with("  replay: ") && line.contains("--seed"))
        .count();
    assert!(printed >= 10, "{text}");
    assert_eq!(
        replays, printed,
        "every printed failure has its replay command: {text}"
    );
    let grouped: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("failures: "))
        .collect();
    let counted: usize = grouped
        .iter()
        .map(|line| {
            line.split(" in ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next()?.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("{line}"))
        })
        .sum();
    assert_eq!(counted, failures, "the grouped lines count every failure: {text}");
    assert!(
        grouped
            .iter()
            .all(|line| line.contains("; replay: ") && line.contains(" replay --seed ")),
        "with no seed file, each group's shortest failure replays by seed: {text}"
    );
    let unwritten_printed = text
        .lines()
        .filter(|line| line.starts_with("  no seed file: cannot write"))
        .count();
    assert!(unwritten_printed >= 1, "{text}");
    let unwritten: usize = text
        .lines()
        .filter_map(|line| line.strip_prefix("corpus: "))
        .find(|rest| rest.contains(" could not be written ("))
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("the summary counts the files not written: {text}"));
    assert!(
        (unwritten_printed..=failures).contains(&unwritten),
        "{unwritten} files not written, {unwritten_printed} of them printed, {failures} failures: {text}"
    );
    assert!(
        errors.contains("--json") && errors.contains("the sweep's own result stands (exit 1)"),
        "{errors}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(leftovers.is_empty(), "no partial files: {leftovers:?}");
    let _ = std::fs::remove_dir_all(&directory);
}
