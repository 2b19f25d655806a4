//! An operator's life through a moving tag: prometheus-operator v0.84.0 installed as a bundle
//! (its Namespace, CRDs, RBAC and Deployment) from `:stable`, through a class that waits for
//! health; custom resources the bundle does not own created beside it;
//! the tag moved to v0.85.0 (the CRD check passes the real upgrade, the resources survive with
//! their UIDs); `kubectl bundle rollback` back to v0.84.0, refused first because the older CRDs
//! drop properties, then accepted for that one digest; and an uninstall in which the operator,
//! still running, removes its own finalizer from a Prometheus before its Deployment, its RBAC
//! and its Namespace go, so that the Namespace finishes terminating.
//!
//! The operator runs with the feature gate `StatusForConfigurationResources`: with it, both
//! releases put the finalizer `monitoring.coreos.com/status-cleanup` on Prometheus objects and
//! take it off when one is deleted. The Prometheus and Alertmanager run no Pods (`replicas: 0`,
//! busybox named as their image), so nothing is pulled from outside the machine.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use gantry_api::conditions::{reasons, types};
use gantry_api::{
    Bundle, BundleSpec, CRD_UPGRADE_ALLOWED_ANNOTATION, HealthPolicy, ProvisionerClassSpec,
};
use gantry_tests::e2e::kubectl::{kubectl_bundle_command, text};
use gantry_tests::e2e::{apply_class, digest_of, namespace_yaml, push_to};
use gantry_tests::{ImageConfig, NodeCluster, node_cluster, unique_name};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, LogParams, PostParams,
};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::health::{condition, host_gantry, wait};
use super::operators::{
    OPERATOR, crd_names, operator_dir, operator_pod, operator_started, rbac_manifests,
    ready_and_healthy, yaml_files,
};

const OLD: &str = "v0.84.0";
const NEW: &str = "v0.85.0";
/// The finalizer both releases put on Prometheus objects with the feature gate below.
const STATUS_CLEANUP: &str = "monitoring.coreos.com/status-cleanup";
const FEATURE_GATE: &str = "--feature-gates=StatusForConfigurationResources=true";
const PROMETHEUS_CRD: &str = "prometheuses.monitoring.coreos.com";

/// The release directory of `version`: the build's own, or its `previous/`.
fn release_dir(version: &str) -> std::path::PathBuf {
    match version {
        NEW => operator_dir().to_path_buf(),
        _ => operator_dir().join("previous"),
    }
}

/// Pushes an image of the release's static `operator` binary as `<namespace>/<operator>:<version>`.
async fn push_operator(cluster: &'static NodeCluster, namespace: &str, version: &str) -> String {
    let binary = release_dir(version).join("operator");
    let repository = format!("{namespace}/{OPERATOR}:{version}");
    tokio::task::spawn_blocking(move || {
        let rootfs = tempfile::tempdir().unwrap();
        std::fs::create_dir(rootfs.path().join("bin")).unwrap();
        std::fs::copy(&binary, rootfs.path().join("bin/operator"))
            .unwrap_or_else(|e| panic!("copying {}: {e}", binary.display()));
        let config = ImageConfig {
            entrypoint: vec!["/bin/operator".into()],
            user: Some("65534:65534".into()),
            ..Default::default()
        };
        cluster
            .push_image(rootfs.path(), &config, &repository)
            .unwrap_or_else(|e| panic!("pushing the operator's image {repository}: {e}"))
    })
    .await
    .unwrap()
}

/// The bundle of one release: the Namespace, the release's CRDs, and its RBAC and Deployment
/// (running `image` with the feature gate that puts finalizers on Prometheus objects).
fn release_files(dir: &Path, namespace: &str, image: &str) -> Vec<(String, String)> {
    let mut files = vec![("00-namespace.yaml".to_string(), namespace_yaml(namespace))];
    files.extend(
        yaml_files(&dir.join("crds"))
            .into_iter()
            .map(|(name, text)| (format!("10-{name}"), text)),
    );
    for (name, text) in rbac_manifests(&dir.join("rbac"), namespace, image) {
        let mut object: Value = serde_saphyr::from_str(&text).unwrap();
        if object["kind"] == "Deployment" {
            object["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array_mut()
                .unwrap()
                .push(json!(FEATURE_GATE));
        }
        files.push((name, serde_saphyr::to_string(&object).unwrap()));
    }
    files
}

async fn push_bundle(registry: &str, tag: &str, files: &[(String, String)]) -> String {
    let files: Vec<(&str, String)> = files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    push_to(registry, tag, &files).await
}

fn api_of(client: &Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("monitoring.coreos.com", "v1", kind)),
    )
}

