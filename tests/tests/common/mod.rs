//! Helpers shared by the end-to-end test binaries.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::Path;
use std::time::Duration;

use gantry_api::conditions::types;
use gantry_api::{
    ApprovalPolicy, Bundle, BundleSpec, DEFAULT_CLASS_ANNOTATION, PLAIN_PROVISIONER,
    ProvisionerClass, ProvisionerClassSpec,
};
use gantry_image::{EffectiveLimits, Platform, RegistryClient, RegistryOptions};
use gantry_tests::{
    Provisioner, ProvisionerOptions, StorageOptions, StorageServer, control_plane, registry,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::sync::OnceLock;

pub mod kubectl;

pub const NAMESPACE: &str = "gantry-system";
/// The default class created by [`gantry`].
pub const DEFAULT_CLASS: &str = "plain";
pub const WAIT: Duration = Duration::from_secs(60);

pub fn class_spec(approval: ApprovalPolicy) -> ProvisionerClassSpec {
    ProvisionerClassSpec {
        provisioner: PLAIN_PROVISIONER.into(),
        approval,
        insecure_registries: vec![registry().host().to_string()],
        ..Default::default()
    }
}

pub async fn apply_class(client: &Client, name: &str, spec: ProvisionerClassSpec, default: bool) {
    let mut class = ProvisionerClass::new(name, spec);
    if default {
        class
            .annotations_mut()
            .insert(DEFAULT_CLASS_ANNOTATION.into(), "true".into());
    }
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    classes
        .patch(
            name,
            &PatchParams::apply("gantry-tests").force(),
            &Patch::Apply(&class),
        )
        .await
        .expect("applying a ProvisionerClass");
}

pub async fn ensure_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    namespaces
        .patch(
            name,
            &PatchParams::apply("gantry-tests").force(),
            &Patch::Apply(&ns),
        )
        .await
        .expect("creating a namespace");
}

/// Pushes `files` (under `manifests/`) as `repository:tag` to the shared registry; returns the
/// pinned reference.
pub async fn push(repository_tag: &str, files: &[(&str, String)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    write_bundle(dir.path(), files);
    let client = RegistryClient::new(RegistryOptions {
        insecure_registries: vec![registry().host().to_string()],
        ..Default::default()
    })
    .unwrap();
    client
        .push_dir(
            dir.path(),
            &format!("{}/{repository_tag}", registry().host()),
            &[Platform::current()],
            &EffectiveLimits::default(),
        )
        .await
        .expect("pushing a bundle image")
        .pinned
}

pub fn write_bundle(dir: &Path, files: &[(&str, String)]) {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, content) in files {
        std::fs::write(manifests.join(name), content).unwrap();
    }
}

pub fn config_map(name: &str, namespace: Option<&str>, data: &str) -> String {
    let namespace = namespace
        .map(|ns| format!("  namespace: {ns}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{namespace}data:\n  value: \"{data}\"\n"
    )
}

pub fn namespace_yaml(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n")
}

pub async fn create_bundle(client: &Client, name: &str, spec: BundleSpec) -> Bundle {
    let bundles: Api<Bundle> = Api::all(client.clone());
    bundles
        .create(&PostParams::default(), &Bundle::new(name, spec))
        .await
        .expect("creating a Bundle")
}

pub fn spec(image: &str, install_namespace: Option<&str>) -> BundleSpec {
    BundleSpec {
        image: image.into(),
        install_namespace: install_namespace.map(Into::into),
        ..Default::default()
    }
}

pub fn condition<'a>(bundle: &'a Bundle, type_: &str) -> Option<&'a gantry_api::Condition> {
    bundle
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Waits until the bundle satisfies `check`; the failure message shows its last status.
pub async fn wait_bundle(
    client: &Client,
    name: &str,
    what: &str,
    mut check: impl FnMut(&Bundle) -> bool,
) -> Bundle {
    let bundles: Api<Bundle> = Api::all(client.clone());
    let mut last = None;
    let found = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(bundle) = bundles.get(name).await {
                if check(&bundle) {
                    return bundle;
                }
                last = Some(bundle);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    match found {
        Ok(bundle) => bundle,
        Err(_) => panic!(
            "bundle {name}: timed out waiting for {what}; last phase and conditions: {:?} {}",
            last.as_ref()
                .and_then(|b| b.status.as_ref())
                .and_then(|s| s.phase),
            serde_json::to_string_pretty(&last.and_then(|b| b.status).map(|s| s.conditions))
                .unwrap_or_default()
        ),
    }
}

/// Waits until condition `type_` is False with `reason`, and checks that its message mentions
/// `mention` (the thing at fault).
pub async fn wait_failure(
    client: &Client,
    name: &str,
    type_: &'static str,
    reason: &'static str,
    mention: &str,
) -> Bundle {
    let bundle = wait_bundle(client, name, reason, reason_is(type_, reason)).await;
    let message = &condition(&bundle, type_).expect("the condition").message;
    assert!(
        message.contains(mention),
        "the {reason} message names {mention:?}: {message}"
    );
    bundle
}

pub fn is_ready(bundle: &Bundle) -> bool {
    condition(bundle, types::READY)
        .is_some_and(|c| c.status == "True" && c.observed_generation == bundle.metadata.generation)
}

pub fn reason_is(type_: &'static str, reason: &'static str) -> impl Fn(&Bundle) -> bool {
    move |bundle| {
        condition(bundle, type_).is_some_and(|c| c.status == "False" && c.reason == reason)
    }
}

pub async fn config_map_data(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name)
        .await
        .unwrap()
        .and_then(|cm| cm.data?.get("value").cloned())
}

