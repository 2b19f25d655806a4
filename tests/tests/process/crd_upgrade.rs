//! A CRD in the cluster that a bundle's new content changes: an unsafe change (a property
//! removed, a field made required) is refused before anything is written, unless the CRD in
//! the bundle accepts it with `gantry.dev/crd-upgrade: unsafe-allowed`; a safe change installs.

use gantry_api::Bundle;
use gantry_api::conditions::{reasons, types};
use gantry_tests::e2e::kubectl::{kubeconfig, kubectl_bundle, ok, text};
use gantry_tests::e2e::*;
use gantry_tests::unique_name;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::Api;

/// A namespaced CRD `gadgets.<group>` serving v1, whose spec has `properties` (YAML lines under
/// `properties:`, indented by 16), `required` fields and annotations.
fn crd(group: &str, properties: &[&str], required: &[&str], annotation: bool) -> String {
    let properties: String = properties
        .iter()
        .map(|p| format!("                {p}:\n                  type: string\n"))
        .collect();
    let required = if required.is_empty() {
        String::new()
    } else {
        format!("            required: [{}]\n", required.join(", "))
    };
    let annotations = if annotation {
        "  annotations:\n    gantry.dev/crd-upgrade: unsafe-allowed\n"
    } else {
        ""
    };
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.{group}\n{annotations}spec:\n  group: {group}\n  scope: Namespaced\n  names:\n    kind: Gadget\n    plural: gadgets\n    singular: gadget\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n{required}            properties:\n{properties}"
    )
}

fn gadget(group: &str) -> String {
    format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: one\nspec:\n  size: \"1\"\n")
}

/// The content: the namespace, the CRD `gadgets.<ns>.example.com` ([`crd`] of `properties`,
/// `required` and `annotation`), a Gadget and a ConfigMap holding `value`.
fn content(
    ns: &str,
    properties: &[&str],
    required: &[&str],
    annotation: bool,
    value: &str,
) -> Vec<(&'static str, String)> {
    let group = format!("{ns}.example.com");
    vec![
        ("00-namespace.yaml", namespace_yaml(ns)),
        ("01-crd.yaml", crd(&group, properties, required, annotation)),
        ("02-gadget.yaml", gadget(&group)),
        ("03-config.yaml", config_map("settings", Some(ns), value)),
    ]
}

/// The names of the properties of the live CRD's `spec`, and its required fields.
async fn live_spec(client: &Client, group: &str) -> (Vec<String>, Vec<String>) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get(&format!("gadgets.{group}")).await.unwrap();
    let spec = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| s.properties.as_ref())
        .and_then(|p| p.get("spec"))
        .cloned()
        .expect("the spec schema");
    let properties = spec.properties.unwrap_or_default().into_keys().collect();
    (properties, spec.required.unwrap_or_default())
}

/// A bundle installing the first content (properties `size` and `color`, nothing required).
async fn installed(prefix: &str) -> (Client, String, String, String) {
    let client = shared_gantry_client().await;
    let ns = unique_name(prefix);
    let repository = format!("{ns}/app:stable");
    let name = unique_name(prefix);
    push(
        &repository,
        &content(&ns, &["size", "color"], &[], false, "one"),
    )
    .await;
    create_bundle(&client, &name, spec(&in_registry(&repository), Some(&ns))).await;
    wait_bundle(&client, &name, "Ready with the first content", is_ready).await;
    (client, ns, name, repository)
}

