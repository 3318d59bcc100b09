//! `commitgap new` end to end, so that the quickstart never rots: scaffold a crate, build it
//! against this checkout, sweep 200 seeds (it passes), plant the bug its comment offers, sweep
//! again (it fails and writes a seed file), replay that file (it fails the same way), undo the bug
//! and run the crate's own `cargo test --release` (it passes, the seed file replayed in it).
//!
//! The crate builds in `target/scaffold` of this checkout, a target directory of its own (the
//! `cargo test` running this holds the workspace's), so only the first run compiles its
//! dependencies.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn cargo_in(directory: &Path, arguments: &[&str]) -> Output {
    Command::new(env!("CARGO"))
        .args(arguments)
        .current_dir(directory)
        .env("CARGO_TARGET_DIR", checkout().join("target").join("scaffold"))
        .output()
        .expect("cargo runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_new_crate_builds_passes_catches_its_planted_bug_and_replays_it() {
    let parent = std::env::temp_dir().join(format!("commitgap-new-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    let crate_dir = parent.join("my-hooks");
    let new = Command::new(env!("CARGO_BIN_EXE_commitgap"))
        .args(["new", crate_dir.to_str().unwrap(), "--path-dependency"])
        .arg(checkout())
        .output()
        .unwrap();
    assert_eq!(new.status.code(), Some(0), "{}", text(&new));
    for file in [
        "Cargo.toml",
        "src/lib.rs",
        "src/main.rs",
        "src/system.rs",
        "tests/simulation.rs",
        "README.md",
        "Cargo.lock",
        ".cargo/config.toml",
    ] {
        assert!(crate_dir.join(file).is_file(), "{file} was written");
    }

    let sweep = ["run", "--release", "--quiet", "--", "sweep", "--seeds", "200"];
    let passing = cargo_in(&crate_dir, &sweep);
    assert_eq!(passing.status.code(), Some(0), "{}", text(&passing));
    assert!(
        text(&passing).contains("200 seeds, 0 failures"),
        "{}",
        text(&passing)
    );

    let system = crate_dir.join("src/system.rs");
    let source = std::fs::read_to_string(&system).unwrap();
    let planted = source.replacen("        // return format!", "        return format!", 1);
    assert_ne!(planted, source, "the comment offers a one-line bug");
    std::fs::write(&system, planted).unwrap();
    let failing = cargo_in(&crate_dir, &sweep);
    assert_eq!(failing.status.code(), Some(1), "{}", text(&failing));
    assert!(
        text(&failing).contains("failures: one-effect-per-operation in "),
        "{}",
        text(&failing)
    );

    let seed_file = std::fs::read_dir(crate_dir.join("seeds"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|extension| extension == "json"))
        .expect("the failing sweep wrote a seed file");
    let replay = cargo_in(
        &crate_dir,
        &[
            "run",
            "--release",
            "--quiet",
            "--",
            "replay",
            seed_file.to_str().unwrap(),
        ],
    );
    assert_eq!(replay.status.code(), Some(1), "{}", text(&replay));
    assert!(
        text(&replay).contains("FAILED one-effect-per-operation"),
        "{}",
        text(&replay)
    );

    // The README's third step: with the bug undone, the crate's own tests pass in the release
    // profile, the seed file the failing sweep wrote replayed among them.
    std::fs::write(&system, &source).unwrap();
    let tested = cargo_in(&crate_dir, &["test", "--release", "--quiet"]);
    assert_eq!(tested.status.code(), Some(0), "{}", text(&tested));

    // The crate built the versions this checkout pins, not a fresh resolution.
    let pinned = |lock: &str| -> Option<String> {
        let at = lock.find("name = \"proptest\"\nversion = ")?;
        lock[at..].lines().nth(1).map(str::to_owned)
    };
    let checkout_lock = std::fs::read_to_string(checkout().join("Cargo.lock")).unwrap();
    let crate_lock = std::fs::read_to_string(crate_dir.join("Cargo.lock")).unwrap();
    assert!(pinned(&checkout_lock).is_some(), "the checkout pins proptest");
    assert_eq!(pinned(&crate_lock), pinned(&checkout_lock));
    let _ = std::fs::remove_dir_all(&parent);
}
