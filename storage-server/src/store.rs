//! The on-disk store: `{root}/{bundle}/{sha256-hex}.tar.gz`.
//!
//! Writes go to a temporary file in the bundle's directory, are hashed while
//! streaming, fsynced and renamed into place, and the directory is fsynced, so
//! a crash never leaves a partial tarball under its final name. Names starting
//! with a dot never collide with bundles or tarballs (valid names cannot start
//! with one), so temporary files, deleted bundles and quarantined files live
//! beside them.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use gantry_api::storage::{BundleName, Digest, StoredTarball};
use prometheus_client::metrics::gauge::Gauge;
use sha2::{Digest as _, Sha256};
use thiserror::Error;
use tokio::io::{AsyncWriteExt, BufWriter};

/// Prefix of temporary upload files inside a bundle directory.
pub const TEMP_PREFIX: &str = ".tmp-";
/// Prefix of bundle directories being deleted, at the root.
pub const TRASH_PREFIX: &str = ".trash-";
/// Directory at the root where corrupt tarballs are moved.
pub const QUARANTINE_DIR: &str = ".quarantine";

/// Tarballs up to this size are read whole, and are what the memory cache keeps.
pub const SMALL_TARBALL: u64 = 64 * 1024;

/// An upload that sends nothing for this long is aborted.
pub const BODY_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

