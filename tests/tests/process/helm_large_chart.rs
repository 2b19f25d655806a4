//! A large real chart through `gantry.dev/helm`: OPA Gatekeeper's (`charts/gatekeeper` of the
//! Go module github.com/open-policy-agent/gatekeeper/v3 v3.18.2, fetched from the module
//! proxy), with its 14 CRDs (`crds/`), a ValidatingWebhookConfiguration and a
//! MutatingWebhookConfiguration whose backend is the chart's own webhook Service, the serving
//! certificate's Secret, two Deployments, RBAC, and hooks. Pushed by the real `helm push`,
//! rendered by the real `gantry-helm-plugin`, installed, upgraded in place by a values change and
//! uninstalled. `helm template --include-crds` with the same values, release name and
//! namespace is the independent check: the bundle's inventory is exactly its objects, less the
//! hooks docs/helm.md says are skipped.
//!
//! The webhooks are live while installed (the one of `failurePolicy: Fail` refuses a namespace)
//! and gone after; what the chart's certificate rotator would write beside the chart (the
//! webhooks' `caBundle`, the serving certificate's Secret) is kept by a pass over the installed
//! content and by the upgrade, and is no drift.
//!
//! The chart's size: 29,583 bytes packaged (`helm package`); 39 objects and 265 KB of YAML as
//! `helm template --include-crds` renders it with the values below, of which Gantry installs
//! 31 objects, 255 KB (the 14 CRDs in wave 0, 229 KB of them; 13 templated objects; 4
//! `post-install` hooks) and skips 8 (the `post-upgrade` and `pre-delete` hooks). The test
//! takes about 12 s: the install is Ready about 8 s after the control plane is up (the plugin
//! started and registered, the chart packaged and pushed), the upgrade about 1 s, the uninstall
//! about 2 s.
//!
//! The values are chosen for a cluster where no Pod ever runs (no scheduler, no kubelet):
//! - `upgradeCRDs.enabled: false`: its `pre-install` hook Job (which applies the CRDs again
//!   from an image) would be a wave of its own, and the templates wait for the Jobs of the wave
//!   before them (docs/helm.md), so the install would wait for it forever;
//! - the webhooks stay enabled (what the test is about). Their Service never has endpoints,
//!   and the API server routes to endpoints (`--enable-aggregator-routing`), so each call fails
//!   at once; the main webhooks' `failurePolicy: Ignore` lets the requests through. The
//!   `check-ignore-label` webhook fails namespace writes outside the release namespace while
//!   installed, so the release namespace is created first, and no namespace is written after
//!   but for the dry run that shows the refusal;
//! - the `post-install` hooks stay (the namespace-labelling Job and its RBAC): they are the
//!   last wave, applied without waiting for the Job (docs/helm.md#limits);
//! - `postUpgrade.labelNamespace.enabled` and `preUninstall.deleteWebhookConfigurations.enabled`
//!   are turned on so that `helm template` renders `post-upgrade` and `pre-delete` hooks, which
//!   must not be installed. The chart has no `test` hooks.
//!
//! A cluster of its own: the chart's webhooks (matching every resource) would be called on the
//! other modules' requests, and its CRDs are cluster-scoped; its provisioner runs with a token
//! for plugins, and the plugin is registered in its namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use gantry_api::Bundle;
use gantry_api::conditions::types;
use gantry_tests::e2e::*;
use gantry_tests::helm::{Objects, go_module_dir, helm_binary, package_and_push, yaml_objects};
use gantry_tests::helm_plugin::gantry_with_helm_plugin;
use gantry_tests::{registry, wait_until};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

static CLUSTER: Isolated = Isolated::new();

/// The release: the Bundle's name and its namespace.
const RELEASE: &str = "gatekeeper";
const NS: &str = "gatekeeper-system";

const VALIDATING: &str = "gatekeeper-validating-webhook-configuration";
const MUTATING: &str = "gatekeeper-mutating-webhook-configuration";
const CERT_SECRET: &str = "gatekeeper-webhook-server-cert";

