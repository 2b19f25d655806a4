//! `spec.deletionPolicy`: `Orphan` leaves the objects without the bundle's label (and another
//! bundle adopts them); `WaitForTermination` keeps the Bundle while an object is held by a
//! finalizer of the test's own and while its Namespace terminates, and past its `spec.timeout`
//! says what is left and keeps waiting. `Delete` is covered where the uninstall waves are
//! (`uninstall_order.rs`, `ordering.rs`). No namespace controller runs here: the test finishes
//! a terminating Namespace itself, as that controller would.

use gantry_api::conditions::{reasons, types};
use gantry_api::{BUNDLE_LABEL, Bundle, BundlePhase, DeletionPolicy, UNINSTALL_FINALIZER};
use gantry_tests::e2e::*;
use gantry_tests::{unique_name, wait_until};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, NamespaceSpec};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const HOLD: &str = "test.gantry.dev/hold";

/// A ConfigMap `name` in `namespace` that the finalizer [`HOLD`] keeps once it is deleted.
fn held_config_map(name: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  finalizers:\n  - {HOLD}\ndata:\n  value: \"1\"\n"
    )
}

/// Whether `Installed` is False with `reason` and its message contains every one of `parts`.
fn installed_says(reason: &'static str, parts: Vec<String>) -> impl Fn(&Bundle) -> bool {
    move |bundle| {
        condition(bundle, types::INSTALLED).is_some_and(|c| {
            c.status == "False"
                && c.reason == reason
                && parts.iter().all(|part| c.message.contains(part.as_str()))
        })
    }
}

async fn release_hold(client: &Client, namespace: &str, name: &str) {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    config_maps
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn orphan_leaves_the_objects_unlabelled_for_another_bundle_to_adopt() {
    let client = shared_gantry_client().await;
    let ns = unique_name("orphan");
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("00-namespace.yaml", namespace_yaml(&ns)),
            ("10-a.yaml", config_map("a", Some(&ns), "1")),
            ("20-b.yaml", config_map("b", Some(&ns), "2")),
        ],
    )
    .await;
    let name = unique_name("orphan");
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.deletion_policy = Some(DeletionPolicy::Orphan);
    create_bundle_ready(&client, &name, bundle_spec).await;

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let label =
        |labels: &std::collections::BTreeMap<String, String>| labels.get(BUNDLE_LABEL).cloned();
    assert_eq!(
        label(config_maps.get("a").await.unwrap().labels()),
        Some(name.clone())
    );

    delete_bundle(&client, &name).await;
    wait_bundle_gone(&client, &name).await;
    for object in ["a", "b"] {
        let live = config_maps.get(object).await.unwrap();
        assert!(live.metadata.deletion_timestamp.is_none(), "{object}");
        assert_eq!(label(live.labels()), None, "{object}");
    }
    assert_config_map(&client, &ns, "b", Some("2")).await;
    let namespace = namespaces.get(&ns).await.unwrap();
    assert!(namespace.metadata.deletion_timestamp.is_none());
    assert_eq!(label(namespace.labels()), None);

    // Nothing claims them any more: a new bundle of the same content adopts them, no Conflict.
    let adopter = unique_name("adopter");
    create_bundle_ready(&client, &adopter, spec(&image, Some(&ns))).await;
    assert_eq!(
        label(config_maps.get("a").await.unwrap().labels()),
        Some(adopter.clone())
    );
    delete_bundle(&client, &adopter).await;
    wait_bundle_gone(&client, &adopter).await;
}

#[tokio::test]
async fn wait_for_termination_keeps_the_bundle_until_every_object_is_gone() {
    let client = shared_gantry_client().await;
    let ns = unique_name("terminate");
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("00-namespace.yaml", namespace_yaml(&ns)),
            ("10-free.yaml", config_map("free", Some(&ns), "1")),
            ("20-held.yaml", held_config_map("held", &ns)),
        ],
    )
    .await;
    let name = unique_name("terminate");
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.deletion_policy = Some(DeletionPolicy::WaitForTermination);
    create_bundle_ready(&client, &name, bundle_spec).await;

    delete_bundle(&client, &name).await;
    let waiting = wait_bundle(
        &client,
        &name,
        "Uninstalling, naming the held ConfigMap",
        installed_says(
            reasons::UNINSTALLING,
            vec![
                "waiting for 1 of the workloads, RBAC and other objects".to_string(),
                format!("ConfigMap {ns}/held (finalizers: {HOLD})"),
            ],
        ),
    )
    .await;
    assert_eq!(
        waiting.status.as_ref().and_then(|s| s.phase),
        Some(BundlePhase::Deleting)
    );
    assert!(
        waiting
            .finalizers()
            .iter()
            .any(|f| f == UNINSTALL_FINALIZER)
    );
    assert!(config_map_data(&client, &ns, "free").await.is_none());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = namespaces.get(&ns).await.unwrap();
    assert!(
        namespace.metadata.deletion_timestamp.is_none(),
        "the Namespace waits for the objects in it"
    );

    // The held object goes; the Namespace is deleted and terminates, and the Bundle waits for
    // it (with `Delete` it would be gone now).
    release_hold(&client, &ns, "held").await;
    wait_bundle(
        &client,
        &name,
        "Uninstalling, naming the terminating Namespace",
        installed_says(
            reasons::UNINSTALLING,
            vec![
                "waiting for 1 of the Namespaces to be deleted".to_string(),
                format!("Namespace {ns} (terminating)"),
            ],
        ),
    )
    .await;
    let namespace = namespaces.get(&ns).await.unwrap();
    assert!(namespace.metadata.deletion_timestamp.is_some());

    // What the namespace controller does once the Namespace is empty: its finalizer removed.
    let finalized = Namespace {
        spec: Some(NamespaceSpec {
            finalizers: Some(vec![]),
        }),
        ..namespace
    };
    namespaces
        .replace_subresource("finalize", &ns, &PostParams::default(), &finalized)
        .await
        .unwrap();
    wait_until("the Namespace gone", WAIT, || {
        let namespaces = namespaces.clone();
        let ns = ns.clone();
        async move {
            namespaces
                .get_opt(&ns)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    wait_bundle_gone(&client, &name).await;
}

#[tokio::test]
async fn wait_for_termination_past_its_timeout_says_what_is_left_and_keeps_waiting() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "overdue").await;
    let image = push(
        &format!("{ns}/app:v1"),
        &[("held.yaml", held_config_map("held", &ns))],
    )
    .await;
    let name = unique_name("overdue");
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.deletion_policy = Some(DeletionPolicy::WaitForTermination);
    bundle_spec.timeout = Some("2s".into());
    create_bundle_ready(&client, &name, bundle_spec).await;

    delete_bundle(&client, &name).await;
    let overdue = wait_bundle(
        &client,
        &name,
        "UninstallFailed past the timeout, naming the held ConfigMap",
        installed_says(
            reasons::UNINSTALL_FAILED,
            vec![
                "not done within 2s".to_string(),
                format!("ConfigMap {ns}/held (finalizers: {HOLD})"),
            ],
        ),
    )
    .await;
    assert_eq!(
        overdue.status.as_ref().and_then(|s| s.phase),
        Some(BundlePhase::Deleting)
    );
    assert!(
        overdue
            .finalizers()
            .iter()
            .any(|f| f == UNINSTALL_FINALIZER),
        "the finalizer stays past the timeout"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let held = config_maps.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());

    // Still waiting, not given up: once the object goes, so does the Bundle.
    release_hold(&client, &ns, "held").await;
    wait_bundle_gone(&client, &name).await;
    assert!(config_map_data(&client, &ns, "held").await.is_none());
}
