//! A reconcile while something fails: drift of the installed content is repaired while new
//! content or a new spec fails; a bundle the API server refuses part of (`Invalid`) is written
//! not at all; a bundle stalled on `Forbidden` goes on as soon as RBAC grants what it lacked.
//!
//! Each test runs a provisioner of its own on the shared control plane (an [`Installation`],
//! with a provisioner ID and class of its own) with the default `--resync-interval` (10m) and
//! `--backoff-cap` (5m): what a test waits for here must come from the change it makes, not
//! from a periodic visit.

use std::time::{Duration, Instant};

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalPolicy, Bundle, BundlePhase, PLAIN_PROVISIONER, ProvisionerClassSpec};
use gantry_tests::e2e::*;
use gantry_tests::{control_plane, registry, unique_name, wait_until};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// How soon a repair or a wake must come: well within the 10 minute resync and the 5 minute
/// recheck of a `Forbidden` stall.
const PROMPTLY: Duration = Duration::from_secs(30);

/// An installation whose provisioner serves `id`, with retries fast and periodic visits at their
/// defaults.
async fn installation(id: &str) -> (Client, Installation) {
    let client = shared_gantry_client().await;
    let installation = start_installation(
        &client,
        &format!("{PLAIN_PROVISIONER}-{id}"),
        &["--resolve-interval=1s", "--backoff-base=200ms"],
    )
    .await;
    (client, installation)
}

fn deployment(name: &str, replicas: i32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{ app: {name} }}\n  template:\n    metadata:\n      labels: {{ app: {name} }}\n    spec:\n      containers:\n      - name: app\n        image: registry.invalid/app:v1\n"
    )
}

fn service(name: &str, port: i32) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector: {{ app: {name} }}\n  ports:\n  - port: {port}\n"
    )
}

/// Waits, at most [`PROMPTLY`], until ConfigMap `namespace/name` holds `value`.
async fn restored(client: &Client, namespace: &str, name: &str, value: &str) {
    let started = Instant::now();
    wait_until(&format!("ConfigMap {name} restored"), PROMPTLY, || async {
        (config_map_data(client, namespace, name).await.as_deref() == Some(value)).then_some(())
    })
    .await;
    println!("ConfigMap {name} restored in {:.1?}", started.elapsed());
}

/// Installs v1 (ConfigMaps `first` and `second` holding `v1`) as bundle `name` of `class`.
async fn install_v1(client: &Client, ns: &str, name: &str, class: &str) -> String {
    ensure_namespace(client, ns).await;
    let files = [
        ("a.yaml", config_map("first", None, "v1")),
        ("b.yaml", config_map("second", None, "v1")),
    ];
    let v1 = push(&format!("{ns}/app:v1"), &files).await;
    create_bundle(client, name, spec_of_class(&v1, Some(ns), class)).await;
    wait_bundle(client, name, "v1 Ready", is_ready).await;
    v1
}

/// What must hold of a bundle whose new spec failed over v1: v1 still installed, and said so.
fn v1_stays_installed(bundle: &Bundle, v1: &str) {
    let status = bundle.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(BundlePhase::UpdateFailing));
    assert_eq!(status.installed_image.as_deref(), Some(v1));
    let ready = condition(bundle, types::READY).unwrap();
    assert!(
        ready.message.ends_with("stays installed"),
        "{}",
        ready.message
    );
}

#[tokio::test]
async fn a_malformed_image_stalls_naming_the_field_and_drift_of_what_is_installed_is_repaired() {
    let (client, installation) = installation("malformed").await;
    let ns = unique_name("malformed");
    let name = ns.clone();
    let v1 = install_v1(&client, &ns, &name, &installation.class).await;

    // An unset shell variable before the repository.
    set_image(&client, &name, "/examples/hello:v1").await;
    let bundle = wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::INVALID_IMAGE_REFERENCE,
        "spec.image \"/examples/hello:v1\"",
    )
    .await;
    assert_stalled(&bundle, reasons::INVALID_IMAGE_REFERENCE);
    v1_stays_installed(&bundle, &v1);

    // The stall holds no retry back from repairing what is installed.
    delete_config_map(&client, &ns, "first").await;
    restored(&client, &ns, "first", "v1").await;
    assert_config_map(&client, &ns, "second", Some("v1")).await;
    let bundle = get_bundle(&client, &name).await;
    assert_stalled(&bundle, reasons::INVALID_IMAGE_REFERENCE);
    v1_stays_installed(&bundle, &v1);
}

