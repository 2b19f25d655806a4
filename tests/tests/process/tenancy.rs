//! Least privilege: bundles applied as a ServiceAccount (the provisioner impersonates it), the
//! refusal of bundles without one (`--require-service-account`), images limited per class
//! (`allowedImages`), and `kubectl bundle diff` before an approval. The provisioner of this
//! module runs with `--require-service-account`, on a control plane of its own: the default
//! class `plain`, which names no ServiceAccount, serves to show the refusal.

use base64::Engine as _;
use gantry_api::conditions::{reasons, types};
use gantry_api::{
    ApprovalPolicy, Bundle, BundlePhase, ProvisionerClassSpec, ServiceAccountReference,
};
use gantry_tests::e2e::kubectl::{kubectl_bundle, text};
use gantry_tests::e2e::*;
use gantry_tests::{Registry, RegistryOptions, unique_name};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// This module's cluster and Gantry: the provisioner refuses bundles without a ServiceAccount.
/// Each test holds it while it runs; the helpers here reach it through [`Isolated::get`].
static CLUSTER: Isolated = Isolated::with_gantry(&[
    "--require-service-account",
    "--resolve-interval=1s",
    "--backoff-base=200ms",
    "--backoff-cap=2s",
]);

/// This module's cluster's admin kubeconfig, as an argument.
fn kubeconfig() -> String {
    CLUSTER.get().kubeconfig().display().to_string()
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
    CLUSTER.get().service_account_token(namespace, name).await;
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
    CLUSTER.get().service_account_token(NAMESPACE, &name).await;
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

/// A new class (its name from `prefix`) whose bundles are applied as `account`.
async fn class_applying_as(
    client: &Client,
    prefix: &str,
    account: &ServiceAccountReference,
    approval: ApprovalPolicy,
) -> String {
    let class = unique_name(prefix);
    apply_class(client, &class, class_as(account, approval), false).await;
    class
}

/// A ServiceAccount that may do `verbs` on ConfigMaps in `namespace`, and nothing else.
async fn config_map_account(
    client: &Client,
    namespace: &str,
    name: &str,
    verbs: &[&str],
) -> ServiceAccountReference {
    let rules = json!([{ "apiGroups": [""], "resources": ["configmaps"], "verbs": verbs }]);
    service_account(client, namespace, name, rules, None).await
}

/// Pushes an image of the ConfigMaps `first` and `second` (`v1`, in the install namespace).
async fn push_two_config_maps(repository_tag: &str, first: &str, second: &str) -> String {
    let files = [
        ("a.yaml", config_map(first, None, "v1")),
        ("b.yaml", config_map(second, None, "v1")),
    ];
    push(repository_tag, &files).await
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
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "limited").await;
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
    let class = class_applying_as(&client, "limited", &limited, ApprovalPolicy::Automatic).await;

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
    create_bundle(&client, &name, spec_of_class(&image, Some(&ns), &class)).await;

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

    delete_bundle(&client, &name).await;
    wait_bundle_gone(&client, &name).await;
    assert!(bindings.get_opt(&binding).await.unwrap().is_none());
}

#[tokio::test]
async fn prune_and_uninstall_run_as_the_service_account() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "nodelete").await;
    let verbs = ["get", "list", "watch", "create", "update", "patch"];
    let creator = config_map_account(&client, &ns, "creator", &verbs).await;
    let class = class_applying_as(&client, "nodelete", &creator, ApprovalPolicy::Automatic).await;
    let v1 = push_two_config_maps(&format!("{ns}/app:v1"), "kept", "dropped").await;
    let name = unique_name("nodelete");
    create_bundle(&client, &name, spec_of_class(&v1, Some(&ns), &class)).await;
    wait_bundle(&client, &name, "Ready as the creator", is_ready).await;

    // v2 drops a ConfigMap: pruning it is a delete, which the ServiceAccount may not do.
    let v2 = push_config_map(&format!("{ns}/app:v2"), "kept", None, "v2").await;
    set_image(&client, &name, &v2).await;
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
    assert_config_map(&client, &ns, "dropped", Some("v1")).await;

    // Uninstalling is deleting too: refused, the objects stay, the bundle waits.
    delete_bundle(&client, &name).await;
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
    config_map_account(&client, &ns, "creator", &["*"]).await;
    wait_bundle_gone(&client, &name).await;
    assert!(config_map_data(&client, &ns, "kept").await.is_none());
    assert!(config_map_data(&client, &ns, "dropped").await.is_none());
}

