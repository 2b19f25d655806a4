//! `Bundle.spec.patches`: JSON 6902 patches change the objects applied (and only the ones
//! their target selects), a patch that cannot be applied fails the bundle before anything is
//! applied, and an approval covers the patches it was given with.

use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, BundlePhase};
use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use gantry_tests::{unique_name, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};

/// A Deployment `server` as upstream ships it: two replicas, one container with one argument.
fn deployment(namespace: Option<&str>) -> String {
    let namespace = namespace
        .map(|ns| format!("  namespace: {ns}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: server\n{namespace}spec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: server}}\n  template:\n    metadata:\n      labels: {{app: server}}\n    spec:\n      containers:\n      - name: server\n        image: registry.example/metrics/server:v1\n        args:\n        - --secure-port=10250\n"
    )
}

/// Sets `spec.patches` of bundle `name`.
async fn set_patches(client: &Client, name: &str, patches: Value) {
    patch_spec(client, name, json!({ "patches": patches })).await;
}

/// Whether the bundle's status describes its current generation.
fn observed(bundle: &Bundle) -> bool {
    bundle.status.as_ref().and_then(|s| s.observed_generation) == bundle.metadata.generation
}

fn args(deployment: &Deployment) -> Vec<String> {
    first_container(deployment).args.clone().unwrap_or_default()
}

#[tokio::test]
async fn patches_change_the_objects_they_select_and_only_those() {
    let client = shared_gantry_client().await;
    let ns = unique_name("patched");
    let moved_to = unique_name("patched-to");
    ensure_namespace(&client, &ns).await;
    ensure_namespace(&client, &moved_to).await;
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("deployment.yaml", deployment(None)),
            (
                "config.yaml",
                format!(
                    "{}---\n{}",
                    config_map("settings", None, "upstream"),
                    config_map("other", None, "upstream")
                ),
            ),
        ],
    )
    .await;
    let name = unique_name("patched");
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.patches = serde_json::from_value(json!([
        {
            // YAML, as users write them: an argument added, the replicas left to an HPA.
            "patch": "- op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: --kubelet-insecure-tls\n- op: remove\n  path: /spec/replicas\n",
            "target": { "group": "apps", "kind": "Deployment", "name": "server", "namespace": ns },
        },
        {
            // JSON: another namespace and another value, for one ConfigMap of two.
            "patch": format!(r#"[{{"op": "replace", "path": "/metadata/namespace", "value": "{moved_to}"}}, {{"op": "replace", "path": "/data/value", "value": "patched"}}]"#),
            "target": { "version": "v1", "kind": "ConfigMap", "name": "settings" },
        },
        {
            "patch": "[{op: remove, path: /spec/suspend}]",
            "target": { "kind": "CronJob" },
        },
    ]))
    .unwrap();
    let bundle = create_bundle_ready(&client, &name, bundle_spec).await;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let live = deployments.get("server").await.unwrap();
    assert_eq!(
        args(&live),
        ["--secure-port=10250", "--kubelet-insecure-tls"],
        "the argument is added"
    );
    assert_eq!(
        live.spec.as_ref().unwrap().replicas,
        Some(1),
        "spec.replicas was not applied: the API server's default stands"
    );
    let managed = serde_json::to_string(&live.metadata.managed_fields).unwrap();
    assert!(
        !managed.contains("f:replicas"),
        "Gantry does not own spec.replicas: {managed}"
    );

    assert_eq!(
        config_map_data(&client, &moved_to, "settings")
            .await
            .as_deref(),
        Some("patched"),
        "the ConfigMap is applied in the namespace the patch gives it"
    );
    assert_eq!(config_map_data(&client, &ns, "settings").await, None);
    assert_eq!(
        config_map_data(&client, &ns, "other").await.as_deref(),
        Some("upstream"),
        "an object the target does not select is applied as shipped"
    );
    let inventory = &bundle.status.as_ref().unwrap().inventory;
    assert!(
        inventory
            .iter()
            .any(|e| e.name == "settings" && e.namespace.as_deref() == Some(moved_to.as_str())),
        "the inventory records the patched object: {inventory:?}"
    );
    // What the approver reviews is what is applied: the permissions count the moved object.
    let permissions = bundle
        .status
        .as_ref()
        .unwrap()
        .requested_permissions
        .as_ref()
        .unwrap();
    assert!(
        permissions
            .namespaced
            .iter()
            .any(|n| n.namespace == moved_to),
        "{permissions:?}"
    );

    // A patch that selects nothing is no failure, and an Event says so.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let note = wait_until("the PatchUnmatched Event", WAIT, || {
        let events = events.clone();
        let name = name.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.into_iter().find_map(|e| {
                (e.reason.as_deref() == Some(reasons::PATCH_UNMATCHED)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str()))
                .then_some(e.note.unwrap_or_default())
            })
        }
    })
    .await;
    assert!(
        note.contains("spec.patches[2] (kind=CronJob) selected no object"),
        "{note}"
    );

    // `kubectl bundle status` shows the patches.
    let shown = ok(&["status", &name]);
    assert!(
        shown.contains("[0] group=apps kind=Deployment name=server")
            && shown.contains(
                r#"add /spec/template/spec/containers/0/args/- "--kubelet-insecure-tls""#
            )
            && shown.contains("remove /spec/replicas"),
        "{shown}"
    );
    // `kubectl bundle diff` applies them too: nothing would change.
    let diff = kubectl_bundle(&["diff", &name, "--kubeconfig", &kubeconfig()]);
    assert_eq!(diff.status.code(), Some(0), "{}", text(&diff));
    assert!(
        text(&diff).contains("spec.patches[2] (kind=CronJob) selects no object"),
        "{}",
        text(&diff)
    );
}

