//! Gantry as Pods on the node: its images, built here by `scripts/images`, run from
//! `manifests/` as shipped; only the image references change, through a kustomization, as
//! docs/install.md tells users to do. The one test tells a story in order: install, a real
//! workload installed from a bundle, leader failover, a storage server restart, uninstall.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use gantry_api::{ApprovalPolicy, Bundle};
use gantry_tests::e2e::{
    apply_class, class_spec_for, create_bundle, is_ready, namespace_yaml, push_to, spec_of_class,
};
use gantry_tests::{NodeCluster, gantry_images, node_cluster, unique_name};
use k8s_openapi::Resource;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

pub(super) const NAMESPACE: &str = "gantry-system";
/// Image pulls, container starts and probes of a fresh install.
const START: Duration = Duration::from_secs(300);
/// A bundle installing, a Pod replaced, a leader taking over.
pub(super) const WAIT: Duration = Duration::from_secs(180);
pub(super) const PROVISIONER: &str = "gantry-provisioner";
pub(super) const STORAGE: &str = "gantry-storage";
/// The namespace of the Pod that calls Services.
const PROBE_NAMESPACE: &str = "gantry-node-probe";

#[tokio::test]
async fn gantry_runs_as_pods_from_the_manifests() {
    let cluster = node_cluster();
    let client = cluster.client().await;
    let _shared = HOST_PROVISIONER.read().await;
    installed(cluster, &client).await;
    // Failover and the storage server's restart below wait for the other tests to finish.
    let _disrupting = DISRUPTION.write().await;

    // A class of the test's own: the node's registry speaks plain HTTP.
    let class = unique_name("node");
    apply_class(
        &client,
        &class,
        class_spec_for(cluster.registry(), ApprovalPolicy::Automatic),
        false,
    )
    .await;

    // A real workload: busybox httpd behind a Service, answering another Pod by DNS name.
    let web = unique_name("web");
    let message = format!("served-by-{web}");
    let image = push_to(
        cluster.registry(),
        &format!("{web}/bundle:v1"),
        &web_bundle(cluster, &web, &message),
    )
    .await;
    create_bundle(&client, &web, spec_of_class(&image, None, &class)).await;
    wait_ready(cluster, &client, &web, &[&web]).await;
    wait_available(cluster, &client, &web, "web", 1, START).await;
    let probe = probe_pod(cluster, &client).await;
    let url = format!("http://web.{web}.svc.cluster.local/");
    let answer = format!("{url} to answer {message:?} in Pod {probe}");
    let last = std::sync::Mutex::new(String::new());
    wait_dumping(cluster, &answer, WAIT, &[&web, PROBE_NAMESPACE], || async {
        // `timeout`, not wget's -T: Debian's busybox 1.35 wget crashes with -T.
        let output = exec(
            cluster,
            &probe,
            &["timeout", "5", "wget", "-q", "-O", "-", &url],
        );
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if output.status.success() && said.trim() == message {
            return Some(());
        }
        let mut last = last.lock().unwrap();
        if *last != said {
            eprintln!("wget {url} in {probe}: {said}");
            *last = said;
        }
        None
    })
    .await;

    // The replica whose shard holds the bundle goes: another replica takes the bundle over
    // and finds everything as desired. Replicas hold other tests' bundles too, so the new
    // owner's counters are compared with what they were before.
    let managed = resource_versions(&client, &web).await;
    let owner = wait_shard(cluster, &client, &web, None).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut counters_before = std::collections::BTreeMap::new();
    let replicas = pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={PROVISIONER}")))
        .await
        .expect("listing the provisioner's Pods");
    for pod in replicas.items {
        let name = pod.name_any();
        if let Some(metrics) = pod_metrics(&client, &name).await {
            counters_before.insert(name, counters(&metrics));
        }
    }
    pods.delete(&owner, &DeleteParams::default())
        .await
        .expect("deleting the owning replica's Pod");
    let new_owner = wait_shard(cluster, &client, &web, Some(&owner)).await;
    let (applied_before, unchanged_before) =
        counters_before.get(&new_owner).copied().unwrap_or((0, 0));
    let metrics = wait(
        cluster,
        &format!("{new_owner} to reconcile {web} after taking it over"),
        WAIT,
        || async {
            let metrics = pod_metrics(&client, &new_owner).await?;
            (counters(&metrics).1 >= unchanged_before + managed.len() as u64).then_some(metrics)
        },
    )
    .await;
    assert_eq!(
        counters(&metrics).0,
        applied_before,
        "the new owner re-applied objects that were as desired:\n{metrics}"
    );
    assert_eq!(
        resource_versions(&client, &web).await,
        managed,
        "the bundle's objects changed when its shard changed"
    );

    // The storage server's Pod goes: the content stays on the volume.
    // A reader of the content: the provisioner's ServiceAccount, for the storage audience.
    let token = cluster
        .control_plane()
        .service_account_token_for(NAMESPACE, PROVISIONER, &[STORAGE])
        .await;
    let (url, digest) = stored_content(&bundle(&client, &web).await);
    assert_eq!(
        read_stored(cluster, &probe, &token, &url),
        Ok(digest.clone()),
        "the content served before the restart"
    );
    let old = storage_pod(&client).await;
    pods.delete(&old, &DeleteParams::default())
        .await
        .expect("deleting the storage server's Pod");
    wait(
        cluster,
        "a new storage server Pod to be ready",
        WAIT,
        || async {
            let pod = storage_pod(&client).await;
            (pod != old && pod_ready(&pods.get(&pod).await.ok()?)).then_some(())
        },
    )
    .await;
    wait(
        cluster,
        "the stored content to be served again",
        WAIT,
        || async { (read_stored(cluster, &probe, &token, &url).ok()? == digest).then_some(()) },
    )
    .await;
    assert!(
        is_ready(&bundle(&client, &web).await),
        "{web} stays Ready across the storage server's restart"
    );
    let config = unique_name("config");
    let image = push_to(
        cluster.registry(),
        &format!("{config}/bundle:v1"),
        &[
            ("00-namespace.yaml", namespace_yaml(&config)),
            ("10-config.yaml", config_map_yaml(&config, &message)),
        ],
    )
    .await;
    create_bundle(&client, &config, spec_of_class(&image, None, &class)).await;
    wait_ready(cluster, &client, &config, &[&config]).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &config);
    assert!(
        config_maps.get_opt("installed").await.unwrap().is_some(),
        "the bundle installed after the restart created its ConfigMap"
    );

    // Uninstall: the objects go, then the namespaces finish terminating, then the content.
    let bundles: Api<Bundle> = Api::all(client.clone());
    for name in [&web, &config] {
        bundles
            .delete(name, &DeleteParams::default())
            .await
            .expect("deleting a Bundle");
    }
    for name in [&web, &config] {
        wait(
            cluster,
            &format!("Bundle {name} and its namespace to be gone"),
            WAIT,
            || async {
                let namespaces: Api<Namespace> = Api::all(client.clone());
                (bundles.get_opt(name).await.ok()?.is_none()
                    && namespaces.get_opt(name).await.ok()?.is_none())
                .then_some(())
            },
        )
        .await;
    }
    match read_stored(cluster, &probe, &token, &url) {
        Err(complaint) if complaint.contains("404") => {}
        other => panic!("the stored content of {web} is still there after uninstalling: {other:?}"),
    }
}

