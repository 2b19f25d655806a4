//! The start-up check: finishes what a crash interrupted (temporary files of uploads,
//! directories of bundle deletions), verifies every stored tarball against its name and moves
//! corrupt ones to `.quarantine/`. Everything here blocks and hashes whole files: the store
//! runs it on a blocking thread.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use gantry_api::storage::{BundleName, Digest};
use sha2::{Digest as _, Sha256};

use super::files::{Entry, entries, fsync_dir, io_err, open_nofollow};
use super::{QUARANTINE_DIR, StoreError, TEMP_PREFIX, TRASH_PREFIX};

const HASH_BUFFER: usize = 256 * 1024;

/// What the start-up check found.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    /// Temporary files of interrupted uploads, removed.
    pub removed_temp: Vec<PathBuf>,
    /// Directories of interrupted bundle deletions, removed.
    pub removed_trash: Vec<PathBuf>,
    /// Tarballs whose content does not match their name: (where it was, where it is now).
    pub quarantined: Vec<(PathBuf, PathBuf)>,
    /// Entries that are not part of the layout (symlinks, unexpected names), left alone.
    pub ignored: Vec<PathBuf>,
    /// Tarballs verified.
    pub verified: u64,
    pub stored_bytes: u64,
}

/// Hashes a file with sha256; returns the hex digest and the size.
fn hash_file(file: &mut File) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; HASH_BUFFER];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), size))
}

/// Checks the store at `root`. Blocking.
pub(super) fn recover(root: &Path) -> Result<RecoveryReport, StoreError> {
    let mut report = RecoveryReport::default();
    for Entry {
        path,
        file_type,
        name,
    } in entries(root)?
    {
        // ext4 volumes have lost+found at their root; it is no concern of ours.
        if name == QUARANTINE_DIR || name == "lost+found" {
            continue;
        }
        if name.starts_with(TRASH_PREFIX) && file_type.is_dir() {
            fs::remove_dir_all(&path).map_err(io_err(&path))?;
            report.removed_trash.push(path);
            continue;
        }
        let bundle = match BundleName::parse(&name) {
            Ok(b) if file_type.is_dir() => b,
            _ => {
                report.ignored.push(path);
                continue;
            }
        };
        recover_bundle(root, &bundle, &path, &mut report)?;
    }
    Ok(report)
}

fn recover_bundle(
    root: &Path,
    bundle: &BundleName,
    dir: &Path,
    report: &mut RecoveryReport,
) -> Result<(), StoreError> {
    let mut removed = false;
    for Entry {
        path,
        file_type,
        name,
    } in entries(dir)?
    {
        if name.starts_with(TEMP_PREFIX) && file_type.is_file() {
            fs::remove_file(&path).map_err(io_err(&path))?;
            report.removed_temp.push(path);
            removed = true;
            continue;
        }
        let digest = match Digest::from_file_name(&name) {
            Ok(d) if file_type.is_file() => d,
            _ => {
                report.ignored.push(path);
                continue;
            }
        };
        let mut file = open_nofollow(&path).map_err(io_err(&path))?;
        let (actual, size) = hash_file(&mut file).map_err(io_err(&path))?;
        if actual == digest.as_str() {
            report.verified += 1;
            report.stored_bytes += size;
            continue;
        }
        let target = quarantine(root, bundle, &digest, &path)?;
        removed = true;
        report.quarantined.push((path, target));
    }
    if removed {
        fsync_dir(dir)?;
    }
    Ok(())
}

/// Moves a corrupt tarball to `.quarantine/{bundle}/{digest}.tar.gz.{unix-seconds}`.
fn quarantine(
    root: &Path,
    bundle: &BundleName,
    digest: &Digest,
    path: &Path,
) -> Result<PathBuf, StoreError> {
    let qdir = root.join(QUARANTINE_DIR).join(bundle.as_str());
    fs::create_dir_all(&qdir).map_err(io_err(&qdir))?;
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let target = qdir.join(format!("{}.{secs}", digest.file_name()));
    fs::rename(path, &target).map_err(io_err(path))?;
    fsync_dir(&qdir)?;
    Ok(target)
}