/// Permissions are asked once per kind and namespace; where RBAC grants by name, that answer is
/// no, and each object is checked on its own: the names granted install, any other is refused
/// before anything is written.
#[tokio::test]
async fn permissions_granted_by_name_are_checked_object_by_object() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "byname").await;
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
    let class = class_applying_as(&client, "byname", &named, ApprovalPolicy::Automatic).await;

    let both = push_two_config_maps(&format!("{ns}/app:both"), "granted", "other").await;
    let name = unique_name("byname");
    create_bundle(&client, &name, spec_of_class(&both, Some(&ns), &class)).await;
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

    let granted = push_config_map(&format!("{ns}/app:granted"), "granted", None, "v1").await;
    set_image(&client, &name, &granted).await;
    wait_bundle(&client, &name, "Ready with the granted name only", is_ready).await;
    assert_config_map(&client, &ns, "granted", Some("v1")).await;
    assert_eq!(config_map_data(&client, &ns, "other").await, None);
}

#[tokio::test]
async fn without_a_service_account_a_bundle_is_refused_before_anything_is_pulled() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "required").await;
    let image = push_config_map(&format!("{ns}/app:v1"), "c", None, "v1").await;

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
    let own = config_map_account(&client, &ns, "own", &["*"]).await;
    let broad = broad_service_account(&client).await;
    let class = class_applying_as(&client, "own-sa", &broad, ApprovalPolicy::Automatic).await;
    let chooser = unique_name("chooser");
    let mut chosen = spec_of_class(&image, Some(&ns), &class);
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
    assert_config_map(&client, &ns, "c", Some("v1")).await;
}