// --- installing -------------------------------------------------------------------------

/// Held (shared) by tests that need Gantry undisturbed; the story test takes it exclusively
/// for its leader failover and storage server restart.
pub(super) static DISRUPTION: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Held exclusively while a provisioner runs on the host (the health tests; it serves a
/// provisioner ID of its own), so that the two installations' tests do not share the machine's
/// cores. Tests of Gantry as Pods share it, taken before [`DISRUPTION`].
pub(super) static HOST_PROVISIONER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Gantry installed as Pods, once per test binary, as the docs say, with a volume for the
/// storage server's claim (kept for the life of the binary); waits until it runs.
pub(super) async fn installed(cluster: &'static NodeCluster, client: &Client) {
    static INSTALLED: tokio::sync::OnceCell<tempfile::TempDir> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let images = gantry_images(cluster.registry()).unwrap_or_else(|e| panic!("{e}"));
            let volume = storage_volume(client).await;
            install(cluster, &images.kustomization);
            volume
        })
        .await;
    running(cluster, client).await;
}

/// Waits until Gantry runs: the storage server's claim bound, both Deployments rolled out.
pub(super) async fn running(cluster: &NodeCluster, client: &Client) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
    wait(
        cluster,
        "the storage server's PVC to bind",
        START,
        || async {
            let pvc = pvcs.get_opt(STORAGE).await.ok()??;
            (pvc.status?.phase.as_deref() == Some("Bound")).then_some(())
        },
    )
    .await;
    wait_available(cluster, client, NAMESPACE, STORAGE, 1, START).await;
    wait_available(cluster, client, NAMESPACE, PROVISIONER, 3, START).await;
}

