//! Smoke tests proving the harness runs the real thing: the API server enforces the CRD schema,
//! RBAC and the status subresource; kubectl and skopeo talk to what the harness started. A
//! control plane of its own: no provisioner may write the status these tests write and read.

use gantry_api::{Bundle, BundleStatus, ProvisionerClass};
use gantry_tests::e2e::{Isolated, create_bundle, spec, spec_of_class};
use gantry_tests::unique_name;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

/// This module's cluster, without a Gantry.
static CLUSTER: Isolated = Isolated::new();

fn bundle(name: &str, image: &str) -> Bundle {
    Bundle::new(name, spec(image, Some("default")))
}

#[tokio::test]
async fn bundle_round_trips_through_the_api_server() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let name = unique_name("roundtrip");
    let created = create_bundle(
        &client,
        &name,
        spec("127.0.0.1:5000/app:v1", Some("default")),
    )
    .await;
    assert!(
        created.metadata.uid.is_some(),
        "the API server assigns a uid"
    );

    let read = bundles.get(&name).await.expect("reading the Bundle back");
    assert_eq!(read.spec.image, "127.0.0.1:5000/app:v1");
    assert_eq!(read.spec.install_namespace.as_deref(), Some("default"));

    // The short name and the category are registered for discovery.
    let resources = cluster
        .client()
        .await
        .list_api_group_resources("gantry.dev/v1alpha1")
        .await
        .expect("discovery of gantry.dev/v1alpha1");
    let bundle_resource = resources
        .resources
        .iter()
        .find(|r| r.name == "bundles")
        .expect("bundles are served");
    assert_eq!(
        bundle_resource.short_names.as_deref(),
        Some(&["bdl".to_string()][..])
    );
    assert!(!bundle_resource.namespaced, "Bundle is cluster-scoped");
}

#[tokio::test]
async fn schema_violations_are_rejected() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let gvk = GroupVersionKind::gvk("gantry.dev", "v1alpha1", "ProvisionerClass");
    let classes: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let name = unique_name("sometimes");
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gantry.dev/v1alpha1",
        "kind": "ProvisionerClass",
        "metadata": { "name": name },
        "spec": { "provisioner": "gantry.dev/plain", "approval": "Sometimes" }
    }))
    .unwrap();
    let error = classes
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("approval: Sometimes must be rejected");
    let message = error.to_string();
    assert!(
        message.contains("spec.approval") && message.contains("Sometimes"),
        "the rejection names the field and the value: {message}"
    );

    // The same class with a valid value is accepted and defaulted.
    let good: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gantry.dev/v1alpha1",
        "kind": "ProvisionerClass",
        "metadata": { "name": name },
        "spec": { "provisioner": "gantry.dev/plain" }
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &good)
        .await
        .expect("a valid class is accepted");
    let typed: Api<ProvisionerClass> = Api::all(client.clone());
    let read = typed.get(&name).await.expect("reading the class");
    assert_eq!(
        read.spec.approval,
        gantry_api::ApprovalPolicy::Automatic,
        "defaulted"
    );

    // An empty image breaks the Bundle schema.
    let bundles: Api<Bundle> = Api::all(client);
    let error = bundles
        .create(&PostParams::default(), &bundle(&unique_name("empty"), ""))
        .await
        .expect_err("an empty image must be rejected");
    assert!(error.to_string().contains("spec.image"), "{error}");
}

