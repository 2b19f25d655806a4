//! Health on a real node: a Deployment whose image does not exist turns `Healthy` false with
//! the kubelet's pull error after the bundle's timeout, and true once the content is fixed; a
//! Job that fails turns it false naming the Job. Gantry runs here as host processes (a
//! storage server and a provisioner) against the node cluster's API server.

use std::future::Future;
use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalPolicy, Bundle, BundleSpec, HealthPolicy, ProvisionerClassSpec};
use gantry_tests::e2e::{apply_class, class_spec_for, push_to, spec_of_class};
use gantry_tests::{
    NodeCluster, Provisioner, ProvisionerOptions, StorageOptions, StorageServer, node_cluster,
    unique_name, wait_until,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::gantry::HOST_PROVISIONER;

/// The provisioner ID of the host provisioner and of its classes: Gantry installed as Pods
/// (which stays installed once a test installed it) leaves their bundles alone, and the host
/// provisioner leaves the bundles of Gantry as Pods alone.
pub(super) const HOST_PROVISIONER_ID: &str = "gantry.dev/plain-host";

/// Pulls, sandbox and container starts on a busy machine.
const START: Duration = Duration::from_secs(180);
/// The provisioner's namespace (its Lease); its own, so it leads at once.
const NAMESPACE: &str = "gantry-health";

pub(super) struct HostGantry {
    _storage: StorageServer,
    _provisioner: Provisioner,
    pub(super) class: String,
    /// Held until the provisioner is gone: the tests of Gantry as Pods wait, so that each
    /// installation's tests have the machine's cores to themselves.
    _alone: tokio::sync::RwLockWriteGuard<'static, ()>,
}

impl HostGantry {
    /// `http://127.0.0.1:PORT` of the provisioner's /metrics.
    pub(super) fn metrics_url(&self) -> &str {
        self._provisioner.metrics_url()
    }

    /// The provisioner's last `count` status writes, as its debug log tells them.
    pub(super) fn last_status_writes(&self, count: usize) -> String {
        let log = std::fs::read_to_string(self._provisioner.log()).unwrap_or_default();
        let writes: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("writing the bundle's status"))
            .collect();
        writes[writes.len().saturating_sub(count)..].join("\n")
    }
}

/// A storage server and a provisioner on this host, serving a class of their own, while no
/// other provisioner runs.
pub(super) async fn host_gantry(cluster: &'static NodeCluster) -> HostGantry {
    let alone = HOST_PROVISIONER.write().await;
    {
        let class = unique_name("health");
        let class_name = class.clone();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    cluster.wait_ready(START).await;
                    let client = cluster.client().await;
                    let namespaces: Api<Namespace> = Api::all(client.clone());
                    let namespace: Namespace =
                        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": NAMESPACE}}))
                        .unwrap();
                    let _ = namespaces.create(&PostParams::default(), &namespace).await;
                    let spec = ProvisionerClassSpec {
                        health: Some(HealthPolicy {
                            wait: Some(true),
                            timeout: Some("10m".into()),
                        }),
                        ..host_class_spec(cluster.registry())
                    };
                    apply_class(&client, &class_name, spec, false).await;
                })
        })
        .join()
        .unwrap();
        let storage = StorageServer::start(StorageOptions::default());
        let provisioner = Provisioner::start(ProvisionerOptions {
            kubeconfig: cluster.kubeconfig().to_path_buf(),
            storage_url: storage.url().to_string(),
            storage_token: None,
            namespace: NAMESPACE.into(),
            args: vec![
                format!("--provisioner-id={HOST_PROVISIONER_ID}"),
                "--resync-interval=30s".into(),
                "--backoff-base=200ms".into(),
                "--backoff-cap=5s".into(),
            ],
        });
        HostGantry {
            _storage: storage,
            _provisioner: provisioner,
            class,
            _alone: alone,
        }
    }
}

/// A class of the host provisioner (its provisioner ID), allowed plain HTTP to `registry`.
pub(super) fn host_class_spec(registry: &str) -> ProvisionerClassSpec {
    ProvisionerClassSpec {
        provisioner: HOST_PROVISIONER_ID.into(),
        ..class_spec_for(registry, ApprovalPolicy::Automatic)
    }
}