/// The steps of docs/install.md: the CRDs first, established, then everything.
fn install(cluster: &NodeCluster, dir: &Path) {
    let crds = dir.join("01-crds.yaml");
    kubectl_ok(cluster, &["apply", "-f", crds.to_str().unwrap()]);
    kubectl_ok(
        cluster,
        &[
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/bundles.gantry.dev",
            "crd/provisionerclasses.gantry.dev",
        ],
    );
    kubectl_ok(cluster, &["apply", "-k", dir.to_str().unwrap()]);
}

/// A host directory the storage server (UID and GID 65532) may write, as a PersistentVolume
/// reserved for the shipped claim, in the default StorageClass if the cluster has one.
pub(super) async fn storage_volume(client: &Client) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("gantry-storage-volume")
        .tempdir()
        .unwrap();
    std::os::unix::fs::chown(dir.path(), Some(65532), Some(65532)).unwrap();
    let classes: Api<StorageClass> = Api::all(client.clone());
    let default_class = classes
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|class| {
            class
                .annotations()
                .get("storageclass.kubernetes.io/is-default-class")
                == Some(&"true".to_string())
        })
        .map(|class| class.name_any())
        .unwrap_or_default();
    let volume: PersistentVolume = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": { "name": unique_name("gantry-storage") },
        "spec": {
            "capacity": { "storage": "10Gi" },
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": default_class,
            "claimRef": { "namespace": NAMESPACE, "name": STORAGE },
            "hostPath": { "path": dir.path(), "type": "Directory" }
        }
    }))
    .unwrap();
    apply(&Api::all(client.clone()), &volume).await;
    dir
}

// --- bundles ------------------------------------------------------------------------------

pub(super) fn config_map_yaml(namespace: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: installed\n  namespace: {namespace}\ndata:\n  value: {value}\n"
    )
}

/// A Namespace, and in it busybox's httpd serving `message` behind the Service `web`.
fn web_bundle(
    cluster: &NodeCluster,
    namespace: &str,
    message: &str,
) -> Vec<(&'static str, String)> {
    let image = cluster.busybox_image();
    let workload = format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {namespace}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: httpd
        image: {image}
        command: ["sh", "-c", "mkdir -p /tmp/www && echo {message} > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
        ports:
        - name: http
          containerPort: 8080
        readinessProbe:
          tcpSocket:
            port: http
          periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: {namespace}
spec:
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: http
"#
    );
    vec![
        ("00-namespace.yaml", namespace_yaml(namespace)),
        ("10-web.yaml", workload),
    ]
}

pub(super) async fn bundle(client: &Client, name: &str) -> Bundle {
    let bundles: Api<Bundle> = Api::all(client.clone());
    bundles.get(name).await.expect("reading a Bundle")
}

pub(super) async fn wait_ready(
    cluster: &NodeCluster,
    client: &Client,
    name: &str,
    namespaces: &[&str],
) {
    let bundles: Api<Bundle> = Api::all(client.clone());
    let what = format!("Bundle {name} to be Ready");
    wait_dumping(cluster, &what, WAIT, namespaces, || async {
        bundles.get(name).await.ok().filter(is_ready).map(drop)
    })
    .await;
}

// --- the storage server ---------------------------------------------------------------------

/// The bundle's content URL and the hex sha256 of the stored tarball.
pub(super) fn stored_content(bundle: &Bundle) -> (String, String) {
    let status = bundle.status.as_ref().expect("a status");
    let url = status.content_url.clone().expect("a content URL");
    let digest = status.content_digest.as_deref().expect("a content digest");
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest).to_string();
    (url, hex)
}

