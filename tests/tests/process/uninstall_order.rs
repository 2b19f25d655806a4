//! Uninstall in waves: the bundle's own custom resource goes first; then its CRD, which stays
//! while a custom resource a user created waits for a finalizer (its operator's, here held by
//! the test), and so do the bundle's other objects (the operator's stand-in, a ConfigMap) and
//! its Namespace; the Bundle names the resource and the finalizer it waits for. Once the
//! finalizer is removed, everything goes.

use gantry_api::conditions::{reasons, types};
use gantry_tests::e2e::*;
use gantry_tests::unique_name;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::json;

const FINALIZER: &str = "example.com/hold";

fn crd(group: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    kind: Gadget\n    plural: gadgets\n    singular: gadget\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    )
}

#[tokio::test]
async fn custom_resources_and_crds_go_before_the_rest() {
    let client = shared_gantry_client().await;
    let ns = unique_name("waves");
    let group = format!("{ns}.example.com");
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("00-namespace.yaml", namespace_yaml(&ns)),
            ("10-crd.yaml", crd(&group)),
            ("20-operator.yaml", config_map("operator", Some(&ns), "runs")),
            (
                "30-gadget.yaml",
                format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: one\n  namespace: {ns}\n"),
            ),
        ],
    )
    .await;
    let name = unique_name("waves");
    create_bundle_ready(&client, &name, spec(&image, Some(&ns))).await;

    // A user's custom resource, with the operator's finalizer on it.
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, "v1", "Gadget"));
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let mut mine = DynamicObject::new("mine", &resource);
    mine.metadata.finalizers = Some(vec![FINALIZER.into()]);
    gadgets.create(&PostParams::default(), &mine).await.unwrap();

    delete_bundle(&client, &name).await;
    let waiting = wait_bundle(
        &client,
        &name,
        "Uninstalling, the CRD waiting for the user's Gadget and its finalizer",
        |b| {
            condition(b, types::INSTALLED).is_some_and(|c| {
                c.reason == reasons::UNINSTALLING
                    && c.message.contains(&format!(
                        "waiting for its custom resources: Gadget {ns}/mine (finalizers: {FINALIZER})"
                    ))
            })
        },
    )
    .await;
    let message = &condition(&waiting, types::INSTALLED).unwrap().message;
    assert!(
        message.contains(&format!(
            "CustomResourceDefinition.apiextensions.k8s.io gadgets.{group}"
        )),
        "{message}"
    );
    assert!(
        gadgets.get_opt("one").await.unwrap().is_none(),
        "the bundle's own Gadget went first"
    );
    // Nothing of the later waves was deleted: the operator still runs in its Namespace.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let operator = config_maps.get("operator").await.unwrap();
    assert!(operator.metadata.deletion_timestamp.is_none());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = namespaces.get(&ns).await.unwrap();
    assert!(namespace.metadata.deletion_timestamp.is_none());

    // The operator finalizes its resource: the rest goes.
    gadgets
        .patch(
            "mine",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await
        .unwrap();
    wait_bundle_gone(&client, &name).await;
    assert!(config_maps.get_opt("operator").await.unwrap().is_none());
    // No namespace controller runs here: the Namespace's deletion has started.
    let namespace = namespaces.get_opt(&ns).await.unwrap();
    assert!(namespace.is_none_or(|n| n.metadata.deletion_timestamp.is_some()));
}
