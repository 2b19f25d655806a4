//! The renderer against OLM v1's own rendering of the same bundle (its regression suite's
//! expected manifests, in `rules/testdata/registry-v1/`), object for object, and its refusals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/registry-v1/argocd-operator.v0.6.0")
}

fn read_yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// The bundle, read once: its CRDs are 1.3 MB of YAML.
fn argocd() -> RegistryBundle {
    static BUNDLE: std::sync::LazyLock<RegistryBundle> = std::sync::LazyLock::new(read_argocd);
    BUNDLE.clone()
}

fn read_argocd() -> RegistryBundle {
    let dir = testdata().join("bundle");
    let objects = files(&dir.join("manifests"))
        .iter()
        .map(|f| read_yaml(f))
        .collect::<Vec<_>>();
    let annotations = std::fs::read_to_string(dir.join("metadata/annotations.yaml")).unwrap();
    RegistryBundle::new(objects, &annotations).expect("the bundle reads")
}

/// What differs only in how Go's typed structs write an object: nulls, empty maps and lists,
/// `status`, `creationTimestamp`.
fn normalized(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Object(map) => {
            let map: serde_json::Map<String, Value> = map
                .iter()
                .filter(|(k, _)| k.as_str() != "status" && k.as_str() != "creationTimestamp")
                .filter_map(|(k, v)| normalized(v).map(|v| (k.clone(), v)))
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .map(|i| normalized(i).unwrap_or(json!({})))
                .collect(),
        )),
        other => Some(other.clone()),
    }
}

fn key(object: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"]),
    )
}

fn by_key(objects: impl IntoIterator<Item = Value>) -> BTreeMap<(String, String, String), Value> {
    objects
        .into_iter()
        .map(|o| (key(&o), normalized(&o).unwrap()))
        .collect()
}

/// `scenario` of OLM's regression suite: what Gantry renders equals what OLM v1 renders, the
/// CRDs (left out of the copied expectations for their size) passing through unchanged.
fn matches_olm(scenario: &str, watch_namespace: Option<&str>) {
    let bundle = argocd();
    let rendered = render(&bundle, "argocd-system", watch_namespace).expect("renders");
    let (crds, rest): (Vec<Value>, Vec<Value>) = rendered
        .into_iter()
        .partition(|o| o["kind"] == "CustomResourceDefinition");
    assert_eq!(
        by_key(crds),
        by_key(bundle.crds.clone()),
        "{scenario}: the CRDs"
    );
    let expected = by_key(
        files(&testdata().join("expected").join(scenario))
            .iter()
            .map(|f| read_yaml(f)),
    );
    let got = by_key(rest);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{scenario}: the objects"
    );
    for (key, object) in &expected {
        assert_eq!(&got[key], object, "{scenario}: {key:?}");
    }
}

#[test]
fn all_namespaces_renders_as_olm_v1_does() {
    matches_olm("all-namespaces", None);
}

#[test]
fn own_namespace_renders_as_olm_v1_does() {
    matches_olm("own-namespace", Some("argocd-system"));
}

#[test]
fn single_namespace_renders_as_olm_v1_does() {
    matches_olm("single-namespace", Some("argocd-watch"));
}

