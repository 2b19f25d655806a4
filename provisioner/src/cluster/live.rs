//! Live objects: reads that keep only what their reader looks at, and whether a live object
//! already holds what the bundle wants (so applying it would change nothing). Serde skips the
//! fields a view does not name while it parses, so a CRD of megabytes never becomes a tree of
//! tens of megabytes of `Value`s, and nobody's managedFields are kept.

use crate::cluster::errors::is_not_found;
use crate::policy::managed_fields::without_fields_of_others;
use gantry_api::FIELD_MANAGER;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
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

/// `live` as health sees it (the shape [`for_health`] reads): kind, the metadata health looks
/// at, the spec when `with_spec`, and the status.
pub fn health_view(live: &Value, with_spec: bool) -> Value {
    let mut view = serde_json::Map::new();
    for key in ["apiVersion", "kind"] {
        view.insert(
            key.into(),
            live.get(key).cloned().unwrap_or_else(|| Value::from("")),
        );
    }
    let mut metadata = serde_json::Map::new();
    for key in ["name", "namespace", "generation", "deletionTimestamp"] {
        if let Some(value) = live.pointer(&format!("/metadata/{key}")) {
            metadata.insert(key.into(), value.clone());
        }
    }
    view.insert("metadata".into(), Value::Object(metadata));
    if with_spec && let Some(spec) = live.get("spec") {
        view.insert("spec".into(), spec.clone());
    }
    if let Some(status) = live.get("status") {
        view.insert("status".into(), status.clone());
    }
    Value::Object(view)
}

/// Applies `patch` to `name` through `api` (server-side apply with `params`) and returns the
/// API server's answer as health sees it (see [`for_health`]): parsing keeps nothing else.
pub async fn apply_for_health<P: Serialize>(
    client: &Client,
    api: &Api<DynamicObject>,
    name: &str,
    params: &PatchParams,
    patch: &P,
    with_spec: bool,
) -> kube::Result<Value> {
    let request = Request::new(api.resource_url())
        .patch(name, params, &Patch::Apply(patch))
        .map_err(kube::Error::BuildRequest)?;
    let answer = if with_spec {
        serde_json::to_value(client.request::<WithSpec>(request).await?)
    } else {
        serde_json::to_value(client.request::<WithoutSpec>(request).await?)
    };
    Ok(answer.unwrap_or(Value::Null))
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
        Err(e) if is_not_found(&e) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Whether `live` already holds every field of `desired` (so applying would change nothing).
/// Only labels and annotations of metadata count; `status` never does; a Secret's `stringData`
/// is compared against `data`.
pub fn live_matches(live: &Value, desired: &Value) -> bool {
    let Some(desired) = desired.as_object() else {
        return false;
    };
    for (key, want) in desired {
        match key.as_str() {
            "status" => continue,
            "metadata" => {
                for field in ["labels", "annotations"] {
                    let want = want.get(field).unwrap_or(&Value::Null);
                    let have = live
                        .pointer(&format!("/metadata/{field}"))
                        .unwrap_or(&Value::Null);
                    if !contains(have, want) {
                        return false;
                    }
                }
            }
            "stringData" if is_secret(live) => {
                let Some(want) = want.as_object() else {
                    return false;
                };
                for (k, v) in want {
                    let encoded = v.as_str().map(|s| {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD.encode(s)
                    });
                    let have = live.pointer(&format!("/data/{}", escape_pointer(k)));
                    if have.and_then(Value::as_str) != encoded.as_deref() {
                        return false;
                    }
                }
            }
            _ => {
                if !contains(live.get(key).unwrap_or(&Value::Null), want) {
                    return false;
                }
            }
        }
    }
    true
}

/// [`live_matches`] for an object applied without force (`gantry.dev/ssa: Merge`): fields
/// another manager owns in the live object's `managedFields` are theirs, whatever their value,
/// so they are not drift.
pub fn live_matches_leaving_others(live: &Value, desired: &Value) -> bool {
    let managed = live
        .pointer("/metadata/managedFields")
        .unwrap_or(&Value::Null);
    live_matches(
        live,
        &without_fields_of_others(desired, managed, FIELD_MANAGER),
    )
}

/// The fields where `live` does not hold what `desired` has, as paths (`.spec.replicas`,
/// `.spec.template.spec.containers[0].image`, `.metadata.labels.app`): what
/// [`live_matches`] found different, for people to read. Empty exactly when it matches.
pub fn drifted_fields(live: &Value, desired: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(desired) = desired.as_object() else {
        return vec![".".into()];
    };
    for (key, want) in desired {
        match key.as_str() {
            "status" => continue,
            "metadata" => {
                for field in ["labels", "annotations"] {
                    let want = want.get(field).unwrap_or(&Value::Null);
                    let have = live
                        .pointer(&format!("/metadata/{field}"))
                        .unwrap_or(&Value::Null);
                    differences(have, want, &format!(".metadata.{field}"), &mut out);
                }
            }
            "stringData" if is_secret(live) => {
                let Some(want) = want.as_object() else {
                    out.push(".stringData".into());
                    continue;
                };
                for (k, v) in want {
                    let encoded = v.as_str().map(|s| {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD.encode(s)
                    });
                    let have = live.pointer(&format!("/data/{}", escape_pointer(k)));
                    if have.and_then(Value::as_str) != encoded.as_deref() {
                        out.push(format!(".data{}", path_key(k)));
                    }
                }
            }
            _ => differences(
                live.get(key).unwrap_or(&Value::Null),
                want,
                &path_key(key),
                &mut out,
            ),
        }
    }
    out
}

/// [`drifted_fields`] for a `gantry.dev/ssa: Merge` object: fields other managers own are
/// theirs, not drift.
pub fn drifted_fields_leaving_others(live: &Value, desired: &Value) -> Vec<String> {
    let managed = live
        .pointer("/metadata/managedFields")
        .unwrap_or(&Value::Null);
    drifted_fields(
        live,
        &without_fields_of_others(desired, managed, FIELD_MANAGER),
    )
}

/// `.key`, or `["key"]` for keys that are not plain words.
fn path_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        format!(".{key}")
    } else {
        format!("[{key:?}]")
    }
}