/// Reads `url` from the storage server in Pod `probe` with `token`: the sha256 of what was
/// served, or wget's complaint (`... 404 Not Found`, or the server not answering).
fn read_stored(
    cluster: &NodeCluster,
    probe: &str,
    token: &str,
    url: &str,
) -> Result<String, String> {
    let script = format!(
        "timeout 5 wget -q -O /tmp/content --header 'Authorization: Bearer {token}' '{url}' && sha256sum /tmp/content"
    );
    let output = exec(cluster, probe, &["sh", "-c", &script]);
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| "sha256sum printed nothing".to_string())
}

async fn storage_pod(client: &Client) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let list = pods
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=gantry-storage"))
        .await
        .expect("listing the storage server's Pods");
    list.items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .map(|pod| pod.name_any())
        .next()
        .unwrap_or_default()
}

// --- the provisioner ------------------------------------------------------------------------

/// The ready provisioner Pod whose shard holds `bundle` (the owner of its slot), once it
/// is not `previous`.
async fn wait_shard(
    cluster: &NodeCluster,
    client: &Client,
    bundle: &str,
    previous: Option<&str>,
) -> String {
    let bundles: Api<Bundle> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), NAMESPACE);
    wait(
        cluster,
        &format!("Bundle {bundle} to be held by a ready provisioner Pod"),
        WAIT,
        || async {
            // The shard that owns the bundle's slot in the slot table.
            let slot = bundles
                .get_opt(bundle)
                .await
                .ok()??
                .labels()
                .get(gantry_api::SLOT_LABEL)
                .and_then(|slot| gantry_api::slots::parse_slot(slot))?;
            let table = leases.get_opt(gantry_api::SLOT_TABLE_LEASE).await.ok()??;
            let table = gantry_api::slots::SlotTable::parse(
                table.annotations().get(gantry_api::SLOT_TABLE_ANNOTATION)?,
            )
            .ok()?;
            let owner = table.owner(slot)?.to_string();
            let pod = pods.get_opt(&owner).await.ok()??;
            let candidate = pod
                .labels()
                .get("app.kubernetes.io/name")
                .map(String::as_str)
                == Some(PROVISIONER)
                && pod.metadata.deletion_timestamp.is_none()
                && pod_ready(&pod)
                && Some(owner.as_str()) != previous;
            candidate.then_some(owner)
        },
    )
    .await
}

/// The Prometheus text of a Pod's /metrics, through the API server's Pod proxy.
async fn pod_metrics(client: &Client, pod: &str) -> Option<String> {
    let request = http::Request::get(format!(
        "/api/v1/namespaces/{NAMESPACE}/pods/{pod}:8080/proxy/metrics"
    ))
    .body(Vec::new())
    .ok()?;
    client.request_text(request).await.ok()
}

/// A replica's (objects applied, objects found unchanged) so far.
fn counters(metrics: &str) -> (u64, u64) {
    (
        metric(metrics, "gantry_provisioner_objects_applied_total").unwrap_or(0),
        metric(metrics, "gantry_provisioner_objects_unchanged_total").unwrap_or(0),
    )
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// `kind/name -> resourceVersion` of the web bundle's objects.
async fn resource_versions(client: &Client, namespace: &str) -> Vec<(String, String)> {
    async fn version<K>(api: Api<K>, name: &str) -> (String, String)
    where
        K: kube::Resource + Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        let object = api.get(name).await.expect("reading a managed object");
        (
            format!("{}/{name}", K::KIND),
            object.resource_version().unwrap_or_default(),
        )
    }
    vec![
        version(Api::<Namespace>::all(client.clone()), namespace).await,
        version(
            Api::<Deployment>::namespaced(client.clone(), namespace),
            "web",
        )
        .await,
        version(Api::<Service>::namespaced(client.clone(), namespace), "web").await,
    ]
}

// --- Pods and waiting ---------------------------------------------------------------------

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn wait_available(
    cluster: &NodeCluster,
    client: &Client,
    namespace: &str,
    name: &str,
    replicas: i32,
    timeout: Duration,
) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let what = format!("Deployment {namespace}/{name} to roll out {replicas} available replica(s)");
    wait_dumping(cluster, &what, timeout, &[namespace], || async {
        let deployment = deployments.get_opt(name).await.ok()??;
        let status = deployment.status?;
        let conditions = status.conditions.unwrap_or_default();
        let available = conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True");
        // The rollout is complete: the controller writes no more status for it.
        let complete = conditions.iter().any(|c| {
            c.type_ == "Progressing" && c.reason.as_deref() == Some("NewReplicaSetAvailable")
        });
        (available
            && complete
            && status.observed_generation == deployment.metadata.generation
            && status.ready_replicas == Some(replicas)
            && status.updated_replicas == Some(replicas))
        .then_some(())
    })
    .await;
}