#[test]
fn the_order_is_accounts_roles_cluster_roles_crds_others_deployments() {
    let rendered = render(&argocd(), "argocd-system", Some("argocd-watch")).unwrap();
    let at = |kind: &str, generated: bool| {
        rendered
            .iter()
            .position(|o| {
                o["kind"] == kind
                    && o["metadata"]["name"]
                        .as_str()
                        .unwrap()
                        .starts_with("argocd-operator.v0")
                        == generated
            })
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let order = [
        at("ServiceAccount", false),
        at("Role", true),
        at("RoleBinding", true),
        at("ClusterRole", true),
        at("ClusterRoleBinding", true),
        at("CustomResourceDefinition", false),
        at("ConfigMap", false),
        at("Deployment", false),
    ];
    assert!(order.is_sorted(), "{order:?}");
    assert_eq!(rendered.last().unwrap()["kind"], "Deployment");
}

fn with_csv(edit: impl FnOnce(&mut Value)) -> RegistryBundle {
    let mut bundle = argocd();
    edit(&mut bundle.csv);
    bundle
}

#[test]
fn what_gantry_cannot_install_is_refused_naming_the_csv_field() {
    let webhooks = with_csv(|csv| {
        csv["spec"]["webhookdefinitions"] = json!([{"type": "ValidatingAdmissionWebhook"}]);
    });
    let error = render(&webhooks, "argocd-system", None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("argocd-operator.v0.6.0, spec.webhookdefinitions"),
        "{error}"
    );
    let api_services = with_csv(|csv| {
        csv["spec"]["apiservicedefinitions"] = json!({"owned": [{"name": "v1.metrics"}]});
    });
    let error = render(&api_services, "argocd-system", None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("spec.apiservicedefinitions.owned: APIServices are not supported"),
        "{error}"
    );
    let dependencies = with_csv(|csv| {
        csv["metadata"]["annotations"]["olm.properties"] =
            json!(r#"[{"type":"olm.package.required","value":{"packageName":"etcd"}}]"#);
    });
    let error = render(&dependencies, "argocd-system", None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("metadata.annotations[olm.properties]: olm.package.required"),
        "{error}"
    );
    let multi_only = with_csv(|csv| {
        csv["spec"]["installModes"] = json!([{"type": "MultiNamespace", "supported": true}]);
    });
    let error = render(&multi_only, "argocd-system", None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("spec.installModes: supports [MultiNamespace]"),
        "{error}"
    );
}

#[test]
fn the_watch_namespace_must_be_one_the_install_modes_allow() {
    let own_only = with_csv(|csv| {
        csv["spec"]["installModes"] = json!([{"type": "OwnNamespace", "supported": true}]);
    });
    let error = render(&own_only, "argocd-system", None)
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("spec.config.watchNamespace: required"),
        "{error}"
    );
    let error = render(&own_only, "argocd-system", Some("elsewhere"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("needs SingleNamespace"), "{error}");
    assert!(render(&own_only, "argocd-system", Some("argocd-system")).is_ok());
    let error = render(&argocd(), "argocd-system", Some("Not_A_Name"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("is not a namespace name"), "{error}");
}

#[test]
fn a_bundle_is_refused_for_what_it_lacks_or_should_not_carry() {
    let annotations = "annotations:\n  operators.operatorframework.io.bundle.package.v1: p\n";
    assert_eq!(
        RegistryBundle::new(vec![], annotations).unwrap_err(),
        RegistryError::NoCsv
    );
    let error = RegistryBundle::new(vec![], "annotations: {}\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("metadata/annotations.yaml: annotations.operators"),
        "{error}"
    );
    let error = RegistryBundle::new(
        vec![],
        "annotations:\n  operators.operatorframework.io.bundle.mediatype.v1: helm\n  operators.operatorframework.io.bundle.package.v1: p\n",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("not \"registry+v1\""), "{error}");
    let mut bundle = argocd();
    bundle.others.push(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "extra"}}),
    );
    let error = render(&bundle, "argocd-system", None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "Deployment extra in manifests/: kind Deployment is not allowed in a registry+v1 bundle"
    );
    let mut bundle = argocd();
    bundle
        .crds
        .retain(|c| c["metadata"]["name"] != "argocds.argoproj.io");
    let error = render(&bundle, "argocd-system", None)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("CRD argocds.argoproj.io is not in the bundle's manifests/"),
        "{error}"
    );
}

#[test]
fn related_images_are_listed() {
    let bundle = with_csv(|csv| {
        csv["spec"]["relatedImages"] = json!([{"name": "op", "image": "quay.io/a/b@sha256:00"}]);
    });
    assert_eq!(bundle.related_images(), ["quay.io/a/b@sha256:00"]);
}

#[test]
fn the_configuration_takes_watch_namespace_only() {
    use super::watch_namespace;
    let config = |v: serde_json::Value| v.as_object().unwrap().clone();
    assert_eq!(watch_namespace(&config(serde_json::json!({}))), Ok(None));
    assert_eq!(
        watch_namespace(&config(serde_json::json!({"watchNamespace": "apps"}))),
        Ok(Some("apps".into()))
    );
    let unknown = watch_namespace(&config(serde_json::json!({"replicas": 2}))).unwrap_err();
    assert!(
        unknown
            .to_string()
            .starts_with("spec.config: replicas is not an option"),
        "{unknown}"
    );
    let invalid =
        watch_namespace(&config(serde_json::json!({"watchNamespace": "Not_A_Name"}))).unwrap_err();
    assert!(
        invalid
            .to_string()
            .starts_with("spec.config.watchNamespace: \"Not_A_Name\""),
        "{invalid}"
    );
}
