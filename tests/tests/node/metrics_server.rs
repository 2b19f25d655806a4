//! An aggregated API installed as a bundle on the node: metrics-server v0.9.0, built from its
//! Go module by `tools/metrics-server/build.sh`, runs from an image of its static binary, with
//! its release manifest (`components.yaml`, rendered from the module's own manifests) unchanged
//! in the bundle. The Bundle adds one argument, `--kubelet-insecure-tls` (the kubelet serves a
//! self-signed certificate), with a patch (`spec.patches`), and points the image at the node's
//! registry (`spec.images`), as a user installing upstream's release would.
//! Gantry runs as Pods and pulls through the node (`pullMode: Node`); the class waits for
//! health. The API server proxies `metrics.k8s.io` to the Pod (the harness's front-proxy
//! certificate and `--enable-aggregator-routing`), metrics-server scrapes the kubelet with its
//! ServiceAccount token, and `kubectl top` answers. Uninstalling removes the APIService with
//! everything else: the group is no longer served (404, where a dangling APIService answers
//! 503) and discovery is whole.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    ApprovalPolicy, Bundle, BundlePatch, BundleSpec, HealthPolicy, ImageOverride, ObjectSelector,
    ProvisionerClassSpec, PullMode, ServiceAccountReference,
};
use gantry_tests::e2e::{apply_class, class_spec_for, push_to, spec_of_class};
use gantry_tests::{
    ImageConfig, NodeCluster, node_cluster, unique_name, wait_until, workspace_root,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use serde_json::Value;

use super::gantry::{
    DISRUPTION, HOST_PROVISIONER, NAMESPACE as GANTRY_NAMESPACE, PROVISIONER, STORAGE, installed,
};
use super::health::{condition, wait};

/// Names a directory holding the `metrics-server` binary and `components.yaml` (skips the
/// build).
const METRICS_SERVER_DIR_ENV: &str = "GANTRY_METRICS_SERVER_DIR";
const VERSION: &str = "v0.9.0";
/// The image the release manifest names, without its tag.
const UPSTREAM_IMAGE: &str = "registry.k8s.io/metrics-server/metrics-server";
/// Where the release manifest puts metrics-server.
const NAMESPACE: &str = "kube-system";
const METRICS_SERVER: &str = "metrics-server";
const API_SERVICE: &str = "v1beta1.metrics.k8s.io";
/// The flag the bundle adds: the kubelet's serving certificate is self-signed.
const INSECURE_TLS: &str = "--kubelet-insecure-tls";
/// metrics-server scrapes every 15 s and reports a Pod's CPU from two scrapes.
const METRICS: Duration = Duration::from_secs(180);
/// The aggregator drops a deleted APIService's group from discovery as it sees the deletion.
const DISCOVERY: Duration = Duration::from_secs(15);

/// The directory `tools/metrics-server/build.sh` prints (it builds once, then caches), or
/// [`METRICS_SERVER_DIR_ENV`].
fn metrics_server_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os(METRICS_SERVER_DIR_ENV) {
            return PathBuf::from(dir);
        }
        let script = workspace_root().join("tools/metrics-server/build.sh");
        let output = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            output.status.success(),
            "{} failed ({}), and {METRICS_SERVER_DIR_ENV} is not set:\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
    })
}

/// An image of the static binary alone, as `/metrics-server` run as nobody, as upstream's
/// image is; pushed as `metrics-server/metrics-server:VERSION`, the name and tag the bundle's
/// `spec.images` rewrite gives the upstream reference.
pub(super) async fn push_metrics_server_image(cluster: &'static NodeCluster) -> String {
    let binary = metrics_server_dir().join(METRICS_SERVER);
    tokio::task::spawn_blocking(move || {
        let rootfs = tempfile::tempdir().unwrap();
        std::fs::copy(&binary, rootfs.path().join(METRICS_SERVER))
            .unwrap_or_else(|e| panic!("copying {}: {e}", binary.display()));
        let config = ImageConfig {
            entrypoint: vec![format!("/{METRICS_SERVER}")],
            user: Some("65534:65534".into()),
            ..Default::default()
        };
        cluster
            .push_image(
                rootfs.path(),
                &config,
                &format!("{METRICS_SERVER}/{METRICS_SERVER}:{VERSION}"),
            )
            .unwrap_or_else(|e| panic!("pushing metrics-server's image: {e}"))
    })
    .await
    .unwrap()
}