#[tokio::test]
async fn a_patch_that_cannot_apply_fails_the_bundle_and_nothing_is_applied() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "bad-patch").await;
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("config.yaml", config_map("settings", None, "upstream")),
            ("deployment.yaml", deployment(Some(&ns))),
        ],
    )
    .await;
    let name = unique_name("bad-patch");
    let config_patch = json!({
        "patch": "[{op: replace, path: /data/value, value: patched}]",
        "target": { "kind": "ConfigMap" },
    });
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.patches = serde_json::from_value(json!([
        config_patch,
        { "patch": "op: remove\npath: /spec/replicas\n", "target": { "kind": "Deployment" } },
    ]))
    .unwrap();
    create_bundle(&client, &name, bundle_spec).await;

    // Not a list of operations.
    wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::INVALID_PATCH,
        "spec.patches[1].patch: not a list of JSON patch operations",
    )
    .await;

    // A list, with an operation on a path the object lacks: the patch, the operation and the
    // object are named, and the bundle waits for a change.
    set_patches(
        &client,
        &name,
        json!([
            config_patch,
            { "patch": "[{op: remove, path: /spec/paused}]", "target": { "kind": "Deployment" } },
        ]),
    )
    .await;
    let bundle = wait_bundle(&client, &name, "InvalidPatch at the new generation", |b| {
        observed(b) && reason_is(types::INSTALLED, reasons::INVALID_PATCH)(b)
    })
    .await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    assert!(
        message.contains(&format!(
            "spec.patches[1]: operation 0 (remove /spec/paused) failed on apps/v1 Deployment {ns}/server: /spec/paused does not exist"
        )),
        "{message}"
    );
    assert_retry_class(&bundle, types::INSTALLED, reasons::INVALID_PATCH);
    assert_eq!(
        bundle.status.as_ref().unwrap().phase,
        Some(BundlePhase::Failing)
    );
    // Nothing applied, not even the object whose patch was fine.
    assert_eq!(config_map_data(&client, &ns, "settings").await, None);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert!(deployments.get_opt("server").await.unwrap().is_none());
    assert!(
        bundle.status.as_ref().unwrap().inventory.is_empty(),
        "{:?}",
        bundle.status
    );

    // Fixed: installed with both patches.
    set_patches(
        &client,
        &name,
        json!([
            config_patch,
            { "patch": "[{op: remove, path: /spec/replicas}]", "target": { "kind": "Deployment" } },
        ]),
    )
    .await;
    wait_bundle(&client, &name, "Ready once the patch is fixed", is_ready).await;
    assert_config_map(&client, &ns, "settings", Some("patched")).await;
    let bundle = wait_bundle(&client, &name, "Stalled gone", |b| {
        condition(b, types::STALLED).is_none()
    })
    .await;
    assert!(is_ready(&bundle));
}

#[tokio::test]
async fn an_approval_covers_the_patches_it_was_given_with() {
    let client = shared_gantry_client().await;
    let UnderReview {
        name,
        namespace: ns,
        ..
    } = under_review(&client, "patch-review", |ns| {
        vec![("a.yaml", config_map("settings", Some(ns), "upstream"))]
    })
    .await;
    let replace = |value: &str| {
        json!([{
            "patch": format!("[{{op: replace, path: /data/value, value: {value}}}]"),
            "target": { "kind": "ConfigMap", "name": "settings" },
        }])
    };
    set_patches(&client, &name, replace("reviewed")).await;
    wait_bundle(&client, &name, "awaiting approval of the new spec", |b| {
        observed(b)
            && b.status.as_ref().and_then(|s| s.phase) == Some(BundlePhase::AwaitingApproval)
    })
    .await;

    // The approver sees the patches, and the decision records them.
    let approved = ok(&["approve", &name, "--yes", "--wait"]);
    assert!(
        approved.contains("With its patches (spec.patches)")
            && approved.contains(r#"replace /data/value "reviewed""#),
        "{approved}"
    );
    let bundle = get_bundle(&client, &name).await;
    let approval = bundle.status.unwrap().approval.unwrap();
    assert_eq!(approval.patches, bundle.spec.patches);
    assert_config_map(&client, &ns, "settings", Some("reviewed")).await;

    // Other patches are other objects: the approval of the digest does not cover them.
    set_patches(&client, &name, replace("changed")).await;
    let bundle = wait_bundle(&client, &name, "a new approval needed", |b| {
        observed(b)
            && condition(b, types::APPROVED).is_some_and(|c| c.reason == reasons::AWAITING_APPROVAL)
    })
    .await;
    let message = &condition(&bundle, types::APPROVED).unwrap().message;
    assert!(message.contains("spec.patches changed"), "{message}");
    assert_eq!(
        bundle.status.as_ref().unwrap().phase,
        Some(BundlePhase::AwaitingApproval)
    );
    assert_eq!(
        config_map_data(&client, &ns, "settings").await.as_deref(),
        Some("reviewed"),
        "nothing applied before the approval"
    );
    // kubectl bundle diff shows the patched object that an approval would apply.
    let diff = kubectl_bundle(&["diff", &name, "--kubeconfig", &kubeconfig()]);
    let shown = text(&diff);
    assert_eq!(diff.status.code(), Some(1), "{shown}");
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with('+') && l.contains("value: changed")),
        "{shown}"
    );
    ok(&["approve", &name, "--yes", "--wait"]);
    assert_config_map(&client, &ns, "settings", Some("changed")).await;
}
