//! What the tests that start whole checks share: a child reaped however the test ends, and the
//! processes still running that name a run's directory, to show that none was left behind.

use std::process::Child;

/// Kills the child and reaps it when the test ends, however it ends.
pub struct Stopped(pub Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The processes whose command line mentions `marker`.
pub fn processes_mentioning(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(command) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let command = String::from_utf8_lossy(&command).replace('\0', " ");
        if command.contains(marker) {
            found.push(command);
        }
    }
    found
}