/// How many requests `registry` has served (`registry_http_requests_total`, every handler and
/// status summed).
async fn requests_served(registry: &Registry) -> f64 {
    let text = reqwest::get(registry.metrics_url())
        .await
        .and_then(|r| r.error_for_status())
        .expect("the registry's metrics")
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|line| {
            line.strip_prefix("registry_http_requests_total")
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn images_outside_a_class_s_allowed_images_are_refused() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "sources").await;
    // A registry of this test alone: every request it serves is this test's.
    let own = Registry::start(RegistryOptions::default());
    let broad = broad_service_account(&client).await;
    let class = unique_name("sources");
    let allowed_prefix = format!("{}/{ns}/allowed", own.host());
    let mut sources = class_as(&broad, ApprovalPolicy::Automatic);
    sources.allowed_images = vec![allowed_prefix.clone()];
    sources.insecure_registries.push(own.host().to_string());
    apply_class(&client, &class, sources, false).await;
    // Pushed and pullable, but under a repository the class does not allow; `allowed-b`
    // shares the prefix's characters, not its path.
    let elsewhere = push_to(
        own.host(),
        &format!("{ns}/allowed-b/app:v1"),
        &[("a.yaml", config_map("elsewhere", None, "v1"))],
    )
    .await;
    let before = requests_served(&own).await;
    let refused = unique_name("refused");
    create_bundle(
        &client,
        &refused,
        spec_of_class(&elsewhere, Some(&ns), &class),
    )
    .await;
    let bundle = wait_failure(
        &client,
        &refused,
        types::UNPACKED,
        reasons::IMAGE_NOT_ALLOWED,
        &allowed_prefix,
    )
    .await;
    assert_eq!(
        requests_served(&own).await,
        before,
        "the registry was not asked anything for a refused image"
    );
    assert_eq!(
        bundle.status.unwrap().resolved_image,
        None,
        "nothing was fetched"
    );
    assert!(config_map_data(&client, &ns, "elsewhere").await.is_none());

    let inside = push_to(
        own.host(),
        &format!("{ns}/allowed/team/app:v1"),
        &[("a.yaml", config_map("inside", None, "v1"))],
    )
    .await;
    let pushed = requests_served(&own).await;
    let accepted = unique_name("accepted");
    create_bundle(
        &client,
        &accepted,
        spec_of_class(&inside, Some(&ns), &class),
    )
    .await;
    wait_bundle(
        &client,
        &accepted,
        "Ready from an allowed repository",
        is_ready,
    )
    .await;
    assert_config_map(&client, &ns, "inside", Some("v1")).await;
    // The counter sees the provisioner's requests: an allowed image is pulled from it.
    assert!(requests_served(&own).await > pushed);
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
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "diff").await;
    let broad = broad_service_account(&client).await;
    let class = class_applying_as(&client, "diff", &broad, ApprovalPolicy::Manual).await;
    let v1 = push(
        &format!("{ns}/app:v1"),
        &[
            ("a.yaml", config_map("settings", None, "old-value")),
            ("b.yaml", config_map("retired", None, "v1")),
            ("c.yaml", secret("credentials", "first-secret-value")),
            (
                "d.yaml",
                secret("retired-credentials", "retired-secret-value"),
            ),
        ],
    )
    .await;
    // What the API server keeps of each secret value, and what a diff must never print.
    let encoded: Vec<String> = [
        "first-secret-value",
        "second-secret-value",
        "retired-secret-value",
    ]
    .iter()
    .map(|plain| base64::engine::general_purpose::STANDARD.encode(plain))
    .collect();
    let shows_no_secret = |out: &str| {
        for value in &encoded {
            assert!(
                !out.contains(value.as_str()),
                "Secret data {value} is masked: {out}"
            );
        }
        assert!(
            !out.contains("-secret-value"),
            "Secret data is masked: {out}"
        );
    };
    let name = unique_name("diff");
    create_bundle(&client, &name, spec_of_class(&v1, Some(&ns), &class)).await;
    wait_bundle(
        &client,
        &name,
        "AwaitingApproval",
        phase_is(BundlePhase::AwaitingApproval),
    )
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
        out.contains(&format!("+++ Secret {ns}/credentials (after apply)")),
        "{out}"
    );
    shows_no_secret(&out);

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
    set_image(&client, &name, &v2).await;
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
    shows_no_secret(&out);
    // The Secret v2 drops is shown as pruned, its value masked too.
    let retired = out
        .split_once(&format!("--- Secret {ns}/retired-credentials (live)"))
        .map(|(_, rest)| rest.split("\n--- ").next().unwrap_or(rest))
        .unwrap_or_else(|| panic!("the pruned Secret is shown: {out}"));
    assert!(
        retired.contains(&format!("+++ Secret {ns}/retired-credentials (pruned)")),
        "{retired}"
    );
    assert!(
        retired
            .lines()
            .any(|line| line.starts_with("-  password:") && line.contains("***")),
        "{retired}"
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
    assert_config_map(&client, &ns, "settings", Some("old-value")).await;
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

/// An operator install as upstream projects ship one, with everything an approver must not miss.
fn operator_install(ns: &str, group: &str) -> Vec<(&'static str, String)> {
    vec![
        ("00-namespace.yaml", namespace_yaml(ns)),
        (
            "01-crd.yaml",
            format!(
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.{group}\nspec:\n  group: {group}\n  names: {{ kind: Widget, plural: widgets, singular: widget, listKind: WidgetList }}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{ type: object, x-kubernetes-preserve-unknown-fields: true }}\n"
            ),
        ),
        (
            "02-rbac.yaml",
            format!(
                "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: manager\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {ns}-manager\nrules:\n- apiGroups: ['*']\n  resources: ['*']\n  verbs: ['*']\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {ns}-manager-admin\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: manager\n  namespace: {ns}\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {ns}-role-binder\nrules:\n- apiGroups: [rbac.authorization.k8s.io]\n  resources: [clusterroles]\n  verbs: [get, bind, escalate]\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {ns}-role-binder\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {ns}-role-binder\nsubjects:\n- kind: ServiceAccount\n  name: manager\n  namespace: {ns}\n---\n\
                 apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {ns}-auth-reader\n  namespace: kube-system\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: extension-apiserver-authentication-reader\nsubjects:\n- kind: ServiceAccount\n  name: manager\n  namespace: {ns}\n"
            ),
        ),
        (
            "03-webhook.yaml",
            format!(
                "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {ns}-webhook\nwebhooks:\n- name: validate.{group}\n  failurePolicy: Fail\n  sideEffects: None\n  admissionReviewVersions: [v1]\n  clientConfig:\n    service: {{ name: webhook, namespace: {ns}, path: /validate }}\n  rules:\n  - apiGroups: ['{group}']\n    apiVersions: [v1]\n    operations: [CREATE, UPDATE]\n    resources: ['*']\n"
            ),
        ),
        (
            "04-agent.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: agent\nspec:\n  selector:\n    matchLabels: { app: agent }\n  template:\n    metadata:\n      labels: { app: agent }\n    spec:\n      serviceAccountName: manager\n      hostNetwork: true\n      containers:\n      - name: agent\n        image: registry.invalid/agent:v1\n        securityContext: { privileged: true }\n".to_string(),
        ),
        ("05-settings.yaml", config_map("settings", None, "v1")),
    ]
}

