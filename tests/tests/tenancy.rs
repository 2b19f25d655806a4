//! Least privilege: bundles applied as a ServiceAccount (the provisioner impersonates it), the
//! refusal of bundles without one (`--require-service-account`), images limited per class
//! (`allowedImages`), and `kubectl bundle diff` before an approval. The provisioner of this
//! binary runs with `--require-service-account`: the default class `plain`, which names no
//! ServiceAccount, serves to show the refusal.

mod common;

use common::kubectl::{kubeconfig, kubectl_bundle, text};
use common::*;
use gantry_api::conditions::{reasons, types};
use gantry_api::{
    ApprovalPolicy, Bundle, BundlePhase, ProvisionerClassSpec, ServiceAccountReference,
};
use gantry_tests::{
    Provisioner, StorageOptions, StorageServer, control_plane, registry, unique_name,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::sync::OnceLock;

/// This binary's Gantry: the provisioner refuses bundles without a ServiceAccount.
fn gantry_requiring_service_accounts() -> &'static (StorageServer, Provisioner) {
    static GANTRY: OnceLock<(StorageServer, Provisioner)> = OnceLock::new();
    GANTRY.get_or_init(|| {
        std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(setup())
        })
        .join()
        .unwrap();
        let storage = StorageServer::start(StorageOptions::default());
        let provisioner = start_provisioner(
            &storage,
            &[
                "--require-service-account",
                "--resolve-interval=1s",
                "--backoff-base=200ms",
                "--backoff-cap=2s",
            ],
        );
        (storage, provisioner)
    })
}

/// Applies an RBAC object (or any object) given as JSON, as the test's admin.
async fn apply_json(client: &Client, object: Value) {
    let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            object["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let kind = object["kind"].as_str().unwrap();
    let gvk = kube::core::GroupVersionKind::gvk(&group, &version, kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let api: Api<kube::api::DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &name,
        &PatchParams::apply("gantry-tests").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
}

/// A ServiceAccount bound to `rules` in its own namespace (a Role), and to `cluster_rules`
/// cluster-wide (a ClusterRole), when given.
async fn service_account(
    client: &Client,
    namespace: &str,
    name: &str,
    rules: Value,
    cluster_rules: Option<Value>,
) -> ServiceAccountReference {
    control_plane().service_account_token(namespace, name).await;
    let subject = json!([{ "kind": "ServiceAccount", "name": name, "namespace": namespace }]);
    apply_json(
        client,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": name, "namespace": namespace }, "rules": rules
        }),
    )
    .await;
    apply_json(
        client,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": name, "namespace": namespace },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
            "subjects": subject
        }),
    )
    .await;
    if let Some(cluster_rules) = cluster_rules {
        let cluster_name = format!("{namespace}-{name}");
        apply_json(
            client,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": { "name": cluster_name }, "rules": cluster_rules
            }),
        )
        .await;
        apply_json(
            client,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": { "name": cluster_name },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name },
                "subjects": subject
            }),
        )
        .await;
    }
    ServiceAccountReference {
        namespace: namespace.into(),
        name: name.into(),
    }
}

/// A ServiceAccount that may do anything (bound to cluster-admin).
async fn broad_service_account(client: &Client) -> ServiceAccountReference {
    let name = unique_name("broad");
    control_plane()
        .service_account_token(NAMESPACE, &name)
        .await;
    apply_json(
        client,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": name },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
            "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": NAMESPACE }]
        }),
    )
    .await;
    ServiceAccountReference {
        namespace: NAMESPACE.into(),
        name,
    }
}

fn class_as(account: &ServiceAccountReference, approval: ApprovalPolicy) -> ProvisionerClassSpec {
    ProvisionerClassSpec {
        service_account: Some(account.clone()),
        ..class_spec(approval)
    }
}

fn bundle_of_class(image: &str, namespace: &str, class: &str) -> gantry_api::BundleSpec {
    gantry_api::BundleSpec {
        provisioner_class_name: Some(class.into()),
        ..spec(image, Some(namespace))
    }
}

fn applied_as(bundle: &Bundle) -> Option<ServiceAccountReference> {
    bundle
        .status
        .as_ref()?
        .requested_permissions
        .as_ref()?
        .service_account
        .clone()
}