const WRITE_BUFFER: usize = 256 * 1024;
const HASH_BUFFER: usize = 256 * 1024;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("request body has sha256 {actual}, but its name says {expected}")]
    DigestMismatch { expected: String, actual: String },
    #[error("reading the request body: {0}")]
    Body(String),
    #[error("tarball {bundle}/{digest}.tar.gz not found")]
    TarballNotFound { bundle: String, digest: String },
    #[error("bundle {0} not found")]
    BundleNotFound(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("background task failed: {0}")]
    Task(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Runs blocking file system work off the async worker threads.
async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

fn fsync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Opens a file without following a symlink in its last component.
fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Whether `path` is a real directory (not a symlink to one).
fn is_real_dir(path: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(m.file_type().is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Hashes a file with sha256.
pub fn hash_file(file: &mut File) -> io::Result<(String, u64)> {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutOutcome {
    /// False when the tarball was already stored (the upload was verified and dropped).
    pub created: bool,
    pub size: u64,
}

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

#[derive(Default)]
struct BundleLock {
    /// Held shared by uploads and single deletions, exclusively by bundle deletion.
    rw: tokio::sync::RwLock<()>,
    /// Serialises the final step of uploads and deletions, which keeps the
    /// stored-bytes gauges exact when the same digest is uploaded concurrently.
    commit: tokio::sync::Mutex<()>,
}

/// A bundle's lock, dropped from the table once nobody holds it.
struct LockRef<'a> {
    store: &'a Store,
    bundle: BundleName,
    lock: Arc<BundleLock>,
}

impl Drop for LockRef<'_> {
    fn drop(&mut self) {
        let mut locks = self.store.locks.lock().unwrap_or_else(|p| p.into_inner());
        // One reference in the table, one here: nobody else uses it.
        if Arc::strong_count(&self.lock) == 2 {
            locks.remove(&self.bundle);
        }
    }
}

/// Removes a temporary file unless it was renamed into place, including when
/// the upload's future is dropped because the client went away.
struct TempFile {
    path: PathBuf,
    armed: bool,
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

/// Small tarballs kept in memory. Stored content never changes under its name, so the
/// only invalidation needed is deletion; `generation` makes a read that raced with a
/// deletion drop its result instead of caching it.
#[derive(Default)]
struct Cache {
    entries: HashMap<String, Bytes>,
    /// Insertion order, for first-in first-out eviction.
    order: std::collections::VecDeque<String>,
    bytes: u64,
    generation: u64,
}

fn cache_key(bundle: &BundleName, digest: &Digest) -> String {
    format!("{bundle}/{digest}")
}

pub struct Store {
    root: PathBuf,
    cache: Mutex<Cache>,
    cache_budget: u64,
    cache_entry_max: u64,
    locks: Mutex<HashMap<BundleName, Arc<BundleLock>>>,
    temp_counter: AtomicU64,
    stored_bytes: Gauge,
    stored_tarballs: Gauge,
}

impl Store {
    /// Opens (and creates if missing) the store at `root`, without a memory cache.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        Self::open_with_cache(root, 0, 0)
    }

    /// Opens the store and keeps up to `budget` bytes of tarballs no larger than
    /// `entry_max` in memory.
    pub fn open_with_cache(root: &Path, budget: u64, entry_max: u64) -> Result<Self, StoreError> {
        fs::create_dir_all(root).map_err(io_err(root))?;
        let root = root.canonicalize().map_err(io_err(root))?;
        if !root.is_dir() {
            return Err(StoreError::NotADirectory(root));
        }
        Ok(Self {
            root,
            cache: Mutex::default(),
            cache_budget: budget,
            cache_entry_max: entry_max.min(budget),
            locks: Mutex::default(),
            temp_counter: AtomicU64::new(0),
            stored_bytes: Gauge::default(),
            stored_tarballs: Gauge::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Total size of the stored tarballs.
    pub fn stored_bytes_gauge(&self) -> Gauge {
        self.stored_bytes.clone()
    }

    /// Number of stored tarballs.
    pub fn stored_tarballs_gauge(&self) -> Gauge {
        self.stored_tarballs.clone()
    }

    /// Largest tarball the memory cache keeps (0: no cache).
    pub fn cache_entry_max(&self) -> u64 {
        self.cache_entry_max
    }

    /// A cached tarball's content.
    pub fn cached(&self, bundle: &BundleName, digest: &Digest) -> Option<Bytes> {
        if self.cache_entry_max == 0 {
            return None;
        }
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.entries.get(&cache_key(bundle, digest)).cloned()
    }

    /// Read before opening a file whose content may go to [`Store::cache_insert`].
    pub fn cache_generation(&self) -> u64 {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .generation
    }

    /// Caches a tarball's full content, read after `generation` was taken; a
    /// deletion since then means the content may be gone, so it is dropped.
    pub fn cache_insert(&self, bundle: &BundleName, digest: &Digest, data: Bytes, generation: u64) {
        let len = data.len() as u64;
        if len > self.cache_entry_max {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let key = cache_key(bundle, digest);
        if cache.generation != generation || cache.entries.contains_key(&key) {
            return;
        }
        while cache.bytes + len > self.cache_budget {
            let Some(old) = cache.order.pop_front() else {
                break;
            };
            if let Some(evicted) = cache.entries.remove(&old) {
                cache.bytes -= evicted.len() as u64;
            }
        }
        cache.bytes += len;
        cache.order.push_back(key.clone());
        cache.entries.insert(key, data);
    }

    /// Drops cached entries whose key starts with `prefix`; called after the files are gone.
    fn cache_invalidate(&self, prefix: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.generation += 1;
        let Cache {
            entries,
            order,
            bytes,
            ..
        } = &mut *cache;
        entries.retain(|k, v| {
            let keep = !k.starts_with(prefix);
            if !keep {
                *bytes -= v.len() as u64;
            }
            keep
        });
        order.retain(|k| entries.contains_key(k));
    }

    fn bundle_dir(&self, bundle: &BundleName) -> PathBuf {
        self.root.join(bundle.as_str())
    }

    fn tarball_path(&self, bundle: &BundleName, digest: &Digest) -> PathBuf {
        self.bundle_dir(bundle).join(digest.file_name())
    }

    fn unique_suffix(&self) -> String {
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        format!("{}-{n}-{nanos}", std::process::id())
    }

    fn lock(&self, bundle: &BundleName) -> LockRef<'_> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        let lock = locks.entry(bundle.clone()).or_default().clone();
        LockRef {
            store: self,
            bundle: bundle.clone(),
            lock,
        }
    }

    fn add_stored(&self, count: i64, bytes: u64) {
        self.stored_tarballs.inc_by(count);
        self.stored_bytes
            .inc_by(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Stores a tarball from a stream, verifying that its sha256 is `digest`.
    pub async fn put<S, E>(
        &self,
        bundle: &BundleName,
        digest: &Digest,
        mut body: S,
        limit: u64,
    ) -> Result<PutOutcome, StoreError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let lock = self.lock(bundle);
        let _shared = lock.lock.rw.read().await;

        let dir = self.bundle_dir(bundle);
        let root = self.root.clone();
        let temp_path = dir.join(format!("{TEMP_PREFIX}{digest}-{}", self.unique_suffix()));
        let file = {
            let (dir, temp_path) = (dir.clone(), temp_path.clone());
            blocking(move || {
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
            .await?
        };
        let mut temp = TempFile {
            path: temp_path.clone(),
            armed: true,
        };

        let mut writer = BufWriter::with_capacity(WRITE_BUFFER, tokio::fs::File::from_std(file));
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        loop {
            // A stalled upload would otherwise hold the bundle's lock (and block its
            // deletion) for as long as the client keeps the connection open.
            let next = tokio::time::timeout(BODY_IDLE_TIMEOUT, body.next())
                .await
                .map_err(|_| {
                    StoreError::Body(format!(
                        "no data for {} seconds",
                        BODY_IDLE_TIMEOUT.as_secs()
                    ))
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
            writer.write_all(&chunk).await.map_err(io_err(&temp_path))?;
        }
        writer.flush().await.map_err(io_err(&temp_path))?;
        let file = writer.into_inner();
        file.sync_all().await.map_err(io_err(&temp_path))?;
        drop(file);

        let actual = hex::encode(hasher.finalize());
        if actual != digest.as_str() {
            return Err(StoreError::DigestMismatch {
                expected: digest.to_string(),
                actual,
            });
        }

        let _commit = lock.lock.commit.lock().await;
        let final_path = self.tarball_path(bundle, digest);
        let created = blocking(move || {
            if fs::symlink_metadata(&final_path).is_ok() {
                // Already stored: content addressing makes this upload redundant.
                fs::remove_file(&temp_path).map_err(io_err(&temp_path))?;
                return Ok(false);
            }
            fs::rename(&temp_path, &final_path).map_err(io_err(&final_path))?;
            fsync_dir(&dir)?;
            Ok(true)
        })
        .await?;
        temp.armed = false;
        if created {
            self.add_stored(1, size);
        }
        Ok(PutOutcome { created, size })
    }

    /// Opens a stored tarball for reading; returns the file and its size.
    /// Blocking: call it from a blocking thread.
    pub fn open_tarball(
        &self,
        bundle: &BundleName,
        digest: &Digest,
    ) -> Result<(File, u64), StoreError> {
        let not_found = || StoreError::TarballNotFound {
            bundle: bundle.to_string(),
            digest: digest.to_string(),
        };
        // Neither the bundle directory nor the file may be a symlink.
        if !is_real_dir(&self.bundle_dir(bundle))? {
            return Err(not_found());
        }
        let path = self.tarball_path(bundle, digest);
        let file = match open_nofollow(&path) {
            Ok(f) => f,
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ELOOP) =>
            {
                return Err(not_found());
            }
            Err(e) => return Err(io_err(&path)(e)),
        };
        let meta = file.metadata().map_err(io_err(&path))?;
        if !meta.is_file() {
            return Err(not_found());
        }
        Ok((file, meta.len()))
    }

    /// Lists the tarballs of a bundle, sorted by digest; empty when nothing is stored.
    /// Blocking: call it from a blocking thread.
    pub fn list(&self, bundle: &BundleName) -> Result<Vec<StoredTarball>, StoreError> {
        let dir = self.bundle_dir(bundle);
        if !is_real_dir(&dir)? {
            return Ok(Vec::new());
        }
        list_dir(&dir)
    }

    /// Deletes one tarball.
    pub async fn delete_tarball(
        &self,
        bundle: &BundleName,
        digest: &Digest,
    ) -> Result<(), StoreError> {
        let lock = self.lock(bundle);
        let _shared = lock.lock.rw.read().await;
        let _commit = lock.lock.commit.lock().await;
        let dir = self.bundle_dir(bundle);
        let path = self.tarball_path(bundle, digest);
        let (b, d) = (bundle.to_string(), digest.to_string());
        let size = blocking(move || {
            let meta = match is_real_dir(&dir)? {
                true => fs::symlink_metadata(&path).ok(),
                false => None,
            };
            let Some(meta) = meta.filter(|m| m.file_type().is_file()) else {
                return Err(StoreError::TarballNotFound {
                    bundle: b,
                    digest: d,
                });
            };
            fs::remove_file(&path).map_err(io_err(&path))?;
            fsync_dir(&dir)?;
            Ok(meta.len())
        })
        .await?;
        self.cache_invalidate(&cache_key(bundle, digest));
        self.add_stored(-1, 0);
        self.stored_bytes
            .dec_by(i64::try_from(size).unwrap_or(i64::MAX));
        Ok(())
    }

    /// Deletes a bundle with all its tarballs; returns how many tarballs were removed.
    pub async fn delete_bundle(&self, bundle: &BundleName) -> Result<usize, StoreError> {
        let lock = self.lock(bundle);
        let _exclusive = lock.lock.rw.write().await;
        let dir = self.bundle_dir(bundle);
        let root = self.root.clone();
        let trash = self
            .root
            .join(format!("{TRASH_PREFIX}{bundle}-{}", self.unique_suffix()));
        let name = bundle.to_string();
        let removed = blocking(move || {
            if !is_real_dir(&dir)? {
                return Err(StoreError::BundleNotFound(name));
            }
            let tarballs = list_dir(&dir)?;
            // A rename makes the deletion atomic for readers; if the process
            // dies while removing the files, the start-up check finishes it.
            fs::rename(&dir, &trash).map_err(io_err(&dir))?;
            fsync_dir(&root)?;
            fs::remove_dir_all(&trash).map_err(io_err(&trash))?;
            Ok(tarballs)
        })
        .await?;
        self.cache_invalidate(&format!("{bundle}/"));
        let bytes: u64 = removed.iter().map(|t| t.size).sum();
        self.stored_tarballs
            .dec_by(i64::try_from(removed.len()).unwrap_or(i64::MAX));
        self.stored_bytes
            .dec_by(i64::try_from(bytes).unwrap_or(i64::MAX));
        Ok(removed.len())
    }

    /// Start-up check: removes leftovers of interrupted uploads and deletions,
    /// verifies every stored tarball against its name and moves corrupt ones
    /// to `.quarantine/`. Blocking: call it from a blocking thread.
    pub fn recover(&self) -> Result<RecoveryReport, StoreError> {
        let mut report = RecoveryReport::default();
        let root = &self.root;
        for entry in fs::read_dir(root).map_err(io_err(root))? {
            let entry = entry.map_err(io_err(root))?;
            let path = entry.path();
            let file_type = entry.file_type().map_err(io_err(&path))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
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
            self.recover_bundle(&bundle, &path, &mut report)?;
        }
        self.stored_tarballs
            .set(i64::try_from(report.verified).unwrap_or(i64::MAX));
        self.stored_bytes
            .set(i64::try_from(report.stored_bytes).unwrap_or(i64::MAX));
        Ok(report)
    }

    fn recover_bundle(
        &self,
        bundle: &BundleName,
        dir: &Path,
        report: &mut RecoveryReport,
    ) -> Result<(), StoreError> {
        let mut removed = false;
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let path = entry.path();
            let file_type = entry.file_type().map_err(io_err(&path))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
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
            let qdir = self.root.join(QUARANTINE_DIR).join(bundle.as_str());
            fs::create_dir_all(&qdir).map_err(io_err(&qdir))?;
            let secs = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            let target = qdir.join(format!("{}.{secs}", digest.file_name()));
            fs::rename(&path, &target).map_err(io_err(&path))?;
            fsync_dir(&qdir)?;
            removed = true;
            report.quarantined.push((path, target));
        }
        if removed {
            fsync_dir(dir)?;
        }
        Ok(())
    }
}

fn list_dir(dir: &Path) -> Result<Vec<StoredTarball>, StoreError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let path = entry.path();
        // DirEntry::file_type does not follow symlinks.
        if !entry.file_type().map_err(io_err(&path))?.is_file() {
            continue;
        }
        let name = entry.file_name();
        let Ok(digest) = Digest::from_file_name(&name.to_string_lossy()) else {
            continue;
        };
        let size = entry.metadata().map_err(io_err(&path))?.len();
        out.push(StoredTarball {
            digest: digest.to_string(),
            size,
        });
    }
    out.sort_by(|a, b| a.digest.cmp(&b.digest));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(data: &[u8]) -> Digest {
        Digest::parse(&hex::encode(Sha256::digest(data))).unwrap()
    }

    fn body(data: &'static [u8]) -> impl Stream<Item = Result<Bytes, io::Error>> + Unpin {
        futures::stream::iter(data.chunks(3).map(|c| Ok(Bytes::from_static(c))))
    }

    #[test]
    fn recover_cleans_up_and_quarantines() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let good = digest_of(b"good");
        let bad = digest_of(b"bad");
        fs::create_dir_all(root.join("demo")).unwrap();
        fs::write(root.join("demo").join(good.file_name()), b"good").unwrap();
        fs::write(root.join("demo").join(bad.file_name()), b"not bad").unwrap();
        fs::write(
            root.join("demo").join(format!("{TEMP_PREFIX}{good}-1")),
            b"go",
        )
        .unwrap();
        fs::write(root.join("demo").join("notes.txt"), b"?").unwrap();
        fs::create_dir_all(root.join(format!("{TRASH_PREFIX}old-1"))).unwrap();
        fs::write(root.join(format!("{TRASH_PREFIX}old-1")).join("x"), b"x").unwrap();
        fs::create_dir_all(root.join("lost+found")).unwrap();
        fs::create_dir_all(root.join("Not_A_Bundle")).unwrap();

        let store = Store::open(root).unwrap();
        let report = store.recover().unwrap();
        assert_eq!(report.verified, 1);
        assert_eq!(report.stored_bytes, 4);
        assert_eq!(report.removed_temp.len(), 1);
        assert_eq!(report.removed_trash.len(), 1);
        assert_eq!(report.quarantined.len(), 1);
        let (from, to) = &report.quarantined[0];
        assert_eq!(from, &store.root().join("demo").join(bad.file_name()));
        assert!(to.starts_with(store.root().join(QUARANTINE_DIR).join("demo")));
        assert_eq!(fs::read(to).unwrap(), b"not bad");
        let mut ignored: Vec<_> = report
            .ignored
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        ignored.sort();
        assert_eq!(ignored, vec!["Not_A_Bundle", "notes.txt"]);
        assert_eq!(store.stored_tarballs_gauge().get(), 1);
        assert_eq!(store.stored_bytes_gauge().get(), 4);
        let b = BundleName::parse("demo").unwrap();
        assert_eq!(
            store.list(&b).unwrap(),
            vec![StoredTarball {
                digest: good.to_string(),
                size: 4
            }]
        );
        // A second start finds nothing left to repair.
        let again = store.recover().unwrap();
        assert!(again.removed_temp.is_empty() && again.quarantined.is_empty());
    }

    #[tokio::test]
    async fn cache_is_bounded_and_invalidated_by_deletion() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with_cache(dir.path(), 10, 6).unwrap();
        let b = BundleName::parse("demo").unwrap();
        let (d1, d2, d3) = (
            digest_of(b"one"),
            digest_of(b"hello world"),
            digest_of(b"abcdef"),
        );
        let g = store.cache_generation();
        store.cache_insert(&b, &d1, Bytes::from_static(b"one"), g);
        // Over the per-entry limit: not cached.
        store.cache_insert(&b, &d2, Bytes::from_static(b"hello world"), g);
        assert_eq!(store.cached(&b, &d1).as_deref(), Some(&b"one"[..]));
        assert_eq!(store.cached(&b, &d2), None);
        // 3 + 6 bytes fit in 10; a second 6-byte entry evicts the oldest.
        store.cache_insert(&b, &d3, Bytes::from_static(b"abcdef"), g);
        assert!(store.cached(&b, &d1).is_some() && store.cached(&b, &d3).is_some());
        let other = BundleName::parse("other").unwrap();
        store.cache_insert(&other, &d3, Bytes::from_static(b"abcdef"), g);
        assert_eq!(store.cached(&b, &d1), None);
        assert!(store.cache.lock().unwrap().bytes <= 10);

        // A deletion drops the entries and any read that started before it.
        store.put(&b, &d3, body(b"abcdef"), 100).await.unwrap();
        let before = store.cache_generation();
        store.delete_tarball(&b, &d3).await.unwrap();
        assert_eq!(store.cached(&b, &d3), None);
        store.cache_insert(&b, &d3, Bytes::from_static(b"abcdef"), before);
        assert_eq!(store.cached(&b, &d3), None, "a stale read was cached");
        assert!(store.cached(&other, &d3).is_some());
        store.put(&other, &d3, body(b"abcdef"), 100).await.unwrap();
        store.delete_bundle(&other).await.unwrap();
        assert_eq!(store.cached(&other, &d3), None);
    }

    #[tokio::test(start_paused = true)]
    async fn stalled_upload_is_aborted_and_cleaned_up() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let b = BundleName::parse("demo").unwrap();
        let d = digest_of(b"never sent");
        let stalled = futures::stream::iter([Ok::<_, io::Error>(Bytes::from_static(b"x"))])
            .chain(futures::stream::pending());
        let err = store.put(&b, &d, Box::pin(stalled), 100).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Body(m) if m.contains("no data for 60 seconds")),
            "{err}"
        );
        assert_eq!(fs::read_dir(dir.path().join("demo")).unwrap().count(), 0);
        // The lock was released: the bundle can be deleted.
        assert_eq!(store.delete_bundle(&b).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn put_list_delete_and_gauges() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let b = BundleName::parse("demo").unwrap();
        let d = digest_of(b"hello world");
        let out = store.put(&b, &d, body(b"hello world"), 100).await.unwrap();
        assert_eq!(
            out,
            PutOutcome {
                created: true,
                size: 11
            }
        );
        let again = store.put(&b, &d, body(b"hello world"), 100).await.unwrap();
        assert!(!again.created);
        assert_eq!(store.stored_tarballs_gauge().get(), 1);
        assert_eq!(store.stored_bytes_gauge().get(), 11);
        assert_eq!(
            store.list(&b).unwrap(),
            vec![StoredTarball {
                digest: d.to_string(),
                size: 11
            }]
        );
        let err = store
            .put(&b, &d, body(b"hello world"), 5)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::TooLarge { limit: 5 }), "{err}");
        let names: Vec<_> = fs::read_dir(dir.path().join("demo"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(d.file_name())]);
        store.delete_tarball(&b, &d).await.unwrap();
        assert_eq!(store.stored_tarballs_gauge().get(), 0);
        assert_eq!(store.stored_bytes_gauge().get(), 0);
        assert!(matches!(
            store.delete_tarball(&b, &d).await,
            Err(StoreError::TarballNotFound { .. })
        ));
        assert_eq!(store.delete_bundle(&b).await.unwrap(), 0);
        assert!(!dir.path().join("demo").exists());
        assert!(store.locks.lock().unwrap().is_empty());
    }
}