#[tokio::test]
async fn an_operator_install_awaiting_approval_highlights_what_an_approver_must_not_miss() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_name("operator");
    let group = format!("{ns}.gantry.test");
    let broad = broad_service_account(&client).await;
    let class = class_applying_as(&client, "operator", &broad, ApprovalPolicy::Manual).await;
    let image = push(&format!("{ns}/operator:v1"), &operator_install(&ns, &group)).await;
    let name = unique_name("operator");
    create_bundle(&client, &name, spec_of_class(&image, Some(&ns), &class)).await;
    let bundle = wait_bundle(&client, &name, "AwaitingApproval with a plan", |b| {
        b.status.as_ref().is_some_and(|s| {
            s.phase == Some(BundlePhase::AwaitingApproval) && s.requested_permissions.is_some()
        })
    })
    .await;
    let permissions = bundle.status.unwrap().requested_permissions.unwrap();
    assert_eq!(permissions.service_account, Some(broad));

    // (kind, namespace, name) -> reason, for every flagged object.
    let flagged: std::collections::BTreeMap<(String, Option<String>, String), String> = permissions
        .highlights
        .iter()
        .map(|h| {
            (
                (h.kind.clone(), h.namespace.clone(), h.name.clone()),
                h.reason.clone(),
            )
        })
        .collect();
    let reason = |kind: &str, namespace: Option<&str>, name: &str| -> &str {
        flagged
            .get(&(
                kind.to_string(),
                namespace.map(str::to_string),
                name.to_string(),
            ))
            .unwrap_or_else(|| panic!("{kind} {name} is not highlighted: {flagged:#?}"))
    };
    let expected: [(&str, Option<&str>, String, &[&str]); 8] = [
        (
            "CustomResourceDefinition",
            None,
            format!("widgets.{group}"),
            &["defines a new API"],
        ),
        (
            "ClusterRole",
            None,
            format!("{ns}-manager"),
            &["grants verbs [*] on resources [*] in groups [*]"],
        ),
        (
            "ClusterRoleBinding",
            None,
            format!("{ns}-manager-admin"),
            &["binds cluster-admin"],
        ),
        (
            "ClusterRole",
            None,
            format!("{ns}-role-binder"),
            &["grants bind,escalate on [clusterroles]"],
        ),
        (
            "ClusterRoleBinding",
            None,
            format!("{ns}-role-binder"),
            &[&format!(
                "binds ClusterRole {ns}-role-binder, which grants escalate, bind or impersonate"
            )],
        ),
        (
            "RoleBinding",
            Some("kube-system"),
            format!("{ns}-auth-reader"),
            &[
                "lives in kube-system",
                &format!("lives outside the install namespace {ns} (in kube-system)"),
            ],
        ),
        (
            "ValidatingWebhookConfiguration",
            None,
            format!("{ns}-webhook"),
            &[&format!(
                "intercepts API requests (admission webhook: validate.{group} failurePolicy Fail)"
            )],
        ),
        (
            "Deployment",
            Some(ns.as_str()),
            "agent".to_string(),
            &[
                "uses the node's namespaces (hostNetwork)",
                "runs container agent privileged",
            ],
        ),
    ];
    for (kind, namespace, name, parts) in &expected {
        let reason = reason(kind, *namespace, name.as_str());
        for part in *parts {
            assert!(
                reason.contains(part),
                "{kind} {name}: {part:?} in {reason:?}"
            );
        }
    }
    // Nothing else: the Namespace, the ServiceAccount and the ConfigMap deserve no attention.
    assert_eq!(
        flagged.len(),
        expected.len(),
        "only the expected objects: {flagged:#?}"
    );

    // `kubectl bundle status` shows each of them with its reason.
    let kc = kubeconfig();
    let status = kubectl_bundle(&["status", &name, "--kubeconfig", kc.as_str()]);
    assert!(status.status.success(), "{}", text(&status));
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(out.contains("Needs attention:"), "{out}");
    let account = permissions.service_account.as_ref().unwrap();
    assert!(
        out.contains(&format!(
            "Applied as ServiceAccount {account} (system:serviceaccount:{}:{})",
            account.namespace, account.name
        )),
        "status names the identity that will apply: {out}"
    );
    for h in &permissions.highlights {
        let kind = if h.group.is_empty() {
            h.kind.clone()
        } else {
            format!("{}.{}", h.kind, h.group)
        };
        let object = match &h.namespace {
            Some(namespace) => format!("{kind} {namespace}/{}", h.name),
            None => format!("{kind} {}", h.name),
        };
        assert!(
            out.contains(&format!("  ! {object}: {}\n", h.reason)),
            "status shows {object}: {out}"
        );
    }
    assert!(
        out.contains(&format!(
            "! ClusterRoleBinding.rbac.authorization.k8s.io {ns}-manager-admin: binds cluster-admin\n"
        )),
        "{out}"
    );

    // Under review, nothing of it is on the cluster.
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    assert!(
        bindings
            .get_opt(&format!("{ns}-manager-admin"))
            .await
            .unwrap()
            .is_none()
    );
    delete_bundle(&client, &name).await;
    wait_bundle_gone(&client, &name).await;
}