fn binding_to_cluster_admin(name: &str, namespace: &str, account: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {name}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: {account}\n  namespace: {namespace}\n"
    )
}

#[tokio::test]
async fn a_limited_service_account_cannot_bind_cluster_admin_and_nothing_is_applied() {
    gantry_requiring_service_accounts();
    let client = control_plane().client().await;
    let ns = unique_name("limited");
    ensure_namespace(&client, &ns).await;
    // May manage ConfigMaps in its namespace and create ClusterRoleBindings, but holds nothing
    // of cluster-admin: RBAC refuses to let it grant more than it has.
    let limited = service_account(
        &client,
        &ns,
        "deployer",
        json!([{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"] }]),
        Some(json!([{ "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"],
                      "verbs": ["get", "list", "watch", "create", "update", "patch"] }])),
    )
    .await;
    let class = unique_name("limited");
    apply_class(
        &client,
        &class,
        class_as(&limited, ApprovalPolicy::Automatic),
        false,
    )
    .await;

    let binding = format!("{ns}-escalation");
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("a-config.yaml", config_map("first", Some(&ns), "v1")),
            (
                "b-binding.yaml",
                binding_to_cluster_admin(&binding, &ns, "deployer"),
            ),
        ],
    )
    .await;
    let name = unique_name("escalation");
    create_bundle(&client, &name, bundle_of_class(&image, &ns, &class)).await;

    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::FORBIDDEN,
        &binding,
    )
    .await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    assert!(
        message.contains(&format!("ServiceAccount {ns}/deployer"))
            && message.contains(&format!("system:serviceaccount:{ns}:deployer")),
        "the message names the identity: {message}"
    );
    assert_eq!(applied_as(&bundle), Some(limited.clone()));
    // Nothing of the bundle was applied: not even the ConfigMap that comes first.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(config_maps.get_opt("first").await.unwrap().is_none());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    assert!(bindings.get_opt(&binding).await.unwrap().is_none());
    assert!(bundle.status.as_ref().unwrap().inventory.is_empty());

    // The same bundle, once its class applies it as a ServiceAccount that may, installs.
    let broad = broad_service_account(&client).await;
    apply_class(
        &client,
        &class,
        class_as(&broad, ApprovalPolicy::Automatic),
        false,
    )
    .await;
    let bundle = wait_bundle(
        &client,
        &name,
        "Ready as the broad ServiceAccount",
        is_ready,
    )
    .await;
    assert_eq!(applied_as(&bundle), Some(broad));
    assert!(config_maps.get_opt("first").await.unwrap().is_some());
    assert!(bindings.get_opt(&binding).await.unwrap().is_some());

    Api::<Bundle>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_bundle_gone(&client, &name).await;
    assert!(bindings.get_opt(&binding).await.unwrap().is_none());
}

