//! Smoke tests of the node cluster itself: the node registers and runs Pods, Deployments and
//! Services work, cluster DNS answers, Namespaces are deleted, ServiceAccount tokens work.

use std::time::Duration;

use std::future::Future;

use gantry_tests::{DROP_CHAIN, NODE_NAME, NodeCluster, node_cluster, unique_name, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use serde_json::json;

/// Pulls, sandbox and container starts on a busy machine.
const START: Duration = Duration::from_secs(180);

/// [`wait_until`] with [`START`] as deadline that tells what the node did when it fails.
async fn wait<T, F, Fut>(cluster: &NodeCluster, namespace: &str, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match tokio::time::timeout(START, wait_until(what, START * 2, check)).await {
        Ok(value) => value,
        Err(_) => panic!(
            "timed out after {START:?} waiting for {what}\n{}",
            cluster.diagnostics(namespace)
        ),
    }
}

async fn namespace(cluster: &NodeCluster, prefix: &str) -> String {
    let name = unique_name(prefix);
    cluster.create_namespace(&name).await;
    name
}

/// Creates `pod` in `namespace` and waits until it has `Succeeded`, returning its log.
async fn run_to_completion(
    cluster: &NodeCluster,
    client: &Client,
    namespace: &str,
    pod: serde_json::Value,
) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(pod).unwrap();
    let name = pod.metadata.name.clone().unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let phase = wait(
        cluster,
        namespace,
        &format!("pod {namespace}/{name} to finish"),
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
        cluster,
        &client,
        &ns,
        busybox_pod(cluster, "hello", "echo hello from $(hostname); ip route"),
    )
    .await;
    // The API server reached the kubelet for the log.
    let mut lines = log.lines();
    assert_eq!(lines.next(), Some("hello from hello"), "{log}");
    // Pods reach their own range and the Services, and nothing else: no default route.
    let routes: Vec<&str> = lines.collect();
    assert!(
        routes.iter().any(|r| r.starts_with(cluster.service_cidr())),
        "a route to the Service range: {routes:?}"
    );
    assert!(
        !routes.iter().any(|r| r.starts_with("default")),
        "no default route: {routes:?}"
    );
    // And what pods send anywhere else is dropped on this machine.
    let rules = std::process::Command::new("iptables")
        .arg("-S")
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    let pods = cluster.pod_cidr();
    for rule in [
        format!("-A INPUT -s {pods} -j {DROP_CHAIN}"),
        format!("-A FORWARD -s {pods} -j {DROP_CHAIN}"),
        format!("-A {DROP_CHAIN} -j DROP"),
    ] {
        assert!(rules.lines().any(|l| l == rule), "{rule} in: {rules}");
    }
}

/// A Deployment of busybox httpd serving `message`, and a Service `web` in front of it.
async fn web_deployment(cluster: &NodeCluster, client: &Client, ns: &str, message: &str) {
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "terminationGracePeriodSeconds": 2, "containers": [{
                    "name": "httpd", "image": cluster.busybox_image(),
                    "command": ["sh", "-c",
                        format!("echo '{message}' > /www/index.html && exec httpd -f -p 8080 -h /www")],
                    "ports": [{ "containerPort": 8080 }],
                    "readinessProbe": { "httpGet": { "path": "/", "port": 8080 }, "periodSeconds": 1 }
                }]}
            }
        }
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "web" },
        "spec": { "selector": { "app": "web" }, "ports": [{ "port": 80, "targetPort": 8080 }] }
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
}

fn deployment_available(deployment: &Deployment) -> bool {
    deployment
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
        })
}

#[tokio::test]
async fn a_service_answers_another_pod_by_its_dns_name() {
    let cluster = node_cluster();
    let client = cluster.client().await;
    let ns = namespace(cluster, "web").await;
    web_deployment(cluster, &client, &ns, "hello from web").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let available = wait(
        cluster,
        &ns,
        "Deployment web to become Available",
        || async {
            let deployment = deployments.get("web").await.ok()?;
            deployment_available(&deployment).then_some(deployment)
        },
    )
    .await;
    assert_eq!(available.status.unwrap().ready_replicas, Some(2));

    // From another pod: the name resolves through the cluster DNS to the ClusterIP, and
    // kube-proxy's rules carry the request to a ready httpd. kube-proxy and CoreDNS pick the
    // Service up asynchronously, so the client retries within its own deadline.
    let name = format!("web.{ns}.svc.cluster.local");
    let script = format!(
        "for attempt in $(seq 60); do \
           if answer=$(wget -q -O - http://{name}/); then echo \"$answer\"; nslookup {name}; exit 0; fi; \
           sleep 1; \
         done; nslookup {name}; exit 1"
    );
    let log = run_to_completion(
        cluster,
        &client,
        &ns,
        busybox_pod(cluster, "client", &script),
    )
    .await;
    assert!(
        log.contains("hello from web"),
        "the Service answered: {log}"
    );
    let service = Api::<Service>::namespaced(client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    let cluster_ip = service.spec.unwrap().cluster_ip.unwrap();
    assert!(
        log.contains(&cluster_ip),
        "{name} resolves to the ClusterIP {cluster_ip}: {log}"
    );
}

#[tokio::test]
async fn a_pods_service_account_token_authenticates_it_to_the_api_server() {
    let cluster = node_cluster();
    let client = cluster.client().await;
    let ns = namespace(cluster, "token").await;
    // The pod calls the API server through the `kubernetes` Service with the token the
    // kubelet projected into it, and asks who it is.
    let script = "dir=/var/run/secrets/kubernetes.io/serviceaccount; \
        wget -q -O - --no-check-certificate \
          --header \"Authorization: Bearer $(cat $dir/token)\" \
          --header 'Content-Type: application/json' \
          --post-data '{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"SelfSubjectReview\"}' \
          https://kubernetes.default.svc.cluster.local/apis/authentication.k8s.io/v1/selfsubjectreviews \
        && test -s $dir/ca.crt && echo && echo namespace=$(cat $dir/namespace)";
    let log = run_to_completion(
        cluster,
        &client,
        &ns,
        busybox_pod(cluster, "whoami", script),
    )
    .await;
    let (review, namespace) = log
        .rsplit_once("namespace=")
        .unwrap_or_else(|| panic!("the pod printed its namespace: {log}"));
    let review: serde_json::Value =
        serde_json::from_str(review).unwrap_or_else(|e| panic!("a SelfSubjectReview ({e}): {log}"));
    assert_eq!(
        review["status"]["userInfo"]["username"],
        format!("system:serviceaccount:{ns}:default"),
        "{log}"
    );
    assert_eq!(namespace.trim(), ns);
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_objects_and_finishes() {
    let cluster = node_cluster();
    let client = cluster.client().await;
    let ns = namespace(cluster, "doomed").await;
    web_deployment(cluster, &client, &ns, "soon gone").await;
    let config: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "settings" },
        "data": { "a": "b" }
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait(cluster, &ns, "the Deployment's pods to run", || async {
        let list = pods.list(&Default::default()).await.ok()?;
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == 2).then_some(())
    })
    .await;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    // The namespace controller deletes the objects, the garbage collector the ReplicaSet's
    // pods, the kubelet stops them; only then the namespace goes.
    wait(
        cluster,
        &ns,
        &format!("namespace {ns} to be gone"),
        || async {
            match namespaces.get_opt(&ns).await {
                Ok(None) => Some(()),
                _ => None,
            }
        },
    )
    .await;
}
