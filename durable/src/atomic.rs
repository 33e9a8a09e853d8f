//! Replacing a file atomically and durably.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::{DurableError, sync_dir};

/// The temporary file [`atomic_write`] writes before renaming it to `path`: `path` with
/// `.tmp` appended to its file name (`campaign.json` → `campaign.json.tmp`), in the same
/// directory (a rename is atomic only within one file system). A crash can leave it behind;
/// the owner of the directory may delete such files when it opens it.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name: OsString = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Replaces the file `path` with `bytes` so that after a crash it holds either its old content
/// (or does not exist, if it did not) or all of `bytes`, never a mix: writes
/// [`temp_path`]`(path)`, fsyncs it, renames it to `path` and fsyncs the directory. Returns
/// once the new content and its directory entry are durable.
///
/// # Errors
/// [`DurableError::Io`] naming the file: the temporary file cannot be created, written or
/// synced (`path` is untouched and the temporary file is removed), the rename failed (likewise),
/// or the directory cannot be synced (`path` has the new content, which may not survive a
/// crash).
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let tmp = write_temp(path, bytes)?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(DurableError::io("rename", path)(e));
    }
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => sync_dir(dir),
        None => sync_dir(Path::new(".")),
    }
}

/// Writes and fsyncs the temporary file of `path`; removes it again on failure.
fn write_temp(path: &Path, bytes: &[u8]) -> Result<PathBuf, DurableError> {
    let tmp = temp_path(path);
    let written = File::create(&tmp)
        .map_err(DurableError::io("create", &tmp))
        .and_then(|mut f| {
            f.write_all(bytes)
                .map_err(DurableError::io("write", &tmp))?;
            f.sync_all().map_err(DurableError::io("fsync", &tmp))
        });
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_content_and_leaves_no_temporary_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("campaign.json");
        atomic_write(&path, b"one").unwrap();
        atomic_write(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["campaign.json"]);
    }

    #[test]
    fn a_crash_before_the_rename_leaves_the_old_content() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ledger");
        atomic_write(&path, b"old").unwrap();
        // A crash between the fsync of the temporary file and the rename.
        let left = write_temp(&path, b"new, never renamed").unwrap();
        assert_eq!(left, tmp.path().join("ledger.tmp"));
        assert_eq!(fs::read(&path).unwrap(), b"old");
        // The next write replaces the leftover.
        atomic_write(&path, b"newer").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"newer");
        assert!(!left.exists());
    }

    #[test]
    fn temp_names_append_to_the_file_name() {
        assert_eq!(
            temp_path(Path::new("d/c.00000000000000000001.batch")),
            Path::new("d/c.00000000000000000001.batch.tmp")
        );
        assert_eq!(
            temp_path(Path::new("events.jsonl")),
            Path::new("events.jsonl.tmp")
        );
    }

    #[test]
    fn a_failed_write_names_the_file_and_keeps_the_target() {
        let tmp = tempfile::tempdir().unwrap();
        let err = atomic_write(&tmp.path().join("no/such/dir/f"), b"x").unwrap_err();
        assert!(
            matches!(&err, DurableError::Io { op: "create", path, .. } if path.ends_with("f.tmp")),
            "{err}"
        );
        assert!(err.to_string().contains("f.tmp"), "{err}");
    }
}
