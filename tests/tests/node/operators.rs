//! Real operators installed as bundles on the node. prometheus-operator v0.85.0, built from its
//! Go module by `tools/prometheus-operator/build.sh`, runs from an image of its static binary
//! with the module's own install manifests: every CRD of `example/prometheus-operator-crd` and
//! `example/rbac/prometheus-operator` (Deployment, ServiceAccount, ClusterRole and binding,
//! Service, and a ServiceMonitor of the bundle's own CRDs). The operator checks its CRDs once at
//! start and never starts the controllers of those it does not find: every controller starting
//! shows that Gantry had each CRD Established and served before it created the Deployment.
//! Gantry runs as host processes (see `health.rs`), with the class waiting for health.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use gantry_api::Bundle;
use gantry_api::conditions::{reasons, types};
use gantry_tests::e2e::push_to;
use gantry_tests::{ImageConfig, NodeCluster, node_cluster, unique_name, workspace_root};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, LogParams,
};
use serde_json::{Value, json};

use super::health::{condition, host_gantry, wait};

/// Names a directory holding the `operator` binary and its `crds/` and `rbac/` manifests
/// (skips the build).
const OPERATOR_DIR_ENV: &str = "GANTRY_PROMETHEUS_OPERATOR_DIR";
pub(super) const VERSION: &str = "v0.85.0";
pub(super) const OPERATOR: &str = "prometheus-operator";
/// The `component` of each controller's log lines (the operator's `controllerName`s).
const CONTROLLERS: [&str; 4] = [
    "prometheus-controller",
    "prometheusagent-controller",
    "alertmanager-controller",
    "thanos-controller",
];
/// The controllers that watch ScrapeConfigs when that CRD is there (its informer is nil
/// otherwise, and never synced).
const SCRAPE_CONFIG_WATCHERS: [&str; 2] = ["prometheus-controller", "prometheusagent-controller"];

/// The directory `tools/prometheus-operator/build.sh` prints (it builds once, then caches), or
/// [`OPERATOR_DIR_ENV`].
pub(super) fn operator_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os(OPERATOR_DIR_ENV) {
            return PathBuf::from(dir);
        }
        let script = workspace_root().join("tools/prometheus-operator/build.sh");
        let output = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            output.status.success(),
            "{} failed ({}), and {OPERATOR_DIR_ENV} is not set:\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
    })
}

/// The `.yaml` files of `dir`, by name.
pub(super) fn yaml_files(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            (name, text)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    files
}

/// The upstream RBAC and Deployment, moved from `default` into `namespace`, with the
/// Deployment running `image` and logging at debug level (each informer's cache sync).
pub(super) fn rbac_manifests(dir: &Path, namespace: &str, image: &str) -> Vec<(String, String)> {
    let mut deployments = 0;
    let files = yaml_files(dir)
        .into_iter()
        .map(|(name, text)| {
            let mut object: Value =
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {name}: {e}"));
            if let Some(ns) = object.pointer_mut("/metadata/namespace") {
                *ns = json!(namespace);
            }
            if let Some(subjects) = object.get_mut("subjects").and_then(Value::as_array_mut) {
                for subject in subjects {
                    subject["namespace"] = json!(namespace);
                }
            }
            if object["kind"] == "Deployment" {
                deployments += 1;
                let container = &mut object["spec"]["template"]["spec"]["containers"][0];
                assert_eq!(container["name"], OPERATOR, "{name}: {container}");
                container["image"] = json!(image);
                container["args"]
                    .as_array_mut()
                    .unwrap_or_else(|| panic!("{name}: the container has no args"))
                    .push(json!("--log-level=debug"));
            }
            let text =
                serde_saphyr::to_string(&object).unwrap_or_else(|e| panic!("writing {name}: {e}"));
            (format!("20-{name}"), text)
        })
        .collect();
    assert_eq!(deployments, 1, "one Deployment in {}", dir.display());
    files
}

