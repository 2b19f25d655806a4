//! `gantry.dev/helm`: Helm charts pushed by the real `helm push`, rendered by the external
//! plugin `gantry-helm-plugin` (Helm's own engine) through the contract of docs/plugins.md,
//! installed, upgraded by a values change and uninstalled; the same objects as `helm template`
//! gives; the trust both ways (a plugin registered elsewhere is never used, one whose
//! certificate does not verify or that says it is another is not accepted); a chart that does
//! not render is `Stalled` naming the file.
//!
//! A cluster of its own: its provisioner runs sharded (as manifests/ runs it) with a token for
//! plugins, and the chart's APIService (whose backend never runs here) stays out of the other
//! modules' discovery.

use std::collections::BTreeSet;
use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::plugin::{CA_ANNOTATION, PLUGIN_LABEL, PROVISIONER_ANNOTATION};
use gantry_api::{ApprovalPolicy, Bundle, ProvisionerClass, ProvisionerClassSpec};
use gantry_tests::Pki;
use gantry_tests::e2e::*;
use gantry_tests::helm::{go_module_dir, helm_in, helm_push, package_and_push, yaml_objects};
use gantry_tests::helm_plugin::{HelmPlugin, chart_archive, write_plugin_token};
use gantry_tests::{registry, unique_name, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::Client;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

static CLUSTER: Isolated = Isolated::new();

/// Registers a plugin for `id`: Service `name` in the provisioner's namespace, reached at
/// localhost:`port` (ExternalName), verified with the CA of Secret `ca_secret`.
async fn register(
    client: &Client,
    namespace: &str,
    name: &str,
    id: &str,
    port: u16,
    ca_secret: &str,
) {
    apply_object::<Service>(
        client,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": name, "namespace": namespace,
                "labels": { PLUGIN_LABEL: "true" },
                "annotations": { PROVISIONER_ANNOTATION: id, CA_ANNOTATION: ca_secret },
            },
            "spec": {
                "type": "ExternalName", "externalName": "localhost",
                "ports": [{ "name": "https", "port": port }],
            },
        }),
    )
    .await;
}

async fn ca_secret(client: &Client, name: &str, pem: &str) {
    apply_object::<Secret>(
        client,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": name, "namespace": NAMESPACE },
            "stringData": { "ca.crt": pem },
        }),
    )
    .await;
}

async fn helm_class(client: &Client, name: &str, provisioner: &str) {
    let spec = ProvisionerClassSpec {
        provisioner: provisioner.into(),
        ..class_spec(ApprovalPolicy::Automatic)
    };
    apply_class(client, name, spec, false).await;
}

/// The class `name` once its `Accepted` condition is `status`.
async fn class_accepted(client: &Client, name: &str, status: &str) -> gantry_api::Condition {
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    wait_until(
        &format!("class {name} Accepted={status}"),
        Duration::from_secs(60),
        || {
            let classes = classes.clone();
            async move {
                let class = classes.get(name).await.ok()?;
                let condition =
                    gantry_rules::conditions::find(&class.status?.conditions, types::ACCEPTED)?
                        .clone();
                (condition.status == status).then_some(condition)
            }
        },
    )
    .await
}

/// `(kind, name)` of the bundle's inventory.
fn inventory(bundle: &Bundle) -> BTreeSet<(String, String)> {
    bundle
        .status
        .as_ref()
        .unwrap()
        .inventory
        .iter()
        .map(|e| (e.kind.clone(), e.name.clone()))
        .collect()
}

