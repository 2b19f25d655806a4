//! Pulling a bundle image: resolve, select the platform, stream every layer through digest
//! verification, decompression, limits and whiteouts into a scratch directory, then
//! validate the result.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use oci_client::Reference;
use oci_client::manifest::{ImageIndexEntry, OciDescriptor};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::canonical::{
    CanonicalDigest, write_canonical, write_canonical_file, write_canonical_file_objects,
};
use super::client::{RegistryClient, SizeCheck, map_stream_error, parse_reference, pinned};
use super::error::ImageError;
use super::error::LimitKind;
use super::layer::{BundleFiles, LayerTree};
use super::limits::EffectiveLimits;
use super::objects::{BundleObject, ObjectSummary, check_objects, summarize_stored};
use super::platform::{Platform, select};

const MAX_CONFIG_BYTES: u64 = 1 << 20;

const LAYER_MEDIA_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
];

/// What to pull and under which rules.
#[derive(Debug, Clone)]
pub struct PullRequest {
    /// Tag or digest reference.
    pub reference: String,
    /// Platform to select from an index (default: [`Platform::current`]).
    pub platform: Option<Platform>,
    pub limits: EffectiveLimits,
    /// Where the scratch directory goes (default: the system's temporary directory). Put it
    /// on the file system of the final destination to make [`PulledBundle::persist_to`] a
    /// rename.
    pub scratch_parent: Option<PathBuf>,
    /// Counters updated while the layers stream (also when the pull fails).
    pub stats: Option<Arc<PullStats>>,
}

/// Bytes read so far by a pull, over all layers.
#[derive(Debug, Default)]
pub struct PullStats {
    /// Layer bytes received from the registry.
    pub compressed_bytes: AtomicU64,
    /// Bytes produced by decompressing them (what a gzip bomb inflates to).
    pub uncompressed_bytes: AtomicU64,
}

impl PullRequest {
    pub fn new(reference: impl Into<String>) -> Self {
        PullRequest {
            reference: reference.into(),
            platform: None,
            limits: EffectiveLimits::default(),
            scratch_parent: None,
            stats: None,
        }
    }
}

/// Which image was pulled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledImage {
    /// `registry/repository@sha256:...` of the top-level manifest (the index for
    /// multi-platform images): `status.resolvedImage`.
    pub resolved_image: String,
    /// The top-level digest.
    pub digest: String,
    /// Digest of the platform image manifest actually unpacked: `status.manifestDigest`.
    pub manifest_digest: String,
    /// The platform of that manifest: `status.platform`.
    pub platform: Platform,
    /// Whether the top level was an index.
    pub from_index: bool,
}

/// A pulled, verified and validated bundle: its files live in a scratch directory that is
/// removed when this value is dropped.
#[derive(Debug)]
pub struct PulledBundle {
    pub image: PulledImage,
    pub files: BundleFiles,
    /// The objects, in file-name order and document order.
    pub objects: Vec<ObjectSummary>,
    /// Bytes transferred for the layers.
    pub compressed_bytes: u64,
    /// Bytes of the decompressed layer streams.
    pub uncompressed_bytes: u64,
    /// The limits the pull ran under: the objects parsed later are held to them too.
    limits: EffectiveLimits,
    scratch: tempfile::TempDir,
}

/// The canonical tarball of a pulled bundle, written into its scratch directory, with the
/// objects it holds.
#[derive(Debug)]
pub struct CanonicalTarball {
    /// Where the tarball is: valid as long as the [`PulledBundle`] lives.
    pub path: PathBuf,
    pub digest: CanonicalDigest,
    /// The objects, in file-name order and document order, parsed from the bytes written.
    pub objects: Vec<BundleObject>,
}

impl PulledBundle {
    /// Writes the canonical tarball to `out`.
    pub fn write_canonical<W: io::Write>(&self, out: W) -> Result<CanonicalDigest, ImageError> {
        write_canonical(&self.files, out)
    }

    /// Writes the canonical tarball into the scratch directory and returns its path (valid
    /// as long as this value lives) and digest.
    pub fn canonical_tarball(&self) -> Result<(PathBuf, CanonicalDigest), ImageError> {
        let path = self.scratch.path().join("canonical.tar.gz");
        let digest = write_canonical_file(&self.files, &path)?;
        Ok((path, digest))
    }