/// An image of the static `operator` binary alone, as `/bin/operator`, run as nobody as
/// upstream's image is.
pub(super) async fn push_operator_image(cluster: &'static NodeCluster, namespace: &str) -> String {
    let binary = operator_dir().join("operator");
    let repository = format!("{namespace}/{OPERATOR}:{VERSION}");
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
            .unwrap_or_else(|e| panic!("pushing the operator's image: {e}"))
    })
    .await
    .unwrap()
}

/// The operator's one running Pod, unless it is `except`.
pub(super) async fn operator_pod(pods: &Api<Pod>, except: Option<&str>) -> Option<String> {
    let selector = format!("app.kubernetes.io/name={OPERATOR}");
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .ok()?;
    let mut running = list.items.into_iter().filter(|pod| {
        pod.metadata.deletion_timestamp.is_none()
            && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    });
    let pod = running.next()?.metadata.name.unwrap();
    (running.next().is_none() && except != Some(pod.as_str())).then_some(pod)
}

/// What the log lacks of every controller starting with all its informers synced: the
/// missing lines, described.
fn missing_starts(log: &str) -> Vec<String> {
    let line_with = |parts: &[&str]| log.lines().any(|l| parts.iter().all(|p| l.contains(p)));
    let mut missing = Vec::new();
    for controller in CONTROLLERS {
        let component = format!("component={controller}");
        if !line_with(&[r#"msg="successfully synced all caches""#, &component]) {
            missing.push(format!("{controller}: successfully synced all caches"));
        }
    }
    for controller in SCRAPE_CONFIG_WATCHERS {
        let component = format!("component={controller}");
        if !line_with(&[
            r#"msg="successfully synced cache""#,
            &component,
            "informer=ScrapeConfig",
        ]) {
            missing.push(format!("{controller}: ScrapeConfig informer synced"));
        }
    }
    missing
}

/// Whether the Deployment has as many available replicas as it wants, in its current
/// generation.
fn available(deployment: &Deployment) -> bool {
    let (Some(spec), Some(status)) = (&deployment.spec, &deployment.status) else {
        return false;
    };
    status.observed_generation == deployment.metadata.generation
        && status.available_replicas.unwrap_or(0) == spec.replicas.unwrap_or(1)
}

pub(super) async fn ready_and_healthy(bundles: &Api<Bundle>, name: &str) -> Option<()> {
    let bundle = bundles.get(name).await.ok()?;
    let healthy = condition(&bundle, types::HEALTHY)?;
    let ready = condition(&bundle, types::READY)?;
    (healthy.0 == "True" && healthy.1 == reasons::HEALTHY && ready.0 == "True").then_some(())
}

#[tokio::test]
async fn prometheus_operator_starts_every_controller() {
    let cluster = node_cluster();
    let crd_files = yaml_files(&operator_dir().join("crds"));
    let gantry = host_gantry(cluster).await;
    let client = cluster.client().await;
    let namespace = unique_name("prom-operator");
    cluster.create_namespace(&namespace).await;

    let image = push_operator_image(cluster, &namespace).await;
    let mut files: Vec<(String, String)> = crd_files
        .iter()
        .map(|(name, text)| (format!("10-{name}"), text.clone()))
        .collect();
    files.extend(rbac_manifests(
        &operator_dir().join("rbac"),
        &namespace,
        &image,
    ));
    let files: Vec<(&str, String)> = files
        .iter()
        .map(|(name, text)| (name.as_str(), text.clone()))
        .collect();
    let bundle_image = push_to(
        cluster.registry(),
        &format!("{namespace}/bundle:{VERSION}"),
        &files,
    )
    .await;
    let name = unique_name("prom-operator");
    let spec = gantry_tests::e2e::spec_of_class(&bundle_image, Some(&namespace), &gantry.class);
    gantry_tests::e2e::create_bundle(&client, &name, spec).await;

    let bundles: Api<Bundle> = Api::all(client.clone());
    wait(cluster, &namespace, "Ready=True and Healthy=True", || {
        ready_and_healthy(&bundles, &name)
    })
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let ours = crd_names(&crds).await;
    assert_eq!(
        ours.len(),
        crd_files.len(),
        "every CRD of the bundle is installed: {ours:?}"
    );
    // The bundle's ServiceMonitor, applied once its CRD was served.
    let service_monitors: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "monitoring.coreos.com",
            "v1",
            "ServiceMonitor",
        )),
    );
    assert!(
        service_monitors.get_opt(OPERATOR).await.unwrap().is_some(),
        "the bundle's ServiceMonitor exists"
    );

    // Every controller started, none was left out for a CRD not yet there.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let (pod, log) = operator_started(cluster, &pods, &namespace, None).await;
    let not_installed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("not installed in the cluster"))
        .collect();
    assert!(
        not_installed.is_empty(),
        "the operator started before its CRDs were served:\n{}",
        not_installed.join("\n")
    );

    // Drift: the Deployment deleted comes back, and runs the operator again.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let old = deployments.get(OPERATOR).await.unwrap().metadata.uid;
    deployments
        .delete(OPERATOR, &DeleteParams::default())
        .await
        .expect("deleting the operator's Deployment");
    wait(
        cluster,
        &namespace,
        "the operator's Deployment to be recreated and available",
        || async {
            let deployment = deployments.get_opt(OPERATOR).await.ok()??;
            (deployment.metadata.uid != old && available(&deployment)).then_some(())
        },
    )
    .await;
    operator_started(cluster, &pods, &namespace, Some(&pod)).await;
    wait(
        cluster,
        &namespace,
        "Ready=True and Healthy=True after the repair",
        || ready_and_healthy(&bundles, &name),
    )
    .await;

    // Uninstall: the bundle goes, with its CRDs and the Deployment.
    bundles
        .delete(&name, &DeleteParams::default())
        .await
        .expect("deleting the Bundle");
    wait(
        cluster,
        &namespace,
        "the Bundle, its CRDs and the operator's Deployment to be gone",
        || async {
            (bundles.get_opt(&name).await.ok()?.is_none()
                && crd_names(&crds).await.is_empty()
                && deployments.get_opt(OPERATOR).await.ok()?.is_none())
            .then_some(())
        },
    )
    .await;
}

