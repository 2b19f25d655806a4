//! Health per object on the node: of a bundle with a Deployment that runs, a Deployment whose
//! image cannot be pulled and a custom resource judged by a CEL rule (`healthCheckExprs`),
//! `status.objectHealth` and `kubectl bundle tree` name exactly the objects that are not
//! healthy, with the kubelet's reason for the Deployment and the rule for the resource; once the
//! resource's status says so, only the broken Deployment is left.

use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, BundleSpec, HealthCheckExpr, HealthPolicy, ObjectHealth};
use gantry_tests::e2e::kubectl::{kubectl_bundle, text};
use gantry_tests::e2e::{push_to, spec_of_class};
use gantry_tests::{node_cluster, unique_name};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::health::{condition, host_gantry, wait};

fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers:\n      - name: {name}\n        image: {image}\n        command: [\"sh\", \"-c\", \"sleep 3600\"]\n"
    )
}

fn crd(group: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: databases.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    kind: Database\n    plural: databases\n    singular: database\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    subresources:\n      status: {{}}\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    )
}

fn object_health(bundle: &Bundle) -> Option<&ObjectHealth> {
    bundle.status.as_ref()?.object_health.as_ref()
}

#[tokio::test]
async fn health_is_reported_per_object_with_a_cel_rule_for_a_custom_resource() {
    let cluster = node_cluster();
    let gantry = host_gantry(cluster).await;
    let client = cluster.client().await;
    let namespace = unique_name("object-health");
    cluster.create_namespace(&namespace).await;
    let group = format!("{namespace}.example.com");
    // On the cluster's own registry, never pushed.
    let missing = format!("{}/{namespace}/missing:1", cluster.registry());
    let database = format!(
        "apiVersion: {group}/v1\nkind: Database\nmetadata:\n  name: db\nspec:\n  size: 1\n"
    );
    let image = push_to(
        cluster.registry(),
        &format!("{namespace}/bundle:v1"),
        &[
            ("00-crd.yaml", crd(&group)),
            ("10-good.yaml", deployment("good", cluster.busybox_image())),
            ("20-broken.yaml", deployment("broken", &missing)),
            ("30-database.yaml", database),
        ],
    )
    .await;
    let name = unique_name("object-health");
    let spec = BundleSpec {
        health: Some(HealthPolicy {
            wait: None,
            timeout: Some("10m".into()),
        }),
        health_check_exprs: vec![HealthCheckExpr {
            api_version: format!("{group}/v1"),
            kind: "Database".into(),
            in_progress: None,
            failed: Some("has(status.phase) && status.phase == 'Error'".into()),
            current: "has(status.phase) && status.phase == 'Online'".into(),
        }],
        ..spec_of_class(&image, Some(&namespace), &gantry.class)
    };
    gantry_tests::e2e::create_bundle(&client, &name, spec).await;

    // The running Deployment is healthy; the broken one waits on its image, the Database on
    // its rule.
    let bundles: Api<Bundle> = Api::all(client.clone());
    let bundle = wait(
        cluster,
        &namespace,
        "objectHealth: the good Deployment healthy, the broken one pulling, the Database by its rule",
        || async {
            let bundle = bundles.get(&name).await.ok()?;
            let health = object_health(&bundle)?;
            let broken = health.not_healthy.iter().find(|o| o.name == "broken")?;
            (health.healthy == 2
                && health.progressing == 2
                && health.not_healthy.len() == 2
                && (broken.message.contains("ImagePullBackOff")
                    || broken.message.contains("ErrImagePull")))
            .then_some(bundle)
        },
    )
    .await;
    let health = object_health(&bundle).unwrap();
    let db = health
        .not_healthy
        .iter()
        .find(|o| o.kind == "Database")
        .unwrap_or_else(|| panic!("the Database is listed: {health:?}"));
    assert_eq!((db.state.as_str(), db.name.as_str()), ("Progressing", "db"));
    assert!(
        db.message.contains("current is not yet true"),
        "{}",
        db.message
    );
    assert!(
        !health.not_healthy.iter().any(|o| o.name == "good"),
        "{health:?}"
    );

    // The tree says the same per object.
    let tree = kubectl_bundle(&[
        "tree",
        &name,
        "--kubeconfig",
        &cluster.kubeconfig().display().to_string(),
    ]);
    assert!(tree.status.success(), "{}", text(&tree));
    let out = String::from_utf8_lossy(&tree.stdout).into_owned();
    let line = |what: &str| {
        out.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what} in {out}"))
            .to_string()
    };
    assert!(line("Deployment.apps/good").contains("Healthy"), "{out}");
    assert!(
        line("Deployment.apps/broken").contains("Progressing"),
        "{out}"
    );
    assert!(
        line(&format!("Database.{group}/db")).contains("Progressing"),
        "{out}"
    );

    // The operator (here the test) reports the Database online: the rule says healthy, and
    // only the broken Deployment is left.
    let databases: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(&group, "v1", "Database")),
    );
    databases
        .patch_status(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Online"}})),
        )
        .await
        .expect("patching the Database's status");
    wait(
        cluster,
        &namespace,
        "only the broken Deployment not healthy",
        || async {
            let bundle = bundles.get(&name).await.ok()?;
            let health = object_health(&bundle)?;
            (health.healthy == 3
                && health.not_healthy.len() == 1
                && health.not_healthy[0].name == "broken")
                .then_some(())
        },
    )
    .await;
    // The Database reported failed: failed at once, listed first.
    databases
        .patch_status(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Error"}})),
        )
        .await
        .expect("patching the Database's status");
    let bundle = wait(
        cluster,
        &namespace,
        "HealthCheckFailed with the Database failed first",
        || async {
            let bundle = bundles.get(&name).await.ok()?;
            let health = object_health(&bundle)?;
            let first = health.not_healthy.first()?;
            (health.failed == 1 && first.name == "db" && first.state == "Failed").then_some(bundle)
        },
    )
    .await;
    let healthy = condition(&bundle, types::HEALTHY).expect("Healthy");
    assert_eq!(
        (healthy.0.as_str(), healthy.1.as_str()),
        ("False", reasons::HEALTH_CHECK_FAILED),
        "{healthy:?}"
    );
}