    /// Writes the canonical tarball into the scratch directory and parses the objects from the
    /// same bytes, on a blocking thread (gzip, tar and parsing are CPU work that must not hold
    /// up the async runtime).
    pub async fn write_canonical_tarball(&self) -> Result<CanonicalTarball, ImageError> {
        let path = self.scratch.path().join("canonical.tar.gz");
        canonical_tarball(self.files.clone(), path, self.limits).await
    }

    /// Writes the canonical tarball of content rendered from this bundle by a provisioner
    /// (`files`: names directly in `manifests/` and their contents) into the scratch
    /// directory, and parses its objects from the same bytes, held to the pull's limits.
    pub async fn write_rendered_tarball(
        &self,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<CanonicalTarball, ImageError> {
        write_rendered_tarball(self.scratch.path().to_path_buf(), files, self.limits).await
    }

    /// The pull's limits.
    pub fn limits(&self) -> &EffectiveLimits {
        &self.limits
    }

    /// Writes the files to `dir/manifests/` (which must not exist or be empty), so that `dir`
    /// is a bundle directory again.
    pub fn persist_to(self, dir: &Path) -> Result<(), ImageError> {
        let target = dir.join(super::paths::MANIFESTS_DIR);
        let io_error =
            |e: io::Error| ImageError::from_io(format!("writing {}", target.display()), e);
        std::fs::create_dir_all(&target).map_err(io_error)?;
        if std::fs::read_dir(&target)
            .map_err(io_error)?
            .next()
            .is_some()
        {
            return Err(ImageError::Io {
                context: format!("writing {}", target.display()),
                source: io::Error::new(io::ErrorKind::AlreadyExists, "directory is not empty"),
            });
        }
        for (name, stored) in &self.files.files {
            let destination = target.join(name);
            // A rename when the scratch directory is on the same file system, else a copy.
            if std::fs::rename(&stored.path, &destination).is_err() {
                std::fs::copy(&stored.path, &destination).map_err(io_error)?;
            }
            let mut perms = std::fs::metadata(&destination)
                .map_err(io_error)?
                .permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
            std::fs::set_permissions(&destination, perms).map_err(io_error)?;
        }
        Ok(())
    }
}

/// Writes the canonical tarball of rendered content (`files`: names directly in `manifests/`
/// and their contents) into the directory `scratch`, and parses its objects from the same
/// bytes, held to `limits`, on a blocking thread.
pub async fn write_rendered_tarball(
    scratch: PathBuf,
    files: Vec<(String, Vec<u8>)>,
    limits: EffectiveLimits,
) -> Result<CanonicalTarball, ImageError> {
    let path = scratch.join("rendered.tar.gz");
    let rendered = blocking("writing the rendered files", move || {
        let mut rendered = BundleFiles::default();
        for (index, (name, content)) in files.into_iter().enumerate() {
            if content.len() as u64 > limits.max_file_bytes {
                return Err(limits.exceeded(
                    crate::error::LimitKind::FileBytes,
                    format!("manifests/{name}"),
                ));
            }
            let path = scratch.join(format!("rendered-{index}"));
            std::fs::write(&path, &content)
                .map_err(|e| ImageError::from_io(format!("writing manifests/{name}"), e))?;
            rendered.files.insert(
                name,
                crate::layer::StoredFile::new(path, content.len() as u64),
            );
        }
        Ok(rendered)
    })
    .await?;
    canonical_tarball(rendered, path, limits).await
}

/// Writes the canonical tarball of `files` to `path` and parses its objects from the same
/// bytes, on a blocking thread (gzip, tar and parsing are CPU work that must not hold up the
/// async runtime).
async fn canonical_tarball(
    files: BundleFiles,
    path: PathBuf,
    limits: EffectiveLimits,
) -> Result<CanonicalTarball, ImageError> {
    blocking("writing the canonical tarball", move || {
        let (digest, objects) = write_canonical_file_objects(&files, &path, &limits)?;
        Ok(CanonicalTarball {
            path,
            digest,
            objects,
        })
    })
    .await
}

/// `work` on a blocking thread; `what` names it if the thread fails.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<T, ImageError> + Send + 'static,
) -> Result<T, ImageError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ImageError::Io {
            context: what.into(),
            source: io::Error::other(e.to_string()),
        })?
}

/// The parts of a manifest or index that pulls and copies read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AnyManifest {
    schema_version: Option<i64>,
    pub(crate) media_type: Option<String>,
    pub(crate) manifests: Option<Vec<ImageIndexEntry>>,
    pub(crate) config: Option<OciDescriptor>,
    pub(crate) layers: Option<Vec<OciDescriptor>>,
    #[serde(default)]
    pub(crate) annotations: BTreeMap<String, String>,
}

