//! Per-object apply policies, annotations on objects of a bundle: `gantry.dev/ssa: IfNotPresent`
//! (created once, never updated), `Merge` (fields other managers own stay theirs), `Ignore`
//! (never applied, repaired or deleted), an unknown value (refused before any write), and
//! `gantry.dev/force: enabled` (an object whose immutable fields changed is recreated).
//!
//! The recreation test has a control plane of its own with kube-controller-manager: a
//! foreground deletion finishes only once the garbage collector has removed the object's
//! dependents, and the shared control plane runs no garbage collector.

use gantry_api::conditions::{reasons, types};
use gantry_api::{BUNDLE_LABEL, Bundle};
use gantry_tests::e2e::*;
use gantry_tests::{Lifetime, unique_name};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// `pairs` as a JSON object of strings.
fn string_map(pairs: &[(&str, &str)]) -> serde_json::Map<String, serde_json::Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect()
}

/// A ConfigMap `name` with `annotations` and `data`.
fn config_map_with(name: &str, annotations: &[(&str, &str)], data: &[(&str, &str)]) -> String {
    let object = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "annotations": string_map(annotations),
        },
        "data": string_map(data),
    });
    // JSON is YAML.
    object.to_string()
}

/// The data of ConfigMap `namespace/name`, `None` when it is absent.
async fn data(client: &Client, namespace: &str, name: &str) -> Option<serde_json::Value> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name)
        .await
        .unwrap()
        .map(|cm| json!(cm.data.unwrap_or_default()))
}

/// Waits until `Installed` is False with `reason`, a failure that stalls the bundle, and checks
/// that its message names every one of `mentions`.
async fn wait_stalled_naming(
    client: &Client,
    name: &str,
    reason: &'static str,
    mentions: &[String],
) -> Bundle {
    let bundle = wait_bundle(client, name, reason, reason_is(types::INSTALLED, reason)).await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    for mention in mentions {
        assert!(message.contains(mention), "{mention:?} in {message}");
    }
    assert_stalled(&bundle, reason);
    bundle
}

/// A namespace, a repository in it, and a bundle installing `files` into the namespace, Ready.
async fn installed(
    client: &Client,
    prefix: &str,
    files: &[(&str, String)],
) -> (String, String, String) {
    let ns = unique_namespace(client, prefix).await;
    let repository = format!("{ns}/app:stable");
    let name = unique_name(prefix);
    push(&repository, files).await;
    create_bundle(client, &name, spec(&in_registry(&repository), Some(&ns))).await;
    wait_bundle(client, &name, "Ready with the first content", is_ready).await;
    (ns, name, repository)
}

fn inventory_names(bundle: &Bundle) -> Vec<String> {
    bundle
        .status
        .iter()
        .flat_map(|s| s.inventory.iter().map(|e| e.name.clone()))
        .collect()
}

#[tokio::test]
async fn if_not_present_objects_are_created_once_and_never_updated() {
    let client = shared_gantry_client().await;
    let content = |default: &str, other: &str| {
        vec![
            (
                "settings.yaml",
                config_map_with(
                    "settings",
                    &[("gantry.dev/ssa", "IfNotPresent")],
                    &[("value", default)],
                ),
            ),
            ("other.yaml", config_map("other", None, other)),
        ]
    };
    let (ns, name, repository) = installed(&client, "ifnp", &content("default", "one")).await;
    assert_eq!(
        data(&client, &ns, "settings").await,
        Some(json!({ "value": "default" }))
    );

    // A user fills it in: neither a drift pass nor new content writes it again.
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    configs
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { "value": "filled in" } })),
        )
        .await
        .unwrap();
    reconcile_handled(&client, &name).await;
    assert_eq!(
        data(&client, &ns, "settings").await,
        Some(json!({ "value": "filled in" })),
        "a drift pass leaves an IfNotPresent object alone"
    );
    push_and_wait_ready(&client, &name, &repository, &content("default-2", "two")).await;
    assert_eq!(
        config_map_data(&client, &ns, "other").await.as_deref(),
        Some("two"),
        "the new content is applied"
    );
    assert_eq!(
        data(&client, &ns, "settings").await,
        Some(json!({ "value": "filled in" })),
        "new content does not update an IfNotPresent object"
    );

    // Still in the inventory: content without it prunes it.
    let bundle = get_bundle(&client, &name).await;
    assert!(inventory_names(&bundle).contains(&"settings".to_string()));
    push_and_wait_ready(
        &client,
        &name,
        &repository,
        &[("other.yaml", config_map("other", None, "three"))],
    )
    .await;
    assert_eq!(data(&client, &ns, "settings").await, None, "pruned");
}

