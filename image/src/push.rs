//! Pushing a bundle directory as a `plain+v0` image: one layer (the canonical tarball, so the
//! same directory always gives the same layer), an OCI image config per platform, and one
//! manifest, or an image index when several platforms are named.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use oci_client::{Reference, RegistryOperation};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::client::{RegistryClient, map_error, parse_reference, pinned};
use super::error::ImageError;
use super::layer::BundleFiles;
use super::limits::EffectiveLimits;
use super::objects::{ObjectSummary, validate_files};
use super::platform::Platform;
use super::write_canonical_file;

/// The label that marks a bundle image's format.
pub const BUNDLE_MEDIATYPE_LABEL: &str = "operators.operatorframework.io.bundle.mediatype.v1";
pub const BUNDLE_MEDIATYPE: &str = "plain+v0";

const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const PUSH_CHUNK: usize = 8 << 20;

/// What a push produced.
#[derive(Debug, Clone)]
pub struct PushedImage {
    /// `registry/repository@sha256:...` of the manifest or index.
    pub pinned: String,
    pub digest: String,
    /// Digest of the image manifest of each platform.
    pub manifests: Vec<(Platform, String)>,
    pub layer_digest: String,
    pub objects: Vec<ObjectSummary>,
}

/// What a push has done so far, for progress shown while it runs.
#[derive(Debug, Default)]
pub struct PushStats {
    /// Size of the layer (the canonical tarball), known once the directory is packed.
    pub layer_size: AtomicU64,
    /// Layer bytes handed to the registry; stays 0 when the registry already has the layer.
    pub layer_bytes_sent: AtomicU64,
}

/// A validated bundle directory, ready to push.
pub struct PreparedBundle {
    pub files: BundleFiles,
    pub objects: Vec<ObjectSummary>,
}

/// Validates `dir` as a bundle directory (it holds `manifests/`).
pub fn prepare_dir(dir: &Path, limits: &EffectiveLimits) -> Result<PreparedBundle, ImageError> {
    let files = BundleFiles::from_dir(dir, limits)?;
    let objects = validate_files(&files, limits)?;
    Ok(PreparedBundle { files, objects })
}

fn descriptor(media_type: &str, digest: &str, size: u64) -> serde_json::Value {
    serde_json::json!({"mediaType": media_type, "digest": digest, "size": size})
}