#[tokio::test]
async fn a_missing_image_is_retried_and_drift_of_what_is_installed_is_repaired_meanwhile() {
    let (client, installation) = installation("missing").await;
    let ns = unique_name("missing");
    let name = ns.clone();
    let v1 = install_v1(&client, &ns, &name, &installation.class).await;

    let missing = format!("{}/{ns}/never-pushed:v2", registry().host());
    set_image(&client, &name, &missing).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::PULL_FAILED,
        "never-pushed",
    )
    .await;
    v1_stays_installed(&bundle, &v1);

    // Changed by hand, and deleted: both come back while the pull is retried.
    edit_config_map(&client, &ns, "second", "edited").await;
    restored(&client, &ns, "second", "v1").await;
    delete_config_map(&client, &ns, "first").await;
    restored(&client, &ns, "first", "v1").await;
    let bundle = get_bundle(&client, &name).await;
    assert_retry_class(&bundle, types::UNPACKED, reasons::PULL_FAILED);
    v1_stays_installed(&bundle, &v1);
}

#[tokio::test]
async fn drift_of_what_is_installed_is_repaired_while_a_new_digest_awaits_approval() {
    let (client, _installation) = installation("awaiting").await;
    let ns = unique_namespace(&client, "awaiting").await;
    let class = unique_name("awaiting");
    let spec = ProvisionerClassSpec {
        provisioner: format!("{PLAIN_PROVISIONER}-awaiting"),
        ..class_spec(ApprovalPolicy::Manual)
    };
    apply_class(&client, &class, spec, false).await;
    let v1 = push_config_map(&format!("{ns}/app:v1"), "first", None, "v1").await;
    let name = ns.clone();
    create_bundle(&client, &name, spec_of_class(&v1, Some(&ns), &class)).await;
    wait_bundle(
        &client,
        &name,
        "v1 awaiting approval",
        phase_is(BundlePhase::AwaitingApproval),
    )
    .await;
    approve_digest(&client, &name, digest_of(&v1)).await;
    wait_bundle(&client, &name, "v1 Ready", is_ready).await;

    let v2 = push_config_map(&format!("{ns}/app:v2"), "first", None, "v2").await;
    set_image(&client, &name, &v2).await;
    wait_bundle(
        &client,
        &name,
        "v2 awaiting approval",
        phase_is(BundlePhase::AwaitingApproval),
    )
    .await;
    delete_config_map(&client, &ns, "first").await;
    restored(&client, &ns, "first", "v1").await;
}

#[tokio::test]
async fn nothing_of_a_bundle_is_written_while_the_api_server_refuses_one_of_its_objects() {
    let (client, installation) = installation("invalid").await;
    let ns = unique_namespace(&client, "invalid").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns);

    // Between two ConfigMaps, a Deployment no offline check refuses and the API server does.
    let files = |replicas| {
        vec![
            ("a.yaml", config_map("before", None, "v1")),
            ("b.yaml", deployment("web", replicas)),
            ("c.yaml", config_map("after", None, "v1")),
        ]
    };
    let refused = push(&format!("{ns}/app:refused"), &files(-1)).await;
    let name = unique_name("invalid");
    create_bundle(
        &client,
        &name,
        spec_of_class(&refused, Some(&ns), &installation.class),
    )
    .await;
    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::INVALID_OBJECT,
        &format!("Deployment.apps {ns}/web (b.yaml document 0)"),
    )
    .await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    assert!(
        message.contains("spec.replicas"),
        "the API server's field: {message}"
    );
    assert!(config_maps.get_opt("before").await.unwrap().is_none());
    assert!(config_maps.get_opt("after").await.unwrap().is_none());
    assert!(deployments.get_opt("web").await.unwrap().is_none());
    assert!(bundle.status.unwrap().inventory.is_empty());

    // Fixed content installs all of it.
    let fixed = push(&format!("{ns}/app:fixed"), &files(1)).await;
    set_image(&client, &name, &fixed).await;
    wait_bundle(&client, &name, "the fixed content Ready", is_ready).await;
    assert!(config_maps.get_opt("before").await.unwrap().is_some());
    assert!(config_maps.get_opt("after").await.unwrap().is_some());
    assert!(deployments.get_opt("web").await.unwrap().is_some());
}

