//! Waiting for a bundle's CRDs: a kind a CRD of the bundle defines is applied only once the
//! CRD is established and the API server serves the kind.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::cluster::discovery::KindCache;
use crate::cluster::live;
use crate::error::{Error, Result};

/// Waits until CRD `crd` is established and the API server serves `gvk`. What was cached for
/// `gvk` is forgotten first: the CRD may have changed (a new version, another scope).
pub async fn wait_served(
    client: &Client,
    kinds: &KindCache,
    crd: &str,
    gvk: &GroupVersionKind,
    timeout: Duration,
) -> Result<()> {
    // Read without its spec: polling a CRD of megabytes would parse all of it every time.
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::core::ApiResource::erase::<CustomResourceDefinition>(&()),
    );
    let deadline = Instant::now() + timeout;
    kinds.forget(gvk);
    loop {
        let established = live::for_health(client, &crds, crd, false)
            .await?
            .and_then(|c| c.pointer("/status/conditions").cloned())
            .and_then(|cs| cs.as_array().cloned())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Established")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            });
        if established && kinds.resolve(client, gvk).await?.is_some() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::CrdNotEstablished {
                crd: crd.to_string(),
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
