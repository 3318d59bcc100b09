//! A sweep killed at any moment leaves only complete seed files: each is written to a temporary
//! name, flushed and renamed into place, so a reader sees a whole file or none. The sweep is
//! killed (SIGKILL, no chance to clean up) at several moments after it started writing a few
//! hundred files, and every `*.json` left behind must read back as a seed file.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use commitgap_sim::seed_file::{self, SeedFile};

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("commitgap-interrupted-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    directory
}

#[test]
fn killing_a_sweep_at_any_moment_leaves_only_whole_seed_files() {
    let mut files_seen = 0;
    // Kills are timed from the first file to appear, so they land while files are being written
    // however fast or slow the machine is.
    for delay_ms in [0, 5, 20, 60, 150] {
        let directory = scratch(&delay_ms.to_string());
        let mut sweep = Command::new(env!("CARGO_BIN_EXE_commitgap"))
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
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while std::fs::read_dir(&directory).map_or(true, |mut entries| entries.next().is_none())
            && sweep.try_wait().unwrap().is_none()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = sweep.kill();
        let _ = sweep.wait();
        for path in seed_file::list(&directory).unwrap() {
            SeedFile::read(&path).unwrap_or_else(|error| panic!("killed after {delay_ms} ms: {error}"));
            files_seen += 1;
        }
        let _ = std::fs::remove_dir_all(&directory);
    }
    assert!(files_seen > 0, "the kills came after the sweep started writing");
    eprintln!("{files_seen} seed files left behind across the kills, all whole");
}
