//! Every blob's length is checked against the size its descriptor declares (layers, the image
//! config, a platform manifest named by an index), against a real registry that serves the
//! blobs whole: a descriptor that says less or more than the blob fails the pull, naming the
//! digest, the declared and the actual size, and nothing past the declared size is read.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::*;
use gantry_image::{BlobSize, ImageError, PullStats};
use gantry_tests::{registry, unique_name};
use serde_json::json;

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";

fn config_blob() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "os": "linux", "architecture": "amd64",
        "rootfs": {"type": "layers", "diff_ids": []},
    }))
    .unwrap()
}

fn layer_blob() -> Vec<u8> {
    Tar::default().file("manifests/cm.yaml", CONFIGMAP).gzip()
}

/// An image manifest whose config and layer descriptors declare the given sizes (the real
/// ones when `None`); the blobs are pushed as they are.
async fn push_manifest(
    repository: &str,
    config_size: Option<i64>,
    layer_size: Option<i64>,
) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let host = registry().host();
    let (config, layer) = (config_blob(), layer_blob());
    push_blob(host, repository, &config).await;
    push_blob(host, repository, &layer).await;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": CONFIG,
            "digest": sha256(&config),
            "size": config_size.unwrap_or(config.len() as i64),
        },
        "layers": [{
            "mediaType": GZIP_LAYER,
            "digest": sha256(&layer),
            "size": layer_size.unwrap_or(layer.len() as i64),
        }],
    }))
    .unwrap();
    (manifest, config, layer)
}

/// Pulls `repository:v1`, expecting a size mismatch; returns it and the layer bytes read.
async fn pull_mismatch(repository: &str) -> (String, String, u64, BlobSize, u64) {
    let host = registry().host();
    let stats = Arc::new(PullStats::default());
    let mut pull = request(&format!("{host}/{repository}:v1"), Some("linux/amd64"));
    pull.stats = Some(stats.clone());
    let result = plain_client(host).pull(&pull).await;
    let read = stats.compressed_bytes.load(Ordering::Relaxed);
    match result {
        Err(error @ ImageError::SizeMismatch { .. }) => {
            let message = error.to_string();
            let ImageError::SizeMismatch {
                digest,
                declared,
                actual,
                ..
            } = error
            else {
                unreachable!()
            };
            (message, digest, declared, actual, read)
        }
        other => panic!("expected a size mismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn a_layer_longer_than_its_descriptor_says_is_refused() {
    let host = registry().host();
    let repository = unique_name("size-layer-short");
    let (real, _, layer) = push_manifest(&repository, None, None).await;
    // The same image with honest sizes pulls: the registry and the check agree.
    tag(host, &repository, "honest", real, MANIFEST).await;
    plain_client(host)
        .pull(&request(&format!("{host}/{repository}:honest"), None))
        .await
        .expect("an image whose sizes are right pulls");

    let declared = layer.len() as i64 - 10;
    let (manifest, _, _) = push_manifest(&repository, None, Some(declared)).await;
    tag(host, &repository, "v1", manifest, MANIFEST).await;
    let (message, digest, declared_seen, actual, read) = pull_mismatch(&repository).await;
    assert_eq!(digest, sha256(&layer));
    assert_eq!(declared_seen, declared as u64);
    assert_eq!(actual, BlobSize::Exactly(layer.len() as u64));
    assert!(
        message.contains(&digest)
            && message.contains(&format!("declares {declared} bytes"))
            && message.contains(&format!("{} bytes", layer.len())),
        "{message}"
    );
    assert!(
        read <= declared as u64 + 1,
        "{read} bytes read past a declared size of {declared}"
    );
}

#[tokio::test]
async fn a_layer_shorter_than_its_descriptor_says_is_refused() {
    let host = registry().host();
    let repository = unique_name("size-layer-long");
    let layer = layer_blob();
    let declared = layer.len() as i64 + 100;
    let (manifest, _, _) = push_manifest(&repository, None, Some(declared)).await;
    tag(host, &repository, "v1", manifest, MANIFEST).await;
    let (message, digest, declared_seen, actual, _) = pull_mismatch(&repository).await;
    assert_eq!(digest, sha256(&layer));
    assert_eq!(declared_seen, declared as u64);
    assert_eq!(actual, BlobSize::Exactly(layer.len() as u64));
    assert!(
        message.contains(&format!("declares {declared} bytes")),
        "{message}"
    );
}

#[tokio::test]
async fn an_image_config_of_another_size_is_refused() {
    let host = registry().host();
    for delta in [-3i64, 3] {
        let repository = unique_name("size-config");
        let config = config_blob();
        let declared = config.len() as i64 + delta;
        let (manifest, _, _) = push_manifest(&repository, Some(declared), None).await;
        tag(host, &repository, "v1", manifest, MANIFEST).await;
        let (_, digest, declared_seen, actual, read) = pull_mismatch(&repository).await;
        assert_eq!(digest, sha256(&config), "delta {delta}");
        assert_eq!(declared_seen, declared as u64);
        assert_eq!(actual, BlobSize::Exactly(config.len() as u64));
        assert_eq!(read, 0, "no layer is read when the config is refused");
    }
}

#[tokio::test]
async fn a_platform_manifest_of_another_size_than_its_index_entry_is_refused() {
    let host = registry().host();
    for delta in [-7i64, 7] {
        let repository = unique_name("size-index");
        // Pushed by digest, then named by an index that gets its size wrong.
        let (digest, manifest) = push_image_manifest(
            host,
            &repository,
            &[(GZIP_LAYER, layer_blob())],
            "linux/amd64",
        )
        .await;
        let declared = manifest.len() as i64 + delta;
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [{
                "mediaType": MANIFEST,
                "digest": digest,
                "size": declared,
                "platform": {"os": "linux", "architecture": "amd64"},
            }],
        }))
        .unwrap();
        tag(host, &repository, "v1", index, INDEX).await;
        let (message, seen, declared_seen, actual, read) = pull_mismatch(&repository).await;
        assert_eq!(seen, digest, "delta {delta}");
        assert_eq!(declared_seen, declared as u64);
        assert_eq!(actual, BlobSize::Exactly(manifest.len() as u64));
        assert!(message.contains("manifest of"), "{message}");
        assert_eq!(read, 0);
    }
}

#[tokio::test]
async fn a_negative_declared_size_is_an_invalid_manifest() {
    let host = registry().host();
    let repository = unique_name("size-negative");
    let (manifest, _, _) = push_manifest(&repository, None, Some(-1)).await;
    tag(host, &repository, "v1", manifest, MANIFEST).await;
    let result = plain_client(host)
        .pull(&request(&format!("{host}/{repository}:v1"), None))
        .await;
    assert!(
        matches!(&result, Err(ImageError::InvalidManifest { reason, .. }) if reason.contains("negative size")),
        "{result:?}"
    );
}
