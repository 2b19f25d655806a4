//! Smoke tests of the node cluster itself: the node registers and runs Pods, Deployments and
//! Services work, cluster DNS answers, Namespaces are deleted, ServiceAccount tokens work.

use std::time::Duration;

use gantry_tests::{NODE_NAME, NodeCluster, node_cluster, unique_name, wait_until};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;

/// Pulls, sandbox and container starts on a busy machine.
const START: Duration = Duration::from_secs(180);

async fn namespace(cluster: &NodeCluster, prefix: &str) -> String {
    let name = unique_name(prefix);
    cluster.create_namespace(&name).await;
    name
}

/// Creates `pod` in `namespace` and waits until it has `Succeeded`, returning its log.
async fn run_to_completion(client: &Client, namespace: &str, pod: serde_json::Value) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(pod).unwrap();
    let name = pod.metadata.name.clone().unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let phase = wait_until(
        &format!("pod {namespace}/{name} to finish"),
        START,
        || async {
            let pod = pods.get(&name).await.ok()?;
            let phase = pod.status?.phase?;
            matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
        },
    )
    .await;
    let log = pods
        .logs(&name, &LogParams::default())
        .await
        .unwrap_or_else(|e| format!("(no log: {e})"));
    assert_eq!(
        phase, "Succeeded",
        "pod {namespace}/{name} failed; its log:\n{log}"
    );
    log
}

fn busybox_pod(cluster: &NodeCluster, name: &str, script: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": cluster.busybox_image(),
                "command": ["sh", "-c", script]
            }]
        }
    })
}

#[tokio::test]
async fn the_node_registers_ready_and_runs_a_pod() {
    let cluster = node_cluster();
    cluster.wait_ready(START).await;
    let client = cluster.client().await;
    let node = Api::<Node>::all(client.clone())
        .get(NODE_NAME)
        .await
        .unwrap();
    let addresses = node.status.unwrap().addresses.unwrap_or_default();
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == cluster.bridge_ip().to_string()),
        "the node's InternalIP is the bridge address: {addresses:?}"
    );
    let ns = namespace(cluster, "pod").await;
    let log = run_to_completion(
        &client,
        &ns,
        busybox_pod(cluster, "hello", "echo hello from $(hostname)"),
    )
    .await;
    // The API server reached the kubelet for the log.
    assert_eq!(log.trim(), "hello from hello");
}