#[tokio::test]
async fn prune_and_uninstall_run_as_the_service_account() {
    gantry_requiring_service_accounts();
    let client = control_plane().client().await;
    let ns = unique_name("nodelete");
    ensure_namespace(&client, &ns).await;
    let creator = service_account(
        &client,
        &ns,
        "creator",
        json!([{ "apiGroups": [""], "resources": ["configmaps"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch"] }]),
        None,
    )
    .await;
    let class = unique_name("nodelete");
    apply_class(
        &client,
        &class,
        class_as(&creator, ApprovalPolicy::Automatic),
        false,
    )
    .await;
    let v1 = push(
        &format!("{ns}/app:v1"),
        &[
            ("a.yaml", config_map("kept", None, "v1")),
            ("b.yaml", config_map("dropped", None, "v1")),
        ],
    )
    .await;
    let name = unique_name("nodelete");
    create_bundle(&client, &name, bundle_of_class(&v1, &ns, &class)).await;
    wait_bundle(&client, &name, "Ready as the creator", is_ready).await;

    // v2 drops a ConfigMap: pruning it is a delete, which the ServiceAccount may not do.
    let v2 = push(
        &format!("{ns}/app:v2"),
        &[("a.yaml", config_map("kept", None, "v2"))],
    )
    .await;
    let bundles: Api<Bundle> = Api::all(client.clone());
    bundles
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "image": v2 } })),
        )
        .await
        .unwrap();
    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::PRUNE_FAILED,
        "dropped",
    )
    .await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    assert!(
        message.contains("forbidden") && message.contains(&format!("ServiceAccount {ns}/creator")),
        "{message}"
    );
    assert_eq!(
        config_map_data(&client, &ns, "dropped").await.as_deref(),
        Some("v1")
    );

    // Uninstalling is deleting too: refused, the objects stay, the bundle waits.
    bundles
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::UNINSTALL_FAILED,
        &format!("system:serviceaccount:{ns}:creator"),
    )
    .await;
    assert_eq!(bundle.status.unwrap().phase, Some(BundlePhase::Deleting));
    assert!(config_map_data(&client, &ns, "kept").await.is_some());

    // Once the ServiceAccount may delete, the uninstall completes.
    service_account(
        &client,
        &ns,
        "creator",
        json!([{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"] }]),
        None,
    )
    .await;
    wait_bundle_gone(&client, &name).await;
    assert!(config_map_data(&client, &ns, "kept").await.is_none());
    assert!(config_map_data(&client, &ns, "dropped").await.is_none());
}

/// Permissions are asked once per kind and namespace; where RBAC grants by name, that answer is
/// no, and each object is checked on its own: the names granted install, any other is refused
/// before anything is written.
#[tokio::test]
async fn permissions_granted_by_name_are_checked_object_by_object() {
    gantry_requiring_service_accounts();
    let client = control_plane().client().await;
    let ns = unique_name("byname");
    ensure_namespace(&client, &ns).await;
    let named = service_account(
        &client,
        &ns,
        "named",
        json!([
            { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create"] },
            { "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["granted"],
              "verbs": ["patch", "update", "delete"] }
        ]),
        None,
    )
    .await;
    let class = unique_name("byname");
    apply_class(
        &client,
        &class,
        class_as(&named, ApprovalPolicy::Automatic),
        false,
    )
    .await;

    let both = push(
        &format!("{ns}/app:both"),
        &[
            ("a.yaml", config_map("granted", None, "v1")),
            ("b.yaml", config_map("other", None, "v1")),
        ],
    )
    .await;
    let name = unique_name("byname");
    create_bundle(&client, &name, bundle_of_class(&both, &ns, &class)).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::FORBIDDEN,
        "other",
    )
    .await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    assert!(
        message.contains(&format!("ServiceAccount {ns}/named")),
        "the message names the identity: {message}"
    );
    // Refused before anything was written: not even the ConfigMap it may write.
    assert_eq!(config_map_data(&client, &ns, "granted").await, None);
    assert_eq!(config_map_data(&client, &ns, "other").await, None);

    let granted = push(
        &format!("{ns}/app:granted"),
        &[("a.yaml", config_map("granted", None, "v1"))],
    )
    .await;
    Api::<Bundle>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "image": granted } })),
        )
        .await
        .unwrap();
    wait_bundle(&client, &name, "Ready with the granted name only", is_ready).await;
    assert_eq!(
        config_map_data(&client, &ns, "granted").await.as_deref(),
        Some("v1")
    );
    assert_eq!(config_map_data(&client, &ns, "other").await, None);
}

