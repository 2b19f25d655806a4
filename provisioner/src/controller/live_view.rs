//! Reads of live objects that keep only what their reader looks at. Serde skips the fields a
//! view does not name while it parses, so a CRD of megabytes never becomes a tree of tens of
//! megabytes of `Value`s, and nobody's managedFields are kept.

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::Request;
use kube::core::params::GetParams;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The metadata health looks at.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deletion_timestamp: Option<String>,
}

/// An object as health assesses it: its kind, the metadata above, its spec and status.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct WithSpec {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<Value>,
}

/// The same without the spec: for kinds whose spec no rule reads and which may be large (a
/// CRD's schema).
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct WithoutSpec {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<Value>,
}

/// Whether health needs the spec of objects of `group`/`kind`: every kind but CRDs.
pub fn spec_needed(group: &str, kind: &str) -> bool {
    !(group == "apiextensions.k8s.io" && kind == "CustomResourceDefinition")
}

/// Reads `name` through `api` as health sees it (see [`WithSpec`]); `None` when it is absent.
pub async fn for_health(
    client: &Client,
    api: &Api<DynamicObject>,
    name: &str,
    with_spec: bool,
) -> kube::Result<Option<Value>> {
    let object = if with_spec {
        read::<WithSpec>(client, api, name)
            .await?
            .map(serde_json::to_value)
    } else {
        read::<WithoutSpec>(client, api, name)
            .await?
            .map(serde_json::to_value)
    };
    Ok(object.and_then(Result::ok))
}

async fn read<T: DeserializeOwned>(
    client: &Client,
    api: &Api<DynamicObject>,
    name: &str,
) -> kube::Result<Option<T>> {
    let request = Request::new(api.resource_url())
        .get(name, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    match client.request::<T>(request).await {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn views_keep_what_health_reads_and_drop_the_rest() {
        let live = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": { "name": "widgets.example.com", "generation": 2,
                          "managedFields": [{ "manager": "gantry", "fieldsV1": { "f:spec": {} } }],
                          "labels": { "a": "b" } },
            "spec": { "versions": [{ "name": "v1", "schema": { "openAPIV3Schema": {} } }] },
            "status": { "conditions": [{ "type": "Established", "status": "True" }] }
        });
        let without: WithoutSpec = serde_json::from_value(live.clone()).unwrap();
        assert_eq!(
            serde_json::to_value(without).unwrap(),
            json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": { "name": "widgets.example.com", "generation": 2 },
                "status": { "conditions": [{ "type": "Established", "status": "True" }] }
            })
        );
        let with: WithSpec = serde_json::from_value(live).unwrap();
        let with = serde_json::to_value(with).unwrap();
        assert!(with.pointer("/spec/versions/0/name").is_some());
        assert!(with.pointer("/metadata/managedFields").is_none());
        assert!(!spec_needed(
            "apiextensions.k8s.io",
            "CustomResourceDefinition"
        ));
        assert!(spec_needed("apps", "Deployment"));
    }
}