/// The names of the CRDs of group `monitoring.coreos.com`.
pub(super) async fn crd_names(crds: &Api<CustomResourceDefinition>) -> Vec<String> {
    crds.list(&ListParams::default())
        .await
        .map(|list| {
            list.items
                .into_iter()
                .filter(|crd| crd.spec.group == "monitoring.coreos.com")
                .filter_map(|crd| crd.metadata.name)
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the running operator Pod (other than `except`) shows every controller started
/// in its log, read through the API server from the kubelet; returns the Pod and its log.
pub(super) async fn operator_started(
    cluster: &NodeCluster,
    pods: &Api<Pod>,
    namespace: &str,
    except: Option<&str>,
) -> (String, String) {
    let last = std::sync::Mutex::new(String::new());
    let outcome = tokio::time::timeout(
        Duration::from_secs(120),
        gantry_tests::wait_until(
            "the operator to start every controller",
            Duration::from_secs(240),
            || async {
                let pod = operator_pod(pods, except).await?;
                let log = pods.logs(&pod, &LogParams::default()).await.ok()?;
                let complete = missing_starts(&log).is_empty();
                *last.lock().unwrap() = log.clone();
                complete.then_some((pod, log))
            },
        ),
    )
    .await;
    outcome.unwrap_or_else(|_| {
        let log = last.lock().unwrap().clone();
        panic!(
            "the operator did not start every controller: {:?} missing\nits log:\n{log}\n{}",
            missing_starts(&log),
            cluster.diagnostics(namespace)
        )
    })
}
