//! `spec.ignore`: fields another controller owns are neither set nor repaired. A Deployment's
//! `/spec/replicas` that an autoscaler (here, another field manager) changes keeps its value
//! through drift passes and new content, while the rest of the object is still repaired; a
//! created object starts as the bundle says; an invalid rule fails before anything is applied.

use gantry_api::conditions::{reasons, types};
use gantry_api::{IgnoreRule, ObjectSelector};
use gantry_tests::e2e::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n"
    )
}

fn replicas_rule() -> IgnoreRule {
    IgnoreRule {
        paths: vec!["/spec/replicas".into()],
        target: Some(ObjectSelector {
            kind: Some("Deployment".into()),
            ..Default::default()
        }),
    }
}

async fn replicas_and_image(deployments: &Api<Deployment>) -> (i32, String) {
    let d = deployments.get("web").await.unwrap();
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    (replicas, first_container(&d).image.clone().unwrap())
}

#[tokio::test]
async fn ignored_fields_keep_the_value_another_controller_sets() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "ignore").await;
    let repository = format!("{ns}/app:v1");
    push(
        &repository,
        &[
            ("a.yaml", deployment("example.org/web:1")),
            ("b.yaml", config_map("settings", None, "one")),
        ],
    )
    .await;
    let name = ns.clone();
    // By tag: new content comes as the tag moves.
    let mut bundle_spec = spec(&in_registry(&repository), Some(&ns));
    bundle_spec.ignore = vec![replicas_rule()];
    create_bundle_ready(&client, &name, bundle_spec).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    // Created as the bundle says.
    assert_eq!(
        replicas_and_image(&deployments).await,
        (2, "example.org/web:1".into())
    );

    // An autoscaler scales it, and someone changes the image: the image is repaired, the
    // replicas stay.
    deployments
        .patch_scale(
            "web",
            &PatchParams::apply("autoscaler").force(),
            &Patch::Apply(json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                                 "spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "web", "image": "example.org/web:hacked"}]}}}})),
        )
        .await
        .unwrap();
    gantry_tests::wait_until("the image repaired", WAIT, || async {
        (replicas_and_image(&deployments).await.1 == "example.org/web:1").then_some(())
    })
    .await;
    assert_eq!(replicas_and_image(&deployments).await.0, 5);

    // New content (written in full): the replicas still stay.
    let v2 = push(
        &repository,
        &[
            ("a.yaml", deployment("example.org/web:2")),
            ("b.yaml", config_map("settings", None, "two")),
        ],
    )
    .await;
    wait_bundle(&client, &name, "Ready with v2", |b| {
        is_ready(b)
            && b.status.as_ref().and_then(|s| s.installed_image.as_deref()) == Some(v2.as_str())
    })
    .await;
    assert_eq!(
        replicas_and_image(&deployments).await,
        (5, "example.org/web:2".into())
    );

    // Without the rule, the bundle's value is applied again: the rule is what kept it.
    patch_spec(&client, &name, json!({ "ignore": null })).await;
    gantry_tests::wait_until("the bundle's replicas again", WAIT, || async {
        (replicas_and_image(&deployments).await.0 == 2).then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_invalid_ignore_rule_fails_before_anything_is_applied() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "ignore-bad").await;
    let image = push(
        &format!("{ns}/app:v1"),
        &[("b.yaml", config_map("settings", None, "one"))],
    )
    .await;
    let name = ns.clone();
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.ignore = vec![IgnoreRule {
        paths: vec!["spec/replicas".into()],
        target: None,
    }];
    create_bundle(&client, &name, bundle_spec).await;
    wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::INVALID_IGNORE_RULE,
        "spec.ignore[0].paths[0] \"spec/replicas\"",
    )
    .await;
    assert!(
        config_map_data(&client, &ns, "settings").await.is_none(),
        "nothing is applied"
    );
}
