//! Health does not poll: once a bundle is installed, its objects are read again for health only
//! when one of them changed (the drift watches) or when the health timeout passes, never on
//! the visits that resolve its tag again. No controller-manager runs here, so the Deployments
//! of these bundles never become available; the provisioner's reads of them by name are
//! counted in the API server's audit log (which logs every `get` of a Service or Deployment).

use std::collections::BTreeMap;
use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_tests::audit::AuditLog;
use gantry_tests::e2e::*;
use gantry_tests::{control_plane, unique_name};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::health::{at, health, wait_health};

/// How many Deployments (each with its Service) a bundle holds.
const WORKLOADS: usize = 5;

/// How long the provisioner's reads are counted for, once the bundle is where the test wants
/// it: the shared provisioner resolves tags every second, so a pass that read the workloads
/// again on each visit would read each about 25 times.
const WINDOW: Duration = Duration::from_secs(25);

/// Deployment `web-i` and Service `web-i` for each workload; the Deployments' image is never
/// pulled (no kubelet runs here).
fn workloads() -> Vec<(String, String)> {
    (0..WORKLOADS)
        .flat_map(|i| {
            let deployment = format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-{i}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: web-{i}}}\n  template:\n    metadata:\n      labels: {{app: web-{i}}}\n    spec:\n      containers:\n      - name: web\n        image: 127.0.0.1:1/web:1\n"
            );
            let service = format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: web-{i}\nspec:\n  selector: {{app: web-{i}}}\n  ports:\n  - port: 80\n"
            );
            [
                (format!("deployment-{i}.yaml"), deployment),
                (format!("service-{i}.yaml"), service),
            ]
        })
        .collect()
}

/// The provisioner's reads by name of the Services and Deployments of `ns` so far: (when,
/// `resource/name`).
fn provisioner_gets(ns: &str) -> Vec<(String, String)> {
    let log = AuditLog::read(&control_plane().audit_log()).expect("reading the audit log");
    let mut gets: Vec<(String, String)> = ["services", "deployments"]
        .into_iter()
        .flat_map(|resource| {
            log.gets(resource, ns)
                .into_iter()
                .filter(|(_, _, agent)| agent.starts_with("gantry-provisioner/"))
                .map(move |(when, name, _)| (when, format!("{resource}/{name}")))
        })
        .collect();
    gets.sort();
    gets
}

/// The reads in `after` that `before` did not have yet (both as [`provisioner_gets`] returns
/// them).
fn new_gets(before: &[(String, String)], after: &[(String, String)]) -> Vec<(String, String)> {
    let mut seen: BTreeMap<&(String, String), usize> = BTreeMap::new();
    for read in before {
        *seen.entry(read).or_default() += 1;
    }
    after
        .iter()
        .filter(|read| match seen.get_mut(read) {
            Some(count) if *count > 0 => {
                *count -= 1;
                false
            }
            _ => true,
        })
        .cloned()
        .collect()
}

/// Pushes the workloads and installs them into `ns` with `health` as the bundle's policy;
/// waits until it is Ready.
async fn install(
    client: &kube::Client,
    ns: &str,
    policy: Option<gantry_api::HealthPolicy>,
) -> String {
    let files = workloads();
    let files: Vec<(&str, String)> = files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    // By tag: each visit resolves it again (every second here), as a chart's version is.
    let tag = format!("{ns}/app:v1");
    push(&tag, &files).await;
    let name = unique_name("health-quiet");
    let mut bundle_spec = spec(&in_registry(&tag), Some(ns));
    bundle_spec.health = policy;
    create_bundle_ready(client, &name, bundle_spec).await;
    name
}

/// Writes the status a Deployment controller writes once `name`'s one replica is available.
async fn make_available(deployments: &Api<Deployment>, name: &str) {
    let generation = deployments
        .get(name)
        .await
        .expect("reading the Deployment")
        .metadata
        .generation;
    let status = json!({ "status": {
        "observedGeneration": generation,
        "replicas": 1,
        "updatedReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "conditions": [
            { "type": "Available", "status": "True", "reason": "MinimumReplicasAvailable" },
            { "type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable" },
        ],
    }});
    deployments
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("writing the Deployment's status");
}

/// While the Deployments progress (the timeout far off), the visits that resolve the tag again
/// read none of the workloads; a change of their status, seen by the drift watch, is what makes
/// the bundle healthy.
#[tokio::test]
async fn workloads_in_progress_are_not_read_again_until_one_changes() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "health-quiet").await;
    let name = install(&client, &ns, health(false, "5m")).await;
    let bundle = wait_health(&client, &name, "False", reasons::PROGRESSING).await;
    let message = &condition(&bundle, types::HEALTHY).unwrap().message;
    assert!(
        message.contains(&format!(
            "{WORKLOADS} of {} objects not healthy",
            2 * WORKLOADS
        )),
        "{message}"
    );

    let before = provisioner_gets(&ns);
    tokio::time::sleep(WINDOW).await;
    let read = new_gets(&before, &provisioner_gets(&ns));
    assert!(
        read.is_empty(),
        "no object changed and the timeout is far off, yet the provisioner read {} of them again in {}s: {read:?}",
        read.len(),
        WINDOW.as_secs()
    );
    let bundle = get_bundle(&client, &name).await;
    assert!(
        at(types::HEALTHY, "False", reasons::PROGRESSING)(&bundle) && is_ready(&bundle),
        "{:?}",
        bundle.status
    );

    // Their controller reports them available: the bundle is healthy, woken by the changes.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    for i in 0..WORKLOADS {
        make_available(&deployments, &format!("web-{i}")).await;
    }
    let bundle = wait_health(&client, &name, "True", reasons::HEALTHY).await;
    assert_eq!(
        condition(&bundle, types::HEALTHY).unwrap().message,
        format!("{} objects healthy", 2 * WORKLOADS)
    );
}

/// The health timeout is the one timer: when it passes, each object is read once, `Healthy`
/// turns `False` (`HealthCheckFailed`), and nothing is read after that while nothing changes.
#[tokio::test]
async fn the_health_timeout_reads_each_object_once_and_then_nothing() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "health-quiet-timeout").await;
    let name = install(&client, &ns, health(false, "6s")).await;
    let installed = provisioner_gets(&ns);
    let bundle = wait_health(&client, &name, "False", reasons::HEALTH_CHECK_FAILED).await;
    let message = &condition(&bundle, types::HEALTHY).unwrap().message;
    assert!(
        message.contains(&format!(
            "{WORKLOADS} of {} objects not healthy after 6s",
            2 * WORKLOADS
        )) && message.contains(&format!("Deployment.apps {ns}/web-0: ")),
        "{message}"
    );

    tokio::time::sleep(WINDOW).await;
    let read = new_gets(&installed, &provisioner_gets(&ns));
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, object) in &read {
        *times.entry(object.as_str()).or_default() += 1;
    }
    assert!(
        times.values().all(|n| *n <= 1),
        "from Ready to {}s after HealthCheckFailed, each object is read at most once (at the timeout): {read:?}",
        WINDOW.as_secs()
    );
    let bundle = get_bundle(&client, &name).await;
    assert!(
        at(types::HEALTHY, "False", reasons::HEALTH_CHECK_FAILED)(&bundle) && is_ready(&bundle),
        "{:?}",
        bundle.status
    );
}