fn platform_json(platform: &Platform) -> serde_json::Value {
    let mut value = serde_json::json!({
        "os": platform.os,
        "architecture": platform.architecture,
    });
    if let Some(variant) = &platform.variant {
        value["variant"] = variant.clone().into();
    }
    value
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

impl RegistryClient {
    /// Validates `dir`, builds the image and pushes it to `reference` (a tag; `latest` when
    /// none is given), for each of `platforms` (default: the current platform).
    pub async fn push_dir(
        &self,
        dir: &Path,
        reference: &str,
        platforms: &[Platform],
        limits: &EffectiveLimits,
    ) -> Result<PushedImage, ImageError> {
        self.push_dir_with_stats(dir, reference, platforms, limits, None)
            .await
    }

    /// [`Self::push_dir`], counting the layer bytes sent into `stats`.
    pub async fn push_dir_with_stats(
        &self,
        dir: &Path,
        reference: &str,
        platforms: &[Platform],
        limits: &EffectiveLimits,
        stats: Option<Arc<PushStats>>,
    ) -> Result<PushedImage, ImageError> {
        self.push_dir_annotated(dir, reference, platforms, limits, stats, &BTreeMap::new())
            .await
    }

    /// [`Self::push_dir_with_stats`], adding `annotations` to every image manifest and to the
    /// image index (none: the image is exactly the one [`Self::push_dir`] makes).
    pub async fn push_dir_annotated(
        &self,
        dir: &Path,
        reference: &str,
        platforms: &[Platform],
        limits: &EffectiveLimits,
        stats: Option<Arc<PushStats>>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<PushedImage, ImageError> {
        let stats = stats.unwrap_or_default();
        let target = parse_reference(reference)?;
        if target.digest().is_some() {
            return Err(ImageError::InvalidReference {
                reference: reference.to_string(),
                reason: "push needs a tag, not a digest".into(),
            });
        }
        let platforms: Vec<Platform> = if platforms.is_empty() {
            vec![Platform::current()]
        } else {
            platforms.to_vec()
        };

        let dir = dir.to_path_buf();
        let limits = *limits;
        let scratch = tempfile::Builder::new()
            .prefix("gantry-push-")
            .tempdir()
            .map_err(|e| ImageError::from_io("creating a scratch directory", e))?;
        let layer_path = scratch.path().join("layer.tar.gz");
        let path = layer_path.clone();
        let (prepared, layer) = tokio::task::spawn_blocking(move || {
            let prepared = prepare_dir(&dir, &limits)?;
            let layer = write_canonical_file(&prepared.files, &path)?;
            Ok::<_, ImageError>((prepared, layer))
        })
        .await
        .map_err(|e| ImageError::Config(format!("bundle preparation failed: {e}")))??;

        stats.layer_size.store(layer.size, Ordering::Relaxed);
        self.authenticate(&target, RegistryOperation::Push).await?;
        self.push_file_blob(&target, &layer_path, &layer.digest, &stats)
            .await?;

        let mut manifests = Vec::new();
        for platform in &platforms {
            let mut config = serde_json::json!({
                "os": platform.os,
                "architecture": platform.architecture,
                "config": {"Labels": {BUNDLE_MEDIATYPE_LABEL: BUNDLE_MEDIATYPE}},
                "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
            });
            if let Some(variant) = &platform.variant {
                config["variant"] = variant.clone().into();
            }
            let config =
                serde_json::to_vec(&config).map_err(|e| ImageError::Config(e.to_string()))?;
            let config_digest = sha256(&config);
            self.push_small_blob(&target, config.clone(), &config_digest)
                .await?;
            let mut manifest_annotations = annotations.clone();
            manifest_annotations.insert(BUNDLE_MEDIATYPE_LABEL.into(), BUNDLE_MEDIATYPE.into());
            let manifest = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": MANIFEST_MEDIA_TYPE,
                "config": descriptor(CONFIG_MEDIA_TYPE, &config_digest, config.len() as u64),
                "layers": [descriptor(LAYER_MEDIA_TYPE, &layer.digest, layer.size)],
                "annotations": manifest_annotations,
            });
            let manifest =
                serde_json::to_vec(&manifest).map_err(|e| ImageError::Config(e.to_string()))?;
            manifests.push((platform.clone(), manifest));
        }

        let (digest, per_platform) = if manifests.len() == 1 {
            let (platform, manifest) = manifests.remove(0);
            let digest = self
                .push_manifest_bytes(&target, manifest, MANIFEST_MEDIA_TYPE)
                .await?;
            (digest.clone(), vec![(platform, digest)])
        } else {
            let mut entries = Vec::new();
            let mut per_platform = Vec::new();
            for (platform, manifest) in manifests {
                let digest = sha256(&manifest);
                let size = manifest.len() as u64;
                let by_digest = target.clone_with_digest(digest.clone());
                self.push_manifest_bytes(&by_digest, manifest, MANIFEST_MEDIA_TYPE)
                    .await?;
                let mut entry = descriptor(MANIFEST_MEDIA_TYPE, &digest, size);
                entry["platform"] = platform_json(&platform);
                entries.push(entry);
                per_platform.push((platform, digest));
            }
            let mut index = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": INDEX_MEDIA_TYPE,
                "manifests": entries,
            });
            if !annotations.is_empty() {
                index["annotations"] = serde_json::json!(annotations);
            }
            let index =
                serde_json::to_vec(&index).map_err(|e| ImageError::Config(e.to_string()))?;
            let digest = self
                .push_manifest_bytes(&target, index, INDEX_MEDIA_TYPE)
                .await?;
            (digest, per_platform)
        };
        Ok(PushedImage {
            pinned: pinned(&target, &digest),
            digest,
            manifests: per_platform,
            layer_digest: layer.digest,
            objects: prepared.objects,
        })
    }

    /// Whether the registry has the blob already. The check only saves an upload: when the
    /// registry cannot answer it (docker-registry answers 500 for a blob whose record in the
    /// repository a crash left empty), the blob is uploaded, which writes that record again,
    /// or fails with an error of its own.
    async fn has_blob(&self, target: &Reference, digest: &str) -> bool {
        match self.client.blob_exists(target, digest).await {
            Ok(exists) => exists,
            Err(error) => {
                tracing::debug!(%digest, %error, "checking for a blob failed; uploading it");
                false
            }
        }
    }

    async fn push_small_blob(
        &self,
        target: &Reference,
        data: Vec<u8>,
        digest: &str,
    ) -> Result<(), ImageError> {
        if self.has_blob(target, digest).await {
            return Ok(());
        }
        self.client
            .push_blob(target, data, digest)
            .await
            .map_err(|e| map_error(target, e))?;
        Ok(())
    }

    /// Streams a file to the registry in chunks, unless the blob is there already.
    async fn push_file_blob(
        &self,
        target: &Reference,
        path: &Path,
        digest: &str,
        stats: &Arc<PushStats>,
    ) -> Result<(), ImageError> {
        if self.has_blob(target, digest).await {
            return Ok(());
        }
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| ImageError::from_io(format!("reading {}", path.display()), e))?;
        let size = file
            .metadata()
            .await
            .map_err(|e| ImageError::from_io(format!("reading {}", path.display()), e))?
            .len();
        let sent = stats.clone();
        let chunks = futures::stream::unfold(Some(file), move |file| {
            let sent = sent.clone();
            async move {
                let mut file = file?;
                let mut buffer = Vec::with_capacity(PUSH_CHUNK);
                match (&mut file)
                    .take(PUSH_CHUNK as u64)
                    .read_to_end(&mut buffer)
                    .await
                {
                    Ok(0) => None,
                    Ok(read) => {
                        // Counted as the request body takes the chunk: the stream is pulled as
                        // the connection sends, so this follows the upload.
                        sent.layer_bytes_sent
                            .fetch_add(read as u64, Ordering::Relaxed);
                        Some((Ok(Bytes::from(buffer)), Some(file)))
                    }
                    Err(e) => Some((
                        Err(oci_client::errors::OciDistributionError::IoError(e)),
                        None,
                    )),
                }
            }
        });
        self.client
            .push_blob_stream(target, chunks, digest, Some(size))
            .await
            .map_err(|e| map_error(target, e))?;
        Ok(())
    }

    /// Pushes a manifest or index and returns its digest.
    async fn push_manifest_bytes(
        &self,
        target: &Reference,
        body: Vec<u8>,
        media_type: &'static str,
    ) -> Result<String, ImageError> {
        let digest = sha256(&body);
        self.client
            .push_manifest_raw(target, body, http::HeaderValue::from_static(media_type))
            .await
            .map_err(|e| map_error(target, e))?;
        Ok(digest)
    }
}