/// The objects of the release manifest; checks that it names the upstream image and lacks
/// the flag the patch adds, so that the test shows both coming from the Bundle.
fn release_objects(text: &str) -> Vec<Value> {
    let objects: Vec<Value> =
        serde_saphyr::from_str_multiple(text).expect("parsing components.yaml");
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment in components.yaml");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        format!("{UPSTREAM_IMAGE}:{VERSION}"),
        "{container}"
    );
    assert!(
        !container["args"]
            .as_array()
            .expect("the container's args")
            .iter()
            .any(|a| a == INSECURE_TLS),
        "the upstream manifest already has {INSECURE_TLS}"
    );
    assert!(
        objects
            .iter()
            .any(|o| o["kind"] == "APIService" && o["metadata"]["name"] == API_SERVICE),
        "components.yaml registers {API_SERVICE}"
    );
    objects
}

/// The patch that adds [`INSECURE_TLS`] to the metrics-server container's arguments, as a user
/// writes it in the Bundle (docs/bundle-format.md, "Patching upstream manifests").
fn insecure_tls_patch() -> BundlePatch {
    BundlePatch {
        patch: format!(
            "- op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: {INSECURE_TLS}\n"
        ),
        target: ObjectSelector {
            group: Some("apps".into()),
            kind: Some("Deployment".into()),
            name: Some(METRICS_SERVER.into()),
            ..Default::default()
        },
    }
}

/// A class of its own: bundle images pulled by the node's runtime through unpack Pods, health
/// waited for, objects applied as the shipped classes apply them.
async fn node_class(cluster: &NodeCluster, client: &kube::Client) -> String {
    let name = unique_name("metrics");
    let spec = ProvisionerClassSpec {
        pull_mode: PullMode::Node,
        health: Some(HealthPolicy {
            wait: Some(true),
            timeout: Some("10m".into()),
        }),
        service_account: Some(ServiceAccountReference {
            namespace: GANTRY_NAMESPACE.into(),
            name: "gantry-applier".into(),
        }),
        ..class_spec_for(cluster.registry(), ApprovalPolicy::Automatic)
    };
    apply_class(client, &name, spec, false).await;
    name
}