fn args_of(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn helm_charts_render_through_the_plugin_and_install_as_helm_template_renders_them() {
    let cluster = CLUSTER.get();
    let plane = cluster.plane();
    let client = plane.client().await;
    let work = tempfile::tempdir().unwrap();
    let token_file = work.path().join("plugin-token");
    write_plugin_token(&client, &token_file).await;
    let token_flag = format!("--plugin-token-file={}", token_file.display());
    let _gantry = start_gantry(
        plane,
        // Sharded, as manifests/ runs it: the sharder places the bundles of plugin classes.
        &[
            "--sharding",
            "--resolve-interval=1s",
            "--backoff-base=200ms",
            "--backoff-cap=2s",
            &token_flag,
        ],
    );
    let plugin = HelmPlugin::start(plane)
        .await
        .expect("starting gantry-helm-plugin");
    let port: u16 = plugin.url().rsplit(':').next().unwrap().parse().unwrap();
    let ca = std::fs::read_to_string(plugin.ca_file()).unwrap();
    ca_secret(&client, "helm-plugin-ca", &ca).await;
    register(
        &client,
        NAMESPACE,
        "helm-plugin",
        "gantry.dev/helm",
        port,
        "helm-plugin-ca",
    )
    .await;
    helm_class(&client, "helm", "gantry.dev/helm").await;
    let accepted = class_accepted(&client, "helm", "True").await;
    assert!(
        accepted
            .message
            .contains("plugin gantry.dev/helm 0.1.0 at https://localhost:"),
        "{}",
        accepted.message
    );

    // metrics-server's chart, packaged and pushed by helm, installed with values.
    let home = work.path().join("helm");
    let (archive, reference) = package_and_push(
        &home,
        &go_module_dir("sigs.k8s.io/metrics-server@v0.9.0").join("charts/metrics-server"),
        registry().host(),
        "charts",
    );
    assert!(
        reference.ends_with("/charts/metrics-server:3.13.1"),
        "{reference}"
    );
    let ns = "metrics";
    ensure_namespace(&client, ns).await;
    let name = "metrics-server";
    let mut metrics = spec_of_class(&reference, Some(ns), "helm");
    metrics.config = Some(
        json!({ "args": ["--kubelet-insecure-tls"], "replicas": 2 })
            .as_object()
            .unwrap()
            .clone(),
    );
    let bundle = create_bundle_ready(&client, name, metrics).await;
    let status = bundle.status.as_ref().unwrap();
    let rendered = status.rendered.as_ref().expect("status.rendered");
    assert_eq!(
        (
            rendered.provisioner.as_str(),
            rendered.version.as_str(),
            rendered.source.as_deref()
        ),
        ("gantry.dev/helm", "0.1.0", Some("metrics-server 3.13.1"))
    );
    assert!(
        rendered
            .notes
            .as_deref()
            .unwrap_or_default()
            .contains("metrics-server"),
        "the chart's NOTES.txt: {:?}",
        rendered.notes
    );

    // `helm template` with the same values and the cluster's version: the same objects.
    let version = client.apiserver_version().await.unwrap().git_version;
    let template = helm_in(
        &home,
        &[
            "template",
            name,
            archive.to_str().unwrap(),
            "--namespace",
            ns,
            "--kube-version",
            &version,
            "--set-json",
            r#"args=["--kubelet-insecure-tls"]"#,
            "--set",
            "replicas=2",
        ],
    );
    let templated = yaml_objects("helm template", &template);
    let expected: BTreeSet<(String, String)> = templated
        .values()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        inventory(&bundle),
        expected,
        "the objects helm template gives"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let live = serde_json::to_value(deployments.get(name).await.unwrap()).unwrap();
    let templated_deployment = templated
        .values()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    assert_eq!(args_of(&live), args_of(templated_deployment));
    assert!(args_of(&live).contains(&"--kubelet-insecure-tls".to_string()));
    assert_eq!(live["spec"]["replicas"], 2);
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"],
        templated_deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    );

    // A values change upgrades in place.
    let before = status.content_digest.clone();
    patch_spec(
        &client,
        name,
        json!({ "config": { "args": ["--kubelet-insecure-tls", "--metric-resolution=20s"] } }),
    )
    .await;
    wait_bundle(&client, name, "Ready with the new values", |b| {
        is_ready(b) && b.status.as_ref().unwrap().content_digest != before
    })
    .await;
    let live = serde_json::to_value(deployments.get(name).await.unwrap()).unwrap();
    assert!(
        args_of(&live).contains(&"--metric-resolution=20s".to_string()),
        "{:?}",
        args_of(&live)
    );

    // Trust: a plugin is only what the administrator registered, verified, and who it says.
    let other = Pki::new("not-the-plugins-ca").unwrap();
    ca_secret(&client, "other-ca", other.ca_pem()).await;
    register(
        &client,
        NAMESPACE,
        "untrusted",
        "example.dev/untrusted",
        port,
        "other-ca",
    )
    .await;
    helm_class(&client, "untrusted", "example.dev/untrusted").await;
    let refused = class_accepted(&client, "untrusted", "False").await;
    assert_eq!(refused.reason, reasons::PROVISIONER_NOT_READY);
    assert!(
        refused.message.contains("certificate"),
        "{}",
        refused.message
    );
    let untrusted = unique_name("untrusted");
    create_bundle(
        &client,
        &untrusted,
        spec_of_class(&reference, Some(ns), "untrusted"),
    )
    .await;
    let waiting = wait_bundle(&client, &untrusted, "waiting for its plugin", |b| {
        condition(b, types::UNPACKED).is_some_and(|c| c.reason == reasons::PROVISIONER_NOT_READY)
    })
    .await;
    assert!(waiting.status.as_ref().unwrap().inventory.is_empty());

    register(
        &client,
        NAMESPACE,
        "impostor",
        "example.dev/impostor",
        port,
        "helm-plugin-ca",
    )
    .await;
    helm_class(&client, "impostor", "example.dev/impostor").await;
    let refused = class_accepted(&client, "impostor", "False").await;
    assert!(
        refused
            .message
            .contains("is gantry.dev/helm (contract v1), not example.dev/impostor"),
        "{}",
        refused.message
    );

    // Registered outside the provisioner's namespace: not a plugin at all, never called.
    register(
        &client,
        "default",
        "elsewhere",
        "example.dev/elsewhere",
        port,
        "helm-plugin-ca",
    )
    .await;
    helm_class(&client, "elsewhere", "example.dev/elsewhere").await;
    let elsewhere = unique_name("elsewhere");
    create_bundle(
        &client,
        &elsewhere,
        spec_of_class(&reference, Some(ns), "elsewhere"),
    )
    .await;
    // Once a later bundle is installed, the provisioner has seen the earlier objects.
    let marker = unique_name("after-elsewhere");
    let plain = push(
        &format!("{marker}/app:v1"),
        &[("a.yaml", config_map(&marker, Some(ns), "x"))],
    )
    .await;
    create_bundle_ready(&client, &marker, spec(&plain, Some(ns))).await;
    let class = Api::<ProvisionerClass>::all(client.clone())
        .get("elsewhere")
        .await
        .unwrap();
    assert!(
        class.status.is_none(),
        "a class of an unregistered ID is not this installation's"
    );
    assert!(
        get_bundle(&client, &elsewhere).await.status.is_none(),
        "nor its bundles"
    );

    // A chart that does not render: Stalled, naming the template.
    let broken = chart_archive(
        "broken",
        &[
            (
                "Chart.yaml",
                "apiVersion: v2\nname: broken\nversion: 0.1.0\n",
            ),
            (
                "templates/configmap.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }\n",
            ),
        ],
    );
    let broken_path = work.path().join("broken-0.1.0.tgz");
    std::fs::write(&broken_path, broken).unwrap();
    let broken_reference = helm_push(&home, &broken_path, registry().host(), "charts");
    let broken_name = unique_name("broken");
    create_bundle(
        &client,
        &broken_name,
        spec_of_class(&broken_reference, Some(ns), "helm"),
    )
    .await;
    let stalled = wait_bundle(&client, &broken_name, "Stalled on the template", |b| {
        condition(b, types::STALLED).is_some_and(|c| c.reason == reasons::RENDER_FAILED)
    })
    .await;
    let message = &condition(&stalled, types::UNPACKED).unwrap().message;
    assert!(message.contains("templates/configmap.yaml"), "{message}");

    // Uninstall leaves nothing.
    Api::<Bundle>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    wait_bundle_gone(&client, name).await;
    assert!(deployments.get_opt(name).await.unwrap().is_none());
    drop(plugin);
}