/// The custom resources the bundle does not own: (kind, name, body).
fn user_resources(busybox: &str) -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "ServiceMonitor",
            "user-monitor",
            json!({ "spec": { "selector": { "matchLabels": { "app": "web" } },
                "endpoints": [{ "port": "http" }] } }),
        ),
        (
            "PrometheusRule",
            "user-rules",
            json!({ "spec": { "groups": [{ "name": "user", "rules": [
                { "alert": "Always", "expr": "vector(1)" }] }] } }),
        ),
        (
            "Alertmanager",
            "user-alertmanager",
            json!({ "spec": { "replicas": 0, "image": busybox } }),
        ),
        (
            // minReadySeconds: v0.85.0 adds `minimum: 0` to it, which this value meets.
            "Prometheus",
            "user-prometheus",
            json!({ "spec": { "replicas": 0, "image": busybox, "minReadySeconds": 5,
                "serviceMonitorSelector": {} } }),
        ),
    ]
}

/// The UIDs of the user's resources, by kind; panics naming one that is gone.
async fn uids(client: &Client, namespace: &str, busybox: &str) -> Vec<(String, String)> {
    let mut uids = Vec::new();
    for (kind, name, _) in user_resources(busybox) {
        let object = api_of(client, namespace, kind)
            .get_opt(name)
            .await
            .unwrap_or_else(|e| panic!("reading {kind} {namespace}/{name}: {e}"))
            .unwrap_or_else(|| panic!("{kind} {namespace}/{name} is gone"));
        uids.push((kind.to_string(), object.uid().unwrap()));
    }
    uids
}

/// The running operator's Pod image and log, once it started every controller (other than
/// the Pod `except`), checked to be `version`.
async fn operator_runs(
    cluster: &NodeCluster,
    pods: &Api<Pod>,
    namespace: &str,
    except: Option<&str>,
    version: &str,
) -> String {
    let (pod, log) = operator_started(cluster, pods, namespace, except).await;
    let image = pods.get(&pod).await.unwrap().spec.unwrap().containers[0]
        .image
        .clone()
        .unwrap();
    assert!(
        image.ends_with(&format!("/{OPERATOR}:{version}")),
        "Pod {pod} runs {image}, not {version}"
    );
    let started = log
        .lines()
        .find(|l| l.contains("Starting Prometheus Operator"))
        .unwrap_or_else(|| panic!("no start line in the log of {pod}:\n{log}"));
    assert!(
        started.contains(&format!("version={}", version.trim_start_matches('v'))),
        "{pod} runs another version: {started}"
    );
    assert!(
        started.contains("StatusForConfigurationResources=true"),
        "{started}"
    );
    pod
}

/// Runs `kubectl bundle ARGS` against the node cluster.
async fn kubectl_bundle(cluster: &NodeCluster, args: &[&str]) -> std::process::Output {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.push("--kubeconfig".into());
    all.push(cluster.kubeconfig().display().to_string());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        kubectl_bundle_command(&args)
            .output()
            .expect("running kubectl bundle")
    })
    .await
    .unwrap()
}

/// Whether the bundle is Ready and Healthy with `image` installed.
async fn installed(bundles: &Api<Bundle>, name: &str, image: &str) -> Option<Bundle> {
    ready_and_healthy(bundles, name).await?;
    let bundle = bundles.get(name).await.ok()?;
    (bundle.status.as_ref()?.installed_image.as_deref() == Some(image)).then_some(bundle)
}

