//! A CRD that a bundle ships changes: the provisioner learns of the new version without a
//! restart, and the custom resource moving to it is applied, not pruned.

use gantry_tests::e2e::*;
use gantry_tests::unique_name;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

/// A namespaced CRD `gadgets.<group>` serving `versions` (the first one stored).
fn crd(group: &str, versions: &[&str]) -> String {
    let versions: String = versions
        .iter()
        .enumerate()
        .map(|(i, version)| {
            format!(
                "  - name: {version}\n    served: true\n    storage: {}\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              size:\n                type: integer\n",
                i == 0
            )
        })
        .collect();
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    kind: Gadget\n    plural: gadgets\n    singular: gadget\n  versions:\n{versions}"
    )
}

fn gadget(group: &str, version: &str, size: u32) -> String {
    format!(
        "apiVersion: {group}/{version}\nkind: Gadget\nmetadata:\n  name: one\nspec:\n  size: {size}\n"
    )
}

#[tokio::test]
async fn a_new_version_of_a_bundled_crd_is_served_and_used() {
    let client = shared_gantry_client().await;
    let ns = unique_name("crdv");
    let group = format!("{ns}.example.com");
    let repository = format!("{ns}/app:stable");
    let first = push(
        &repository,
        &[
            ("00-namespace.yaml", namespace_yaml(&ns)),
            ("01-crd.yaml", crd(&group, &["v1"])),
            ("02-gadget.yaml", gadget(&group, "v1", 1)),
        ],
    )
    .await;
    let name = unique_name("crdv");
    create_bundle_ready(&client, &name, spec(&in_registry(&repository), Some(&ns))).await;

    // The CRD now also serves v2, and the custom resource moves to it.
    let second = push(
        &repository,
        &[
            ("00-namespace.yaml", namespace_yaml(&ns)),
            ("01-crd.yaml", crd(&group, &["v1", "v2"])),
            ("02-gadget.yaml", gadget(&group, "v2", 2)),
        ],
    )
    .await;
    assert_ne!(first, second);
    let bundle = wait_bundle(&client, &name, "Ready with v2", |b| {
        is_ready(b)
            && b.status.as_ref().and_then(|s| s.resolved_image.as_deref()) == Some(second.as_str())
    })
    .await;
    let inventory: Vec<(String, String)> = bundle
        .status
        .unwrap()
        .inventory
        .iter()
        .map(|e| (e.kind.clone(), e.version.clone()))
        .collect();
    assert!(
        inventory.contains(&("Gadget".to_string(), "v2".to_string())),
        "{inventory:?}"
    );

    // Moving to another version is no removal: the custom resource is still there, as v2 says.
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v2", "Gadget"),
        "gadgets",
    );
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let one = gadgets.get("one").await.expect("the Gadget exists");
    assert_eq!(one.data["spec"]["size"], 2);

    // The new version was waited for, not tried before it was served.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let failures: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str()))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.note)
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
}
