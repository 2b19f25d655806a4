//! `gantry.dev/helm` on the node: the plugin `gantry-helm-plugin` runs as Pods from its image
//! (`scripts/images --helm-plugin-only`, built as Gantry's are), installed from the optional
//! component `manifests/components/helm-plugin` through a kustomization that points it at the
//! pushed image, with a serving certificate the administrator made (here, a CA of the test's
//! own), beside Gantry running as Pods. A chart nobody here wrote, metrics-server's 3.13.1 as
//! its upstream repository ships it (`charts/metrics-server` of the Go module
//! sigs.k8s.io/metrics-server v0.9.0), pushed with the real `helm push`, is installed as a
//! Bundle: Ready and Healthy, its Pod running the node registry's metrics-server image (the
//! binary built from the same module), its APIService Available. `helm template` with the same
//! values gives the objects of `status.inventory` and the Deployment that runs; a values change
//! upgrades the Deployment in place; deleting the Bundle leaves nothing, the APIService included.
//! The chart `charts/gantry` with `helmPlugin.enabled=true` renders the component's objects.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gantry_api::conditions::{reasons, types};
use gantry_api::plugin::{CA_ANNOTATION, PLUGIN_LABEL, PROVISIONER_ANNOTATION};
use gantry_api::{
    ApprovalPolicy, Bundle, HealthPolicy, ProvisionerClass, ProvisionerClassSpec,
    ServiceAccountReference,
};
use gantry_tests::e2e::{apply_class, class_spec_for, create_bundle, patch_spec, spec_of_class};
use gantry_tests::helm::{
    HELM_LABELS, Objects, assert_same_objects, go_module_dir, helm_binary, package_and_push,
    yaml_objects,
};
use gantry_tests::{NodeCluster, Pki, node_cluster, unique_name, workspace_root};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::gantry::{
    DISRUPTION, HOST_PROVISIONER, NAMESPACE as GANTRY_NAMESPACE, apply, installed, kubectl,
    kubectl_ok, wait_dumping,
};
use super::health::condition;
use super::metrics_server::push_metrics_server_image;

/// The plugin's objects, as the component names them.
const PLUGIN: &str = "gantry-helm-plugin";
const PLUGIN_REPLICAS: i32 = 2;
const TLS_SECRET: &str = "gantry-helm-plugin-tls";
const CA_SECRET: &str = "gantry-helm-plugin-ca";
/// The class the component ships.
const SHIPPED_CLASS: &str = "helm";
const COMPONENT: &str = "manifests/components/helm-plugin";
/// metrics-server's module, its chart and the image the chart's values point at.
const MODULE: &str = "sigs.k8s.io/metrics-server@v0.9.0";
const CHART_VERSION: &str = "3.13.1";
const METRICS_SERVER: &str = "metrics-server";
const METRICS_SERVER_VERSION: &str = "v0.9.0";
const API_SERVICE: &str = "v1beta1.metrics.k8s.io";
/// Pulls, starts and probes.
const WAIT: Duration = Duration::from_secs(240);