/// How long the CRDs (and the rest) may take to go once the Bundle is deleted: the API server
/// deletes each CRD's custom resources before the CRD, one CRD after the other, and beside the
/// whole process tier 14 CRDs took more than 120 s.
const GONE: Duration = Duration::from_secs(300);

/// An object as the inventory names it: (group, kind, namespace, name).
type Key = (String, String, Option<String>, String);

/// The values of the install (see the module's comment).
fn values() -> Value {
    json!({
        "replicas": 2,
        "auditInterval": 60,
        "upgradeCRDs": { "enabled": false },
        "postUpgrade": { "labelNamespace": { "enabled": true } },
        "preUninstall": { "deleteWebhookConfigurations": { "enabled": true } },
    })
}

/// The events of an object's `helm.sh/hook` annotation; empty for an ordinary object.
fn hooks_of(object: &Value) -> Vec<String> {
    object["metadata"]["annotations"]["helm.sh/hook"]
        .as_str()
        .map(|hooks| hooks.split(',').map(|h| h.trim().to_string()).collect())
        .unwrap_or_default()
}

/// Whether docs/helm.md's rules install the object: ordinary objects and CRDs do, hooks only
/// when they name `pre-install` or `post-install`.
fn installed(object: &Value) -> bool {
    let hooks = hooks_of(object);
    hooks.is_empty()
        || hooks
            .iter()
            .any(|h| h == "pre-install" || h == "post-install")
}

/// The API resource of each kind among `objects`, and whether it is namespaced, from the
/// cluster's discovery.
async fn resources(client: &Client, objects: &Objects) -> BTreeMap<String, (ApiResource, bool)> {
    let mut resources = BTreeMap::new();
    for object in objects.values() {
        let api_version = object["apiVersion"].as_str().unwrap();
        let kind = object["kind"].as_str().unwrap();
        let key = format!("{api_version} {kind}");
        if resources.contains_key(&key) {
            continue;
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let (resource, capabilities) =
            kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind))
                .await
                .unwrap_or_else(|e| panic!("discovering {key}: {e}"));
        resources.insert(key, (resource, capabilities.scope == Scope::Namespaced));
    }
    resources
}

/// The object's API resource and its key as the inventory names it: namespaced objects the
/// chart leaves without a namespace go to the release namespace.
fn key_of(object: &Value, resources: &BTreeMap<String, (ApiResource, bool)>) -> (ApiResource, Key) {
    let api_version = object["apiVersion"].as_str().unwrap();
    let kind = object["kind"].as_str().unwrap();
    let (resource, namespaced) = resources[&format!("{api_version} {kind}")].clone();
    let namespace = namespaced.then(|| {
        object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(NS)
            .to_string()
    });
    let group = api_version
        .split_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    (resource, (group, kind.to_string(), namespace, name))
}

fn inventory(bundle: &Bundle) -> BTreeSet<Key> {
    bundle
        .status
        .as_ref()
        .unwrap()
        .inventory
        .iter()
        .map(|e| {
            (
                e.group.clone(),
                e.kind.clone(),
                e.namespace.clone(),
                e.name.clone(),
            )
        })
        .collect()
}

fn dynamic(client: &Client, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// What of a webhook configuration's webhooks the chart decides (the API server defaults the
/// rest): name, failure policy, the Service called and its path, the rules' groups, operations
/// and resources.
fn webhooks(configuration: &Value) -> Vec<Value> {
    configuration["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let service = &w["clientConfig"]["service"];
            json!({
                "name": w["name"],
                "failurePolicy": w["failurePolicy"],
                "timeoutSeconds": w["timeoutSeconds"],
                "service": [service["namespace"], service["name"], service["path"]],
                "namespaceSelector": w["namespaceSelector"],
                "rules": w["rules"].as_array().unwrap().iter().map(|r| json!([
                    r["apiGroups"], r["apiVersions"], r["operations"], r["resources"],
                ])).collect::<Vec<_>>(),
            })
        })
        .collect()
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

/// `helm template` of `archive` with `values` (as a values file) and the cluster's version,
/// CRDs included.
fn template(home: &Path, archive: &Path, values: &Value, version: &str) -> Objects {
    let file = home.join("values.json");
    std::fs::write(&file, values.to_string()).unwrap();
    let rendered = Command::new(helm_binary())
        .args([
            "template",
            RELEASE,
            archive.to_str().unwrap(),
            "--namespace",
            NS,
            "--kube-version",
            version,
            "--include-crds",
            "-f",
            file.to_str().unwrap(),
        ])
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("running helm template");
    assert!(
        rendered.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    yaml_objects(
        "helm template",
        &String::from_utf8(rendered.stdout).unwrap(),
    )
}

fn find<'a>(objects: &'a Objects, kind: &str, name: &str) -> &'a Value {
    objects
        .values()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("helm template renders no {kind} {name}"))
}