#[tokio::test]
async fn if_not_present_objects_already_there_are_kept_as_they_are_and_managed() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "ifnp-there").await;
    // Made by hand before the bundle.
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let by_hand: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "settings" }, "data": { "value": "by hand" }
    }))
    .unwrap();
    configs
        .create(&PostParams::default(), &by_hand)
        .await
        .unwrap();
    let image = push(
        &format!("{ns}/app:v1"),
        &[(
            "settings.yaml",
            config_map_with(
                "settings",
                &[("gantry.dev/ssa", "IfNotPresent")],
                &[("value", "default")],
            ),
        )],
    )
    .await;
    let name = unique_name("ifnp-there");
    create_bundle_ready(&client, &name, spec(&image, Some(&ns))).await;
    let label = |cm: &ConfigMap| {
        cm.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(BUNDLE_LABEL).cloned())
    };
    let live = configs.get("settings").await.unwrap();
    assert_eq!(
        json!(live.data),
        json!({ "value": "by hand" }),
        "left as it was"
    );
    assert_eq!(
        label(&live).as_deref(),
        Some(name.as_str()),
        "labelled as the bundle's"
    );

    // Deleted, it comes back as the bundle has it: woken by the deletion, well before the
    // resync (30s) would find it missing.
    delete_config_map(&client, &ns, "settings").await;
    let soon = std::time::Duration::from_secs(20);
    gantry_tests::wait_until("the object recreated", soon, || async {
        configs.get_opt("settings").await.unwrap().filter(|cm| {
            json!(cm.data) == json!({ "value": "default" })
                && label(cm).as_deref() == Some(name.as_str())
        })
    })
    .await;

    // Uninstalled with the bundle.
    delete_bundle(&client, &name).await;
    wait_bundle_gone(&client, &name).await;
    assert_eq!(
        data(&client, &ns, "settings").await,
        None,
        "removed on uninstall"
    );
}

#[tokio::test]
async fn merge_objects_leave_fields_other_managers_own_to_them() {
    let client = shared_gantry_client().await;
    let content = |value: &str, mine: &str| {
        vec![(
            "shared.yaml",
            config_map_with(
                "shared",
                &[("gantry.dev/ssa", "Merge")],
                &[("value", value), ("mine", mine)],
            ),
        )]
    };
    let (ns, name, repository) = installed(&client, "merge", &content("bundle", "1")).await;

    // Another field manager takes `value`, as a controller or an autoscaler would.
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let theirs = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "shared", "namespace": ns },
        "data": { "value": "theirs" }
    });
    configs
        .patch(
            "shared",
            &PatchParams::apply("operator").force(),
            &Patch::Apply(&theirs),
        )
        .await
        .unwrap();
    reconcile_handled(&client, &name).await;
    assert_eq!(
        data(&client, &ns, "shared").await,
        Some(json!({ "value": "theirs", "mine": "1" })),
        "a drift pass does not take the field back"
    );

    // New content setting both: the field the operator owns stays its own, the rest applies.
    push_and_wait_ready(&client, &name, &repository, &content("bundle-2", "2")).await;
    assert_eq!(
        data(&client, &ns, "shared").await,
        Some(json!({ "value": "theirs", "mine": "2" }))
    );
    let live = configs.get("shared").await.unwrap();
    let managers: Vec<(String, String)> = live
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let fields = m.fields_v1.map(|f| f.0.to_string()).unwrap_or_default();
            (m.manager.unwrap_or_default(), fields)
        })
        .collect();
    let owns = |manager: &str, field: &str| {
        managers
            .iter()
            .any(|(m, fields)| m == manager && fields.contains(field))
    };
    assert!(owns("operator", "f:value"), "{managers:?}");
    assert!(!owns("gantry", "f:value"), "{managers:?}");
    assert!(owns("gantry", "f:mine"), "{managers:?}");
}