#[tokio::test]
async fn helm_plugin_runs_as_pods_and_installs_a_real_chart_as_helm_template_renders_it() {
    let cluster = node_cluster();
    let client = cluster.client().await;
    let _shared = HOST_PROVISIONER.read().await;
    installed(cluster, &client).await;
    // The chart registers metrics.k8s.io, as metrics_server.rs's bundle does: until it answers,
    // discovery fails for every client, so the other tests wait.
    let _alone = DISRUPTION.write().await;
    let started = Instant::now();
    let elapsed = |what: &str| println!("{what}: {:.1} s", started.elapsed().as_secs_f64());

    the_chart_renders_the_component(cluster);

    // The plugin, from its image, with the administrator's certificate.
    let plugin_install = plugin_kustomization(cluster);
    let pki = Pki::new("gantry-helm-plugin-ca").unwrap();
    let serving = pki
        .server(&[&format!("{PLUGIN}.{GANTRY_NAMESPACE}.svc")], &[])
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), GANTRY_NAMESPACE);
    let secret = |value: Value| serde_json::from_value::<Secret>(value).unwrap();
    apply(
        &secrets,
        &secret(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": { "name": TLS_SECRET, "namespace": GANTRY_NAMESPACE },
            "stringData": { "tls.crt": serving.cert_pem, "tls.key": serving.key_pem },
        })),
    )
    .await;
    apply(
        &secrets,
        &secret(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": CA_SECRET, "namespace": GANTRY_NAMESPACE },
            "stringData": { "ca.crt": pki.ca_pem() },
        })),
    )
    .await;
    kubectl_ok(
        cluster,
        &["apply", "-k", plugin_install.path().to_str().unwrap()],
    );
    rolled_out(cluster, &client, GANTRY_NAMESPACE, PLUGIN, PLUGIN_REPLICAS).await;
    elapsed("the plugin rolled out");
    let accepted = class_accepted(cluster, &client, SHIPPED_CLASS).await;
    assert!(
        accepted.contains(&format!(
            "plugin gantry.dev/helm 0.1.0 at https://{PLUGIN}.{GANTRY_NAMESPACE}.svc:443"
        )),
        "the shipped class {SHIPPED_CLASS}: {accepted}"
    );

    // A class for the node's registry, waiting for health; the chart and the image it runs.
    let class = unique_name("helm");
    let spec = ProvisionerClassSpec {
        provisioner: "gantry.dev/helm".into(),
        health: Some(HealthPolicy {
            wait: Some(true),
            timeout: Some("5m".into()),
        }),
        service_account: Some(ServiceAccountReference {
            namespace: GANTRY_NAMESPACE.into(),
            name: "gantry-applier".into(),
        }),
        ..class_spec_for(cluster.registry(), ApprovalPolicy::Automatic)
    };
    apply_class(&client, &class, spec, false).await;
    push_metrics_server_image(cluster).await;
    let image = format!(
        "{}/{METRICS_SERVER}/{METRICS_SERVER}:{METRICS_SERVER_VERSION}",
        cluster.registry()
    );
    let home = tempfile::tempdir().unwrap();
    let (archive, reference) = package_and_push(
        home.path(),
        &go_module_dir(MODULE).join("charts/metrics-server"),
        cluster.registry(),
        "charts",
    );
    assert!(
        reference.ends_with(&format!("/charts/{METRICS_SERVER}:{CHART_VERSION}")),
        "{reference}"
    );
    elapsed("the chart and the image pushed");

    // Installed with values, as a user of the chart sets them.
    let name = unique_name(METRICS_SERVER);
    let namespace = name.clone();
    cluster.create_namespace(&namespace).await;
    let (repository, tag) = image
        .rsplit_once(':')
        .filter(|(_, tag)| !tag.contains('/'))
        .expect("a tagged image");
    let mut values = json!({
        "image": { "repository": repository, "tag": tag },
        "args": ["--kubelet-insecure-tls"],
        // metrics-server is ready once it scraped the kubelet: probed at once, and often.
        "readinessProbe": { "initialDelaySeconds": 0, "periodSeconds": 2 },
    });
    let mut spec = spec_of_class(&reference, Some(&namespace), &class);
    spec.config = Some(values.as_object().unwrap().clone());
    let created = Instant::now();
    create_bundle(&client, &name, spec).await;
    let bundle = ready_and_healthy(cluster, &client, &name, &namespace, None).await;
    println!(
        "metrics-server {CHART_VERSION}: Bundle created to Ready and Healthy in {:.1} s",
        created.elapsed().as_secs_f64()
    );
    let status = bundle.status.as_ref().unwrap();
    let rendered = status.rendered.as_ref().expect("status.rendered");
    assert_eq!(
        (rendered.provisioner.as_str(), rendered.source.as_deref()),
        (
            "gantry.dev/helm",
            Some(format!("{METRICS_SERVER} {CHART_VERSION}").as_str())
        )
    );
    let pod = running_pod(&client, &namespace, &name).await;
    let api_services: Api<APIService> = Api::all(client.clone());
    let available = api_services.get(API_SERVICE).await.expect("the APIService");
    assert!(
        api_service_available(&available),
        "{API_SERVICE} is Available once the bundle is Healthy: {:?}",
        available.status
    );

    // `helm template` with the same values: the objects of the inventory, the Deployment that runs.
    let version = client.apiserver_version().await.unwrap().git_version;
    let templated = helm_template(home.path(), &name, &archive, &namespace, &version, &values);
    assert_eq!(
        inventory(&bundle),
        templated_keys(&templated, &namespace),
        "status.inventory holds the objects helm template gives"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let deployment_name = deployment_of(&templated);
    let live = deployments.get(&deployment_name).await.unwrap();
    assert_same_container(&live, &templated);
    let container =
        &serde_json::to_value(&live).unwrap()["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], image.as_str());
    println!("Pod {namespace}/{pod} runs {image}");
    elapsed("installed, and as helm template renders it");

    // Another value: the same Deployment, upgraded in place.
    let before = status.content_digest.clone();
    values["args"] = json!(["--kubelet-insecure-tls", "--metric-resolution=20s"]);
    patch_spec(&client, &name, json!({ "config": values })).await;
    let upgraded = Instant::now();
    let bundle = ready_and_healthy(cluster, &client, &name, &namespace, before.as_deref()).await;
    println!(
        "values changed to Ready and Healthy in {:.1} s",
        upgraded.elapsed().as_secs_f64()
    );
    let templated = helm_template(home.path(), &name, &archive, &namespace, &version, &values);
    assert_eq!(inventory(&bundle), templated_keys(&templated, &namespace));
    let after = deployments.get(&deployment_name).await.unwrap();
    assert_eq!(
        after.uid(),
        live.uid(),
        "the Deployment is upgraded in place, not replaced"
    );
    assert!(
        after.metadata.generation > live.metadata.generation,
        "a new spec: generation {:?} after {:?}",
        after.metadata.generation,
        live.metadata.generation
    );
    assert_same_container(&after, &templated);
    running_pod(&client, &namespace, &name).await;
    elapsed("upgraded");

    // Uninstall: nothing the chart made is left, the APIService included.
    let bundles: Api<Bundle> = Api::all(client.clone());
    bundles
        .delete(&name, &DeleteParams::default())
        .await
        .expect("deleting the Bundle");
    wait_dumping(
        cluster,
        "the Bundle to be gone",
        WAIT,
        &[&namespace],
        || async { bundles.get_opt(&name).await.ok()?.is_none().then_some(()) },
    )
    .await;
    let mut left = Vec::new();
    for object in templated.values() {
        if let Some(found) = still_there(&client, object, &namespace).await {
            left.push(found);
        }
    }
    assert!(left.is_empty(), "left behind by the uninstall: {left:?}");
    assert!(
        api_services.get_opt(API_SERVICE).await.unwrap().is_none(),
        "{API_SERVICE} is gone"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    wait_dumping(
        cluster,
        "metrics-server's Pods to be gone",
        WAIT,
        &[&namespace],
        || async {
            pods.list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
    elapsed("uninstalled");

    // The plugin and the test's class go too; the certificate's Secrets with them.
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    classes
        .delete(&class, &DeleteParams::default())
        .await
        .expect("deleting the class");
    kubectl_ok(
        cluster,
        &[
            "delete",
            "-k",
            plugin_install.path().to_str().unwrap(),
            "--wait=false",
        ],
    );
    for secret in [TLS_SECRET, CA_SECRET] {
        secrets
            .delete(secret, &DeleteParams::default())
            .await
            .expect("deleting a Secret");
    }
    let _ = kubectl(
        cluster,
        &["delete", "namespace", &namespace, "--wait=false"],
    );
}

// --- the plugin -----------------------------------------------------------------------------

/// `scripts/images --helm-plugin-only --push REGISTRY --kustomize DIR`: the plugin's image
/// pushed to the node's registry, and DIR the component with a kustomization naming it.
fn plugin_kustomization(cluster: &NodeCluster) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("gantry-helm-plugin-install-")
        .tempdir()
        .unwrap();
    let script = workspace_root().join("scripts/images");
    let output = gantry_tests::script_command()
        .arg(&script)
        .args(["--helm-plugin-only", "--push", cluster.registry()])
        .args(["--plain-http", "--kustomize"])
        .arg(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "scripts/images --helm-plugin-only failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let pushed = stdout
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{PLUGIN} ")))
        .unwrap_or_else(|| panic!("scripts/images printed no image for {PLUGIN}:\n{stdout}"));
    assert!(
        pushed.starts_with(&format!("{}/{PLUGIN}@sha256:", cluster.registry())),
        "{pushed}"
    );
    dir
}

/// The chart with `helmPlugin.enabled=true` renders, beside what it renders by default, exactly
/// the component's objects (and Helm's labels).
fn the_chart_renders_the_component(cluster: &NodeCluster) {
    let rendered = |args: &[&str]| {
        let home = tempfile::tempdir().unwrap();
        let yaml = output_of(
            helm(home.path())
                .current_dir(workspace_root())
                .args(["template", "gantry", "charts/gantry"])
                .args(args),
        );
        yaml_objects("helm template charts/gantry", &yaml)
    };
    let default = rendered(&[]);
    let mut added: Objects = rendered(&["--set", "helmPlugin.enabled=true"])
        .into_iter()
        .filter(|(key, _)| !default.contains_key(key))
        .collect();
    for (key, object) in added.iter_mut() {
        let labels = object
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("{key} has no labels"));
        for label in HELM_LABELS {
            assert!(labels.remove(label).is_some(), "{key} lacks {label}");
        }
    }
    let component = output_of(cluster.kubectl().args([
        "kustomize",
        workspace_root().join(COMPONENT).to_str().unwrap(),
    ]));
    assert_same_objects(
        "helm template --set helmPlugin.enabled=true",
        &added,
        &yaml_objects(COMPONENT, &component),
    );
}

/// The class `name`'s `Accepted` message once it is True.
async fn class_accepted(cluster: &NodeCluster, client: &Client, name: &str) -> String {
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    wait_dumping(
        cluster,
        &format!("class {name} to be Accepted"),
        WAIT,
        &[],
        || async {
            let class = classes.get_opt(name).await.ok()??;
            let accepted = class
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == types::ACCEPTED)?;
            (accepted.status == "True").then_some(accepted.message)
        },
    )
    .await
}

/// Waits until Deployment `namespace/name` has rolled out `replicas` ready replicas.
async fn rolled_out(
    cluster: &NodeCluster,
    client: &Client,
    namespace: &str,
    name: &str,
    replicas: i32,
) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let what = format!("Deployment {namespace}/{name} to roll out {replicas} replica(s)");
    wait_dumping(cluster, &what, WAIT, &[namespace], || async {
        let deployment = deployments.get_opt(name).await.ok()??;
        let status = deployment.status?;
        (status.observed_generation == deployment.metadata.generation
            && status.updated_replicas == Some(replicas)
            && status.ready_replicas == Some(replicas)
            && status.available_replicas == Some(replicas))
        .then_some(())
    })
    .await;
}

// --- the chart ------------------------------------------------------------------------------

/// `helm` with its caches and configuration in `home`.
fn helm(home: &Path) -> Command {
    let mut command = Command::new(helm_binary());
    command
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    command
}

fn output_of(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// `helm template` of the archive as Gantry renders it: the release, its namespace, the
/// cluster's version and `values`.
fn helm_template(
    home: &Path,
    name: &str,
    archive: &Path,
    namespace: &str,
    kube_version: &str,
    values: &Value,
) -> Objects {
    let file = home.join("values.json");
    std::fs::write(&file, values.to_string()).unwrap();
    let yaml = output_of(
        helm(home)
            .args(["template", name])
            .arg(archive)
            .args([
                "--namespace",
                namespace,
                "--kube-version",
                kube_version,
                "-f",
            ])
            .arg(&file),
    );
    yaml_objects("helm template", &yaml)
}

/// Kinds the chart makes that are not namespaced.
const CLUSTER_SCOPED: [&str; 3] = ["ClusterRole", "ClusterRoleBinding", "APIService"];

/// `group kind namespace/name` of each templated object; a namespaced one without a namespace
/// is in the install namespace, as Gantry applies it.
fn templated_keys(templated: &Objects, namespace: &str) -> BTreeSet<String> {
    templated
        .values()
        .map(|o| {
            let api_version = o["apiVersion"].as_str().unwrap();
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let kind = o["kind"].as_str().unwrap();
            let object_namespace = match o["metadata"]["namespace"].as_str() {
                Some(ns) => ns,
                None if CLUSTER_SCOPED.contains(&kind) => "",
                None => namespace,
            };
            format!(
                "{group} {kind} {object_namespace}/{}",
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

fn inventory(bundle: &Bundle) -> BTreeSet<String> {
    bundle
        .status
        .as_ref()
        .unwrap()
        .inventory
        .iter()
        .map(|e| {
            format!(
                "{} {} {}/{}",
                e.group,
                e.kind,
                e.namespace.as_deref().unwrap_or(""),
                e.name
            )
        })
        .collect()
}

fn deployment_of(templated: &Objects) -> String {
    let deployments: Vec<&Value> = templated
        .values()
        .filter(|o| o["kind"] == "Deployment")
        .collect();
    assert_eq!(deployments.len(), 1, "the chart renders one Deployment");
    deployments[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The live Deployment runs the templated one's container: image, arguments, probes' timing
/// and replicas as `helm template` renders them.
fn assert_same_container(live: &Deployment, templated: &Objects) {
    let live = serde_json::to_value(live).unwrap();
    let templated = templated
        .values()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let container = |d: &Value| d["spec"]["template"]["spec"]["containers"][0].clone();
    let (live_container, templated_container) = (container(&live), container(templated));
    for field in ["image", "args"] {
        assert_eq!(
            live_container[field], templated_container[field],
            "the Deployment's container {field}"
        );
    }
    // The API server leaves a zero out.
    let seconds =
        |container: &Value, field: &str| container["readinessProbe"][field].as_i64().unwrap_or(0);
    for field in ["initialDelaySeconds", "periodSeconds"] {
        assert_eq!(
            seconds(&live_container, field),
            seconds(&templated_container, field),
            "the Deployment's readinessProbe.{field}"
        );
    }
    assert_eq!(live["spec"]["replicas"], templated["spec"]["replicas"]);
}

// --- metrics-server -------------------------------------------------------------------------

/// The bundle once Ready and Healthy at its generation, with content other than `before`.
async fn ready_and_healthy(
    cluster: &NodeCluster,
    client: &Client,
    name: &str,
    namespace: &str,
    before: Option<&str>,
) -> Bundle {
    let bundles: Api<Bundle> = Api::all(client.clone());
    wait_dumping(
        cluster,
        &format!("Bundle {name} to be Ready and Healthy"),
        WAIT,
        &[namespace],
        || async {
            let bundle = bundles.get(name).await.ok()?;
            let healthy = condition(&bundle, types::HEALTHY)?;
            let ready = condition(&bundle, types::READY)?;
            let content = bundle.status.as_ref()?.content_digest.as_deref();
            (healthy.0 == "True"
                && healthy.1 == reasons::HEALTHY
                && ready.0 == "True"
                && content != before)
                .then_some(bundle)
        },
    )
    .await
}

/// The one running Pod of the release `release`, all of its containers ready.
async fn running_pod(client: &Client, namespace: &str, release: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/name={METRICS_SERVER},app.kubernetes.io/instance={release}"
        )))
        .await
        .expect("listing metrics-server's Pods");
    let running: Vec<String> = list
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            let status = pod.status.as_ref();
            status.and_then(|s| s.phase.as_deref()) == Some("Running")
                && status
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|c| c.iter().all(|c| c.ready))
        })
        .map(|pod| pod.name_any())
        .collect();
    assert_eq!(running.len(), 1, "one running, ready Pod: {running:?}");
    running.into_iter().next().unwrap()
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

/// `Kind namespace/name` of `object` if it still exists (a namespaced one without a namespace
/// in `namespace`).
async fn still_there(client: &Client, object: &Value, namespace: &str) -> Option<String> {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discovering {api_version} {kind}: {e}"));
    let name = object["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> = if capabilities.scope == kube::discovery::Scope::Namespaced {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace);
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading {kind} {name}: {e}"))
        .map(|_| format!("{kind} {name}"))
}

/// The plugin's Service registers it as docs/plugins.md says.
#[test]
fn the_components_service_registers_the_plugin() {
    let text =
        std::fs::read_to_string(workspace_root().join(COMPONENT).join("10-plugin.yaml")).unwrap();
    let objects = yaml_objects(COMPONENT, &text);
    let service = &objects[&format!("v1 Service {GANTRY_NAMESPACE}/{PLUGIN}")];
    assert_eq!(service["metadata"]["labels"][PLUGIN_LABEL], "true");
    assert_eq!(
        service["metadata"]["annotations"][PROVISIONER_ANNOTATION],
        "gantry.dev/helm"
    );
    assert_eq!(service["metadata"]["annotations"][CA_ANNOTATION], CA_SECRET);
    assert_eq!(service["spec"]["ports"][0]["name"], "https");
}