/// A dry-run create of namespace `name`: what admission says of it.
async fn create_namespace_dry_run(client: &Client, name: &str) -> Result<(), String> {
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name },
    }))
    .unwrap();
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&params, &namespace)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_large_chart_with_crds_and_webhooks_installs_upgrades_and_uninstalls_as_helm_template_renders_it()
 {
    let started = Instant::now();
    let cluster = CLUSTER.get();
    let plane = cluster.plane();
    let client = plane.client().await;
    let work = tempfile::tempdir().unwrap();
    let (_gantry, plugin) = gantry_with_helm_plugin(plane, work.path(), &[]).await;

    let home = work.path().join("helm");
    let (archive, reference) = package_and_push(
        &home,
        &go_module_dir("github.com/open-policy-agent/gatekeeper/v3@v3.18.2")
            .join("charts/gatekeeper"),
        registry().host(),
        "charts",
    );
    assert!(
        reference.ends_with("/charts/gatekeeper:3.18.2"),
        "{reference}"
    );
    // Created before the webhooks exist: their check-ignore-label webhook refuses namespace
    // writes outside the release namespace while its backend is down.
    ensure_namespace(&client, NS).await;

    // The independent check: `helm template` with the same values, release and namespace.
    let version = client.apiserver_version().await.unwrap().git_version;
    let templated = template(&home, &archive, &values(), &version);
    let crd_names: BTreeSet<String> = templated
        .values()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(crd_names.len(), 14, "the CRDs of crds/: {crd_names:?}");
    let skipped: BTreeSet<(String, String)> = templated
        .values()
        .filter(|o| !installed(o))
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        skipped.contains(&("Job".into(), "gatekeeper-delete-webhook-configs".into()))
            && skipped.contains(&(
                "Job".into(),
                "gatekeeper-update-namespace-label-post-upgrade".into()
            )),
        "helm template renders the pre-delete and post-upgrade hooks: {skipped:?}"
    );

    let mut bundle_spec = spec_of_class(&reference, Some(NS), "helm");
    bundle_spec.config = Some(values().as_object().unwrap().clone());
    create_bundle(&client, RELEASE, bundle_spec).await;
    let bundle = wait_bundle(&client, RELEASE, "Ready", is_ready).await;
    let installed_at = started.elapsed();
    let status = bundle.status.as_ref().unwrap();
    assert_eq!(
        status.rendered.as_ref().and_then(|r| r.source.as_deref()),
        Some("gatekeeper 3.18.2")
    );

    // The inventory is exactly what helm template renders, less the skipped hooks.
    let resources = resources(&client, &templated).await;
    let expected: BTreeMap<Key, ApiResource> = templated
        .values()
        .filter(|o| installed(o))
        .map(|o| {
            let (resource, key) = key_of(o, &resources);
            (key, resource)
        })
        .collect();
    assert_eq!(
        expected.len(),
        31,
        "14 CRDs, 13 templates, 4 post-install hooks"
    );
    assert_eq!(
        inventory(&bundle),
        expected.keys().cloned().collect::<BTreeSet<_>>(),
        "the objects helm template gives, its post-upgrade and pre-delete hooks skipped"
    );
    for (kind, name) in &skipped {
        assert!(
            !inventory(&bundle)
                .iter()
                .any(|k| &k.1 == kind && &k.3 == name),
            "{kind} {name} is a hook that is not installed"
        );
    }
    // Every one of them is there.
    for ((_, kind, namespace, name), resource) in &expected {
        assert!(
            dynamic(&client, resource, namespace.as_deref())
                .get_opt(name)
                .await
                .unwrap()
                .is_some(),
            "{kind} {namespace:?}/{name} is installed"
        );
    }

    // Every CRD of crds/ is Established.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in &crd_names {
        let crd = crds.get(name).await.unwrap();
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "CRD {name} is Established");
        let templated_crd = find(&templated, "CustomResourceDefinition", name);
        let live = serde_json::to_value(&crd.spec).unwrap();
        assert_eq!(live["group"], templated_crd["spec"]["group"], "{name}");
        assert_eq!(
            live["names"]["plural"],
            templated_crd["spec"]["names"]["plural"]
        );
    }

    // The webhook configurations, as helm template renders them.
    let validating = serde_json::to_value(
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .get(VALIDATING)
            .await
            .unwrap(),
    )
    .unwrap();
    let templated_validating = find(&templated, "ValidatingWebhookConfiguration", VALIDATING);
    assert_eq!(webhooks(&validating), webhooks(templated_validating));
    assert_eq!(
        validating["webhooks"][0]["clientConfig"]["service"]["name"],
        "gatekeeper-webhook-service"
    );
    let mutating = serde_json::to_value(
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .get(MUTATING)
            .await
            .unwrap(),
    )
    .unwrap();
    let templated_mutating = find(&templated, "MutatingWebhookConfiguration", MUTATING);
    assert_eq!(webhooks(&mutating), webhooks(templated_mutating));

    // The webhooks are called: with no backend, the one of failurePolicy Fail refuses a new
    // namespace (the others, failurePolicy Ignore, let every request through).
    let refused = wait_until(
        "the check-ignore-label webhook called",
        Duration::from_secs(30),
        || async { create_namespace_dry_run(&client, "elsewhere").await.err() },
    )
    .await;
    assert!(
        refused.contains("check-ignore-label.gatekeeper.sh"),
        "{refused}"
    );

    // What Gatekeeper's certificate rotator writes beside the chart (the serving certificate
    // into the Secret, its CA into the webhooks' caBundle) is not Gantry's: a pass over the
    // installed content keeps it.
    let ca_bundle = STANDARD.encode(std::fs::read(plugin.ca_file()).unwrap());
    let rotator = PatchParams {
        field_manager: Some("cert-rotator".into()),
        ..PatchParams::default()
    };
    let inject = json!([
        { "op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca_bundle },
        { "op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": ca_bundle },
    ]);
    let validating_api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    validating_api
        .patch(
            VALIDATING,
            &rotator,
            &Patch::<Value>::Json(serde_json::from_value(inject).unwrap()),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    secrets
        .patch(
            CERT_SECRET,
            &rotator,
            &Patch::Merge(json!({ "data": { "ca.crt": ca_bundle } })),
        )
        .await
        .unwrap();
    let passed = reconcile_handled(&client, RELEASE).await;
    assert!(is_ready(&passed));
    assert!(
        condition(&passed, types::DRIFTED).is_none_or(|c| c.status != "True"),
        "what another manager wrote is no drift: {:?}",
        condition(&passed, types::DRIFTED)
    );
    let injected_kept = || async {
        let live = validating_api.get(VALIDATING).await.unwrap();
        for webhook in live.webhooks.unwrap_or_default() {
            assert_eq!(
                webhook
                    .client_config
                    .ca_bundle
                    .map(|b| STANDARD.encode(b.0)),
                Some(ca_bundle.clone()),
                "the caBundle of {} is kept",
                webhook.name
            );
        }
        let secret = secrets.get(CERT_SECRET).await.unwrap();
        assert!(
            secret.data.unwrap_or_default().contains_key("ca.crt"),
            "the certificate in Secret {CERT_SECRET} is kept"
        );
    };
    injected_kept().await;

    // The Deployments, as helm template renders them.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let manager_name = "gatekeeper-controller-manager";
    let manager = deployments.get(manager_name).await.unwrap();
    let live = serde_json::to_value(&manager).unwrap();
    let templated_manager = find(&templated, "Deployment", manager_name);
    assert_eq!(live["spec"]["replicas"], 2);
    assert_eq!(
        container(&live)["args"],
        container(templated_manager)["args"]
    );
    assert_eq!(
        container(&live)["image"],
        container(templated_manager)["image"]
    );
    let audit_uid = deployments.get("gatekeeper-audit").await.unwrap().uid();
    let audit = serde_json::to_value(deployments.get("gatekeeper-audit").await.unwrap()).unwrap();
    let templated_audit = find(&templated, "Deployment", "gatekeeper-audit");
    assert_eq!(
        container(&audit)["args"],
        container(templated_audit)["args"]
    );
    assert!(
        container(&audit)["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--audit-interval=60")),
        "{}",
        container(&audit)["args"]
    );
    // The post-install hook Job is installed, its hook annotations kept.
    let job = find(&templated, "Job", "gatekeeper-update-namespace-label");
    let (job_resource, _) = key_of(job, &resources);
    let live_job = dynamic(&client, &job_resource, Some(NS))
        .get("gatekeeper-update-namespace-label")
        .await
        .unwrap();
    assert_eq!(
        live_job
            .annotations()
            .get("helm.sh/hook")
            .map(String::as_str),
        Some("post-install")
    );

    // A values change upgrades in place: the same Deployments, with the new spec.
    let upgrade_started = Instant::now();
    let before = status.content_digest.clone();
    let mut upgraded = values();
    upgraded["replicas"] = json!(3);
    upgraded["auditInterval"] = json!(30);
    patch_spec(&client, RELEASE, json!({ "config": upgraded })).await;
    let bundle = wait_bundle(&client, RELEASE, "Ready with the new values", |b| {
        is_ready(b) && b.status.as_ref().unwrap().content_digest != before
    })
    .await;
    let upgraded_in = upgrade_started.elapsed();
    let retemplated = template(&home, &archive, &upgraded, &version);
    assert_eq!(
        inventory(&bundle),
        expected.keys().cloned().collect::<BTreeSet<_>>(),
        "the same objects"
    );
    let live_manager = deployments.get(manager_name).await.unwrap();
    assert_eq!(live_manager.uid(), manager.uid(), "upgraded in place");
    let live = serde_json::to_value(&live_manager).unwrap();
    assert_eq!(live["spec"]["replicas"], 3);
    let audit = deployments.get("gatekeeper-audit").await.unwrap();
    assert_eq!(audit.uid(), audit_uid, "upgraded in place");
    let audit = serde_json::to_value(audit).unwrap();
    assert_eq!(
        container(&audit)["args"],
        container(find(&retemplated, "Deployment", "gatekeeper-audit"))["args"]
    );
    assert!(
        container(&audit)["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--audit-interval=30")),
        "{}",
        container(&audit)["args"]
    );

    injected_kept().await;

    // Deleting the Bundle leaves nothing: every templated object and every CRD goes.
    let uninstall_started = Instant::now();
    delete_bundle(&client, RELEASE).await;
    wait_until("the Bundle gone", GONE, || {
        let bundles: Api<Bundle> = Api::all(client.clone());
        async move {
            bundles
                .get_opt(RELEASE)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    for ((_, kind, namespace, name), resource) in &expected {
        let api = dynamic(&client, resource, namespace.as_deref());
        wait_until(&format!("{kind} {namespace:?}/{name} gone"), GONE, || {
            let api = api.clone();
            async move { api.get_opt(name).await.unwrap().is_none().then_some(()) }
        })
        .await;
    }
    for name in &crd_names {
        wait_until(&format!("CRD {name} gone"), GONE, || {
            let crds = crds.clone();
            async move { crds.get_opt(name).await.unwrap().is_none().then_some(()) }
        })
        .await;
    }
    // Nor are the webhooks called any more.
    wait_until(
        "namespaces admitted again",
        Duration::from_secs(30),
        || async { create_namespace_dry_run(&client, "elsewhere").await.ok() },
    )
    .await;
    let uninstalled_in = uninstall_started.elapsed();
    drop(plugin);
    eprintln!(
        "gatekeeper: installed after {installed_at:?}, upgraded in {upgraded_in:?}, \
         uninstalled in {uninstalled_in:?}, {:?} in all",
        started.elapsed()
    );
}