#[tokio::test]
async fn status_is_written_only_through_the_status_subresource() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let bundles: Api<Bundle> = Api::all(client);
    let name = unique_name("status");
    let mut with_status = bundle(&name, "127.0.0.1:5000/app:v1");
    with_status.status = Some(BundleStatus {
        resolved_image: Some("127.0.0.1:5000/app@sha256:0000".into()),
        ..BundleStatus::default()
    });
    let created = bundles
        .create(&PostParams::default(), &with_status)
        .await
        .expect("creating a Bundle");
    assert_eq!(created.status, None, "status in a create is dropped");

    // A patch of the main resource cannot set status either.
    let patch = json!({ "status": { "resolvedImage": "main-resource" } });
    let patched = bundles
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patching the Bundle");
    assert_eq!(
        patched.status, None,
        "status in a main-resource patch is ignored"
    );

    // The status subresource writes it, and leaves the spec alone.
    let patch = json!({ "status": { "resolvedImage": "127.0.0.1:5000/app@sha256:1111", "phase": "Pending" },
                        "spec": { "image": "changed-through-status" } });
    let patched = bundles
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patching the status subresource");
    let status = patched.status.expect("status written");
    assert_eq!(
        status.resolved_image.as_deref(),
        Some("127.0.0.1:5000/app@sha256:1111")
    );
    assert_eq!(status.phase, Some(gantry_api::BundlePhase::Pending));
    assert_eq!(
        patched.spec.image, "127.0.0.1:5000/app:v1",
        "spec untouched by a status write"
    );
}

#[tokio::test]
async fn kubectl_prints_the_printer_columns() {
    let plane = CLUSTER.get();
    let client = plane.client().await;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let name = unique_name("columns");
    let image = "127.0.0.1:5000/columns:v1";
    create_bundle(
        &client,
        &name,
        spec_of_class(image, Some("default"), "plain"),
    )
    .await;
    // MESSAGE shows status.message, the Ready message shortened by the provisioner.
    let patch = json!({ "status": { "phase": "Installed", "className": "plain", "message": "3 objects applied",
        "resolvedImage": "127.0.0.1:5000/columns@sha256:abcd",
        "installedImage": "127.0.0.1:5000/columns@sha256:abcd",
        "conditions": [{ "type": "Ready", "status": "True", "reason": "InstallSucceeded", "message": "3 objects applied",
                         "lastTransitionTime": "2026-01-01T00:00:00Z" },
                       { "type": "Healthy", "status": "False", "reason": "Progressing", "message": "0/1 Pods ready",
                         "lastTransitionTime": "2026-01-01T00:00:00Z" }] } });
    bundles
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("writing status");

    let output = plane
        .kubectl()
        .args(["get", "bdl", &name])
        .output()
        .expect("running kubectl");
    assert!(
        output.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "CLASS", "IMAGE", "PHASE", "READY", "HEALTHY", "SINCE", "AGE", "MESSAGE"
        ],
        "{stdout}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    // Ready True with objects not healthy: both shown without -o wide.
    assert_eq!(
        &row[..6],
        [
            name.as_str(),
            "plain",
            "127.0.0.1:5000/columns:v1",
            "Installed",
            "True",
            "False"
        ],
        "{stdout}"
    );
    assert_eq!(&row[8..], ["3", "objects", "applied"], "{stdout}");

    let output = plane
        .kubectl()
        .args(["get", "bundles", &name, "-o", "wide"])
        .output()
        .expect("running kubectl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let wide_header: Vec<&str> = stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    for column in ["INSTALLED", "RESOLVED"] {
        assert!(wide_header.contains(&column), "{column} missing: {stdout}");
    }
    assert!(
        stdout.contains("127.0.0.1:5000/columns@sha256:abcd"),
        "{stdout}"
    );
}

#[tokio::test]
async fn service_account_tokens_authenticate_and_rbac_is_enforced() {
    let plane = CLUSTER.get();
    let namespace = unique_name("sa");
    let token = plane.service_account_token(&namespace, "robot").await;
    let client = plane.token_client(&namespace, &token).await;

    let review: Api<SelfSubjectReview> = Api::all(client.clone());
    let me = review
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("SelfSubjectReview as the ServiceAccount");
    let username = me
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default();
    assert_eq!(username, format!("system:serviceaccount:{namespace}:robot"));

    // No RoleBinding grants it anything: RBAC answers 403.
    let config_maps: Api<ConfigMap> = Api::namespaced(client, &namespace);
    match config_maps.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }

    // A forged token is not authenticated at all.
    let forged = plane.token_client("forged", "not-a-real-token").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(forged, &namespace);
    match config_maps.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 401, "{status:?}"),
        other => panic!("expected 401 Unauthorized, got {other:?}"),
    }
}