/// A long-running busybox Pod in a namespace of its own, to call Services from.
async fn probe_pod(cluster: &NodeCluster, client: &Client) -> String {
    let namespace = PROBE_NAMESPACE;
    cluster.create_namespace(namespace).await;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "probe", "namespace": namespace },
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "probe", "image": cluster.busybox_image(),
                "command": ["sleep", "86400"]
            }]
        }
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    apply(&pods, &pod).await;
    wait_dumping(
        cluster,
        "the probe Pod to be ready",
        START,
        &[namespace],
        || async { pod_ready(&pods.get("probe").await.ok()?).then_some(()) },
    )
    .await;
    format!("{namespace}/probe")
}

/// Runs `command` in the probe Pod (`namespace/name`).
fn exec(cluster: &NodeCluster, pod: &str, command: &[&str]) -> Output {
    let (namespace, name) = pod.split_once('/').expect("namespace/name");
    let mut args = vec!["-n", namespace, "exec", name, "--"];
    args.extend_from_slice(command);
    kubectl(cluster, &args)
}

/// Server-side applies `object` through `api` as the test's field manager.
pub(super) async fn apply<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.patch(
        &object.name_any(),
        &PatchParams::apply("gantry-tests").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {}: {e}", object.name_any()));
}

/// Waits for `check` within `timeout`; on timeout the failure shows gantry-system's Pods.
async fn wait<T, F, Fut>(cluster: &NodeCluster, what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_dumping(cluster, what, timeout, &[], check).await
}

/// Waits for `check` within `timeout`; on timeout the failure shows the Pods, their logs and
/// the events of gantry-system and of `namespaces`.
pub(super) async fn wait_dumping<T, F, Fut>(
    cluster: &NodeCluster,
    what: &str,
    timeout: Duration,
    namespaces: &[&str],
    check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    // wait_until's own deadline is later: this one decides, and dumps what is relevant.
    match tokio::time::timeout(timeout, gantry_tests::wait_until(what, timeout * 2, check)).await {
        Ok(value) => value,
        Err(_) => {
            let mut report = dump(cluster, NAMESPACE);
            for namespace in namespaces.iter().filter(|n| **n != NAMESPACE) {
                report.push_str(&dump(cluster, namespace));
            }
            panic!("timed out after {timeout:?} waiting for {what}\n{report}")
        }
    }
}

/// Pods, their recent logs and the events of `namespace`, for failure messages.
pub(super) fn dump(cluster: &NodeCluster, namespace: &str) -> String {
    let text = |args: &[&str]| {
        let output = kubectl(cluster, args);
        format!(
            "$ kubectl {}\n{}{}\n",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    let mut report = format!("\n===== namespace {namespace} =====\n");
    if namespace == NAMESPACE {
        report.push_str(&text(&["get", "bundles,provisionerclasses", "-o", "yaml"]));
    }
    report.push_str(&text(&[
        "-n",
        namespace,
        "get",
        "pods,pvc,deployments",
        "-o",
        "wide",
    ]));
    report.push_str(&text(&[
        "-n",
        namespace,
        "get",
        "events",
        "--sort-by=.lastTimestamp",
    ]));
    let pods = kubectl(cluster, &["-n", namespace, "get", "pods", "-o", "name"]);
    for pod in String::from_utf8_lossy(&pods.stdout).lines() {
        report.push_str(&text(&[
            "-n",
            namespace,
            "logs",
            pod,
            "--all-containers",
            "--tail=40",
        ]));
    }
    report
}

pub(super) fn kubectl(cluster: &NodeCluster, args: &[&str]) -> Output {
    cluster
        .kubectl()
        .args(args)
        .output()
        .expect("running kubectl")
}

pub(super) fn kubectl_ok(cluster: &NodeCluster, args: &[&str]) -> Output {
    let output = kubectl(cluster, args);
    assert!(
        output.status.success(),
        "kubectl {} failed:\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
