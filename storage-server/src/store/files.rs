//! Small file system steps the store is built from: errors that name the path, blocking work
//! moved off the async workers, directory fsync, and opening without following symlinks.

use std::fs::{self, File, FileType, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use gantry_api::storage::{Digest, StoredTarball};

use super::StoreError;

/// Names the path of a failed file system step; a full volume (or quota) is told apart, since
/// the client is told so (`507`) rather than of an internal error.
pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| match source.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => StoreError::NoSpace {
            path: path.to_owned(),
            source,
        },
        _ => StoreError::Io {
            path: path.to_owned(),
            source,
        },
    }
}

/// Runs blocking file system work (and whole-file hashing) off the async worker threads.
pub(super) async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

pub(super) fn fsync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Opens a file without following a symlink in its last component.
pub(super) fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Whether `path` is a real directory (not a symlink to one).
pub(super) fn is_real_dir(path: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.file_type().is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// One entry of a directory; `file_type` does not follow symlinks.
pub(super) struct Entry {
    pub path: PathBuf,
    pub file_type: FileType,
    /// The file name, lossily decoded (an undecodable one is never a valid name anyway).
    pub name: String,
}

/// The entries of `dir`.
pub(super) fn entries(dir: &Path) -> Result<Vec<Entry>, StoreError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(io_err(&path))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        out.push(Entry {
            path,
            file_type,
            name,
        });
    }
    Ok(out)
}

/// The tarballs in a bundle directory, sorted by digest; other entries are skipped.
pub(super) fn list_dir(dir: &Path) -> Result<Vec<StoredTarball>, StoreError> {
    let mut out = Vec::new();
    for entry in entries(dir)? {
        if !entry.file_type.is_file() {
            continue;
        }
        let Ok(digest) = Digest::from_file_name(&entry.name) else {
            continue;
        };
        let size = fs::symlink_metadata(&entry.path)
            .map_err(io_err(&entry.path))?
            .len();
        out.push(StoredTarball {
            digest: digest.to_string(),
            size,
        });
    }
    out.sort_by(|a, b| a.digest.cmp(&b.digest));
    Ok(out)
}