/// Where `have` does not contain `want` ([`contains`]), below `path`.
fn differences(have: &Value, want: &Value, path: &str, out: &mut Vec<String>) {
    if contains(have, want) {
        return;
    }
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => {
            for (k, v) in w {
                differences(
                    h.get(k).unwrap_or(&Value::Null),
                    v,
                    &format!("{path}{}", path_key(k)),
                    out,
                );
            }
        }
        (Value::Null, Value::Object(w)) => {
            for (k, v) in w {
                differences(&Value::Null, v, &format!("{path}{}", path_key(k)), out);
            }
        }
        (Value::Array(h), Value::Array(w)) if h.len() == w.len() => {
            for (i, (h, w)) in h.iter().zip(w).enumerate() {
                differences(h, w, &format!("{path}[{i}]"), out);
            }
        }
        _ => out.push(path.to_string()),
    }
}

fn is_secret(live: &Value) -> bool {
    live.get("kind").and_then(Value::as_str) == Some("Secret")
        && live.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// `have` contains `want`: maps key by key, lists element by element, scalars equal (numbers
/// by value). An empty or null `want` is satisfied by an absent field.
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (_, Value::Null) => true,
        (Value::Null, Value::Object(w)) => w.values().all(|v| contains(&Value::Null, v)),
        (Value::Null, Value::Array(w)) => w.is_empty(),
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| contains(h.get(k).unwrap_or(&Value::Null), v)),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(h, w)| contains(h, w))
        }
        (Value::Number(h), Value::Number(w)) => h.as_f64() == w.as_f64(),
        (h, w) => h == w,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_health_view_of_a_live_object_is_what_a_read_for_health_keeps() {
        let live = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "n", "generation": 3,
                "labels": { "a": "b" }, "managedFields": [{ "manager": "x" }],
                "deletionTimestamp": "2026-01-01T00:00:00Z" },
            "spec": { "replicas": 2 },
            "status": { "observedGeneration": 2 }
        });
        let view = health_view(&live, true);
        // The same as parsing the object as `for_health` does.
        let read: WithSpec = serde_json::from_value(live.clone()).unwrap();
        assert_eq!(view, serde_json::to_value(read).unwrap());
        let without: WithoutSpec = serde_json::from_value(live.clone()).unwrap();
        assert_eq!(
            health_view(&live, false),
            serde_json::to_value(without).unwrap()
        );
        assert_eq!(view.pointer("/metadata/managedFields"), None);
    }

    #[test]
    fn drifted_fields_name_what_live_matches_finds_different() {
        let desired = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "labels": { "app": "web", "app.kubernetes.io/name": "web" } },
            "spec": { "replicas": 2, "template": { "spec": { "containers": [
                { "name": "web", "image": "web:1", "args": ["--a"] }] } } },
            "status": { "ignored": true }
        });
        let mut live = desired.clone();
        live["status"] = json!({});
        live["metadata"]["resourceVersion"] = json!("7");
        assert!(live_matches(&live, &desired));
        assert!(drifted_fields(&live, &desired).is_empty());
        live["spec"]["replicas"] = json!(5);
        live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2");
        live["metadata"]["labels"]["app.kubernetes.io/name"] = json!("other");
        live["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--a", "--b"]);
        assert!(!live_matches(&live, &desired));
        // In the order of the object's keys, which depends on serde_json's `preserve_order`
        // (another crate of the workspace turns it on): compared sorted.
        let mut fields = drifted_fields(&live, &desired);
        fields.sort();
        assert_eq!(
            fields,
            vec![
                ".metadata.labels[\"app.kubernetes.io/name\"]",
                ".spec.replicas",
                ".spec.template.spec.containers[0].args",
                ".spec.template.spec.containers[0].image",
            ]
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                            "stringData": {"k": "v"}});
        let live_secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                                 "data": {"k": "eA=="}});
        assert_eq!(drifted_fields(&live_secret, &secret), vec![".data.k"]);
    }

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
    #[test]
    fn live_with_defaults_and_extra_metadata_matches() {
        let desired = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "s", "namespace": "n", "labels": { "a": "1" } },
            "spec": { "ports": [{ "port": 80 }] }
        });
        let live = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "s", "namespace": "n", "uid": "u", "resourceVersion": "7",
                          "labels": { "a": "1", "b": "2" }, "managedFields": [] },
            "spec": { "ports": [{ "port": 80, "protocol": "TCP", "targetPort": 80 }], "type": "ClusterIP" },
            "status": { "loadBalancer": {} }
        });
        assert!(live_matches(&live, &desired));
    }

    #[test]
    fn a_changed_or_missing_field_does_not_match() {
        let desired =
            json!({ "kind": "ConfigMap", "metadata": { "name": "c" }, "data": { "k": "v" } });
        assert!(!live_matches(
            &json!({ "kind": "ConfigMap", "metadata": {}, "data": { "k": "x" } }),
            &desired
        ));
        assert!(!live_matches(
            &json!({ "kind": "ConfigMap", "metadata": {} }),
            &desired
        ));
        let labelled = json!({ "kind": "ConfigMap", "metadata": { "labels": { "l": "1" } } });
        assert!(!live_matches(
            &json!({ "kind": "ConfigMap", "metadata": {} }),
            &labelled
        ));
    }

    #[test]
    fn secret_string_data_is_compared_as_data() {
        let desired = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": {}, "stringData": { "p": "hi" } });
        let live = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": {}, "data": { "p": "aGk=" } });
        assert!(live_matches(&live, &desired));
        let changed = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": {}, "data": { "p": "eA==" } });
        assert!(!live_matches(&changed, &desired));
    }

    #[test]
    fn a_merged_object_does_not_count_fields_of_other_managers_as_drift() {
        let desired = json!({ "kind": "ConfigMap", "metadata": { "name": "c" },
                              "data": { "mine": "1", "shared": "bundle" } });
        let live = |theirs: &str, mine: &str| {
            json!({ "kind": "ConfigMap",
                "metadata": { "name": "c", "managedFields": [
                    { "manager": "gantry", "operation": "Apply",
                      "fieldsV1": { "f:data": { "f:mine": {} } } },
                    { "manager": "kubectl-edit", "operation": "Update",
                      "fieldsV1": { "f:data": { "f:shared": {} } } }
                ] },
                "data": { "mine": mine, "shared": theirs } })
        };
        // Another manager's value of `shared` is theirs: not drift for a merged object...
        assert!(live_matches_leaving_others(&live("edited", "1"), &desired));
        // ...while it is for an object Gantry applies with force.
        assert!(!live_matches(&live("edited", "1"), &desired));
        // A field Gantry owns that changed is drift either way.
        assert!(!live_matches_leaving_others(&live("edited", "2"), &desired));
    }

    #[test]
    fn numbers_compare_by_value_and_empty_wants_match_absence() {
        assert!(contains(&json!(1.0), &json!(1)));
        assert!(contains(&Value::Null, &json!({})));
        assert!(contains(&Value::Null, &json!([])));
        assert!(!contains(&Value::Null, &json!([1])));
        assert!(!contains(&json!([1, 2]), &json!([1])));
    }
}
