//! The on-disk store: `{root}/{bundle}/{sha256-hex}.tar.gz`.
//!
//! Names starting with a dot never collide with bundles or tarballs (valid names cannot start
//! with one), so temporary files, deleted bundles and quarantined files live beside them.
//! The parts, by job:
//! - [`atomic`]: an upload goes to a temporary file, is hashed while streaming, fsynced,
//!   checked and renamed into place, so a crash never leaves a partial tarball visible;
//! - [`cache`]: small tarballs kept in memory;
//! - [`recovery`]: the start-up check (leftovers removed, every tarball verified);
//! - [`locks`]: per-bundle locks between uploads and deletions;
//! - [`files`]: the file system steps the others share.
//!
//! Every method of [`Store`] that touches the disk or hashes a whole file does so on a
//! blocking thread, so none of them can stall the async runtime.

mod atomic;
mod cache;
mod files;
mod locks;
mod recovery;

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::Stream;
use gantry_api::storage::{BundleName, Digest, StoredTarball};
use prometheus_client::metrics::gauge::Gauge;
use thiserror::Error;

use atomic::TempFile;
use cache::Cache;
use files::{blocking, fsync_dir, io_err, is_real_dir, list_dir, open_nofollow};
use locks::Locks;
pub use recovery::RecoveryReport;

/// Prefix of temporary upload files inside a bundle directory.
pub const TEMP_PREFIX: &str = ".tmp-";
/// Prefix of bundle directories being deleted, at the root.
pub const TRASH_PREFIX: &str = ".trash-";
/// Directory at the root where corrupt tarballs are moved.
pub const QUARANTINE_DIR: &str = ".quarantine";

/// Tarballs up to this size are read whole, and are what the memory cache keeps.
pub const SMALL_TARBALL: u64 = 64 * 1024;

/// How slow a transfer may be before it is cut off, so that a client sending or reading one
/// byte at a time cannot hold a connection, a file and a bundle's lock forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferLimits {
    /// A transfer that moves no byte for this long is cut off.
    pub idle_timeout: Duration,
    /// Bytes per second a transfer must average: one of `n` bytes must be done within
    /// `idle_timeout + n / min_rate` of its start (as Apache's mod_reqtimeout `MinRate`).
    /// 0 disables the check.
    pub min_rate: u64,
}

impl TransferLimits {
    /// The defaults of the server's flags.
    pub const DEFAULT: TransferLimits = TransferLimits {
        idle_timeout: Duration::from_secs(60),
        min_rate: 16 * 1024,
    };

    /// The time by which a transfer that started at `start` must have moved `bytes`.
    pub fn deadline(&self, start: tokio::time::Instant, bytes: u64) -> tokio::time::Instant {
        let allowed = match self.min_rate {
            0 => Duration::from_secs(100 * 365 * 24 * 3600),
            rate => Duration::from_secs_f64(bytes as f64 / rate as f64),
        };
        start + self.idle_timeout + allowed
    }
}

impl Default for TransferLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("request body has sha256 {actual}, but its name says {expected}")]
    DigestMismatch { expected: String, actual: String },
    #[error("reading the request body: {0}")]
    Body(String),
    /// The client sent its upload too slowly (or not at all).
    #[error("upload cut off: {0}")]
    Timeout(String),
    /// The volume has no space (or quota) left; nothing of the upload is kept.
    #[error("{path}: the storage volume is full: {source}")]
    NoSpace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutOutcome {
    /// False when the tarball was already stored (the upload was verified and dropped).
    pub created: bool,
    pub size: u64,
}

/// A stored tarball opened for a GET or HEAD.
pub enum Content {
    /// Small enough to be held in memory whole (and perhaps cached).
    Whole(Bytes),
    /// To be streamed from the file.
    File { file: File, size: u64 },
}

impl Content {
    pub fn size(&self) -> u64 {
        match self {
            Self::Whole(b) => b.len() as u64,
            Self::File { size, .. } => *size,
        }
    }
}

pub struct Store {
    root: PathBuf,
    transfer: TransferLimits,
    cache: Cache,
    locks: Locks,
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
            transfer: TransferLimits::DEFAULT,
            cache: Cache::new(budget, entry_max),
            locks: Locks::default(),
            temp_counter: AtomicU64::new(0),
            stored_bytes: Gauge::default(),
            stored_tarballs: Gauge::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Sets how slow an upload may be.
    pub fn with_transfer_limits(mut self, transfer: TransferLimits) -> Self {
        self.transfer = transfer;
        self
    }

    /// Total size of the stored tarballs.
    pub fn stored_bytes_gauge(&self) -> Gauge {
        self.stored_bytes.clone()
    }