#[tokio::test]
async fn metrics_server_serves_kubectl_top_and_uninstalls_without_breaking_discovery() {
    let cluster = node_cluster();
    let client = cluster.client().await;
    let _shared = HOST_PROVISIONER.read().await;
    installed(cluster, &client).await;
    // Until metrics-server answers, its APIService fails discovery for every client (kubectl,
    // the namespace controller, the garbage collector): the other tests wait.
    let _alone = DISRUPTION.write().await;

    let components = std::fs::read_to_string(metrics_server_dir().join("components.yaml"))
        .expect("reading components.yaml");
    let objects = release_objects(&components);
    let image = push_metrics_server_image(cluster).await;
    let bundle_image = push_to(
        cluster.registry(),
        &format!("{METRICS_SERVER}/bundle:{VERSION}"),
        &[("components.yaml", components.clone())],
    )
    .await;
    let class = node_class(cluster, &client).await;
    let name = unique_name(METRICS_SERVER);
    let spec = BundleSpec {
        patches: vec![insecure_tls_patch()],
        images: vec![ImageOverride {
            name: UPSTREAM_IMAGE.into(),
            new_name: Some(format!(
                "{}/{METRICS_SERVER}/{METRICS_SERVER}",
                cluster.registry()
            )),
            ..Default::default()
        }],
        ..spec_of_class(&bundle_image, Some(NAMESPACE), &class)
    };
    let created = Instant::now();
    gantry_tests::e2e::create_bundle(&client, &name, spec).await;

    // Followed until Ready and Healthy, every not-yet-healthy message kept.
    let bundles: Api<Bundle> = Api::all(client.clone());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let progress: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let deployment_at_healthy = wait(
        cluster,
        NAMESPACE,
        "Ready=True and Healthy=True",
        || async {
            let bundle = bundles.get(&name).await.ok()?;
            let healthy = condition(&bundle, types::HEALTHY)?;
            if healthy.0 != "True" {
                if healthy.1 == reasons::PROGRESSING {
                    progress.lock().unwrap().push(healthy.2);
                }
                return None;
            }
            let ready = condition(&bundle, types::READY)?;
            if healthy.1 != reasons::HEALTHY || ready.0 != "True" {
                return None;
            }
            // Read at once: a rolled-out Deployment stays so for much longer than this read.
            Some(deployments.get(METRICS_SERVER).await.ok())
        },
    )
    .await;
    let to_healthy = created.elapsed();
    println!(
        "metrics-server {VERSION}: Bundle created to Ready and Healthy in {:.1} s",
        to_healthy.as_secs_f64()
    );
    let deployment = deployment_at_healthy.expect("the Deployment exists once Healthy");
    assert!(
        rolled_out(&deployment),
        "Healthy=True before the Deployment rolled out: {:?}",
        deployment.status
    );
    let deployment_named = format!("Deployment.apps {NAMESPACE}/{METRICS_SERVER}");
    let progress = progress.into_inner().unwrap();
    assert!(
        progress.iter().any(|m| m.contains(&deployment_named)),
        "before Healthy, a Progressing message names {deployment_named} (readiness alone takes \
         20 s, its initialDelaySeconds); seen: {progress:#?}"
    );
    println!(
        "before Healthy: {} Progressing observations, e.g. {:?}",
        progress.len(),
        progress.last()
    );

    // What the Bundle asked for is what runs: the node registry's image, with the added flag.
    let container = &deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(container.image.as_deref(), Some(image.as_str()));
    assert!(
        container.args.iter().flatten().any(|a| a == INSECURE_TLS),
        "the bundle added {INSECURE_TLS}: {:?}",
        container.args
    );

    // The aggregated API is served: Available, and kubectl top answers from it.
    let api_services: Api<APIService> = Api::all(client.clone());
    let available = api_services
        .get(API_SERVICE)
        .await
        .expect("the APIService exists");
    assert!(
        api_service_available(&available),
        "{API_SERVICE} is Available once the bundle is Healthy: {:?}",
        available.status
    );
    let metrics_pod = running_pod(&client).await;
    let gantry_pods = gantry_pods(&client).await;
    assert!(!gantry_pods.is_empty(), "Gantry runs as Pods here");
    let top = wait_until(
        "kubectl top pod -A to list metrics-server's and Gantry's Pods",
        METRICS,
        || async {
            let output = kubectl(cluster, &["top", "pod", "-A", "--no-headers"]);
            let rows = top_rows(&output)?;
            let listed = |namespace: &str, pod: &str| {
                rows.iter()
                    .any(|row| row.len() == 4 && row[0] == namespace && row[1] == pod)
            };
            (listed(NAMESPACE, &metrics_pod)
                && gantry_pods.iter().all(|pod| listed(GANTRY_NAMESPACE, pod)))
            .then_some(rows)
        },
    )
    .await;
    for row in &top {
        assert!(
            row.len() == 4 && is_cpu(&row[2]) && is_memory(&row[3]),
            "a row of kubectl top pod -A with CPU and memory: {row:?}"
        );
    }
    println!("kubectl top pod -A:");
    for row in &top {
        println!("  {}", row.join("  "));
    }
    let nodes = wait_until("kubectl top node to answer", METRICS, || async {
        top_rows(&kubectl(cluster, &["top", "node", "--no-headers"]))
    })
    .await;
    assert!(
        nodes.iter().any(|row| row.len() == 5
            && row[0] == cluster.node_name()
            && is_cpu(&row[1])
            && is_memory(&row[3])),
        "kubectl top node lists {} with CPU and memory: {nodes:?}",
        cluster.node_name()
    );

    // Uninstall: the Bundle and everything it made go, the APIService with them.
    bundles
        .delete(&name, &DeleteParams::default())
        .await
        .expect("deleting the Bundle");
    let deleting = Instant::now();
    wait(cluster, NAMESPACE, "the Bundle to be gone", || async {
        bundles.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    println!(
        "Bundle deleted to gone in {:.1} s",
        deleting.elapsed().as_secs_f64()
    );
    let mut left = Vec::new();
    for object in &objects {
        if let Some(found) = still_there(&client, object).await {
            left.push(found);
        }
    }
    assert!(left.is_empty(), "left behind by the uninstall: {left:?}");
    assert!(
        api_services.get_opt(API_SERVICE).await.unwrap().is_none(),
        "{API_SERVICE} is gone"
    );
    let discovery = Instant::now();
    wait_until(
        "kubectl api-resources to succeed (discovery whole again)",
        DISCOVERY,
        || async {
            let output = kubectl(cluster, &["api-resources", "-o", "name"]);
            output.status.success().then_some(())
        },
    )
    .await;
    println!(
        "discovery whole {:.1} s after the Bundle was gone",
        discovery.elapsed().as_secs_f64()
    );
    let versions = kubectl(cluster, &["api-versions"]);
    assert!(
        versions.status.success(),
        "kubectl api-versions: {versions:?}"
    );
    assert!(
        !String::from_utf8_lossy(&versions.stdout).contains("metrics.k8s.io"),
        "metrics.k8s.io is no longer served"
    );
    // Removed, not dangling: an APIService without a backend answers 503 for its group.
    let group = kubectl(cluster, &["get", "--raw", "/apis/metrics.k8s.io/v1beta1"]);
    assert!(
        !group.status.success() && String::from_utf8_lossy(&group.stderr).contains("NotFound"),
        "/apis/metrics.k8s.io/v1beta1 is not found: {group:?}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    wait(
        cluster,
        NAMESPACE,
        "metrics-server's Pods to be gone",
        || async {
            pods.list(&ListParams::default().labels(&format!("k8s-app={METRICS_SERVER}")))
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

fn kubectl(cluster: &NodeCluster, args: &[&str]) -> Output {
    cluster
        .kubectl()
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl {args:?}: {e}"))
}

/// The rows of a successful `kubectl top ... --no-headers`, split on whitespace.
fn top_rows(output: &Output) -> Option<Vec<Vec<String>>> {
    if !output.status.success() {
        return None;
    }
    let rows: Vec<Vec<String>> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.split_whitespace().map(str::to_string).collect())
        .collect();
    (!rows.is_empty()).then_some(rows)
}

/// `12m` (millicores, as kubectl top writes CPU).
fn is_cpu(value: &str) -> bool {
    value
        .strip_suffix('m')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `34Mi` (as kubectl top writes memory).
fn is_memory(value: &str) -> bool {
    value
        .strip_suffix("Mi")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn rolled_out(deployment: &Deployment) -> bool {
    let (Some(spec), Some(status)) = (&deployment.spec, &deployment.status) else {
        return false;
    };
    let want = spec.replicas.unwrap_or(1);
    status.observed_generation == deployment.metadata.generation
        && status.updated_replicas.unwrap_or(0) == want
        && status.ready_replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
}

fn api_service_available(api_service: &APIService) -> bool {
    api_service
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
        })
}

/// The one running metrics-server Pod.
async fn running_pod(client: &kube::Client) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let list = pods
        .list(&ListParams::default().labels(&format!("k8s-app={METRICS_SERVER}")))
        .await
        .expect("listing metrics-server's Pods");
    let running: Vec<String> = list
        .items
        .into_iter()
        .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|pod| pod.metadata.name)
        .collect();
    assert_eq!(
        running.len(),
        1,
        "one running metrics-server Pod: {running:?}"
    );
    running.into_iter().next().unwrap()
}

/// The running Pods of Gantry's Deployments (not the short-lived unpack Pods).
async fn gantry_pods(client: &kube::Client) -> Vec<String> {
    Api::<Pod>::namespaced(client.clone(), GANTRY_NAMESPACE)
        .list(&ListParams::default())
        .await
        .expect("listing Pods")
        .items
        .into_iter()
        .filter(|pod| {
            pod.metadata.deletion_timestamp.is_none()
                && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .filter_map(|pod| pod.metadata.name)
        .filter(|name| {
            [PROVISIONER, STORAGE]
                .iter()
                .any(|deployment| name.starts_with(&format!("{deployment}-")))
        })
        .collect()
}

/// `Kind namespace/name` of `object` if it still exists.
async fn still_there(client: &kube::Client, object: &Value) -> Option<String> {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, _) = pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discovering {api_version} {kind}: {e}"));
    let name = object["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading {kind} {name}: {e}"))
        .map(|_| {
            format!(
                "{kind} {}/{name}",
                object["metadata"]["namespace"].as_str().unwrap_or("")
            )
        })
}