impl AnyManifest {
    /// `body` as a manifest or index, of any schema version.
    pub(crate) fn parse(reference: &Reference, body: &[u8]) -> Result<Self, ImageError> {
        serde_json::from_slice(body).map_err(|e| ImageError::InvalidManifest {
            reference: reference.whole(),
            reason: format!("not a valid manifest: {e}"),
        })
    }

    pub(crate) fn is_index(&self) -> bool {
        match self.media_type.as_deref() {
            Some(oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE)
            | Some(oci_client::manifest::IMAGE_MANIFEST_LIST_MEDIA_TYPE) => true,
            Some(_) => false,
            None => self.manifests.is_some() && self.layers.is_none(),
        }
    }
}

#[derive(Deserialize)]
struct ImageConfig {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
    variant: Option<String>,
}

/// `body` as a manifest or index of schema version 2.
pub(crate) fn parse_manifest(
    reference: &Reference,
    body: &[u8],
) -> Result<AnyManifest, ImageError> {
    let manifest = AnyManifest::parse(reference, body)?;
    if manifest.schema_version != Some(2) {
        return Err(ImageError::InvalidManifest {
            reference: reference.whole(),
            reason: format!("unsupported schemaVersion {:?}", manifest.schema_version),
        });
    }
    Ok(manifest)
}

impl RegistryClient {
    /// The digest of the image manifest that `reference` designates for `platform`: its own
    /// digest when it is an image manifest, the matching entry's when it is an index. Reads
    /// the top-level manifest only (digest checked). For an image another party pulled, such
    /// as a node's container runtime, which reports only the top-level digest.
    pub async fn platform_manifest(
        &self,
        reference: &str,
        platform: &Platform,
    ) -> Result<String, ImageError> {
        let reference = parse_reference(reference)?;
        let authorization = self.authorization(&reference).await?;
        let (body, digest) = self
            .fetch_manifest(&reference, authorization.as_deref(), None)
            .await?;
        let manifest = parse_manifest(&reference, &body)?;
        if !manifest.is_index() {
            return Ok(digest);
        }
        let entries = manifest.manifests.unwrap_or_default();
        let (entry, _) = select(&entries, platform, &reference.whole())?;
        Ok(entry.digest.clone())
    }