    /// Number of stored tarballs.
    pub fn stored_tarballs_gauge(&self) -> Gauge {
        self.stored_tarballs.clone()
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

    fn add_stored(&self, count: i64, bytes: u64) {
        self.stored_tarballs.inc_by(count);
        self.stored_bytes
            .inc_by(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    fn remove_stored(&self, count: usize, bytes: u64) {
        self.stored_tarballs
            .dec_by(i64::try_from(count).unwrap_or(i64::MAX));
        self.stored_bytes
            .dec_by(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Stores a tarball from a stream, verifying that its sha256 is `digest`.
    pub async fn put<S, E>(
        &self,
        bundle: &BundleName,
        digest: &Digest,
        body: S,
        limit: u64,
    ) -> Result<PutOutcome, StoreError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let lock = self.locks.lock(bundle);
        let _shared = lock.lock.rw.read().await;

        let dir = self.bundle_dir(bundle);
        let temp_path = dir.join(format!("{TEMP_PREFIX}{digest}-{}", self.unique_suffix()));
        let (temp, file) = TempFile::create(&self.root, &dir, temp_path).await?;
        let size = temp
            .write_verified(file, body, limit, digest, self.transfer)
            .await?;

        let _commit = lock.lock.commit.lock().await;
        let created = temp
            .install(&dir, self.tarball_path(bundle, digest))
            .await?;
        if created {
            self.add_stored(1, size);
        }
        Ok(PutOutcome { created, size })
    }

    /// Opens a stored tarball for reading: small ones whole (from or into the cache), larger
    /// ones as a file to stream.
    /// The content of a tarball if the memory cache holds it; no disk access.
    pub fn cached_content(&self, bundle: &BundleName, digest: &Digest) -> Option<Content> {
        self.cache
            .get(&cache::key(bundle, digest))
            .map(Content::Whole)
    }

    pub async fn open_content(
        &self,
        bundle: &BundleName,
        digest: &Digest,
    ) -> Result<Content, StoreError> {
        let key = cache::key(bundle, digest);
        if let Some(data) = self.cache.get(&key) {
            return Ok(Content::Whole(data));
        }
        let generation = self.cache.generation();
        let (dir, path) = (self.bundle_dir(bundle), self.tarball_path(bundle, digest));
        let not_found = StoreError::TarballNotFound {
            bundle: bundle.to_string(),
            digest: digest.to_string(),
        };
        let content = blocking(move || read_content(&dir, &path, not_found)).await?;
        if let Content::Whole(data) = &content {
            self.cache.insert(key, data.clone(), generation);
        }
        Ok(content)
    }

    /// Lists the tarballs of a bundle, sorted by digest; empty when nothing is stored.
    pub async fn list(&self, bundle: &BundleName) -> Result<Vec<StoredTarball>, StoreError> {
        let dir = self.bundle_dir(bundle);
        blocking(move || {
            if !is_real_dir(&dir)? {
                return Ok(Vec::new());
            }
            list_dir(&dir)
        })
        .await
    }

    /// Deletes one tarball.
    pub async fn delete_tarball(
        &self,
        bundle: &BundleName,
        digest: &Digest,
    ) -> Result<(), StoreError> {
        let lock = self.locks.lock(bundle);
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
        self.cache.invalidate(&cache::key(bundle, digest));
        self.remove_stored(1, size);
        Ok(())
    }

    /// Deletes a bundle with all its tarballs; returns how many tarballs were removed.
    pub async fn delete_bundle(&self, bundle: &BundleName) -> Result<usize, StoreError> {
        let lock = self.locks.lock(bundle);
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
        self.cache.invalidate(&cache::bundle_prefix(bundle));
        self.remove_stored(removed.len(), removed.iter().map(|t| t.size).sum());
        Ok(removed.len())
    }

    /// Start-up check: removes leftovers of interrupted uploads and deletions, verifies every
    /// stored tarball against its name (on a blocking thread: it hashes every file) and moves
    /// corrupt ones to `.quarantine/`; then sets the stored-tarball gauges.
    pub async fn recover(&self) -> Result<RecoveryReport, StoreError> {
        let root = self.root.clone();
        let report = blocking(move || recovery::recover(&root)).await?;
        self.stored_tarballs
            .set(i64::try_from(report.verified).unwrap_or(i64::MAX));
        self.stored_bytes
            .set(i64::try_from(report.stored_bytes).unwrap_or(i64::MAX));
        Ok(report)
    }
}

/// Opens the tarball at `path` in bundle directory `dir`, neither of which may be a symlink,
/// and reads it whole if it is small. Blocking.
fn read_content(dir: &Path, path: &Path, not_found: StoreError) -> Result<Content, StoreError> {
    if !is_real_dir(dir)? {
        return Err(not_found);
    }
    let mut file = match open_nofollow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(not_found);
        }
        Err(e) => return Err(io_err(path)(e)),
    };
    let meta = file.metadata().map_err(io_err(path))?;
    if !meta.is_file() {
        return Err(not_found);
    }
    let size = meta.len();
    if size > SMALL_TARBALL {
        return Ok(Content::File { file, size });
    }
    let mut data = Vec::with_capacity(size as usize);
    // Named relative to the root, as a client would name it.
    let shown =
        Path::new(dir.file_name().unwrap_or_default()).join(path.file_name().unwrap_or_default());
    file.read_to_end(&mut data).map_err(io_err(&shown))?;
    Ok(Content::Whole(data.into()))
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use sha2::{Digest as _, Sha256};

    use super::*;

    fn digest_of(data: &[u8]) -> Digest {
        Digest::parse(&hex::encode(Sha256::digest(data))).unwrap()
    }

    fn body(data: &'static [u8]) -> impl Stream<Item = Result<Bytes, io::Error>> + Unpin {
        futures::stream::iter(data.chunks(3).map(|c| Ok(Bytes::from_static(c))))
    }

    #[tokio::test]
    async fn recover_cleans_up_and_quarantines() {
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
        let report = store.recover().await.unwrap();
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
            store.list(&b).await.unwrap(),
            vec![StoredTarball {
                digest: good.to_string(),
                size: 4
            }]
        );
        // A second start finds nothing left to repair.
        let again = store.recover().await.unwrap();
        assert!(again.removed_temp.is_empty() && again.quarantined.is_empty());
    }

    #[tokio::test]
    async fn small_tarballs_are_cached_until_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with_cache(dir.path(), 10, 6).unwrap();
        let (b, other) = (
            BundleName::parse("demo").unwrap(),
            BundleName::parse("other").unwrap(),
        );
        let d = digest_of(b"abcdef");
        store.put(&b, &d, body(b"abcdef"), 100).await.unwrap();
        store.put(&other, &d, body(b"abcdef"), 100).await.unwrap();
        for bundle in [&b, &other] {
            let content = store.open_content(bundle, &d).await.unwrap();
            assert!(matches!(content, Content::Whole(ref data) if data == &b"abcdef"[..]));
            assert!(store.cache.get(&cache::key(bundle, &d)).is_some());
        }

        // A deletion drops the entries, and the content is gone.
        store.delete_tarball(&b, &d).await.unwrap();
        assert_eq!(store.cache.get(&cache::key(&b, &d)), None);
        assert!(matches!(
            store.open_content(&b, &d).await,
            Err(StoreError::TarballNotFound { .. })
        ));
        assert!(store.cache.get(&cache::key(&other, &d)).is_some());
        store.delete_bundle(&other).await.unwrap();
        assert_eq!(store.cache.get(&cache::key(&other, &d)), None);
        assert!(store.open_content(&other, &d).await.is_err());
    }