#[tokio::test]
async fn ignored_objects_are_never_applied_repaired_or_deleted() {
    let client = shared_gantry_client().await;
    let ignored = |name: &str, value: &str| {
        config_map_with(name, &[("gantry.dev/ssa", "Ignore")], &[("value", value)])
    };
    let (ns, name, repository) = installed(
        &client,
        "ignore",
        &[
            ("adopted.yaml", config_map("adopted", None, "one")),
            ("never.yaml", ignored("never", "bundle")),
        ],
    )
    .await;
    assert_eq!(data(&client, &ns, "never").await, None, "never created");
    let bundle = get_bundle(&client, &name).await;
    assert_eq!(inventory_names(&bundle), ["adopted"]);

    // Created by a user: left as it is, unlabelled.
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mine: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "never" }, "data": { "value": "user" }
    }))
    .unwrap();
    configs.create(&PostParams::default(), &mine).await.unwrap();
    reconcile_handled(&client, &name).await;
    let never = configs.get("never").await.unwrap();
    assert_eq!(json!(never.data), json!({ "value": "user" }));
    assert!(
        !never
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(BUNDLE_LABEL)
    );

    // An object the bundle applied, marked Ignore by new content: neither changed nor pruned,
    // and no longer in the inventory.
    push_and_wait_ready(
        &client,
        &name,
        &repository,
        &[
            ("adopted.yaml", ignored("adopted", "two")),
            ("never.yaml", ignored("never", "bundle")),
        ],
    )
    .await;
    let bundle = get_bundle(&client, &name).await;
    assert!(
        inventory_names(&bundle).is_empty(),
        "{:?}",
        inventory_names(&bundle)
    );
    assert_config_map(&client, &ns, "adopted", Some("one")).await;

    // Deleting the bundle deletes neither.
    delete_bundle(&client, &name).await;
    wait_bundle_gone(&client, &name).await;
    assert_config_map(&client, &ns, "adopted", Some("one")).await;
    assert_config_map(&client, &ns, "never", Some("user")).await;
}

#[tokio::test]
async fn an_unknown_policy_value_fails_before_any_write() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "badpolicy").await;
    let repository = format!("{ns}/app:stable");
    push(
        &repository,
        &[
            ("a.yaml", config_map("first", None, "one")),
            (
                "b.yaml",
                config_map_with("second", &[("gantry.dev/ssa", "merge")], &[]),
            ),
        ],
    )
    .await;
    let name = unique_name("badpolicy");
    create_bundle(&client, &name, spec(&in_registry(&repository), Some(&ns))).await;
    let bundle = wait_stalled_naming(
        &client,
        &name,
        reasons::INVALID_OBJECT_POLICY,
        &[
            format!("ConfigMap {ns}/second (b.yaml document 0)"),
            "annotation gantry.dev/ssa has the value \"merge\"".to_string(),
            "allowed values are Merge, IfNotPresent, Ignore".to_string(),
        ],
    )
    .await;
    assert_eq!(data(&client, &ns, "first").await, None, "nothing applied");
    assert!(
        bundle.status.iter().all(|s| s.inventory.is_empty()),
        "nothing recorded"
    );
}

/// A control plane of its own, with a garbage collector (see the module's comment).
static COLLECTED: Isolated = Isolated::with_gantry(&SHARED_GANTRY_FLAGS);

/// A Job `migrate` running `image`, with `annotations`.
fn job(image: &str, annotations: &[(&str, &str)]) -> String {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": "migrate",
            "annotations": string_map(annotations),
        },
        "spec": {
            "backoffLimit": 0,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "migrate", "image": image }]
            } }
        }
    })
    .to_string()
}

#[tokio::test]
async fn a_job_whose_template_changed_stalls_unless_forced_and_is_then_recreated() {
    let cluster = COLLECTED.get();
    cluster
        .plane()
        .start_controller_manager(&Lifetime::TestBinary)
        .expect("starting kube-controller-manager");
    let client = cluster.client().await;
    let (ns, name, repository) = installed(
        &client,
        "force",
        &[("job.yaml", job("registry.example/migrate:1", &[]))],
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let first = jobs.get("migrate").await.unwrap().metadata.uid;

    // A new template: the API server refuses the change, and nothing forces it.
    push(
        &repository,
        &[("job.yaml", job("registry.example/migrate:2", &[]))],
    )
    .await;
    wait_stalled_naming(
        &client,
        &name,
        reasons::IMMUTABLE_FIELD_CHANGED,
        &[
            format!("Job.batch {ns}/migrate (job.yaml document 0)"),
            "immutable field(s) spec.template".to_string(),
            "gantry.dev/force: enabled".to_string(),
        ],
    )
    .await;
    let live = jobs.get("migrate").await.unwrap();
    assert_eq!(live.metadata.uid, first, "the Job is left as it was");

    // With force, it is deleted and created again with the new template.
    push_and_wait_ready(
        &client,
        &name,
        &repository,
        &[(
            "job.yaml",
            job(
                "registry.example/migrate:2",
                &[("gantry.dev/force", "enabled")],
            ),
        )],
    )
    .await;
    let live = jobs.get("migrate").await.unwrap();
    assert_ne!(live.metadata.uid, first, "a new Job");
    let image = live
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers[0].image.clone());
    assert_eq!(
        image.flatten().as_deref(),
        Some("registry.example/migrate:2")
    );
}