/// Records when each watched object was deleted, by name; returns once the watch has listed
/// what is there.
async fn record_deletions<K>(api: Api<K>, log: Arc<Mutex<Vec<(String, Instant)>>>)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let (listed, started) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Ok(Some(event)) = events.try_next().await {
            match event {
                watcher::Event::InitDone => {
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                }
                watcher::Event::Delete(object) => {
                    log.lock()
                        .unwrap()
                        .push((object.name_any(), Instant::now()));
                }
                _ => {}
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(30), started)
        .await
        .expect("a watch listing within 30s")
        .expect("the watch ended before listing");
}

#[tokio::test]
async fn prometheus_operator_upgrade_rollback_and_uninstall_with_its_finalizers() {
    let cluster = node_cluster();
    let _gantry = host_gantry(cluster).await;
    let client = cluster.client().await;
    let busybox = cluster.busybox_image().to_string();
    let registry = cluster.registry();

    let class = unique_name("upgrade");
    // Pulled by the provisioner: unpack Pods (`pullMode: Node`) could not reach this host
    // Gantry's storage server, which listens on loopback only.
    let spec = ProvisionerClassSpec {
        health: Some(HealthPolicy {
            wait: Some(true),
            timeout: Some("10m".into()),
        }),
        ..super::health::host_class_spec(registry)
    };
    apply_class(&client, &class, spec, false).await;

    // One bundle per release, and `:stable` moving between them.
    let namespace = unique_name("prom-upgrade");
    let mut releases = Vec::new();
    for version in [OLD, NEW] {
        let image = push_operator(cluster, &namespace, version).await;
        let files = release_files(&release_dir(version), &namespace, &image);
        let pinned = push_bundle(registry, &format!("{namespace}/bundle:{version}"), &files).await;
        releases.push((files, pinned));
    }
    let stable = format!("{namespace}/bundle:stable");
    let old = push_bundle(registry, &stable, &releases[0].0).await;
    assert_eq!(
        old, releases[0].1,
        "`:stable` and `:{OLD}` name the same image"
    );
    let new = releases[1].1.clone();

    let name = unique_name("prom-upgrade");
    let spec = BundleSpec {
        interval: Some("5s".into()),
        ..gantry_tests::e2e::spec_of_class(
            &format!("{registry}/{stable}"),
            Some(&namespace),
            &class,
        )
    };
    gantry_tests::e2e::create_bundle(&client, &name, spec).await;
    let bundles: Api<Bundle> = Api::all(client.clone());
    wait(cluster, &namespace, "v0.84.0 Ready and Healthy", || {
        installed(&bundles, &name, &old)
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let old_pod = operator_runs(cluster, &pods, &namespace, None, OLD).await;

    // Custom resources the bundle does not own.
    for (kind, object_name, body) in user_resources(&busybox) {
        let mut object = DynamicObject::new(
            object_name,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("monitoring.coreos.com", "v1", kind)),
        );
        object.data = body;
        api_of(&client, &namespace, kind)
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating {kind} {object_name}: {e}"));
    }
    let prometheuses = api_of(&client, &namespace, "Prometheus");
    wait(
        cluster,
        &namespace,
        "v0.84.0 to put its finalizer on the Prometheus",
        || async {
            let prometheus = prometheuses.get("user-prometheus").await.ok()?;
            prometheus
                .finalizers()
                .iter()
                .any(|f| f == STATUS_CLEANUP)
                .then_some(())
        },
    )
    .await;
    let before = uids(&client, &namespace, &busybox).await;

    // The tag moves: the bundle follows it, the CRD check passes the real upgrade.
    push_bundle(registry, &stable, &releases[1].0).await;
    let upgraded = wait(cluster, &namespace, "v0.85.0 Ready and Healthy", || {
        installed(&bundles, &name, &new)
    })
    .await;
    let history: Vec<String> = upgraded
        .status
        .unwrap()
        .history
        .iter()
        .map(|h| h.digest.clone())
        .collect();
    assert_eq!(history, [digest_of(&new), digest_of(&old)]);
    let new_pod = operator_runs(cluster, &pods, &namespace, Some(&old_pod), NEW).await;
    assert_eq!(uids(&client, &namespace, &busybox).await, before);

    // Back to v0.84.0: its CRDs drop properties v0.85.0 added, which the check refuses, and
    // nothing is applied.
    let refused = kubectl_bundle(cluster, &["rollback", &name, "--wait", "--timeout", "3m"]).await;
    let said = text(&refused);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains(PROMETHEUS_CRD)
            && said.contains("property removed")
            && said.contains("--allow-unsafe-crd-changes"),
        "the refusal names the findings and the way to accept them: {said}"
    );
    let bundle = bundles.get(&name).await.unwrap();
    let (status, reason, message) = condition(&bundle, types::INSTALLED).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", reasons::UNSAFE_CRD_UPGRADE),
        "{message}"
    );
    assert_eq!(bundle.spec.image, old);
    assert_eq!(
        bundle.status.unwrap().installed_image.as_deref(),
        Some(new.as_str())
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let running = deployments
        .get(OPERATOR)
        .await
        .unwrap()
        .spec
        .unwrap()
        .template;
    assert!(
        running.spec.unwrap().containers[0]
            .image
            .as_deref()
            .unwrap()
            .ends_with(NEW),
        "nothing of the refused content was applied"
    );

    // Accepted for that digest only.
    let accepted = kubectl_bundle(
        cluster,
        &[
            "rollback",
            &name,
            "--allow-unsafe-crd-changes",
            "--wait",
            "--timeout",
            "3m",
        ],
    )
    .await;
    assert!(accepted.status.success(), "{}", text(&accepted));
    let bundle = wait(
        cluster,
        &namespace,
        "v0.84.0 Ready and Healthy again",
        || installed(&bundles, &name, &old),
    )
    .await;
    assert_eq!(
        bundle
            .annotations()
            .get(CRD_UPGRADE_ALLOWED_ANNOTATION)
            .map(String::as_str),
        Some(digest_of(&old))
    );
    operator_runs(cluster, &pods, &namespace, Some(&new_pod), OLD).await;
    assert_eq!(uids(&client, &namespace, &busybox).await, before);
    let prometheus = prometheuses.get("user-prometheus").await.unwrap();
    assert!(
        prometheus.finalizers().iter().any(|f| f == STATUS_CLEANUP),
        "{:?}",
        prometheus.finalizers()
    );

    // Uninstall: the operator's log followed to its end, and deletions recorded.
    let log = Arc::new(Mutex::new(String::new()));
    let operator_pod = operator_pod(&pods, None)
        .await
        .expect("the operator's running Pod");
    {
        let log = log.clone();
        let mut lines = pods
            .log_stream(
                &operator_pod,
                &LogParams {
                    follow: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .lines();
        tokio::spawn(async move {
            while let Some(Ok(line)) = lines.next().await {
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
    }
    let deleted = Arc::new(Mutex::new(Vec::new()));
    record_deletions(deployments.clone(), deleted.clone()).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    record_deletions(crds.clone(), deleted.clone()).await;
    record_deletions(prometheuses.clone(), deleted.clone()).await;

    bundles
        .delete(&name, &DeleteParams::default())
        .await
        .expect("deleting the Bundle");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait(
        cluster,
        &namespace,
        "the Bundle, its CRDs and its Namespace to be gone",
        || async {
            (bundles.get_opt(&name).await.ok()?.is_none()
                && crd_names(&crds).await.is_empty()
                && namespaces.get_opt(&namespace).await.ok()?.is_none())
            .then_some(())
        },
    )
    .await;

    let finalized = format!("key={namespace}/user-prometheus");
    let log = log.lock().unwrap().clone();
    assert!(
        log.lines()
            .any(|l| l.contains("removed finalizer from object") && l.contains(&finalized)),
        "the operator removed its finalizer from the Prometheus itself; its log:\n{log}"
    );
    let deleted = deleted.lock().unwrap().clone();
    let when = |what: &str| {
        deleted
            .iter()
            .find(|(n, _)| n == what)
            .map(|(_, at)| *at)
            .unwrap_or_else(|| panic!("{what} was not seen deleted: {deleted:?}"))
    };
    let (prometheus, crd, operator) = (
        when("user-prometheus"),
        when(PROMETHEUS_CRD),
        when(OPERATOR),
    );
    assert!(
        prometheus <= crd && crd <= operator,
        "the Prometheus, then its CRD, then the operator's Deployment: {deleted:?}"
    );
}