/// Waits (with [`START`] as deadline) for `check`; on a timeout, tells where the bundles of the
/// test's `namespace` stand and what the node did.
pub(super) async fn wait<T, Fut>(
    cluster: &NodeCluster,
    namespace: &str,
    what: &str,
    check: impl FnMut() -> Fut,
) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let outcome = tokio::time::timeout(START, wait_until(what, START * 2, check)).await;
    if let Ok(value) = outcome {
        return value;
    }
    let bundles = Api::<Bundle>::all(cluster.client().await)
        .list(&Default::default())
        .await
        .map(|list| {
            list.items
                .into_iter()
                .filter(|b| b.spec.install_namespace.as_deref() == Some(namespace))
                .map(|b| format!("{:?}", b.status))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    panic!(
        "timed out after {START:?} waiting for {what}\nbundles: {bundles}\n{}",
        cluster.diagnostics(namespace)
    )
}

/// A bundle of the host Gantry's class in `namespace`, with a health timeout of `timeout`.
async fn create_bundle(
    client: &Client,
    class: &str,
    (name, image, namespace): (&str, &str, &str),
    timeout: &str,
) {
    let spec = BundleSpec {
        health: Some(HealthPolicy {
            wait: None,
            timeout: Some(timeout.into()),
        }),
        ..spec_of_class(image, Some(namespace), class)
    };
    gantry_tests::e2e::create_bundle(client, name, spec).await;
}

/// `(status, reason, message)` of condition `type_`.
pub(super) fn condition(bundle: &Bundle, type_: &str) -> Option<(String, String, String)> {
    bundle
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.observed_generation == bundle.metadata.generation)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn deployment_yaml(image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: {image}
        command: ["sh", "-c", "sleep 3600"]
"#
    )
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_is_unhealthy_until_the_content_is_fixed() {
    let cluster = node_cluster();
    let gantry = host_gantry(cluster).await;
    let client = cluster.client().await;
    let namespace = unique_name("health-pull");
    cluster.create_namespace(&namespace).await;
    // On the cluster's own registry, never pushed.
    let missing = format!("{}/{namespace}/missing:1", cluster.registry());
    let broken = push_to(
        cluster.registry(),
        &format!("{namespace}/bundle:broken"),
        &[("web.yaml", deployment_yaml(&missing))],
    )
    .await;
    let name = unique_name("health-pull");
    create_bundle(&client, &gantry.class, (&name, &broken, &namespace), "15s").await;

    let bundles: Api<Bundle> = Api::all(client.clone());
    let progressing = wait(cluster, &namespace, "Healthy=False Progressing", || async {
        let bundle = bundles.get(&name).await.ok()?;
        condition(&bundle, types::HEALTHY)
            .filter(|(s, r, _)| s == "False" && r == reasons::PROGRESSING)?;
        Some(bundle)
    })
    .await;
    let ready = condition(&progressing, types::READY).expect("Ready");
    assert_eq!(ready.0, "False", "the class waits for health: {ready:?}");

    let (_, _, message) = wait(
        cluster,
        &namespace,
        "Healthy=False HealthCheckFailed after the 15s timeout",
        || async {
            let bundle = bundles.get(&name).await.ok()?;
            // The message follows the Pods at every assessment (at the latest the resync).
            condition(&bundle, types::HEALTHY).filter(|(s, r, m)| {
                s == "False"
                    && r == reasons::HEALTH_CHECK_FAILED
                    && (m.contains("ImagePullBackOff") || m.contains("ErrImagePull"))
            })
        },
    )
    .await;
    assert!(
        message.contains(&format!("Deployment.apps {namespace}/web"))
            && (message.contains("ImagePullBackOff") || message.contains("ErrImagePull")),
        "the message names the Deployment and the kubelet's pull error: {message}"
    );
    let bundle = bundles.get(&name).await.unwrap();
    assert_eq!(
        condition(&bundle, types::READY).map(|c| (c.0, c.1)),
        Some(("False".into(), reasons::HEALTH_CHECK_FAILED.into()))
    );

    // Fixed: the content now names the cluster's busybox image.
    let fixed = push_to(
        cluster.registry(),
        &format!("{namespace}/bundle:fixed"),
        &[("web.yaml", deployment_yaml(cluster.busybox_image()))],
    )
    .await;
    bundles
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": fixed}})),
        )
        .await
        .unwrap();
    wait(
        cluster,
        &namespace,
        "Healthy=True and Ready=True",
        || async {
            let bundle = bundles.get(&name).await.ok()?;
            let healthy = condition(&bundle, types::HEALTHY)?;
            let ready = condition(&bundle, types::READY)?;
            (healthy.0 == "True" && healthy.1 == reasons::HEALTHY && ready.0 == "True")
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_job_that_fails_is_unhealthy_at_once_naming_the_job() {
    let cluster = node_cluster();
    let gantry = host_gantry(cluster).await;
    let client = cluster.client().await;
    let namespace = unique_name("health-job");
    cluster.create_namespace(&namespace).await;
    let job = format!(
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: {}
        command: ["sh", "-c", "echo broken; exit 3"]
"#,
        cluster.busybox_image()
    );
    let image = push_to(
        cluster.registry(),
        &format!("{namespace}/bundle:v1"),
        &[("job.yaml", job)],
    )
    .await;
    let name = unique_name("health-job");
    // A long timeout: `HealthCheckFailed` can only come from the Job's failure.
    create_bundle(&client, &gantry.class, (&name, &image, &namespace), "10m").await;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let (_, _, message) = wait(
        cluster,
        &namespace,
        "Healthy=False HealthCheckFailed",
        || async {
            let bundle = bundles.get(&name).await.ok()?;
            condition(&bundle, types::HEALTHY)
                .filter(|(s, r, _)| s == "False" && r == reasons::HEALTH_CHECK_FAILED)
        },
    )
    .await;
    assert!(
        message.contains(&format!("Job.batch {namespace}/migrate"))
            && message.contains("Job Failed"),
        "the message names the Job and its failure: {message}"
    );
    let bundle = bundles.get(&name).await.unwrap();
    assert_eq!(
        condition(&bundle, types::READY).map(|c| (c.0, c.1)),
        Some(("False".into(), reasons::HEALTH_CHECK_FAILED.into())),
        "the class waits for health"
    );
}