/// One storage server and one provisioner per test binary.
pub struct Gantry {
    pub storage: StorageServer,
    pub provisioner: Provisioner,
}

/// The provisioner's count of status writes, from its metrics.
pub async fn status_writes() -> u64 {
    let text = reqwest::get(format!("{}/metrics", gantry().provisioner.metrics_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("gantry_provisioner_status_writes_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the status_writes metric")
}

/// One storage server and one provisioner for every test of this binary, with the default
/// class `plain` (Automatic, plain HTTP to the test registry).
pub fn gantry() -> &'static Gantry {
    static GANTRY: OnceLock<Gantry> = OnceLock::new();
    GANTRY.get_or_init(|| {
        start_gantry(&[
            "--resolve-interval=1s",
            "--resync-interval=30s",
            "--backoff-base=200ms",
            "--backoff-cap=5s",
        ])
    })
}

/// Starts a storage server and a provisioner run with `args`, after the namespace and the
/// default class `plain` (Automatic, plain HTTP to the test registry).
pub fn start_gantry(args: &[&str]) -> Gantry {
    let plane = control_plane();
    std::thread::spawn(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let client = control_plane().client().await;
                ensure_namespace(&client, NAMESPACE).await;
                let mut class = class_spec(ApprovalPolicy::Automatic);
                class.require_digest = false;
                apply_class(&client, DEFAULT_CLASS, class, true).await;
            })
    })
    .join()
    .unwrap();
    let storage = StorageServer::start(StorageOptions::default());
    let provisioner = Provisioner::start(ProvisionerOptions {
        kubeconfig: plane.kubeconfig().to_path_buf(),
        storage_url: storage.url().to_string(),
        storage_token: None,
        namespace: NAMESPACE.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
    });
    Gantry {
        storage,
        provisioner,
    }
}

/// A provisioner of its own (for binaries where it must be the only one).
pub fn start_provisioner(storage: &StorageServer, args: &[&str]) -> Provisioner {
    Provisioner::start(ProvisionerOptions {
        kubeconfig: control_plane().kubeconfig().to_path_buf(),
        storage_url: storage.url().to_string(),
        storage_token: None,
        namespace: NAMESPACE.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
    })
}

/// The namespace and default class a provisioner of its own needs.
pub async fn setup() -> kube::Client {
    let client = control_plane().client().await;
    ensure_namespace(&client, NAMESPACE).await;
    apply_class(
        &client,
        "plain",
        class_spec(ApprovalPolicy::Automatic),
        true,
    )
    .await;
    client
}

/// Waits until ConfigMap `namespace/name` holds `value` again.
pub async fn wait_config_map(
    client: &Client,
    namespace: &str,
    name: &str,
    value: &str,
    what: &str,
) {
    gantry_tests::wait_until(what, Duration::from_secs(20), || async {
        (config_map_data(client, namespace, name).await.as_deref() == Some(value)).then_some(())
    })
    .await;
}

/// A bundle under review: its name, its namespace, its image repository and tag, the pinned
/// reference that was pushed, and the bundle as it awaits approval.
pub struct UnderReview {
    pub name: String,
    pub namespace: String,
    pub repository: String,
    pub pinned: String,
    pub bundle: Bundle,
}

/// Creates a `Manual` class, a namespace, an image of `files(namespace)` and a bundle of it,
/// and waits until the bundle awaits approval.
pub async fn under_review(
    client: &Client,
    prefix: &str,
    files: impl FnOnce(&str) -> Vec<(&'static str, String)>,
) -> UnderReview {
    let class = gantry_tests::unique_name(&format!("{prefix}-class"));
    apply_class(client, &class, class_spec(ApprovalPolicy::Manual), false).await;
    let namespace = gantry_tests::unique_name(prefix);
    ensure_namespace(client, &namespace).await;
    let repository = format!("{namespace}/app:v1");
    let pinned = push(&repository, &files(&namespace)).await;
    let name = gantry_tests::unique_name(prefix);
    let mut bundle_spec = spec(
        &format!("{}/{repository}", registry().host()),
        Some(&namespace),
    );
    bundle_spec.provisioner_class_name = Some(class);
    create_bundle(client, &name, bundle_spec).await;
    let bundle = wait_bundle(client, &name, "AwaitingApproval", |b| {
        b.status.as_ref().and_then(|s| s.phase) == Some(gantry_api::BundlePhase::AwaitingApproval)
    })
    .await;
    UnderReview {
        name,
        namespace,
        repository,
        pinned,
        bundle,
    }
}

/// The kinds of a bundle's inventory, in order.
pub fn inventory_kinds(bundle: &Bundle) -> Vec<String> {
    bundle
        .status
        .iter()
        .flat_map(|s| s.inventory.iter().map(|e| e.kind.clone()))
        .collect()
}

/// The Widgets (`widgets.<group>`, version v1) of namespace `ns`.
pub fn widgets(client: &Client, ns: &str, group: &str) -> Api<kube::api::DynamicObject> {
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Waits until Bundle `name` is gone; the failure shows what its conditions say it waits for.
pub async fn wait_bundle_gone(client: &Client, name: &str) {
    let bundles: Api<Bundle> = Api::all(client.clone());
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let Some(bundle) = bundles.get_opt(name).await.unwrap() else {
            return;
        };
        assert!(
            std::time::Instant::now() < deadline,
            "bundle {name} is still there after {WAIT:?}: {}",
            serde_json::to_string(&bundle.status.map(|s| s.conditions)).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
