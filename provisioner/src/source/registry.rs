//! Where a bundle's content comes from: the registry client for a bundle and its class
//! (pull secrets, insecure registries, extra CA), resolving and pulling.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Mutex;

use gantry_api::{Bundle, ProvisionerClass};
use gantry_image::{DockerConfig, RegistryClient, RegistryOptions};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

const DOCKER_CONFIG_JSON: &str = ".dockerconfigjson";
const CA_KEY: &str = "ca.crt";

/// What a registry client was made from (pull secrets' contents, CA certificates, insecure
/// registries), as a digest: content one client pulled is reused only by bundles whose client
/// is made from the same, so no bundle gets an image its own credentials could not pull.
pub type CredentialsId = [u8; 32];

/// A shared registry client and what it was made from.
#[derive(Clone)]
pub struct SharedClient {
    client: RegistryClient,
    pub credentials: CredentialsId,
}

impl Deref for SharedClient {
    type Target = RegistryClient;
    fn deref(&self) -> &RegistryClient {
        &self.client
    }
}

/// A registry client with the credentials of the class and the bundle: pull secrets and the
/// CA secret are read from `namespace` (the provisioner's).
pub async fn registry_client(
    client: &Client,
    namespace: &str,
    registries: &RegistryClients,
    class: &ProvisionerClass,
    bundle: &Bundle,
) -> Result<SharedClient> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut credentials = DockerConfig::default();
    // What the client is made from, in full: the key of the shared client.
    let mut key = Vec::new();
    let mut add_to_key = |part: &[u8]| {
        key.extend_from_slice(&(part.len() as u64).to_le_bytes());
        key.extend_from_slice(part);
    };
    let names = class
        .spec
        .pull_secrets
        .iter()
        .chain(bundle.spec.pull_secret.iter());
    for name in names {
        let data = secret_key(&secrets, namespace, name, DOCKER_CONFIG_JSON).await?;
        add_to_key(b"credentials");
        add_to_key(&data);
        let config = DockerConfig::from_json(&data, &format!("secret {}/{name}", namespace))
            .map_err(|e| Error::PullSecret {
                secret: name.clone(),
                message: e.to_string(),
            })?;
        credentials.merge(config);
    }
    let mut ca_pem = Vec::new();
    if let Some(name) = &class.spec.registry_ca_secret {
        let ca = secret_key(&secrets, namespace, name, CA_KEY).await?;
        add_to_key(b"ca");
        add_to_key(&ca);
        ca_pem.push(ca);
    }
    for registry in &class.spec.insecure_registries {
        add_to_key(b"insecure");
        add_to_key(registry.as_bytes());
    }
    let id: CredentialsId = Sha256::digest(&key).into();
    registries
        .get_or_make(key, || {
            RegistryClient::new(RegistryOptions {
                credentials,
                insecure_registries: class.spec.insecure_registries.clone(),
                ca_pem,
            })
        })
        .map(|client| SharedClient {
            client,
            credentials: id,
        })
        .map_err(|e| Error::from_image(&bundle.spec.image, e))
}

async fn secret_key(
    secrets: &Api<Secret>,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Vec<u8>> {
    let secret = secrets
        .get_opt(name)
        .await?
        .ok_or_else(|| Error::PullSecret {
            secret: name.to_string(),
            message: format!("not found in namespace {namespace}"),
        })?;
    secret
        .data
        .and_then(|mut data| data.remove(key))
        .map(|bytes| bytes.0)
        .ok_or_else(|| Error::PullSecret {
            secret: name.to_string(),
            message: format!("has no key {key}"),
        })
}

/// Registry clients by what they were made from (the pull secrets' contents, insecure
/// registries, CA certificates). Making a client builds two TLS configurations from the
/// system's roots, which costs more than resolving a tag; and a kept client reuses its
/// connections. Keyed by the full contents, so a client is shared only by bundles with exactly
/// the same credentials. Bounded: when full, it starts afresh.
#[derive(Default)]
pub struct RegistryClients {
    entries: Mutex<HashMap<Vec<u8>, RegistryClient>>,
}

impl RegistryClients {
    /// More entries than this and the map is cleared (costing one client each).
    const MAX_ENTRIES: usize = 256;

    /// The client made from `key`, made with `make` when there is none.
    pub fn get_or_make<E>(
        &self,
        key: Vec<u8>,
        make: impl FnOnce() -> Result<RegistryClient, E>,
    ) -> Result<RegistryClient, E> {
        if let Some(client) = self.entries.lock().ok().and_then(|e| e.get(&key).cloned()) {
            return Ok(client);
        }
        let client = make()?;
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= Self::MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(key, client.clone());
        }
        Ok(client)
    }
}

/// Whether a reference pins a digest.
pub fn is_digest_reference(image: &str) -> bool {
    image.contains("@sha256:")
}

/// The digest part of `repo@sha256:...`.
pub fn digest_of(pinned: &str) -> Option<&str> {
    pinned.rsplit_once('@').map(|(_, digest)| digest)
}
