//! One process per directory: an exclusive lock file.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use crate::DurableError;

/// An exclusive advisory lock (`flock`) on a file, typically `DIR/lock`, held until dropped:
/// the owner of a directory (a spool, a state directory) takes it when it opens the directory
/// so that a second process on the same directory is refused instead of corrupting it.
///
/// The file holds the holder's pid (a line of text) so that a refusal can name it. The lock
/// itself is the kernel's, tied to the open file: it is released when the holder closes it or
/// dies (even by SIGKILL), so a lock file left behind by a dead process is never stale: the
/// next [`LockFile::acquire`] takes it and writes its own pid. Two `LockFile`s on one path in
/// one process exclude each other too.
#[derive(Debug)]
pub struct LockFile {
    path: PathBuf,
    _file: File,
}

impl LockFile {
    /// Opens (creating it if missing) and locks the file `path` without waiting, and writes
    /// this process's pid in it.
    ///
    /// # Errors
    /// [`DurableError::Locked`] when another holder has it (with the pid it wrote, when
    /// readable); [`DurableError::Io`] when the file cannot be opened or locked.
    pub fn acquire(path: &Path) -> Result<LockFile, DurableError> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(DurableError::io("open", path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(DurableError::Locked {
                    path: path.to_path_buf(),
                    holder: text.trim().parse().ok(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(DurableError::io("lock", path)(e)),
        }
        // The pid is informative only: a failure to write it does not lose the lock.
        let _ = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(format!("{}\n", std::process::id()).as_bytes()));
        Ok(LockFile {
            path: path.to_path_buf(),
            _file: file,
        })
    }

    /// Locks `dir/file_name` (see [`LockFile::acquire`]).
    ///
    /// # Errors
    /// As [`LockFile::acquire`].
    pub fn in_dir(dir: &Path, file_name: &str) -> Result<LockFile, DurableError> {
        LockFile::acquire(&dir.join(file_name))
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_refused_naming_the_file_and_the_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let lock = LockFile::in_dir(tmp.path(), "lock").unwrap();
        assert_eq!(lock.path(), tmp.path().join("lock"));
        let err = LockFile::in_dir(tmp.path(), "lock").unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(&err, DurableError::Locked { holder: Some(pid), .. } if *pid == std::process::id()),
            "{text}"
        );
        assert!(
            text.contains(&tmp.path().join("lock").display().to_string()),
            "{text}"
        );
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(lock);
        LockFile::in_dir(tmp.path(), "lock").unwrap();
    }

    #[test]
    fn a_file_left_by_a_dead_holder_is_taken_over() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("agent.lock");
        std::fs::write(&path, "4294967295\nleft over by a crash\n").unwrap();
        let _lock = LockFile::acquire(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
    }

    #[test]
    fn an_unopenable_path_is_an_io_error() {
        let tmp = tempfile::tempdir().unwrap();
        let err = LockFile::acquire(&tmp.path().join("missing/lock")).unwrap_err();
        assert!(matches!(err, DurableError::Io { op: "open", .. }), "{err}");
    }
}