#[tokio::test]
async fn without_a_service_account_a_bundle_is_refused_before_anything_is_pulled() {
    gantry_requiring_service_accounts();
    let client = control_plane().client().await;
    let ns = unique_name("required");
    ensure_namespace(&client, &ns).await;
    let image = push(
        &format!("{ns}/app:v1"),
        &[("a.yaml", config_map("c", None, "v1"))],
    )
    .await;

    // The default class names no ServiceAccount.
    let name = unique_name("required");
    create_bundle(&client, &name, spec(&image, Some(&ns))).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::SERVICE_ACCOUNT_REQUIRED,
        "--require-service-account",
    )
    .await;
    let status = bundle.status.unwrap();
    assert_eq!(
        status.resolved_image, None,
        "nothing was resolved or pulled"
    );
    assert_eq!(status.content_digest, None);
    assert!(config_map_data(&client, &ns, "c").await.is_none());

    // A bundle naming its own ServiceAccount needs a class that allows it ...
    let own = service_account(
        &client,
        &ns,
        "own",
        json!([{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"] }]),
        None,
    )
    .await;
    let class = unique_name("own-sa");
    let broad = broad_service_account(&client).await;
    apply_class(
        &client,
        &class,
        class_as(&broad, ApprovalPolicy::Automatic),
        false,
    )
    .await;
    let chooser = unique_name("chooser");
    let mut chosen = bundle_of_class(&image, &ns, &class);
    chosen.service_account_name = Some("own".into());
    create_bundle(&client, &chooser, chosen).await;
    wait_failure(
        &client,
        &chooser,
        types::INSTALLED,
        reasons::SERVICE_ACCOUNT_NOT_ALLOWED,
        "allowBundleServiceAccount",
    )
    .await;
    assert!(config_map_data(&client, &ns, "c").await.is_none());

    // ... and with one, it is applied as that ServiceAccount, not the class's.
    apply_class(
        &client,
        &class,
        ProvisionerClassSpec {
            allow_bundle_service_account: true,
            ..class_as(&broad, ApprovalPolicy::Automatic)
        },
        false,
    )
    .await;
    let bundle = wait_bundle(
        &client,
        &chooser,
        "Ready as its own ServiceAccount",
        is_ready,
    )
    .await;
    assert_eq!(applied_as(&bundle), Some(own));
    assert_eq!(
        config_map_data(&client, &ns, "c").await.as_deref(),
        Some("v1")
    );
}

#[tokio::test]
async fn images_outside_a_class_s_allowed_images_are_refused() {
    gantry_requiring_service_accounts();
    let client = control_plane().client().await;
    let ns = unique_name("sources");
    ensure_namespace(&client, &ns).await;
    let broad = broad_service_account(&client).await;
    let class = unique_name("sources");
    let allowed_prefix = format!("{}/{ns}/allowed", registry().host());
    apply_class(
        &client,
        &class,
        ProvisionerClassSpec {
            allowed_images: vec![allowed_prefix.clone()],
            ..class_as(&broad, ApprovalPolicy::Automatic)
        },
        false,
    )
    .await;
    // Pushed and pullable, but under a repository the class does not allow; `allowed-b`
    // shares the prefix's characters, not its path.
    let elsewhere = push(
        &format!("{ns}/allowed-b/app:v1"),
        &[("a.yaml", config_map("elsewhere", None, "v1"))],
    )
    .await;
    let refused = unique_name("refused");
    create_bundle(&client, &refused, bundle_of_class(&elsewhere, &ns, &class)).await;
    let bundle = wait_failure(
        &client,
        &refused,
        types::UNPACKED,
        reasons::IMAGE_NOT_ALLOWED,
        &allowed_prefix,
    )
    .await;
    assert_eq!(
        bundle.status.unwrap().resolved_image,
        None,
        "nothing was fetched"
    );
    assert!(config_map_data(&client, &ns, "elsewhere").await.is_none());

    let inside = push(
        &format!("{ns}/allowed/team/app:v1"),
        &[("a.yaml", config_map("inside", None, "v1"))],
    )
    .await;
    let accepted = unique_name("accepted");
    create_bundle(&client, &accepted, bundle_of_class(&inside, &ns, &class)).await;
    wait_bundle(
        &client,
        &accepted,
        "Ready from an allowed repository",
        is_ready,
    )
    .await;
    assert_eq!(
        config_map_data(&client, &ns, "inside").await.as_deref(),
        Some("v1")
    );
}

fn secret(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\nstringData:\n  password: {value}\n"
    )
}

fn diff(name: &str) -> std::process::Output {
    let kc = kubeconfig();
    kubectl_bundle(&["diff", name, "--kubeconfig", kc.as_str()])
}

#[tokio::test]
async fn kubectl_bundle_diff_shows_what_an_approval_would_change() {
    gantry_requiring_service_accounts();
    let client = control_plane().client().await;
    let ns = unique_name("diff");
    ensure_namespace(&client, &ns).await;
    let broad = broad_service_account(&client).await;
    let class = unique_name("diff");
    apply_class(
        &client,
        &class,
        class_as(&broad, ApprovalPolicy::Manual),
        false,
    )
    .await;
    let v1 = push(
        &format!("{ns}/app:v1"),
        &[
            ("a.yaml", config_map("settings", None, "old-value")),
            ("b.yaml", config_map("retired", None, "v1")),
            ("c.yaml", secret("credentials", "first-secret-value")),
        ],
    )
    .await;
    let name = unique_name("diff");
    create_bundle(&client, &name, bundle_of_class(&v1, &ns, &class)).await;
    wait_bundle(&client, &name, "AwaitingApproval", |b| {
        b.status.as_ref().and_then(|s| s.phase) == Some(BundlePhase::AwaitingApproval)
    })
    .await;

    // Nothing is installed yet: everything would be created.
    let first = diff(&name);
    assert_eq!(first.status.code(), Some(1), "{}", text(&first));
    let out = String::from_utf8_lossy(&first.stdout);
    assert!(
        out.contains(&format!("+++ ConfigMap {ns}/settings")),
        "{out}"
    );
    assert!(out.contains("+  value: old-value"), "{out}");
    assert!(
        !out.contains("first-secret-value"),
        "Secret data is masked: {out}"
    );

    let kc = kubeconfig();
    let approved = kubectl_bundle(&["approve", &name, "--yes", "--kubeconfig", kc.as_str()]);
    assert!(approved.status.success(), "{}", text(&approved));
    wait_bundle(&client, &name, "Ready once approved", is_ready).await;

    // Installed as it is: no changes, exit 0.
    let same = diff(&name);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same));

    // New content awaiting approval: a changed value, a changed secret, a pruned object.
    let v2 = push(
        &format!("{ns}/app:v2"),
        &[
            ("a.yaml", config_map("settings", None, "new-value")),
            ("c.yaml", secret("credentials", "second-secret-value")),
        ],
    )
    .await;
    Api::<Bundle>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "image": v2 } })),
        )
        .await
        .unwrap();
    let pinned_digest = v2.rsplit_once('@').unwrap().1.to_string();
    wait_bundle(&client, &name, "the new digest awaiting approval", |b| {
        let status = b.status.as_ref();
        status.and_then(|s| s.phase) == Some(BundlePhase::AwaitingApproval)
            && status
                .and_then(|s| s.resolved_image.as_deref())
                .is_some_and(|r| r.ends_with(&pinned_digest))
    })
    .await;
    let changed = diff(&name);
    assert_eq!(changed.status.code(), Some(1), "{}", text(&changed));
    let out = String::from_utf8_lossy(&changed.stdout);
    assert!(out.contains("-  value: old-value"), "{out}");
    assert!(out.contains("+  value: new-value"), "{out}");
    assert!(
        out.contains(&format!("--- ConfigMap {ns}/retired")) && out.contains("pruned"),
        "{out}"
    );
    assert!(
        out.contains("*** (before)") && out.contains("*** (after)"),
        "{out}"
    );
    assert!(
        !out.contains("first-secret") && !out.contains("second-secret"),
        "Secret data is masked: {out}"
    );
    // The same diff with the content read from the registry (as from outside the cluster, where
    // the storage server cannot be reached), checked against the stored content's digest.
    let from_registry = kubectl_bundle(&[
        "diff",
        &name,
        "--from-registry",
        "--plain-http",
        "--kubeconfig",
        kc.as_str(),
    ]);
    assert_eq!(
        from_registry.status.code(),
        Some(1),
        "{}",
        text(&from_registry)
    );
    assert_eq!(String::from_utf8_lossy(&from_registry.stdout), out);
    // The diff is a dry run: nothing changed on the cluster.
    assert_eq!(
        config_map_data(&client, &ns, "settings").await.as_deref(),
        Some("old-value")
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(cms.get_opt("retired").await.unwrap().is_some());
    assert!(
        cms.get("settings")
            .await
            .unwrap()
            .labels()
            .contains_key(gantry_api::BUNDLE_LABEL)
    );

    let missing = diff("no-such-bundle");
    assert!(missing.status.code().unwrap_or(0) > 1, "{}", text(&missing));
}
