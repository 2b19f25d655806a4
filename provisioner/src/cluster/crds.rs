//! Waiting for a bundle's CRDs: a kind a CRD of the bundle defines is applied only once the
//! CRD is established and the API server serves the kind. And what the upgrade check of a CRD
//! reads: the CRD as it is live, and whether objects are read through one of its versions.

use std::time::{Duration, Instant};

use gantry_rules::conditions::ConditionStatus;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::cluster::discovery::KindCache;
use crate::cluster::live;
use crate::error::{Error, Result};

/// The kinds a CRD (as applied) serves: one per served version.
pub fn served_kinds(crd: &Value) -> Vec<GroupVersionKind> {
    let group = crd.pointer("/spec/group").and_then(Value::as_str);
    let kind = crd.pointer("/spec/names/kind").and_then(Value::as_str);
    let (Some(group), Some(kind)) = (group, kind) else {
        return Vec::new();
    };
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .map(|version| GroupVersionKind::gvk(group, version, kind))
        .collect()
}

/// The CRD `name` as it is live, with its status; `None` when it does not exist.
pub async fn read_live(client: &Client, name: &str) -> Result<Option<Value>> {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<CustomResourceDefinition>(&()),
    );
    Ok(live::for_health(client, &crds, name, true).await?)
}

/// The objects of the live CRD `crd` as read through `version`, in all namespaces.
fn objects_api(client: &Client, crd: &Value, version: &str) -> Api<DynamicObject> {
    let text = |pointer| {
        crd.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let gvk = GroupVersionKind::gvk(text("/spec/group"), version, text("/spec/names/kind"));
    let resource = ApiResource::from_gvk_with_plural(&gvk, text("/spec/names/plural"));
    Api::all_with(client.clone(), &resource)
}

/// Whether any object of the live CRD `crd` is read through `version` (a list with limit 1). A
/// version the API server does not serve (any more) has none to show.
pub async fn has_objects(client: &Client, crd: &Value, version: &str) -> Result<bool> {
    let api = objects_api(client, crd, version);
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(list) => Ok(!list.items.is_empty()),
        Err(e) if crate::cluster::errors::is_not_found(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Every object of the live CRD `crd` read through `version`, in all namespaces, read in pages;
/// none when the version is not served.
pub async fn list_objects(
    client: &Client,
    crd: &Value,
    version: &str,
) -> Result<Vec<DynamicObject>> {
    let api = objects_api(client, crd, version);
    let mut objects = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(e) if crate::cluster::errors::is_not_found(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        objects.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(objects),
        }
    }
}

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
                        && c.get("status")
                            .and_then(Value::as_str)
                            .map(ConditionStatus::from)
                            == Some(ConditionStatus::True)
                })
            });
        if established && kinds.resolve(client, gvk).await?.is_some() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::CrdNotEstablished {
                crd: crd.to_string(),
                timeout: timeout.into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_crd_serves_a_kind_per_served_version() {
        let crd = json!({ "spec": {
            "group": "example.com",
            "names": { "kind": "Widget", "plural": "widgets" },
            "versions": [
                { "name": "v1", "served": true, "storage": true },
                { "name": "v1beta1", "served": false, "storage": false },
                { "name": "v2", "served": true, "storage": false },
            ],
        }});
        assert_eq!(
            served_kinds(&crd),
            vec![
                GroupVersionKind::gvk("example.com", "v1", "Widget"),
                GroupVersionKind::gvk("example.com", "v2", "Widget"),
            ]
        );
        assert!(served_kinds(&json!({ "spec": {} })).is_empty());
    }
}
