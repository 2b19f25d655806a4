//! Copying an image from one repository to another, by digest: the manifest or image index
//! exactly as the source serves it (so its digest is unchanged), every child manifest of an
//! index, and every blob (config and layers) the target does not hold yet, streamed through
//! and checked against its digest and size.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use oci_client::manifest::OciDescriptor;
use oci_client::{Reference, RegistryOperation};
use sha2::{Digest, Sha256};

use super::client::{RegistryClient, SizeCheck, map_error, map_stream_error, parse_reference};
use super::error::ImageError;
use super::platform::Platform;
use super::pull::AnyManifest;

/// What a copy has done so far, for progress shown while it runs.
#[derive(Debug, Default)]
pub struct CopyStats {
    /// Blob bytes sent to the target registry (blobs it already held are not counted).
    pub bytes_sent: AtomicU64,
}

/// What a copy did.
#[derive(Debug, Clone)]
pub struct CopiedImage {
    /// `sha256:...` of the top-level manifest or index, the same in both repositories.
    pub digest: String,
    /// Whether the top level is an image index.
    pub index: bool,
    /// Manifests pushed (the index and its children).
    pub manifests: usize,
    /// Blobs sent, and blobs the target already held.
    pub blobs_sent: usize,
    pub blobs_present: usize,
}

/// The top-level manifest or index of an image, as the registry serves it.
#[derive(Debug, Clone)]
pub struct RawManifest {
    pub digest: String,
    pub body: bytes::Bytes,
    /// Its annotations (none for a manifest without them).
    pub annotations: BTreeMap<String, String>,
    /// For an index: the platforms of its entries that have one; empty for an image manifest.
    pub platforms: Vec<Platform>,
    pub index: bool,
}

impl AnyManifest {
    /// The media type to push the body with: the one it declares, else the OCI type.
    fn media_type(&self) -> String {
        self.media_type.clone().unwrap_or_else(|| {
            if self.is_index() {
                oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE.into()
            } else {
                oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.into()
            }
        })
    }
}

impl RegistryClient {
    /// The top-level manifest or index `reference` designates (a tag is resolved once; the
    /// body is digest checked), with its annotations and, for an index, its platforms.
    pub async fn raw_manifest(&self, reference: &str) -> Result<RawManifest, ImageError> {
        let parsed = parse_reference(reference)?;
        let authorization = self.authorization(&parsed).await?;
        let (body, digest) = self
            .fetch_manifest(&parsed, authorization.as_deref(), None)
            .await?;
        let parts = AnyManifest::parse(&parsed, &body)?;
        let index = parts.is_index();
        let platforms = parts
            .manifests
            .iter()
            .flatten()
            .filter_map(|entry| entry.platform.as_ref())
            .map(|p| {
                Platform::new(
                    &p.os.to_string(),
                    &p.architecture.to_string(),
                    p.variant.as_deref(),
                )
            })
            .collect();
        Ok(RawManifest {
            digest,
            body,
            annotations: parts.annotations,
            platforms,
            index,
        })
    }

    /// Copies the image `source` (a tag or digest reference) to `target`
    /// (`registry/repository`, with a tag to tag it there too): the top-level manifest or
    /// index keeps its digest; an index's child manifests and every blob are copied.
    pub async fn copy_image(
        &self,
        source: &str,
        target: &str,
        stats: Option<Arc<CopyStats>>,
    ) -> Result<CopiedImage, ImageError> {
        let stats = stats.unwrap_or_default();
        let source = parse_reference(source)?;
        let target = parse_reference(target)?;
        let authorization = self.authorization(&source).await?;
        self.authenticate(&target, RegistryOperation::Push).await?;
        let (body, digest) = self
            .fetch_manifest(&source, authorization.as_deref(), None)
            .await?;
        let source = source.clone_with_digest(digest.clone());
        let parts = AnyManifest::parse(&source, &body)?;
        let mut copied = CopiedImage {
            digest: digest.clone(),
            index: parts.is_index(),
            manifests: 0,
            blobs_sent: 0,
            blobs_present: 0,
        };
        if parts.is_index() {
            for entry in parts.manifests.iter().flatten() {
                let child = source.clone_with_digest(entry.digest.clone());
                let (child_body, _) = self
                    .fetch_manifest(&child, authorization.as_deref(), Some(entry.size))
                    .await?;
                let child_parts = AnyManifest::parse(&child, &child_body)?;
                if child_parts.is_index() {
                    return Err(ImageError::InvalidManifest {
                        reference: child.whole(),
                        reason: "nested image indexes are not supported".into(),
                    });
                }
                self.copy_blobs(&child, &target, &child_parts, &stats, &mut copied)
                    .await?;
                self.push_raw_manifest(
                    &target.clone_with_digest(entry.digest.clone()),
                    child_body,
                    &child_parts.media_type(),
                )
                .await?;
                copied.manifests += 1;
            }
        } else {
            self.copy_blobs(&source, &target, &parts, &stats, &mut copied)
                .await?;
        }
        let media_type = parts.media_type();
        self.push_raw_manifest(
            &target.clone_with_digest(digest.clone()),
            body.clone(),
            &media_type,
        )
        .await?;
        copied.manifests += 1;
        if target.tag().is_some() && target.digest().is_none() {
            self.push_raw_manifest(&target, body, &media_type).await?;
        }
        Ok(copied)
    }

