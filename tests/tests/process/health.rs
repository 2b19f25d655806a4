//! Health on the loopback tier, where no Pods run: a CRD becomes established and a custom
//! resource follows its `Ready` condition (`Healthy` and a waiting `Ready` follow them, woken by
//! the object's changes); with `wait: false`, `Ready` does not wait for a Deployment that never
//! rolls out here, and `Healthy` turns false once the timeout passes, woken by no change at all.
//! Objects of kinds without status are assessed from the apply's answer: one held in deletion
//! by a finalizer is not healthy until it is gone and installed again.

use gantry_api::HealthPolicy;
use gantry_api::conditions::{reasons, types};
use gantry_tests::e2e::*;
use gantry_tests::unique_name;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

pub(super) fn crd(group: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    kind: Widget\n    plural: widgets\n    singular: widget\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    subresources:\n      status: {{}}\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    )
}

pub(super) fn health(wait: bool, timeout: &str) -> Option<HealthPolicy> {
    Some(HealthPolicy {
        wait: Some(wait),
        timeout: Some(timeout.into()),
    })
}

/// Pushes `files`, creates a bundle of them installing into `ns` (named after it) whose `Ready`
/// waits for health, and waits until it is healthy.
async fn install_healthy(
    client: &kube::Client,
    ns: &str,
    files: &[(&str, String)],
) -> (String, gantry_api::Bundle) {
    let image = push(&format!("{ns}/app:v1"), files).await;
    let name = ns.to_string();
    let mut bundle_spec = spec(&image, Some(ns));
    bundle_spec.health = health(true, "5m");
    create_bundle(client, &name, bundle_spec).await;
    let bundle = wait_health(client, &name, "True", reasons::HEALTHY).await;
    (name, bundle)
}

/// Waits until `Healthy` is at `status` with `reason`, at the bundle's generation.
pub(super) async fn wait_health(
    client: &kube::Client,
    name: &str,
    status: &'static str,
    reason: &'static str,
) -> gantry_api::Bundle {
    let what = format!("Healthy={status} {reason}");
    wait_bundle(client, name, &what, at(types::HEALTHY, status, reason)).await
}

/// Writes `status` as the status of Widget `w`, as its controller would.
pub(super) async fn set_widget_status(widgets: &Api<DynamicObject>, status: serde_json::Value) {
    widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .expect("patching the widget's status");
}

/// Whether condition `type_` is at `status` with `reason`, at the bundle's generation.
pub(super) fn at(
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
) -> impl Fn(&gantry_api::Bundle) -> bool {
    move |bundle| {
        condition(bundle, type_).is_some_and(|c| {
            c.status == status
                && c.reason == reason
                && c.observed_generation == bundle.metadata.generation
        })
    }
}

#[tokio::test]
async fn a_waiting_bundle_is_ready_once_its_crd_is_established_and_its_resource_ready() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "health-cr").await;
    let group = format!("{ns}.example.com");
    let widget =
        format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 1\n");
    let (name, bundle) = install_healthy(
        &client,
        &ns,
        &[("00-crd.yaml", crd(&group)), ("10-widget.yaml", widget)],
    )
    .await;
    assert!(is_ready(&bundle), "{:?}", bundle.status);

    // The resource says it is not Ready: the bundle is not healthy, and not Ready either.
    let widgets = widgets(&client, &ns, &group);
    let set_ready = |status: &'static str| {
        let conditions = json!({"conditions": [{
            "type": "Ready", "status": status, "reason": "Checked",
            "message": "the widget checked itself",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        set_widget_status(&widgets, conditions)
    };
    set_ready("False").await;
    let bundle = wait_health(&client, &name, "False", reasons::PROGRESSING).await;
    let healthy = condition(&bundle, types::HEALTHY).unwrap();
    assert!(
        healthy.message.contains(&format!(
            "Widget.{group} {ns}/w: Resource is not Ready: Checked"
        )),
        "{}",
        healthy.message
    );
    assert!(
        at(types::READY, "False", reasons::PROGRESSING)(&bundle),
        "{:?}",
        bundle.status
    );
    // Assessed again later, the message is the same (it names the deadline, not the time
    // left): a message that changed on every pass would be a status write, and each status
    // write another pass.
    let again = reconcile_handled(&client, &name).await;
    assert_eq!(
        condition(&again, types::HEALTHY).unwrap().message,
        healthy.message
    );
    assert!(
        healthy.message.contains("(waiting until "),
        "{}",
        healthy.message
    );

    set_ready("True").await;
    let bundle = wait_health(&client, &name, "True", reasons::HEALTHY).await;
    assert!(is_ready(&bundle), "{:?}", bundle.status);
}

#[tokio::test]
async fn without_wait_ready_does_not_wait_and_healthy_fails_after_the_timeout() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "health-nowait").await;
    // No controller-manager runs here: the Deployment is never observed, let alone rolled out.
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: 127.0.0.1:1/web:1\n";
    let image = push(
        &format!("{ns}/app:v1"),
        &[("web.yaml", deployment.to_string())],
    )
    .await;
    let name = unique_name("health-nowait");
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.health = health(false, "3s");
    let bundle = create_bundle_ready(&client, &name, bundle_spec).await;
    assert!(
        at(types::HEALTHY, "False", reasons::PROGRESSING)(&bundle)
            || at(types::HEALTHY, "False", reasons::HEALTH_CHECK_FAILED)(&bundle),
        "{:?}",
        bundle.status
    );
    let bundle = wait_health(&client, &name, "False", reasons::HEALTH_CHECK_FAILED).await;
    let message = &condition(&bundle, types::HEALTHY).unwrap().message;
    assert!(
        message.contains(&format!(
            "Deployment.apps {ns}/web: Deployment has not been observed"
        )),
        "{message}"
    );
    assert!(
        is_ready(&bundle),
        "Ready does not wait: {:?}",
        bundle.status
    );
}

#[tokio::test]
async fn a_configmap_held_in_deletion_is_not_healthy_until_installed_again() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "health-held").await;
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\ndata:\n  key: value\n";
    let other = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\ndata:\n  key: value\n";
    let (name, bundle) = install_healthy(
        &client,
        &ns,
        &[
            ("10-held.yaml", held.to_string()),
            ("20-other.yaml", other.to_string()),
        ],
    )
    .await;
    assert_eq!(
        condition(&bundle, types::HEALTHY).unwrap().message,
        "2 objects healthy"
    );

    // Deleted, the ConfigMap stays, held by its finalizer: nothing but its deletion timestamp
    // changed, and the bundle is assessed again.
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), &ns);
    delete_config_map(&client, &ns, "held").await;
    let bundle = wait_health(&client, &name, "False", reasons::PROGRESSING).await;
    let message = &condition(&bundle, types::HEALTHY).unwrap().message;
    assert!(
        message.contains("1 of 2 objects not healthy (waiting until ")
            && message.contains(&format!("ConfigMap {ns}/held: resource is being deleted")),
        "{message}"
    );
    assert!(
        at(types::READY, "False", reasons::PROGRESSING)(&bundle),
        "{:?}",
        bundle.status
    );

    // Released, it is gone; the bundle installs it again and is healthy.
    let uid = configmaps.get("held").await.unwrap().metadata.uid;
    configmaps
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await
        .expect("removing the finalizer");
    wait_health(&client, &name, "True", reasons::HEALTHY).await;
    let again = configmaps.get("held").await.expect("installed again");
    assert_ne!(again.metadata.uid, uid, "a new object");
    assert!(again.metadata.deletion_timestamp.is_none());
}
