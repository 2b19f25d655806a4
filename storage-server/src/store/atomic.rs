//! Atomic installation of an upload: the body is streamed to a temporary file beside its final
//! name while it is hashed, fsynced, checked against the digest its name claims, then renamed
//! into place and the directory fsynced. A crash never leaves a partial tarball under its
//! final name, and a failed or abandoned upload leaves no temporary file behind.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use gantry_api::storage::Digest;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncWriteExt, BufWriter};

use super::files::{blocking, fsync_dir, io_err, is_real_dir};
use super::{StoreError, TransferLimits};

const WRITE_BUFFER: usize = 256 * 1024;

/// A temporary upload file, removed when dropped unless it was installed — including when
/// the upload's future is dropped because the client went away.
pub(super) struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl TempFile {
    /// Creates `path` (and its bundle directory `dir` under `root` if needed).
    pub(super) async fn create(
        root: &Path,
        dir: &Path,
        path: PathBuf,
    ) -> Result<(Self, fs::File), StoreError> {
        let (root, dir, temp_path) = (root.to_owned(), dir.to_owned(), path.clone());
        let file = blocking(move || {
            match fs::create_dir(&dir) {
                Ok(()) => fsync_dir(&root)?,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if !is_real_dir(&dir)? {
                        return Err(StoreError::NotADirectory(dir));
                    }
                }
                Err(e) => return Err(io_err(&dir)(e)),
            }
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&temp_path)
                .map_err(io_err(&temp_path))
        })
        .await?;
        Ok((Self { path, armed: true }, file))
    }

    /// Writes `body` to `file` (this temporary file), hashing it on the way, and makes it
    /// durable; fails if it is over `limit` bytes, stalls or trickles (`transfer`), or its
    /// sha256 is not `digest`. Returns the size. Hashing a chunk as it arrives is cheap enough
    /// for the async side.
    pub(super) async fn write_verified<S, E>(
        &self,
        file: fs::File,
        mut body: S,
        limit: u64,
        digest: &Digest,
        transfer: TransferLimits,
    ) -> Result<u64, StoreError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let path = &self.path;
        let mut writer = BufWriter::with_capacity(WRITE_BUFFER, tokio::fs::File::from_std(file));
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let start = tokio::time::Instant::now();
        loop {
            // A stalled or trickling upload would otherwise hold the bundle's lock (and block
            // its deletion) for as long as the client keeps the connection open.
            let idle = tokio::time::Instant::now() + transfer.idle_timeout;
            let rate = transfer.deadline(start, size);
            let next = tokio::time::timeout_at(idle.min(rate), body.next())
                .await
                .map_err(|_| {
                    StoreError::Timeout(if idle <= rate {
                        format!("no data for {} seconds", transfer.idle_timeout.as_secs())
                    } else {
                        format!(
                            "{size} bytes in {} seconds, slower than the minimum of {} bytes a second",
                            start.elapsed().as_secs(),
                            transfer.min_rate
                        )
                    })
                })?;
            let Some(chunk) = next else {
                break;
            };
            let chunk = chunk.map_err(|e| StoreError::Body(e.to_string()))?;
            size += chunk.len() as u64;
            if size > limit {
                return Err(StoreError::TooLarge { limit });
            }
            hasher.update(&chunk);
            writer.write_all(&chunk).await.map_err(io_err(path))?;
        }
        writer.flush().await.map_err(io_err(path))?;
        let file = writer.into_inner();
        file.sync_all().await.map_err(io_err(path))?;
        drop(file);

        let actual = hex::encode(hasher.finalize());
        if actual != digest.as_str() {
            return Err(StoreError::DigestMismatch {
                expected: digest.to_string(),
                actual,
            });
        }
        Ok(size)
    }

    /// Renames the file to `final_path` in `dir`, or drops it when that name is already
    /// taken (content addressing makes the upload redundant). Returns whether it was installed.
    pub(super) async fn install(
        mut self,
        dir: &Path,
        final_path: PathBuf,
    ) -> Result<bool, StoreError> {
        let (dir, temp_path) = (dir.to_owned(), self.path.clone());
        let created = blocking(move || {
            if fs::symlink_metadata(&final_path).is_ok() {
                fs::remove_file(&temp_path).map_err(io_err(&temp_path))?;
                return Ok(false);
            }
            fs::rename(&temp_path, &final_path).map_err(io_err(&final_path))?;
            fsync_dir(&dir)?;
            Ok(true)
        })
        .await?;
        self.armed = false;
        Ok(created)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed
            && let Err(e) = fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), error = %e, "removing temporary file");
        }
    }
}