    /// Pulls, verifies, unpacks and validates a bundle image.
    pub async fn pull(&self, request: &PullRequest) -> Result<PulledBundle, ImageError> {
        let reference = parse_reference(&request.reference)?;
        let wanted = request.platform.clone().unwrap_or_else(Platform::current);
        let limits = request.limits;
        let authorization = self.authorization(&reference).await?;

        let (body, top_digest) = self
            .fetch_manifest(&reference, authorization.as_deref(), None)
            .await?;
        // Everything below is fetched by digest, so a tag moving meanwhile changes nothing.
        let top = reference.clone_with_digest(top_digest.clone());
        let manifest = parse_manifest(&top, &body)?;
        let (image_ref, manifest, manifest_digest, platform, from_index) = if manifest.is_index() {
            let entries = manifest.manifests.unwrap_or_default();
            let (entry, platform) = select(&entries, &wanted, &reference.whole())?;
            let image_ref = reference.clone_with_digest(entry.digest.clone());
            let (body, digest) = self
                .fetch_manifest(&image_ref, authorization.as_deref(), Some(entry.size))
                .await?;
            let manifest = parse_manifest(&image_ref, &body)?;
            if manifest.is_index() {
                return Err(ImageError::InvalidManifest {
                    reference: image_ref.whole(),
                    reason: "nested image indexes are not supported".into(),
                });
            }
            (image_ref, manifest, digest, platform, true)
        } else {
            let config = manifest
                .config
                .clone()
                .ok_or_else(|| ImageError::InvalidManifest {
                    reference: top.whole(),
                    reason: "image manifest without config".into(),
                })?;
            let raw = self
                .fetch_small_blob(&top, &config, MAX_CONFIG_BYTES)
                .await?;
            let config: ImageConfig =
                serde_json::from_slice(&raw).map_err(|e| ImageError::InvalidManifest {
                    reference: top.whole(),
                    reason: format!("image config {} is not valid: {e}", config.digest),
                })?;
            let platform =
                Platform::new(&config.os, &config.architecture, config.variant.as_deref());
            (top.clone(), manifest, top_digest.clone(), platform, false)
        };

        let layers = manifest.layers.unwrap_or_default();
        if layers.is_empty() {
            return Err(ImageError::MissingManifests);
        }
        let declared = layers
            .iter()
            .fold(0u64, |sum, l| sum.saturating_add(l.size.max(0) as u64));
        if declared > limits.max_compressed_bytes {
            return Err(limits.exceeded(
                LimitKind::CompressedBytes,
                format!("{} (declared layer sizes: {declared})", image_ref.whole()),
            ));
        }
        for layer in &layers {
            if !LAYER_MEDIA_TYPES.contains(&layer.media_type.as_str()) {
                return Err(ImageError::UnsupportedMediaType {
                    what: format!("layer {} of {}", layer.digest, image_ref.whole()),
                    media_type: layer.media_type.clone(),
                });
            }
        }

        let scratch = match &request.scratch_parent {
            Some(parent) => tempfile::Builder::new()
                .prefix(".gantry-pull-")
                .tempdir_in(parent),
            None => tempfile::Builder::new().prefix("gantry-pull-").tempdir(),
        }
        .map_err(|e| ImageError::from_io("creating a scratch directory", e))?;

        let mut tree = LayerTree::new(scratch.path().to_path_buf(), limits);
        // Files are validated on a thread of their own while later bytes still stream in;
        // results only count for the files of the final tree, after every digest matched.
        let (file_tx, file_rx) = std::sync::mpsc::channel::<(String, PathBuf, u64)>();
        tree.notify_files(file_tx);
        let validator = Validator::start(file_rx, limits)?;
        let mut compressed = 0u64;
        for (index, layer) in layers.iter().enumerate() {
            let (back, total) = self
                .apply_layer(&image_ref, layer, index, tree, compressed, request)
                .await?;
            tree = back;
            compressed = total;
        }
        let uncompressed = tree.uncompressed_bytes();
        let (files, objects) = tokio::task::spawn_blocking(move || {
            // Finishing drops the tree's sender, which ends the validator's loop.
            let files = tree.finish();
            let mut early = validator.join();
            let files = files?;
            let objects = check_objects(
                files.files.iter().map(|(name, stored)| {
                    early
                        .remove(&stored.path)
                        .unwrap_or_else(|| summarize_stored(name, &stored.path, &limits))
                }),
                &limits,
            )?;
            Ok::<_, ImageError>((files, objects))
        })
        .await
        .map_err(|e| ImageError::Io {
            context: "validating the bundle".into(),
            source: io::Error::other(e.to_string()),
        })??;

        Ok(PulledBundle {
            image: PulledImage {
                resolved_image: pinned(&reference, &top_digest),
                digest: top_digest,
                manifest_digest,
                platform,
                from_index,
            },
            files,
            objects,
            compressed_bytes: compressed,
            uncompressed_bytes: uncompressed,
            limits,
            scratch,
        })
    }

    /// Streams one layer: the download (with hashing and the compressed-bytes limit) runs
    /// here, decompression and unpacking on a blocking thread fed through a small channel.
    /// The layer counts only once its digest matched; on any error the caller drops the tree.
    async fn apply_layer(
        &self,
        reference: &Reference,
        layer: &OciDescriptor,
        index: usize,
        mut tree: LayerTree,
        compressed_before: u64,
        request: &PullRequest,
    ) -> Result<(LayerTree, u64), ImageError> {
        let limits = &request.limits;
        let stats = request.stats.as_deref();
        let what = format!("layer {} of {}", layer.digest, reference.whole());
        let mut size = SizeCheck::for_descriptor(reference, what.clone(), layer)?;
        let mut stream = self.blob_stream(reference, layer, &size).await?;
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        let name = layer.digest.clone();
        let worker = tokio::task::spawn_blocking(move || {
            let result = tree.apply_layer(index, &name, ChannelReader::new(rx));
            (tree, result)
        });

        let mut hasher = Sha256::new();
        let mut total = compressed_before;
        let mut failure = None;
        let mut worker_gone = false;
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    failure = Some(map_stream_error(reference, &what, e));
                    break;
                }
            };
            if let Err(mismatch) = size.received(chunk.len()) {
                failure = Some(mismatch);
                break;
            }
            total += chunk.len() as u64;
            if let Some(stats) = stats {
                stats.compressed_bytes.store(total, Ordering::Relaxed);
            }
            if total > limits.max_compressed_bytes {
                failure = Some(limits.exceeded(LimitKind::CompressedBytes, what.clone()));
                break;
            }
            hasher.update(&chunk);
            if !worker_gone && tx.send(chunk).await.is_err() {
                // The worker stopped on an error. Hash the rest anyway: a tampered blob is
                // then reported as a digest mismatch, not by whatever its content broke.
                worker_gone = true;
            }
        }
        drop(tx);
        drop(stream);
        let (tree, result) = worker.await.map_err(|e| ImageError::Io {
            context: format!("unpacking {what}"),
            source: io::Error::other(e.to_string()),
        })?;
        if let Some(stats) = stats {
            stats
                .uncompressed_bytes
                .store(tree.uncompressed_bytes(), Ordering::Relaxed);
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        size.finish()?;
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != layer.digest {
            return Err(ImageError::DigestMismatch {
                what,
                expected: layer.digest.clone(),
                actual,
            });
        }
        result?;
        Ok((tree, total))
    }
}

