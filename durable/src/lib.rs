//! Durable files for latmesh: the one toolkit both spools (the agent's and the
//! coordinator's), the coordinator's state directory and its event queue use to put bytes on
//! disk so that they survive a crash (SIGKILL, power loss).
//!
//! - [`atomic_write`]: replace a file whole (temporary file in the same directory, fsync,
//!   rename, fsync of the directory): a reader sees the old content or the new, never a mix.
//! - [`sync_dir`], [`create_dir`], [`create_private_dir`]: make a directory entry (a
//!   created, renamed or deleted file) durable; create a directory and make it durable.
//! - [`LockFile`]: one process per directory (an advisory exclusive lock on a file holding
//!   the holder's pid; released by the kernel when the holder dies, so never stale).
//! - [`Framing`]: checksummed records, `magic | payload length | CRC-32 | payload`, one
//!   encoder and one read/verify path for every on-disk format (each keeps its own magic).
//!
//! Errors are typed ([`DurableError`], [`FrameError`]); those about a file name it.
//! Everything here is blocking file I/O: from async code, call it through
//! `tokio::task::spawn_blocking`.

mod atomic;
mod dir;
mod error;
mod frame;
mod lock;

pub use atomic::{atomic_write, temp_path};
pub use dir::{create_dir, create_private_dir, sync_dir};
pub use error::DurableError;
pub use frame::{FrameError, Framing, Header, checksum};
pub use lock::LockFile;