#[tokio::test]
async fn an_upgrade_with_an_object_the_api_server_refuses_leaves_the_installed_content_as_it_was() {
    let (client, installation) = installation("invalid-upgrade").await;
    let ns = unique_name("upgrade");
    let name = ns.clone();
    let v1 = install_v1(&client, &ns, &name, &installation.class).await;
    let before = get_bundle(&client, &name).await;

    let v2 = push(
        &format!("{ns}/app:v2"),
        &[
            ("a.yaml", config_map("first", None, "v2")),
            ("b.yaml", config_map("second", None, "v2")),
            ("c.yaml", config_map("third", None, "v2")),
            ("d.yaml", service("web", 0)),
        ],
    )
    .await;
    set_image(&client, &name, &v2).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::INVALID_OBJECT,
        &format!("Service {ns}/web (d.yaml document 0)"),
    )
    .await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    assert!(message.contains("spec.ports[0].port"), "{message}");
    for config_map in ["first", "second"] {
        assert_eq!(
            config_map_data(&client, &ns, config_map).await.as_deref(),
            Some("v1"),
            "{config_map}"
        );
    }
    assert_eq!(config_map_data(&client, &ns, "third").await, None);
    let status = bundle.status.unwrap();
    assert_eq!(status.installed_image.as_deref(), Some(v1.as_str()));
    assert_eq!(status.inventory, before.status.unwrap().inventory);
}

/// A bundle that creates its namespace: the objects in it cannot be dry-run before the
/// Namespace exists, so they are judged once it does, before any of them is written.
#[tokio::test]
async fn objects_in_a_namespace_the_bundle_creates_are_judged_before_their_wave_writes() {
    let (client, installation) = installation("invalid-wave").await;
    let ns = unique_name("wave");
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("a.yaml", namespace_yaml(&ns)),
            ("b.yaml", config_map("inside", None, "v1")),
            ("c.yaml", service("web", 0)),
        ],
    )
    .await;
    let name = ns.clone();
    create_bundle(
        &client,
        &name,
        spec_of_class(&image, Some(&ns), &installation.class),
    )
    .await;
    wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::INVALID_OBJECT,
        &format!("Service {ns}/web (c.yaml document 0)"),
    )
    .await;
    assert_eq!(config_map_data(&client, &ns, "inside").await, None);
}

#[tokio::test]
async fn a_forbidden_stall_goes_on_as_soon_as_a_role_binding_grants_what_it_lacked() {
    let (client, _installation) = installation("forbidden").await;
    let ns = unique_namespace(&client, "forbidden").await;
    control_plane().service_account_token(&ns, "deployer").await;
    // It may read ConfigMaps (drift watches and health need that), not write them.
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    let apply = PatchParams::apply("gantry-tests").force();
    // A Role `name` of `verbs` on ConfigMaps, bound to the ServiceAccount.
    let grant = |name: &'static str, verbs: &'static [&'static str]| {
        let (roles, bindings, apply) = (&roles, &bindings, &apply);
        let role: Role = serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": ns },
            "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": verbs }]
        }))
        .unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": ns },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
            "subjects": [{ "kind": "ServiceAccount", "name": "deployer" }]
        }))
        .unwrap();
        async move {
            roles.patch(name, apply, &Patch::Apply(role)).await.unwrap();
            bindings
                .patch(name, apply, &Patch::Apply(binding))
                .await
                .unwrap();
        }
    };
    grant("reader", &["get", "list", "watch"]).await;
    let class = unique_name("forbidden");
    let spec = ProvisionerClassSpec {
        provisioner: format!("{PLAIN_PROVISIONER}-forbidden"),
        service_account: Some(gantry_api::ServiceAccountReference {
            namespace: ns.clone(),
            name: "deployer".into(),
        }),
        ..class_spec(ApprovalPolicy::Automatic)
    };
    apply_class(&client, &class, spec, false).await;
    let image = push_config_map(&format!("{ns}/app:v1"), "settings", None, "v1").await;
    let name = ns.clone();
    create_bundle(&client, &name, spec_of_class(&image, Some(&ns), &class)).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::FORBIDDEN,
        &format!("ServiceAccount {ns}/deployer"),
    )
    .await;
    let stalled = condition(&bundle, types::STALLED).unwrap();
    assert!(
        stalled.message.contains("checked again every 5m"),
        "the Stalled message says when it is looked at otherwise: {}",
        stalled.message
    );
    assert_eq!(config_map_data(&client, &ns, "settings").await, None);

    let granted = Instant::now();
    grant("writer", &["create", "patch", "update"]).await;
    wait_until("the bundle Ready once granted", PROMPTLY, || async {
        let bundle = Api::<Bundle>::all(client.clone()).get(&name).await.ok()?;
        is_ready(&bundle).then_some(())
    })
    .await;
    println!("Ready {:.1?} after the grant", granted.elapsed());
    assert_config_map(&client, &ns, "settings", Some("v1")).await;
}
