//! Fetching an OCI artifact whole, for content that another renderer interprets (a Helm chart
//! pushed with `helm push`: config `application/vnd.cncf.helm.config.v1+json`, one layer
//! `application/vnd.cncf.helm.chart.content.v1.tar+gzip`). Nothing is unpacked or parsed
//! here: the config and the layers come back as bytes, each verified against its descriptor
//! (sha256 and size) and all of them held to the compressed-bytes limit while they stream,
//! so that the renderer only ever sees bytes the manifest pinned, and no more of them than
//! the limits allow.

use futures::StreamExt;
use oci_client::Reference;
use oci_client::manifest::OciDescriptor;
use sha2::{Digest, Sha256};

use super::client::{RegistryClient, SizeCheck, map_stream_error, parse_reference, pinned};
use super::error::{ImageError, LimitKind};
use super::limits::EffectiveLimits;
use super::pull::parse_manifest;

/// An artifact's config and layers, as the registry sent them and the manifest pinned them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedArtifact {
    /// `registry/repository@sha256:...` of the manifest, as [`crate::PulledImage`] names it:
    /// what a status records, so that the same bytes can be fetched again.
    pub resolved_image: String,
    /// `sha256:...` of the manifest.
    pub digest: String,
    /// The config descriptor's media type: how the renderer tells what it was given.
    pub config_media_type: String,
    pub config: Vec<u8>,
    /// In the manifest's order.
    pub layers: Vec<FetchedLayer>,
    /// Bytes received for the config and the layers together.
    pub compressed_bytes: u64,
}

/// One layer of a [`FetchedArtifact`], its digest verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedLayer {
    pub media_type: String,
    /// `sha256:...`, as the manifest declares it and the bytes hash to.
    pub digest: String,
    pub data: Vec<u8>,
}

impl RegistryClient {
    /// Fetches the artifact `reference` (tag or digest) designates: its manifest (digest
    /// checked against a digest reference, and against the registry's
    /// `Docker-Content-Digest`), then its config and every layer into memory, by digest, so a
    /// tag moving meanwhile changes nothing.
    ///
    /// The content must be a single manifest: an image index is refused, since there is no
    /// platform to choose an artifact by. The layers count against `limits.max_files` and all
    /// blobs together against `limits.max_compressed_bytes`, first as declared (nothing is
    /// downloaded when the manifest already says too much), then as received, stopping at
    /// the limit. Media types are not checked: that is the renderer's business.
    pub async fn fetch_artifact(
        &self,
        reference: &str,
        limits: &EffectiveLimits,
    ) -> Result<FetchedArtifact, ImageError> {
        let reference = parse_reference(reference)?;
        let authorization = self.authorization(&reference).await?;
        let (body, digest) = self
            .fetch_manifest(&reference, authorization.as_deref(), None)
            .await?;
        let top = reference.clone_with_digest(digest.clone());
        let manifest = parse_manifest(&top, &body)?;
        if manifest.is_index() {
            return Err(ImageError::InvalidManifest {
                reference: reference.whole(),
                reason: "an image index; this content must be a single manifest".into(),
            });
        }
        let config = manifest.config.ok_or_else(|| ImageError::InvalidManifest {
            reference: top.whole(),
            reason: "image manifest without config".into(),
        })?;
        let layers = manifest.layers.unwrap_or_default();

        if layers.len() as u64 > limits.max_files {
            return Err(limits.exceeded(
                LimitKind::Files,
                format!("{} ({} layers)", top.whole(), layers.len()),
            ));
        }
        let declared = std::iter::once(&config)
            .chain(&layers)
            .fold(0u64, |sum, d| sum.saturating_add(d.size.max(0) as u64));
        if declared > limits.max_compressed_bytes {
            return Err(limits.exceeded(
                LimitKind::CompressedBytes,
                format!("{} (declared blob sizes: {declared})", top.whole()),
            ));
        }

        let mut received = 0u64;
        let what = format!("config {} of {}", config.digest, top.whole());
        let config_data = self
            .fetch_counted(&top, what, &config, &mut received, limits)
            .await?;
        let mut fetched = Vec::with_capacity(layers.len());
        for layer in &layers {
            let what = format!("layer {} of {}", layer.digest, top.whole());
            let data = self
                .fetch_counted(&top, what, layer, &mut received, limits)
                .await?;
            fetched.push(FetchedLayer {
                media_type: layer.media_type.clone(),
                digest: layer.digest.clone(),
                data,
            });
        }

        Ok(FetchedArtifact {
            resolved_image: pinned(&reference, &digest),
            digest,
            config_media_type: config.media_type,
            config: config_data,
            layers: fetched,
            compressed_bytes: received,
        })
    }