    async fn copy_blobs(
        &self,
        source: &Reference,
        target: &Reference,
        parts: &AnyManifest,
        stats: &Arc<CopyStats>,
        copied: &mut CopiedImage,
    ) -> Result<(), ImageError> {
        let config = parts
            .config
            .clone()
            .ok_or_else(|| ImageError::InvalidManifest {
                reference: source.whole(),
                reason: "image manifest without config".into(),
            })?;
        for descriptor in std::iter::once(&config).chain(parts.layers.iter().flatten()) {
            if self
                .client
                .blob_exists(target, &descriptor.digest)
                .await
                .map_err(|e| map_error(target, e))?
            {
                copied.blobs_present += 1;
                continue;
            }
            self.copy_blob(source, target, descriptor, stats).await?;
            copied.blobs_sent += 1;
        }
        Ok(())
    }

    /// Streams one blob from `source`'s repository to `target`'s, checking its size and
    /// digest on the way: a blob that does not match fails the upload before it completes.
    async fn copy_blob(
        &self,
        source: &Reference,
        target: &Reference,
        descriptor: &OciDescriptor,
        stats: &Arc<CopyStats>,
    ) -> Result<(), ImageError> {
        let what = format!("blob {} of {source}", descriptor.digest);
        let size = SizeCheck::for_descriptor(source, what.clone(), descriptor)?;
        let declared = size.declared;
        let stream = self.blob_stream(source, descriptor, &size).await?;
        struct State {
            stream: oci_client::client::SizedStream,
            size: SizeCheck,
            hasher: Sha256,
            done: bool,
        }
        let state = State {
            stream,
            size,
            hasher: Sha256::new(),
            done: false,
        };
        let expected = descriptor.digest.clone();
        let (source_ref, sent) = (source.clone(), stats.clone());
        let chunks = futures::stream::unfold(state, move |mut state| {
            let (what, expected, source_ref, sent) = (
                what.clone(),
                expected.clone(),
                source_ref.clone(),
                sent.clone(),
            );
            async move {
                if state.done {
                    return None;
                }
                let failed = |state: &mut State, error: ImageError| {
                    state.done = true;
                    Err(oci_client::errors::OciDistributionError::GenericError(
                        Some(error.to_string()),
                    ))
                };
                match state.stream.next().await {
                    Some(Ok(chunk)) => {
                        if let Err(e) = state.size.received(chunk.len()) {
                            let error = failed(&mut state, e);
                            return Some((error, state));
                        }
                        state.hasher.update(&chunk);
                        sent.bytes_sent
                            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        Some((Ok(chunk), state))
                    }
                    Some(Err(e)) => {
                        let error = failed(&mut state, map_stream_error(&source_ref, &what, e));
                        Some((error, state))
                    }
                    None => {
                        state.done = true;
                        if let Err(e) = state.size.finish() {
                            let error = failed(&mut state, e);
                            return Some((error, state));
                        }
                        let actual =
                            format!("sha256:{}", hex::encode(state.hasher.clone().finalize()));
                        if actual != expected {
                            let error = failed(
                                &mut state,
                                ImageError::DigestMismatch {
                                    what,
                                    expected,
                                    actual,
                                },
                            );
                            return Some((error, state));
                        }
                        None
                    }
                }
            }
        });
        self.client
            .push_blob_stream(target, chunks, &descriptor.digest, Some(declared))
            .await
            .map_err(|e| map_error(target, e))?;
        Ok(())
    }

    async fn push_raw_manifest(
        &self,
        target: &Reference,
        body: bytes::Bytes,
        media_type: &str,
    ) -> Result<(), ImageError> {
        let media_type =
            http::HeaderValue::from_str(media_type).map_err(|_| ImageError::InvalidManifest {
                reference: target.whole(),
                reason: format!("media type {media_type:?} is not a header value"),
            })?;
        self.client
            .push_manifest_raw(target, body.to_vec(), media_type)
            .await
            .map_err(|e| map_error(target, e))?;
        Ok(())
    }
}
