//! Helpers for the registry-backed tests: crafted layers, raw image pushes, clients.
#![allow(dead_code)]

use std::io::Write;

use gantry_image::{
    DockerConfig, EffectiveLimits, Platform, PullRequest, RegistryClient, RegistryOptions,
};
use gantry_tests::init_crypto;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};

pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// Builds tar archives with any path and entry type, malicious ones included.
#[derive(Default)]
pub struct Tar {
    data: Vec<u8>,
}

impl Tar {
    pub fn entry(mut self, path: &str, kind: tar::EntryType, content: &[u8]) -> Self {
        let mut header = tar::Header::new_old();
        let bytes = path.as_bytes();
        assert!(bytes.len() < 100);
        header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
        header.set_entry_type(kind);
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
            header.set_link_name("other.yaml").unwrap();
        }
        header.set_cksum();
        self.data.extend_from_slice(header.as_bytes());
        self.data.extend_from_slice(content);
        self.data
            .extend(std::iter::repeat_n(0u8, (512 - content.len() % 512) % 512));
        self
    }

    pub fn file(self, path: &str, content: &str) -> Self {
        self.entry(path, tar::EntryType::Regular, content.as_bytes())
    }

    pub fn dir(self, path: &str) -> Self {
        self.entry(path, tar::EntryType::Directory, b"")
    }

    pub fn tar(mut self) -> Vec<u8> {
        self.data.extend(std::iter::repeat_n(0u8, 1024));
        self.data
    }

    pub fn gzip(self) -> Vec<u8> {
        gzip(&self.tar())
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

pub const CONFIGMAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: default\ndata:\n  key: value\n";

/// A plain `oci-client` for `host` over plain HTTP, to push hand-made images.
fn raw_client(host: &str) -> Client {
    init_crypto();
    Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![host.to_string()]),
        ..Default::default()
    })
}

/// A raw client for `host`, authorised (anonymously) to push to `reference`'s repository.
async fn push_client(host: &str, reference: &Reference) -> Client {
    let client = raw_client(host);
    client
        .auth(
            reference,
            &RegistryAuth::Anonymous,
            oci_client::RegistryOperation::Push,
        )
        .await
        .unwrap();
    client
}

fn descriptor(media_type: &str, data: &[u8]) -> serde_json::Value {
    serde_json::json!({"mediaType": media_type, "digest": sha256(data), "size": data.len()})
}

pub const GZIP_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const TAR_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";

/// Pushes an image made of `layers` (media type, blob) for `platform`, by digest only, and
/// returns the manifest's digest and body.
pub async fn push_image_manifest(
    host: &str,
    repository: &str,
    layers: &[(&str, Vec<u8>)],
    platform: &str,
) -> (String, Vec<u8>) {
    let reference: Reference = format!("{host}/{repository}:unused").parse().unwrap();
    let client = push_client(host, &reference).await;
    let parts: Vec<&str> = platform.split('/').collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "os": parts[0], "architecture": parts[1],
        "rootfs": {"type": "layers", "diff_ids": []},
    }))
    .unwrap();
    client
        .push_blob(&reference, config.clone(), &sha256(&config))
        .await
        .unwrap();
    let mut layer_descriptors = Vec::new();
    for (media_type, blob) in layers {
        client
            .push_blob(&reference, blob.clone(), &sha256(blob))
            .await
            .unwrap();
        layer_descriptors.push(descriptor(media_type, blob));
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config),
        "layers": layer_descriptors,
    }))
    .unwrap();
    let digest = sha256(&manifest);
    let by_digest = reference.clone_with_digest(digest.clone());
    client
        .push_manifest_raw(
            &by_digest,
            manifest.clone(),
            http::HeaderValue::from_static("application/vnd.oci.image.manifest.v1+json"),
        )
        .await
        .unwrap();
    (digest, manifest)
}

/// Pushes one blob to `repository`; returns its digest.
pub async fn push_blob(host: &str, repository: &str, data: &[u8]) -> String {
    let reference: Reference = format!("{host}/{repository}:unused").parse().unwrap();
    let client = push_client(host, &reference).await;
    let digest = sha256(data);
    client
        .push_blob(&reference, data.to_vec(), &digest)
        .await
        .unwrap();
    digest
}

/// Pushes a manifest or index body under a tag.
pub async fn tag(host: &str, repository: &str, tag: &str, body: Vec<u8>, media_type: &'static str) {
    let reference: Reference = format!("{host}/{repository}:{tag}").parse().unwrap();
    let client = push_client(host, &reference).await;
    client
        .push_manifest_raw(&reference, body, http::HeaderValue::from_static(media_type))
        .await
        .unwrap();
}

/// Pushes a single-platform image of `layers` at `repository:tag`; returns its digest.
pub async fn push_layers(host: &str, repository: &str, layers: &[(&str, Vec<u8>)]) -> String {
    let (digest, body) = push_image_manifest(host, repository, layers, "linux/amd64").await;
    tag(
        host,
        repository,
        "v1",
        body,
        "application/vnd.oci.image.manifest.v1+json",
    )
    .await;
    digest
}

/// A client for the shared plain-HTTP registry. Clients install rustls' provider first: it
/// must be in place before any client is built, whichever test runs first.
pub fn plain_client(host: &str) -> RegistryClient {
    init_crypto();
    RegistryClient::new(RegistryOptions {
        insecure_registries: vec![host.to_string()],
        ..Default::default()
    })
    .unwrap()
}

pub fn client_with(
    credentials: DockerConfig,
    ca: Option<&str>,
    insecure: &[&str],
) -> RegistryClient {
    init_crypto();
    RegistryClient::new(RegistryOptions {
        credentials,
        insecure_registries: insecure.iter().map(|s| s.to_string()).collect(),
        ca_pem: ca.map(|c| vec![c.as_bytes().to_vec()]).unwrap_or_default(),
    })
    .unwrap()
}

pub fn request(reference: &str, platform: Option<&str>) -> PullRequest {
    let mut request = PullRequest::new(reference);
    request.platform = platform.map(|p| p.parse::<Platform>().unwrap());
    request
}

pub fn limits() -> EffectiveLimits {
    EffectiveLimits::default()
}
