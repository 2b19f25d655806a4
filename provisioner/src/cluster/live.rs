//! Live objects: reads that keep only what their reader looks at, and whether a live object
//! already holds what the bundle wants (so applying it would change nothing). Serde skips the
//! fields a view does not name while it parses, so a CRD of megabytes never becomes a tree of
//! tens of megabytes of `Value`s, and nobody's managedFields are kept.

use crate::cluster::errors::is_not_found;
use gantry_api::FIELD_MANAGER;
use gantry_rules::managed_fields::{Owned, without_fields_of_others};
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

/// The fields where `live` does not hold what `desired` has, as paths (`.spec.replicas`,
/// `.spec.template.spec.containers[0].image`, `.metadata.labels.app`); empty when applying
/// `desired` would change nothing. Only labels and annotations of metadata count; `status`
/// never does; a Secret's `stringData` is compared against `data`.
///
/// Fields live holds and `desired` does not (defaults, other managers' fields) are no
/// difference. Nor is a zero value of `desired` (`0`, `false`, `""`) that live lacks while
/// Gantry's apply still owns it in `managedFields`: the API server stores Go zero values of
/// `omitempty` fields as absent (`minReadySeconds: 0`), and anyone else's write that removed or
/// changed the field would have taken it out of Gantry's field set.
pub fn drifted_fields(live: &Value, desired: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(desired) = desired.as_object() else {
        return vec![".".into()];
    };
    let managed = live
        .pointer("/metadata/managedFields")
        .unwrap_or(&Value::Null);
    let root = At::root(Owned::by_apply_of(managed, FIELD_MANAGER));
    for (key, want) in desired {
        let at = root.field(key);
        match key.as_str() {
            "status" => continue,
            "metadata" => {
                for field in ["labels", "annotations"] {
                    let want = want.get(field).unwrap_or(&Value::Null);
                    let have = live
                        .pointer(&format!("/metadata/{field}"))
                        .unwrap_or(&Value::Null);
                    differences(have, want, &at.field(field), &mut out);
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
            _ => differences(live.get(key).unwrap_or(&Value::Null), want, &at, &mut out),
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

/// Where a value sits in the object being compared, and what Gantry's apply owns of the whole
/// object. Each step borrows the one above it: a path is spelt out, and what is owned of it
/// looked up, only where a comparison needs it.
#[derive(Clone, Copy)]
struct At<'a> {
    owned: Owned<'a>,
    parent: Option<&'a At<'a>>,
    step: Step<'a>,
}

#[derive(Clone, Copy)]
enum Step<'a> {
    Field(&'a str),
    /// An element of a list, by its index and its live value (whose key fields find it in the
    /// managed fields).
    Element(usize, &'a Value),
}

impl<'a> At<'a> {
    fn root(owned: Owned<'a>) -> Self {
        Self {
            owned,
            parent: None,
            step: Step::Field(""),
        }
    }

    fn field(&'a self, name: &'a str) -> Self {
        Self {
            owned: self.owned,
            parent: Some(self),
            step: Step::Field(name),
        }
    }

    fn element(&'a self, index: usize, live: &'a Value) -> Self {
        Self {
            owned: self.owned,
            parent: Some(self),
            step: Step::Element(index, live),
        }
    }

    /// What Gantry's apply owns of the value here.
    fn owned(&self) -> Owned<'a> {
        match (self.parent, self.step) {
            (None, _) => self.owned,
            (Some(parent), Step::Field(name)) => parent.owned().field(name),
            (Some(parent), Step::Element(index, live)) => parent.owned().element(live, index),
        }
    }

    fn path(&self) -> String {
        match (self.parent, self.step) {
            (None, _) => String::new(),
            (Some(parent), Step::Field(name)) => parent.path() + &path_key(name),
            (Some(parent), Step::Element(index, _)) => format!("{}[{index}]", parent.path()),
        }
    }
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

/// Where `have` does not contain `want` ([`contains`]), below `at`.
fn differences(have: &Value, want: &Value, at: &At, out: &mut Vec<String>) {
    if contains(have, want, at) {
        return;
    }
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => {
            for (k, v) in w {
                differences(h.get(k).unwrap_or(&Value::Null), v, &at.field(k), out);
            }
        }
        (Value::Null, Value::Object(w)) => {
            for (k, v) in w {
                differences(&Value::Null, v, &at.field(k), out);
            }
        }
        (Value::Array(h), Value::Array(w)) if h.len() == w.len() => {
            for (i, (h, w)) in h.iter().zip(w).enumerate() {
                differences(h, w, &at.element(i, h), out);
            }
        }
        _ => out.push(at.path()),
    }
}

fn is_secret(live: &Value) -> bool {
    live.get("kind").and_then(Value::as_str) == Some("Secret")
        && live.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// `have` (at `at`) contains `want`: maps key by key, lists element by element, scalars equal
/// (numbers by value). An empty or null `want` is satisfied by an absent field, and so is a
/// zero scalar that Gantry's apply owns there (the API server dropped it; see
/// [`drifted_fields`]).
fn contains(have: &Value, want: &Value, at: &At) -> bool {
    match (have, want) {
        (_, Value::Null) => true,
        (Value::Null, Value::Object(w)) => w
            .iter()
            .all(|(k, v)| contains(&Value::Null, v, &at.field(k))),
        (Value::Null, Value::Array(w)) => w.is_empty(),
        (Value::Null, w) if is_zero(w) => at.owned().is_owned(),
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| contains(h.get(k).unwrap_or(&Value::Null), v, &at.field(k))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len()
                && h.iter()
                    .zip(w)
                    .enumerate()
                    .all(|(i, (h, w))| contains(h, w, &at.element(i, h)))
        }
        (Value::Number(h), Value::Number(w)) => h.as_f64() == w.as_f64(),
        (h, w) => h == w,
    }
}

/// `0`, `false` or `""`: what Go's `omitempty` leaves out of an object.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    fn matches(live: &Value, desired: &Value) -> bool {
        drifted_fields(live, desired).is_empty()
    }

    fn matches_leaving_others(live: &Value, desired: &Value) -> bool {
        drifted_fields_leaving_others(live, desired).is_empty()
    }

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
    fn drifted_fields_name_what_differs() {
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
        assert!(matches(&live, &desired));
        assert!(drifted_fields(&live, &desired).is_empty());
        live["spec"]["replicas"] = json!(5);
        live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2");
        live["metadata"]["labels"]["app.kubernetes.io/name"] = json!("other");
        live["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--a", "--b"]);
        assert!(!matches(&live, &desired));
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
        assert!(matches(&live, &desired));
    }

    #[test]
    fn a_changed_or_missing_field_does_not_match() {
        let desired =
            json!({ "kind": "ConfigMap", "metadata": { "name": "c" }, "data": { "k": "v" } });
        assert!(!matches(
            &json!({ "kind": "ConfigMap", "metadata": {}, "data": { "k": "x" } }),
            &desired
        ));
        assert!(!matches(
            &json!({ "kind": "ConfigMap", "metadata": {} }),
            &desired
        ));
        let labelled = json!({ "kind": "ConfigMap", "metadata": { "labels": { "l": "1" } } });
        assert!(!matches(
            &json!({ "kind": "ConfigMap", "metadata": {} }),
            &labelled
        ));
    }

    #[test]
    fn secret_string_data_is_compared_as_data() {
        let desired = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": {}, "stringData": { "p": "hi" } });
        let live = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": {}, "data": { "p": "aGk=" } });
        assert!(matches(&live, &desired));
        let changed = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": {}, "data": { "p": "eA==" } });
        assert!(!matches(&changed, &desired));
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
        assert!(matches_leaving_others(&live("edited", "1"), &desired));
        // ...while it is for an object Gantry applies with force.
        assert!(!matches(&live("edited", "1"), &desired));
        // A field Gantry owns that changed is drift either way.
        assert!(!matches_leaving_others(&live("edited", "2"), &desired));
    }

    /// ingress-nginx's controller Deployment as its upstream manifest writes it (with the
    /// bundle's label, and a few more zero values upstream manifests carry), and as
    /// kube-apiserver answered Gantry's server-side apply of it: without its zero values, with
    /// its defaults, and with Gantry's field set in `managedFields`.
    fn ingress_nginx() -> (Value, Value) {
        let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap();
        (
            parse(include_str!(
                "testdata/ingress-nginx-controller.desired.json"
            )),
            parse(include_str!("testdata/ingress-nginx-controller.live.json")),
        )
    }

    /// Gantry's field set in `live`, at `pointer` below `fieldsV1`.
    fn gantrys_fields<'a>(live: &'a mut Value, pointer: &str) -> &'a mut Map<String, Value> {
        let entries = live["metadata"]["managedFields"].as_array_mut().unwrap();
        let ours = entries
            .iter_mut()
            .find(|e| e["manager"] == FIELD_MANAGER)
            .unwrap();
        ours.pointer_mut(&format!("/fieldsV1{pointer}"))
            .and_then(Value::as_object_mut)
            .unwrap()
    }

    #[test]
    fn zero_values_the_api_server_dropped_are_no_drift() {
        let (desired, live) = ingress_nginx();
        assert_eq!(live.pointer("/spec/minReadySeconds"), None);
        assert_eq!(drifted_fields(&live, &desired), Vec::<String>::new());
        assert!(matches_leaving_others(&live, &desired));
        // What tells them from fields someone removed: Gantry's apply still owns them.
        let mut unowned = live.clone();
        unowned["metadata"]["managedFields"] = json!([]);
        let mut fields = drifted_fields(&unowned, &desired);
        fields.sort();
        assert_eq!(
            fields,
            [
                ".spec.minReadySeconds",
                ".spec.template.spec.containers[0].env[3].value",
                ".spec.template.spec.containers[0].ports[0].hostPort",
                ".spec.template.spec.containers[0].readinessProbe.initialDelaySeconds",
                ".spec.template.spec.containers[1].stdin",
                ".spec.template.spec.containers[1].tty",
                ".spec.template.spec.hostNetwork",
            ]
        );
    }

    #[test]
    fn a_zero_value_someone_changed_or_removed_is_drift() {
        let (desired, live) = ingress_nginx();
        // As kube-apiserver answers another manager's merge patch of `minReadySeconds: 5`: the
        // field leaves Gantry's set for theirs.
        let mut changed = live.clone();
        changed["spec"]["minReadySeconds"] = json!(5);
        gantrys_fields(&mut changed, "/f:spec").remove("f:minReadySeconds");
        changed["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "manager": "kubectl-patch", "operation": "Update",
                          "fieldsV1": { "f:spec": { "f:minReadySeconds": {} } } }));
        assert_eq!(
            drifted_fields(&changed, &desired),
            [".spec.minReadySeconds"]
        );
        // A value that is not zero is compared as it is, even where Gantry's set still has it.
        let mut changed = live.clone();
        changed["spec"]["minReadySeconds"] = json!(5);
        assert_eq!(
            drifted_fields(&changed, &desired),
            [".spec.minReadySeconds"]
        );

        // Someone removed `allowPrivilegeEscalation: false` (a pointer: stored when false).
        let mut removed = live.clone();
        let container = "/spec/template/spec/containers/0/securityContext";
        removed
            .pointer_mut(container)
            .and_then(Value::as_object_mut)
            .unwrap()
            .remove("allowPrivilegeEscalation");
        gantrys_fields(
            &mut removed,
            "/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"controller\"}/f:securityContext",
        )
        .remove("f:allowPrivilegeEscalation");
        assert_eq!(
            drifted_fields(&removed, &desired),
            [".spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation"]
        );

        // A value that is not zero and is absent live is sent, whoever owns it.
        let mut absent = live.clone();
        absent["spec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("terminationGracePeriodSeconds");
        assert_eq!(
            drifted_fields(&absent, &desired),
            [".spec.template.spec.terminationGracePeriodSeconds"]
        );
    }

    #[test]
    fn numbers_compare_by_value_and_empty_wants_match_absence() {
        let at = At::root(Owned::default());
        assert!(contains(&json!(1.0), &json!(1), &at));
        assert!(contains(&Value::Null, &json!({}), &at));
        assert!(contains(&Value::Null, &json!([]), &at));
        assert!(!contains(&Value::Null, &json!([1]), &at));
        assert!(!contains(&json!([1, 2]), &json!([1]), &at));
        // A zero value is not an absent field unless Gantry's apply owns it (below).
        assert!(!contains(&Value::Null, &json!(0), &at));
    }
}
