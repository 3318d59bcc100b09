//! A test's scratch directory: made empty when the test asks for it, removed when the test ends
//! well, and kept when it panics, so that a run of the tests leaves nothing behind in the
//! system's temporary directory but the files of a failure.
//!
//! Each directory's name holds the test process's id, so two runs of the tests at once never
//! share one.

use std::ffi::OsStr;
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// A directory under the system's temporary directory, removed on drop unless the thread is
/// panicking.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// `commitgap-{prefix}-{name}-{process id}`, made empty.
    pub fn new(prefix: &str, name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("commitgap-{prefix}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("the scratch directory can be made");
        Scratch(path)
    }
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<OsStr> for Scratch {
    fn as_ref(&self) -> &OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
