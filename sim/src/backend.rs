//! Where a run's SQLite database lives: the choice of backend, apart from the database itself so
//! that a configuration can name it without depending on how databases are made. It must hold
//! nothing but the choice.

use serde::{Deserialize, Serialize};

/// Where the database lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// SQLite's in-memory VFS, shared between connections by name.
    Memdb,
    /// A file in WAL mode, on tmpfs when `/dev/shm` exists.
    WalFile,
}

impl Backend {
    /// The backend's name as written in configurations and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memdb => "memdb",
            Backend::WalFile => "wal-file",
        }
    }

    /// The backend called `name`, or `None` when no backend has that name.
    pub fn from_name(name: &str) -> Option<Backend> {
        [Backend::Memdb, Backend::WalFile]
            .into_iter()
            .find(|backend| backend.name() == name)
    }
}
