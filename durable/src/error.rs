//! The error of the file operations of this crate.

use std::io;
use std::path::PathBuf;

/// Why a durable-file operation failed; every variant names the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// A file system call failed.
    #[error("cannot {op} {path}: {source}")]
    Io {
        /// What was attempted: `"create"`, `"write"`, `"fsync"`, `"rename"`,
        /// `"fsync directory"`, `"create directory"`, `"open"`, `"lock"`.
        op: &'static str,
        /// The file or directory it was attempted on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Another process (or another [`crate::LockFile`] of this one) holds the lock file.
    #[error(
        "{path} is locked by another process{holder}",
        holder = holder.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The pid the holder wrote in it, when readable.
        holder: Option<u32>,
    },
}

impl DurableError {
    /// A closure turning an [`io::Error`] of `op` on `path` into [`DurableError::Io`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| DurableError::Io { op, path, source }
    }
}