    #[tokio::test]
    async fn large_tarballs_are_streamed_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_with_cache(dir.path(), 1 << 20, SMALL_TARBALL).unwrap();
        let b = BundleName::parse("demo").unwrap();
        let data: &'static [u8] =
            Box::leak(vec![7u8; SMALL_TARBALL as usize + 1].into_boxed_slice());
        let d = digest_of(data);
        store.put(&b, &d, body(data), u64::MAX).await.unwrap();
        let content = store.open_content(&b, &d).await.unwrap();
        assert_eq!(content.size(), SMALL_TARBALL + 1);
        assert!(matches!(content, Content::File { .. }));
        assert_eq!(store.cache.get(&cache::key(&b, &d)), None);
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
            matches!(&err, StoreError::Timeout(m) if m.contains("no data for 60 seconds")),
            "{err}"
        );
        assert_eq!(fs::read_dir(dir.path().join("demo")).unwrap().count(), 0);
        // The lock was released: the bundle can be deleted.
        assert_eq!(store.delete_bundle(&b).await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_upload_slower_than_the_minimum_rate_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path())
            .unwrap()
            .with_transfer_limits(TransferLimits {
                idle_timeout: Duration::from_secs(5),
                min_rate: 100,
            });
        let b = BundleName::parse("demo").unwrap();
        let d = digest_of(&[b'x'; 10_000]);
        // One byte a second: never idle for 5 seconds, but far below 100 bytes a second.
        let trickle = futures::stream::unfold(0u32, |n| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            (n < 10_000).then(|| (Ok::<_, io::Error>(Bytes::from_static(b"x")), n + 1))
        });
        let started = tokio::time::Instant::now();
        let err = store
            .put(&b, &d, Box::pin(trickle), 1 << 20)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Timeout(m) if m.contains("100 bytes a second")),
            "{err}"
        );
        // Cut off once 5 s + n/100 s is past for the n bytes received: after about 5 s.
        let took = started.elapsed();
        assert!(took < Duration::from_secs(7), "{took:?}");
        assert_eq!(fs::read_dir(dir.path().join("demo")).unwrap().count(), 0);
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
            store.list(&b).await.unwrap(),
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
        assert!(store.locks.is_empty());
    }
}