type FileResults = HashMap<PathBuf, Result<Vec<ObjectSummary>, ImageError>>;

/// Bytes of files being parsed at once. Parsing takes a few times a file's size in memory, so
/// files are parsed concurrently only while their sizes add up to this; a larger file is
/// parsed alone.
const PARSE_BUDGET: u64 = 4 << 20;

/// A counting semaphore over bytes.
struct ByteBudget {
    available: std::sync::Mutex<u64>,
    freed: std::sync::Condvar,
}

impl ByteBudget {
    fn acquire(&self, bytes: u64) -> u64 {
        let want = bytes.clamp(1, PARSE_BUDGET);
        let mut available = self.available.lock().unwrap_or_else(|e| e.into_inner());
        while *available < want {
            available = self
                .freed
                .wait(available)
                .unwrap_or_else(|e| e.into_inner());
        }
        *available -= want;
        want
    }

    fn release(&self, bytes: u64) {
        let mut available = self.available.lock().unwrap_or_else(|e| e.into_inner());
        *available += bytes;
        self.freed.notify_all();
    }
}

/// Threads that validate files as the layers produce them: as many as the machine has cores
/// (at most four), within [`PARSE_BUDGET`]. Their stacks are the default: each parse runs on a
/// stack sized for the depth limit ([`crate::on_parse_stack`]).
struct Validator {
    threads: Vec<std::thread::JoinHandle<FileResults>>,
}

impl Validator {
    fn start(
        files: std::sync::mpsc::Receiver<(String, PathBuf, u64)>,
        limits: EffectiveLimits,
    ) -> Result<Self, ImageError> {
        let count = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4));
        let files = std::sync::Arc::new(std::sync::Mutex::new(files));
        let budget = Arc::new(ByteBudget {
            available: std::sync::Mutex::new(PARSE_BUDGET),
            freed: std::sync::Condvar::new(),
        });
        // Objects held in results: past the limit, files are left for the final pass, which
        // stops at the limit, so that memory stays bounded whatever the layers hold.
        let held = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for i in 0..count {
            let files = files.clone();
            let budget = budget.clone();
            let held = held.clone();
            let thread = std::thread::Builder::new()
                .name(format!("gantry-validate-{i}"))
                .spawn(move || {
                    let mut results = FileResults::new();
                    loop {
                        let next = match files.lock() {
                            Ok(receiver) => receiver.recv(),
                            Err(_) => break,
                        };
                        let Ok((name, path, size)) = next else { break };
                        if held.load(Ordering::Relaxed) > limits.max_objects {
                            continue;
                        }
                        let bytes = budget.acquire(size);
                        let result = summarize_stored(&name, &path, &limits);
                        budget.release(bytes);
                        if let Ok(objects) = &result {
                            held.fetch_add(objects.len() as u64, Ordering::Relaxed);
                        }
                        results.insert(path, result);
                    }
                    results
                })
                .map_err(|e| ImageError::from_io("starting a validation thread", e))?;
            threads.push(thread);
        }
        Ok(Validator { threads })
    }

    /// Waits for the threads (the sender must be gone) and merges their results; a thread
    /// that failed only means its files are validated again.
    fn join(self) -> FileResults {
        let mut all = FileResults::new();
        for thread in self.threads {
            if let Ok(results) = thread.join() {
                all.extend(results);
            }
        }
        all
    }
}

/// A blocking reader over chunks sent by the download task.
struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl ChannelReader {
    fn new(rx: mpsc::Receiver<Bytes>) -> Self {
        ChannelReader {
            rx,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}