#[tokio::test]
async fn an_unsafe_crd_change_is_refused_until_the_crd_allows_it() {
    let (client, ns, name, repository) = installed("crdup").await;
    let group = format!("{ns}.example.com");

    // `color` removed and `size` required: refused, and nothing of the content is applied.
    push(
        &repository,
        &content(&ns, &["size"], &["size"], false, "two"),
    )
    .await;
    let spec_path = "spec.versions[v1].schema.openAPIV3Schema.properties.spec.properties";
    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::UNSAFE_CRD_UPGRADE,
        &format!("gadgets.{group} v1 {spec_path}.color: property removed"),
    )
    .await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    assert!(
        message.contains(&format!(
            "gadgets.{group} v1 {spec_path}.size: field size became required"
        )),
        "{message}"
    );
    let (mut properties, required) = live_spec(&client, &group).await;
    properties.sort();
    assert_eq!(properties, ["color", "size"], "the live CRD is unchanged");
    assert!(required.is_empty(), "{required:?}");
    assert_eq!(
        config_map_data(&client, &ns, "settings").await.as_deref(),
        Some("one"),
        "nothing of the refused content is applied"
    );

    // The same change, accepted by the CRD's annotation, installs.
    push_and_wait_ready(
        &client,
        &name,
        &repository,
        &content(&ns, &["size"], &["size"], true, "three"),
    )
    .await;
    let (properties, required) = live_spec(&client, &group).await;
    assert_eq!(properties, ["size"]);
    assert_eq!(required, ["size"]);
    assert_config_map(&client, &ns, "settings", Some("three")).await;
}

#[tokio::test]
async fn a_safe_crd_change_installs() {
    let (client, ns, name, repository) = installed("crdsafe").await;
    let group = format!("{ns}.example.com");

    // A new optional property: no annotation needed.
    push_and_wait_ready(
        &client,
        &name,
        &repository,
        &content(&ns, &["size", "color", "label"], &[], false, "two"),
    )
    .await;
    let (mut properties, _) = live_spec(&client, &group).await;
    properties.sort();
    assert_eq!(properties, ["color", "label", "size"]);
    assert_config_map(&client, &ns, "settings", Some("two")).await;
}

#[tokio::test]
async fn an_approver_sees_unsafe_crd_changes_before_approving() {
    let client = shared_gantry_client().await;
    let review = under_review(&client, "crdrev", |ns| {
        content(ns, &["size", "color"], &[], false, "one")
    })
    .await;
    let (name, ns) = (review.name.clone(), review.namespace.clone());
    let group = format!("{ns}.example.com");
    // The first content creates the CRD: nothing to compare, nothing highlighted.
    let highlights = |bundle: &Bundle| -> Vec<String> {
        bundle
            .status
            .as_ref()
            .and_then(|s| s.requested_permissions.as_ref())
            .map(|p| p.highlights.iter().map(|h| h.reason.clone()).collect())
            .unwrap_or_default()
    };
    assert!(
        !highlights(&review.bundle)
            .iter()
            .any(|h| h.starts_with("unsafe CRD upgrade")),
        "{:?}",
        highlights(&review.bundle)
    );
    ok(&["approve", &name, "--yes", "--wait"]);

    // New content drops `color`: awaiting approval, the finding is the first highlight.
    let unsafe_digest = push(
        &review.repository,
        &content(&ns, &["size"], &[], false, "two"),
    )
    .await;
    let bundle = wait_bundle(&client, &name, "the new digest awaiting approval", |b| {
        b.status.as_ref().and_then(|s| s.phase) == Some(gantry_api::BundlePhase::AwaitingApproval)
            && b.status.as_ref().and_then(|s| s.resolved_image.as_deref())
                == Some(unsafe_digest.as_str())
            && !highlights(b).is_empty()
    })
    .await;
    let first = &highlights(&bundle)[0];
    let spec_path = "spec.versions[v1].schema.openAPIV3Schema.properties.spec.properties";
    assert_eq!(
        first,
        &format!("unsafe CRD upgrade: gadgets.{group} v1 {spec_path}.color: property removed"),
    );
    // The plugin's review and diff show it before anything is approved.
    let status = ok(&["status", &name]);
    assert!(status.contains("property removed"), "{status}");
    let diff = kubectl_bundle(&["diff", &name, "--kubeconfig", &kubeconfig()]);
    let shown = text(&diff);
    assert!(
        shown.contains("Unsafe CRD changes")
            && shown.contains(&format!(
                "gadgets.{group} v1 {spec_path}.color: property removed"
            )),
        "{shown}"
    );
    // Approved anyway, the apply still refuses it: the approval is not the CRD's acceptance.
    ok(&["approve", &name, "--yes"]);
    wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::UNSAFE_CRD_UPGRADE,
        &format!("gadgets.{group} v1 {spec_path}.color: property removed"),
    )
    .await;
}