/// Every read of the bundle's objects is made as the ServiceAccount too: one that may write
/// ConfigMaps but not read them is refused before anything is written.
#[tokio::test]
async fn a_service_account_that_may_write_but_not_read_applies_nothing() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "noread").await;
    let verbs = ["create", "update", "patch", "delete"];
    let writer = config_map_account(&client, &ns, "writer", &verbs).await;
    let class = class_applying_as(&client, "noread", &writer, ApprovalPolicy::Automatic).await;
    let image = push_two_config_maps(&format!("{ns}/app:v1"), "first", "second").await;
    let name = unique_name("noread");
    create_bundle(&client, &name, spec_of_class(&image, Some(&ns), &class)).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::FORBIDDEN,
        &format!("ServiceAccount {ns}/writer"),
    )
    .await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    assert!(
        message.contains(&format!("system:serviceaccount:{ns}:writer"))
            && message.contains("cannot get resource \"configmaps\""),
        "the API server's refusal of the read, naming the identity: {message}"
    );
    assert_eq!(applied_as(&bundle), Some(writer));
    assert!(config_map_data(&client, &ns, "first").await.is_none());
    assert!(config_map_data(&client, &ns, "second").await.is_none());
    assert!(bundle.status.as_ref().unwrap().inventory.is_empty());

    // Once it may read, the same bundle installs: the read was all that was missing.
    let verbs = ["get", "create", "update", "patch", "delete"];
    config_map_account(&client, &ns, "writer", &verbs).await;
    wait_bundle(&client, &name, "Ready once it may read", is_ready).await;
    assert_config_map(&client, &ns, "second", Some("v1")).await;
}