    /// Downloads one blob whole, adding its bytes to `received` as they arrive: past
    /// `limits.max_compressed_bytes` it stops there, without reading the rest (a check the
    /// declared sizes make redundant as long as every blob keeps to its size, which
    /// [`SizeCheck`] enforces too; this one does not depend on it). The sha256 is checked at
    /// the end, the size while streaming.
    async fn fetch_counted(
        &self,
        reference: &Reference,
        what: String,
        descriptor: &OciDescriptor,
        received: &mut u64,
        limits: &EffectiveLimits,
    ) -> Result<Vec<u8>, ImageError> {
        let mut size = SizeCheck::for_descriptor(reference, what.clone(), descriptor)?;
        let mut stream = self.blob_stream(reference, descriptor, &size).await?;
        // The declared size is a claim: reserve at most a little of it up front.
        let mut data = Vec::with_capacity(size.declared.min(1 << 20) as usize);
        let mut hasher = Sha256::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| map_stream_error(reference, &what, e))?;
            size.received(chunk.len())?;
            *received = received.saturating_add(chunk.len() as u64);
            if *received > limits.max_compressed_bytes {
                return Err(limits.exceeded(LimitKind::CompressedBytes, what));
            }
            hasher.update(&chunk);
            data.extend_from_slice(&chunk);
        }
        size.finish()?;
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != descriptor.digest {
            return Err(ImageError::DigestMismatch {
                what,
                expected: descriptor.digest.clone(),
                actual,
            });
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    //! Against a small registry on loopback that serves what each test puts in it and
    //! records which blobs were asked for.

    use std::collections::HashMap;
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::body::Body;
    use axum::extract::{Path, State};
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::Response;
    use axum::routing::get;
    use serde_json::json;

    use super::*;
    use crate::client::RegistryOptions;

    const REPOSITORY: &str = "charts/demo";
    const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    const INDEX: &str = "application/vnd.oci.image.index.v1+json";
    const HELM_CONFIG: &str = "application/vnd.cncf.helm.config.v1+json";
    const HELM_CHART: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
    /// The digest of the blob served as an endless stream.
    const ENDLESS: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    const CHUNK: usize = 64 << 10;

    fn sha256(data: &[u8]) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(data)))
    }

    fn descriptor(media_type: &str, data: &[u8]) -> serde_json::Value {
        json!({"mediaType": media_type, "digest": sha256(data), "size": data.len()})
    }

    #[derive(Default)]
    struct Registry {
        /// Manifests by tag or digest: media type and body.
        manifests: HashMap<String, (String, Vec<u8>)>,
        /// Blobs by the digest they are served under (not necessarily theirs).
        blobs: HashMap<String, Vec<u8>>,
        /// The digests of the blobs asked for, in order.
        requested: Mutex<Vec<String>>,
        /// Bytes handed out for [`ENDLESS`].
        streamed: AtomicU64,
    }

    impl Registry {
        fn requested(&self) -> Vec<String> {
            self.requested.lock().unwrap().clone()
        }
    }

    async fn manifest(
        State(registry): State<Arc<Registry>>,
        Path(reference): Path<String>,
    ) -> Response {
        match registry.manifests.get(&reference) {
            Some((media_type, body)) => Response::builder()
                .header(header::CONTENT_TYPE, media_type.as_str())
                .header("Docker-Content-Digest", sha256(body))
                .body(Body::from(body.clone()))
                .unwrap(),
            None => not_found("MANIFEST_UNKNOWN"),
        }
    }

    /// Serves a blob; asked for a range from byte 0 (as the client asks), it answers with
    /// that range as a registry does, which `oci-client` does not hash: the digest checked is
    /// the fetch's own.
    async fn blob(
        State(registry): State<Arc<Registry>>,
        Path(digest): Path<String>,
        headers: HeaderMap,
    ) -> Response {
        registry.requested.lock().unwrap().push(digest.clone());
        let ranged = headers
            .get(header::RANGE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == "bytes=0-");
        if digest == ENDLESS {
            // No Content-Length: only counting stops the client.
            let served = registry.clone();
            let chunks = futures::stream::repeat_with(move || {
                served.streamed.fetch_add(CHUNK as u64, Ordering::SeqCst);
                Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'x'; CHUNK]))
            });
            return Response::builder()
                .status(if ranged {
                    StatusCode::PARTIAL_CONTENT
                } else {
                    StatusCode::OK
                })
                .body(Body::from_stream(chunks))
                .unwrap();
        }
        match registry.blobs.get(&digest) {
            Some(data) if ranged => Response::builder()
                .status(StatusCode::PARTIAL_CONTENT)
                .header(
                    header::CONTENT_RANGE,
                    format!("bytes 0-{}/{}", data.len().saturating_sub(1), data.len()),
                )
                .body(Body::from(data.clone()))
                .unwrap(),
            Some(data) => Response::new(Body::from(data.clone())),
            None => not_found("BLOB_UNKNOWN"),
        }
    }

    fn not_found(code: &str) -> Response {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from(format!(
                r#"{{"errors":[{{"code":"{code}","message":"unknown"}}]}}"#
            )))
            .unwrap()
    }

    /// Serves `registry` on a loopback port; returns its `host:port` and the state.
    async fn serve(registry: Registry) -> (String, Arc<Registry>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let registry = Arc::new(registry);
        let app = Router::new()
            .route("/v2/", get(|| async { "{}" }))
            .route(
                &format!("/v2/{REPOSITORY}/manifests/{{reference}}"),
                get(manifest),
            )
            .route(&format!("/v2/{REPOSITORY}/blobs/{{digest}}"), get(blob))
            .with_state(registry.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (host, registry)
    }

    fn client(host: &str) -> RegistryClient {
        gantry_tests::init_crypto();
        RegistryClient::new(RegistryOptions {
            insecure_registries: vec![host.to_string()],
            ..Default::default()
        })
        .unwrap()
    }

    /// A chart as `helm package` makes it: a gzipped tar of `demo/...`.
    fn chart() -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        let chart_yaml = b"apiVersion: v2\nname: demo\nversion: 0.1.0\n";
        let mut header = tar::Header::new_gnu();
        header.set_size(chart_yaml.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, "demo/Chart.yaml", &chart_yaml[..])
            .unwrap();
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&tar.into_inner().unwrap()).unwrap();
        gzip.finish().unwrap()
    }

    fn helm_config() -> Vec<u8> {
        br#"{"name":"demo","version":"0.1.0","apiVersion":"v2"}"#.to_vec()
    }

    /// A registry holding `layers` under `REPOSITORY:0.1.0` and under the manifest's digest,
    /// with a Helm config; returns it and the manifest.
    fn artifact(layers: &[(&str, Vec<u8>)]) -> (Registry, Vec<u8>) {
        let config = helm_config();
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": descriptor(HELM_CONFIG, &config),
            "layers": layers.iter().map(|(t, d)| descriptor(t, d)).collect::<Vec<_>>(),
        }))
        .unwrap();
        let mut registry = Registry::default();
        for (_, data) in layers {
            registry.blobs.insert(sha256(data), data.clone());
        }
        registry.blobs.insert(sha256(&config), config);
        let entry = (MANIFEST.to_string(), manifest.clone());
        registry.manifests.insert("0.1.0".into(), entry.clone());
        registry.manifests.insert(sha256(&manifest), entry);
        (registry, manifest)
    }

    fn limits() -> EffectiveLimits {
        EffectiveLimits::default()
    }

    #[tokio::test]
    async fn fetch_a_helm_chart_by_tag_and_by_digest() {
        let chart = chart();
        let (registry, manifest) = artifact(&[(HELM_CHART, chart.clone())]);
        let (host, _registry) = serve(registry).await;
        let client = client(&host);
        let digest = sha256(&manifest);

        let by_tag = client
            .fetch_artifact(&format!("{host}/{REPOSITORY}:0.1.0"), &limits())
            .await
            .unwrap();
        assert_eq!(by_tag.digest, digest);
        assert_eq!(
            by_tag.resolved_image,
            format!("{host}/{REPOSITORY}@{digest}")
        );
        assert_eq!(by_tag.config_media_type, HELM_CONFIG);
        assert_eq!(by_tag.config, helm_config());
        assert_eq!(
            by_tag.layers,
            vec![FetchedLayer {
                media_type: HELM_CHART.into(),
                digest: sha256(&chart),
                data: chart.clone(),
            }]
        );
        assert_eq!(
            by_tag.compressed_bytes,
            (helm_config().len() + chart.len()) as u64
        );

        let by_digest = client
            .fetch_artifact(&format!("{host}/{REPOSITORY}@{digest}"), &limits())
            .await
            .unwrap();
        assert_eq!(by_digest, by_tag);
    }

    #[tokio::test]
    async fn a_manifest_that_is_not_the_digest_asked_for_is_refused() {
        let (mut registry, manifest) = artifact(&[(HELM_CHART, chart())]);
        let other = sha256(b"another manifest");
        registry
            .manifests
            .insert(other.clone(), (MANIFEST.into(), manifest));
        let (host, registry) = serve(registry).await;
        match client(&host)
            .fetch_artifact(&format!("{host}/{REPOSITORY}@{other}"), &limits())
            .await
        {
            Err(ImageError::DigestMismatch { expected, .. }) => assert_eq!(expected, other),
            other => panic!("{other:?}"),
        }
        assert!(registry.requested().is_empty());
    }

    #[tokio::test]
    async fn a_layer_that_does_not_match_its_digest_is_refused_naming_it() {
        let chart = chart();
        let (mut registry, _) = artifact(&[(HELM_CHART, chart.clone())]);
        // Same length, other bytes: only the digest can tell.
        let mut tampered = chart.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 0xff;
        registry.blobs.insert(sha256(&chart), tampered.clone());
        let (host, _registry) = serve(registry).await;
        match client(&host)
            .fetch_artifact(&format!("{host}/{REPOSITORY}:0.1.0"), &limits())
            .await
        {
            Err(error @ ImageError::DigestMismatch { .. }) => {
                let message = error.to_string();
                assert!(
                    message.contains(&format!("layer {}", sha256(&chart))),
                    "{message}"
                );
                let ImageError::DigestMismatch {
                    expected, actual, ..
                } = error
                else {
                    unreachable!()
                };
                assert_eq!(expected, sha256(&chart));
                assert_eq!(actual, sha256(&tampered));
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn blobs_past_the_compressed_limit_are_not_downloaded() {
        let (first, second) = (vec![b'a'; 1000], vec![b'b'; 1000]);
        let (registry, _) = artifact(&[(HELM_CHART, first.clone()), (HELM_CHART, second)]);
        let (host, registry) = serve(registry).await;
        let mut limits = limits();
        // Room for the config and the first layer, not the second.
        limits.max_compressed_bytes = (helm_config().len() + first.len()) as u64 + 10;
        match client(&host)
            .fetch_artifact(&format!("{host}/{REPOSITORY}:0.1.0"), &limits)
            .await
        {
            Err(error @ ImageError::LimitExceeded { .. }) => {
                assert!(error.to_string().contains("maxCompressedBytes"), "{error}");
                let ImageError::LimitExceeded { limit, value, .. } = error else {
                    unreachable!()
                };
                assert_eq!(limit, LimitKind::CompressedBytes);
                assert_eq!(value, limits.max_compressed_bytes);
            }
            other => panic!("{other:?}"),
        }
        // The declared sizes already say too much: not one blob was asked for.
        assert!(
            registry.requested().is_empty(),
            "{:?}",
            registry.requested()
        );
    }

    #[tokio::test]
    async fn a_blob_streams_only_up_to_the_compressed_limit() {
        let (host, registry) = serve(Registry::default()).await;
        let client = client(&host);
        let reference = parse_reference(&format!("{host}/{REPOSITORY}:0.1.0")).unwrap();
        // A descriptor that declares more than the limit (as one that the declared-size check
        // did not catch would), of a blob that never ends.
        let declared = 64u64 << 20;
        let descriptor = OciDescriptor {
            media_type: HELM_CHART.into(),
            digest: ENDLESS.into(),
            size: declared as i64,
            ..Default::default()
        };
        let mut limits = limits();
        limits.max_compressed_bytes = 1 << 20;
        // What the config and earlier layers took.
        let mut received = 1000;
        match client
            .fetch_counted(
                &reference,
                "layer x".into(),
                &descriptor,
                &mut received,
                &limits,
            )
            .await
        {
            Err(ImageError::LimitExceeded { limit, culprit, .. }) => {
                assert_eq!(limit, LimitKind::CompressedBytes);
                assert_eq!(culprit, "layer x");
            }
            other => panic!("{other:?}"),
        }
        assert!(received > limits.max_compressed_bytes);
        assert!(
            received <= limits.max_compressed_bytes + CHUNK as u64,
            "{received}"
        );
        // Handed out: up to the limit, plus what sits in buffers; far from all of it.
        let streamed = registry.streamed.load(Ordering::SeqCst);
        assert!(streamed < declared / 2, "streamed {streamed} bytes");
        assert_eq!(registry.requested(), vec![ENDLESS.to_string()]);
    }

    #[tokio::test]
    async fn more_layers_than_max_files_are_refused() {
        let (registry, _) = artifact(&[(HELM_CHART, chart()), (HELM_CHART, b"two".to_vec())]);
        let (host, registry) = serve(registry).await;
        let mut limits = limits();
        limits.max_files = 1;
        match client(&host)
            .fetch_artifact(&format!("{host}/{REPOSITORY}:0.1.0"), &limits)
            .await
        {
            Err(ImageError::LimitExceeded { limit, culprit, .. }) => {
                assert_eq!(limit, LimitKind::Files);
                assert!(culprit.contains("2 layers"), "{culprit}");
            }
            other => panic!("{other:?}"),
        }
        assert!(registry.requested().is_empty());
    }

    #[tokio::test]
    async fn an_image_index_is_refused_naming_the_reference() {
        let (mut registry, manifest) = artifact(&[(HELM_CHART, chart())]);
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [{
                "mediaType": MANIFEST,
                "digest": sha256(&manifest),
                "size": manifest.len(),
                "platform": {"os": "linux", "architecture": "amd64"},
            }],
        }))
        .unwrap();
        registry
            .manifests
            .insert("multi".into(), (INDEX.into(), index));
        let (host, registry) = serve(registry).await;
        let reference = format!("{host}/{REPOSITORY}:multi");
        match client(&host).fetch_artifact(&reference, &limits()).await {
            Err(error @ ImageError::InvalidManifest { .. }) => {
                assert_eq!(error.reference(), Some(reference.as_str()));
                assert!(
                    error
                        .to_string()
                        .contains("an image index; this content must be a single manifest"),
                    "{error}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(registry.requested().is_empty());
    }

    #[tokio::test]
    async fn a_schema_1_manifest_is_refused() {
        let mut registry = Registry::default();
        let body = serde_json::to_vec(&json!({"schemaVersion": 1, "fsLayers": []})).unwrap();
        registry
            .manifests
            .insert("old".into(), (MANIFEST.into(), body));
        let (host, _registry) = serve(registry).await;
        match client(&host)
            .fetch_artifact(&format!("{host}/{REPOSITORY}:old"), &limits())
            .await
        {
            Err(ImageError::InvalidManifest { reason, .. }) => {
                assert!(reason.contains("schemaVersion"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
}
