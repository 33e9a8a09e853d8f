//! Directories: fsync one (so that a created, renamed or deleted entry survives a crash),
//! create one durably.

use std::fs::{DirBuilder, File};
use std::path::Path;

use crate::DurableError;

/// Fsyncs the directory `dir`, making durable the entries created, renamed or deleted in it.
///
/// # Errors
/// [`DurableError::Io`] (`"fsync directory"`) naming `dir` when it cannot be opened or synced.
pub fn sync_dir(dir: &Path) -> Result<(), DurableError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(DurableError::io("fsync directory", dir))
}

/// Creates `dir` with its missing parents (default permissions) unless it is a directory
/// already, and fsyncs its parent so the new entry survives a crash.
///
/// # Errors
/// [`DurableError::Io`] naming the directory that could not be created or synced.
pub fn create_dir(dir: &Path) -> Result<(), DurableError> {
    create(dir, DirBuilder::new().recursive(true))
}

/// As [`create_dir`], but the directories it creates have mode 0700 (owner only) on Unix.
///
/// # Errors
/// As [`create_dir`].
pub fn create_private_dir(dir: &Path) -> Result<(), DurableError> {
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    create(dir, &builder)
}

fn create(dir: &Path, builder: &DirBuilder) -> Result<(), DurableError> {
    if dir.is_dir() {
        return Ok(());
    }
    builder
        .create(dir)
        .map_err(DurableError::io("create directory", dir))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_nested_directories_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/c");
        create_private_dir(&dir).unwrap();
        assert!(dir.is_dir());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        create_dir(&dir).unwrap();
        sync_dir(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("missing");
        let err = sync_dir(&missing).unwrap_err();
        assert!(err.to_string().contains("fsync directory"), "{err}");
        assert!(err.to_string().contains("missing"), "{err}");
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let err = create_dir(&file.join("sub")).unwrap_err();
        assert!(
            matches!(
                err,
                DurableError::Io {
                    op: "create directory",
                    ..
                }
            ),
            "{err}"
        );
    }
}
