//! What the end-to-end tests share, in both tiers: builders of images, classes and bundles,
//! create-and-wait and approval helpers, the shared Gantry (storage server and provisioner) on
//! the shared control plane, and clusters of their own for the tests that need one
//! ([`Isolated`]). `kubectl bundle` as kubectl runs it is in [`kubectl`].

pub mod kubectl;
pub mod operator_bundles;

use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    ApprovalPolicy, Bundle, BundleSpec, DEFAULT_CLASS_ANNOTATION, PLAIN_PROVISIONER,
    ProvisionerClass, ProvisionerClassSpec, RECONCILE_REQUESTED_ANNOTATION,
};
use gantry_image::{EffectiveLimits, Platform, PushedImage, RegistryClient, RegistryOptions};
use gantry_rules::conditions::{ConditionStatus, find};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::{
    ControlPlane, Provisioner, ProvisionerOptions, StorageOptions, StorageServer, control_plane,
    registry,
};

/// The provisioner's namespace (pull secrets, the Lease).
pub const NAMESPACE: &str = "gantry-system";
/// The default class created by [`gantry`] and [`start_gantry`].
pub const DEFAULT_CLASS: &str = "plain";
/// How long [`wait_bundle`] and the other waits here give a bundle.
pub const WAIT: Duration = Duration::from_secs(60);

// --- classes and namespaces -----------------------------------------------------------------

/// A class of the plain provisioner with `approval`, allowed plain HTTP to the shared registry.
pub fn class_spec(approval: ApprovalPolicy) -> ProvisionerClassSpec {
    class_spec_for(registry().host(), approval)
}

/// A class of the plain provisioner with `approval`, allowed plain HTTP to `registry`
/// (`host:port`).
pub fn class_spec_for(registry: &str, approval: ApprovalPolicy) -> ProvisionerClassSpec {
    ProvisionerClassSpec {
        provisioner: PLAIN_PROVISIONER.into(),
        approval,
        insecure_registries: vec![registry.to_string()],
        ..Default::default()
    }
}

/// Applies ProvisionerClass `name` (server-side, field manager `gantry-tests`), the default
/// class when `default` says so.
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

/// Another Gantry installation on the shared control plane: its own storage server, a
/// provisioner with `--provisioner-id=ID` (and more `args`) in a namespace of its own, and a
/// class of automatic approval naming it.
pub struct Installation {
    pub storage: StorageServer,
    pub provisioner: Provisioner,
    /// The class whose bundles this installation serves.
    pub class: String,
    /// The provisioner's namespace, where its pull secrets are read.
    pub namespace: String,
}

/// Starts an [`Installation`] whose provisioner identifies as `id`.
pub async fn start_installation(client: &Client, id: &str, args: &[&str]) -> Installation {
    let namespace = crate::unique_name("installation");
    ensure_namespace(client, &namespace).await;
    let storage = StorageServer::start(StorageOptions::default());
    // A second installation serves its own ID only: the registry+v1 provisioner's ID stays
    // the shared Gantry's (docs/operations.md, two installations in one cluster).
    let mut flags = vec![
        format!("--provisioner-id={id}"),
        "--registry-provisioner-id=".to_string(),
    ];
    flags.extend(args.iter().map(|a| a.to_string()));
    let provisioner = Provisioner::start(ProvisionerOptions {
        kubeconfig: control_plane().kubeconfig().to_path_buf(),
        storage_url: storage.url().to_string(),
        storage_token: None,
        namespace: namespace.clone(),
        args: flags,
    });
    let class = crate::unique_name("installation-class");
    let spec = ProvisionerClassSpec {
        provisioner: id.into(),
        ..class_spec(ApprovalPolicy::Automatic)
    };
    apply_class(client, &class, spec, false).await;
    Installation {
        storage,
        provisioner,
        class,
        namespace,
    }
}

/// Creates a namespace named from `prefix` ([`crate::unique_name`]); its name.
pub async fn unique_namespace(client: &Client, prefix: &str) -> String {
    let name = crate::unique_name(prefix);
    ensure_namespace(client, &name).await;
    name
}

/// Creates namespace `name` unless it exists.
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

// --- images ---------------------------------------------------------------------------------

/// Pushes `files` (under `manifests/`) as `repository:tag` to the shared registry; returns the
/// pinned reference.
pub async fn push(repository_tag: &str, files: &[(&str, String)]) -> String {
    push_to(registry().host(), repository_tag, files).await
}

/// Pushes an image of one file, `a.yaml`, holding [`config_map`]`(name, namespace, data)` as
/// `repository:tag` to the shared registry; returns the pinned reference.
pub async fn push_config_map(
    repository_tag: &str,
    name: &str,
    namespace: Option<&str>,
    data: &str,
) -> String {
    push(
        repository_tag,
        &[("a.yaml", config_map(name, namespace, data))],
    )
    .await
}

/// Pushes `files` (under `manifests/`) as `repository:tag` to the plain-HTTP registry
/// `registry` (`host:port`) for this machine's platform; returns the pinned reference.
pub async fn push_to(registry: &str, repository_tag: &str, files: &[(&str, String)]) -> String {
    let client = RegistryClient::new(RegistryOptions {
        insecure_registries: vec![registry.to_string()],
        ..Default::default()
    })
    .unwrap();
    push_with(
        &client,
        &format!("{registry}/{repository_tag}"),
        &Platform::current(),
        files,
    )
    .await
    .pinned
}

/// Pushes `files` (under `manifests/`) with `client` as a `platform` image to `reference`
/// (`host:port/repository:tag`).
pub async fn push_with(
    client: &RegistryClient,
    reference: &str,
    platform: &Platform,
    files: &[(&str, String)],
) -> PushedImage {
    let dir = tempfile::tempdir().unwrap();
    write_bundle(dir.path(), files);
    client
        .push_dir(
            dir.path(),
            reference,
            std::slice::from_ref(platform),
            &EffectiveLimits::default(),
        )
        .await
        .expect("pushing a bundle image")
}

/// Writes `files` (name, content) under `dir/manifests/`.
pub fn write_bundle(dir: &Path, files: &[(&str, String)]) {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, content) in files {
        std::fs::write(manifests.join(name), content).unwrap();
    }
}

/// A ConfigMap `name` (in `namespace`, else none) holding `value: <data>`.
pub fn config_map(name: &str, namespace: Option<&str>, data: &str) -> String {
    let namespace = namespace
        .map(|ns| format!("  namespace: {ns}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{namespace}data:\n  value: \"{data}\"\n"
    )
}

/// A Namespace `name`.
pub fn namespace_yaml(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n")
}

/// The tag reference of `repository_tag` in the shared registry.
pub fn in_registry(repository_tag: &str) -> String {
    format!("{}/{repository_tag}", registry().host())
}

/// The digest of a pinned reference (`repository@sha256:...`).
pub fn digest_of(pinned: &str) -> &str {
    pinned.rsplit_once('@').expect("a pinned reference").1
}

// --- bundles --------------------------------------------------------------------------------

/// A bundle of `image` (of the default class) installing into `install_namespace`.
pub fn spec(image: &str, install_namespace: Option<&str>) -> BundleSpec {
    BundleSpec {
        image: image.into(),
        install_namespace: install_namespace.map(Into::into),
        ..Default::default()
    }
}

/// A bundle of `image` of class `class` installing into `install_namespace`.
pub fn spec_of_class(image: &str, install_namespace: Option<&str>, class: &str) -> BundleSpec {
    BundleSpec {
        provisioner_class_name: Some(class.into()),
        ..spec(image, install_namespace)
    }
}

/// Creates Bundle `name`.
pub async fn create_bundle(client: &Client, name: &str, spec: BundleSpec) -> Bundle {
    let bundles: Api<Bundle> = Api::all(client.clone());
    bundles
        .create(&PostParams::default(), &Bundle::new(name, spec))
        .await
        .expect("creating a Bundle")
}

/// Bundle `name` as it is now.
pub async fn get_bundle(client: &Client, name: &str) -> Bundle {
    Api::<Bundle>::all(client.clone()).get(name).await.unwrap()
}

/// Creates Bundle `name` and waits until it is Ready.
pub async fn create_bundle_ready(client: &Client, name: &str, spec: BundleSpec) -> Bundle {
    create_bundle(client, name, spec).await;
    wait_bundle(client, name, "Ready", is_ready).await
}

/// Pushes `files` to `repository` (the tag the bundle follows) and waits until Bundle `name`
/// is Ready with them.
pub async fn push_and_wait_ready(
    client: &Client,
    name: &str,
    repository: &str,
    files: &[(&str, String)],
) {
    let pinned = push(repository, files).await;
    wait_bundle(client, name, "Ready with the new content", |b| {
        is_ready(b)
            && b.status.as_ref().and_then(|s| s.installed_image.as_deref()) == Some(pinned.as_str())
    })
    .await;
}

/// Merges `spec` (a part of a BundleSpec, as JSON) into Bundle `name`'s spec.
pub async fn patch_spec(client: &Client, name: &str, spec: serde_json::Value) {
    Api::<Bundle>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": spec })),
        )
        .await
        .expect("patching a Bundle's spec");
}

/// Points Bundle `name` at `image`.
pub async fn set_image(client: &Client, name: &str, image: &str) {
    patch_spec(client, name, json!({ "image": image })).await;
}

/// Condition `type_` of the bundle's status.
pub fn condition<'a>(bundle: &'a Bundle, type_: &str) -> Option<&'a gantry_api::Condition> {
    find(&bundle.status.as_ref()?.conditions, type_)
}

/// Whether `Ready` is True at the bundle's generation.
pub fn is_ready(bundle: &Bundle) -> bool {
    condition(bundle, types::READY).is_some_and(|c| {
        c.status == ConditionStatus::True && c.observed_generation == bundle.metadata.generation
    })
}

/// Whether the bundle is in `phase`.
pub fn phase_is(phase: gantry_api::BundlePhase) -> impl Fn(&Bundle) -> bool {
    move |bundle| bundle.status.as_ref().and_then(|s| s.phase) == Some(phase)
}

/// Whether condition `type_` is False with `reason`.
pub fn reason_is(type_: &'static str, reason: &'static str) -> impl Fn(&Bundle) -> bool {
    move |bundle| {
        condition(bundle, type_)
            .is_some_and(|c| c.status == ConditionStatus::False && c.reason == reason)
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
    assert_retry_class(&bundle, type_, reason);
    bundle
}

/// Failures no retry can fix (docs/api.md, `Stalled`): the bundle waits for a change instead.
/// `VerificationFailed` is either (a bad signature stalls, an unreachable key is retried), so
/// its tests say which they expect.
const STALLED_REASONS: &[&str] = &[
    reasons::INVALID_BUNDLE,
    reasons::INVALID_PARAMETERS,
    reasons::DIGEST_REQUIRED,
    reasons::IMAGE_NOT_ALLOWED,
    reasons::NAMESPACE_REQUIRED,
    reasons::SERVICE_ACCOUNT_REQUIRED,
    reasons::SERVICE_ACCOUNT_NOT_ALLOWED,
    reasons::FORBIDDEN,
    reasons::DENIED,
    reasons::UNSAFE_CRD_UPGRADE,
    reasons::INVALID_HEALTH_EXPRESSION,
    reasons::INVALID_IGNORE_RULE,
    reasons::INVALID_OBJECT_POLICY,
    reasons::IMMUTABLE_FIELD_CHANGED,
    reasons::INVALID_PATCH,
    reasons::INVALID_IMAGE_REFERENCE,
    reasons::INVALID_OBJECT,
    reasons::NO_MATCHING_VERSION,
];

/// Checks that the failure `reason` on `type_` is reported as what it is: stalled failures
/// carry `Stalled=True` with the same reason and say what must change; every other failure is
/// retried with backoff, says when, and has no `Stalled` condition.
pub fn assert_retry_class(bundle: &Bundle, type_: &str, reason: &str) {
    if reason == reasons::VERIFICATION_FAILED {
        return;
    }
    let failed = condition(bundle, type_).expect("the failed condition");
    let stalled = condition(bundle, types::STALLED);
    if STALLED_REASONS.contains(&reason) {
        assert_stalled(bundle, reason);
        assert!(
            !failed.message.contains("next retry"),
            "a stalled failure is not retried: {}",
            failed.message
        );
    } else {
        assert!(
            stalled.is_none(),
            "{reason} is retried, not stalled: {stalled:?}"
        );
        assert!(
            failed.message.contains("(attempt ") && failed.message.contains("next retry in"),
            "a {reason} failure says when it is retried: {}",
            failed.message
        );
    }
}

/// Checks that the bundle is `Stalled` with `reason` and says what must change.
pub fn assert_stalled(bundle: &Bundle, reason: &str) {
    let stalled = condition(bundle, types::STALLED)
        .unwrap_or_else(|| panic!("a {reason} failure stalls the bundle: {:?}", bundle.status));
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", reason),
        "{stalled:?}"
    );
    assert!(
        stalled.message.contains("no retry can fix this until"),
        "Stalled says what must change: {}",
        stalled.message
    );
}

/// Deletes Bundle `name`.
pub async fn delete_bundle(client: &Client, name: &str) {
    Api::<Bundle>::all(client.clone())
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .expect("deleting a Bundle");
}

/// Waits until Bundle `name` is gone; the failure shows what its conditions say it waits for.
pub async fn wait_bundle_gone(client: &Client, name: &str) {
    let bundles: Api<Bundle> = Api::all(client.clone());
    let deadline = Instant::now() + WAIT;
    loop {
        let Some(bundle) = bundles.get_opt(name).await.unwrap() else {
            return;
        };
        assert!(
            Instant::now() < deadline,
            "bundle {name} is still there after {WAIT:?}: {}",
            serde_json::to_string(&bundle.status.map(|s| s.conditions)).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Requests a reconcile through the annotation and waits until a pass handled it.
pub async fn reconcile_handled(client: &Client, name: &str) -> Bundle {
    let value = format!("{:?}", Instant::now());
    Api::<Bundle>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "metadata": { "annotations": { RECONCILE_REQUESTED_ANNOTATION: value } } }),
            ),
        )
        .await
        .unwrap();
    wait_bundle(client, name, "the request handled", |b| {
        b.status
            .as_ref()
            .and_then(|s| s.last_handled_reconcile_at.as_deref())
            == Some(value.as_str())
    })
    .await
}

/// The `value` of ConfigMap `namespace/name`, if it exists.
pub async fn config_map_data(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name)
        .await
        .unwrap()
        .and_then(|cm| cm.data?.get("value").cloned())
}

/// Checks that ConfigMap `namespace/name` holds `value` (`None`: that it does not exist).
pub async fn assert_config_map(client: &Client, namespace: &str, name: &str, value: Option<&str>) {
    assert_eq!(
        config_map_data(client, namespace, name).await.as_deref(),
        value,
        "ConfigMap {namespace}/{name}"
    );
}

/// Waits until ConfigMap `namespace/name` holds `value` again.
pub async fn wait_config_map(
    client: &Client,
    namespace: &str,
    name: &str,
    value: &str,
    what: &str,
) {
    crate::wait_until(what, Duration::from_secs(20), || async {
        (config_map_data(client, namespace, name).await.as_deref() == Some(value)).then_some(())
    })
    .await;
}

/// The first container of a Deployment's Pod template.
pub fn first_container(
    deployment: &k8s_openapi::api::apps::v1::Deployment,
) -> &k8s_openapi::api::core::v1::Container {
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref());
    &pod.expect("a Pod template").containers[0]
}

/// The Widgets (`widgets.<group>`, version v1) of namespace `ns`.
pub fn widgets(client: &Client, ns: &str, group: &str) -> Api<kube::api::DynamicObject> {
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
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
    let class = crate::unique_name(&format!("{prefix}-class"));
    apply_class(client, &class, class_spec(ApprovalPolicy::Manual), false).await;
    let namespace = crate::unique_name(prefix);
    ensure_namespace(client, &namespace).await;
    let repository = format!("{namespace}/app:v1");
    let pinned = push(&repository, &files(&namespace)).await;
    let name = crate::unique_name(prefix);
    let bundle_spec = spec_of_class(
        &format!("{}/{repository}", registry().host()),
        Some(&namespace),
        &class,
    );
    create_bundle(client, &name, bundle_spec).await;
    let bundle = wait_bundle(
        client,
        &name,
        "AwaitingApproval",
        phase_is(gantry_api::BundlePhase::AwaitingApproval),
    )
    .await;
    UnderReview {
        name,
        namespace,
        repository,
        pinned,
        bundle,
    }
}

/// [`under_review`] of an image of one ConfigMap, `cm` holding `v1`.
pub async fn config_map_under_review(client: &Client, prefix: &str) -> UnderReview {
    under_review(client, prefix, |_| {
        vec![("a.yaml", config_map("cm", None, "v1"))]
    })
    .await
}

// --- Gantry ---------------------------------------------------------------------------------

/// A storage server and a provisioner.
pub struct Gantry {
    pub storage: StorageServer,
    pub provisioner: Provisioner,
}

impl Gantry {
    /// The provisioner's count of status writes, from its metrics.
    pub async fn status_writes(&self) -> u64 {
        let text = reqwest::get(format!("{}/metrics", self.provisioner.metrics_url()))
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
}

/// Starts the shared [`gantry`] if need be; an admin client of the shared control plane.
pub async fn shared_gantry_client() -> Client {
    gantry();
    control_plane().client().await
}

/// The flags of the shared Gantry's provisioner.
pub const SHARED_GANTRY_FLAGS: [&str; 4] = [
    "--resolve-interval=1s",
    "--resync-interval=30s",
    "--backoff-base=200ms",
    "--backoff-cap=5s",
];

/// The Gantry shared by the tests of a test binary, on the shared [`control_plane`]: one
/// storage server and one provisioner (run with [`SHARED_GANTRY_FLAGS`]), with the default
/// class `plain` (Automatic, plain HTTP to the shared registry). Started on first use.
pub fn gantry() -> &'static Gantry {
    static GANTRY: OnceLock<Gantry> = OnceLock::new();
    GANTRY.get_or_init(|| start_gantry(control_plane(), &SHARED_GANTRY_FLAGS))
}

/// Starts a storage server and a provisioner run with `args` against `plane`, after the
/// namespace and the default class `plain` (Automatic, plain HTTP to the shared registry).
pub fn start_gantry(plane: &ControlPlane, args: &[&str]) -> Gantry {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(setup(plane))
            })
            .join()
            .unwrap();
    });
    let storage = StorageServer::start(StorageOptions::default());
    let provisioner = start_provisioner(plane, &storage, args);
    Gantry {
        storage,
        provisioner,
    }
}

/// A provisioner against `plane` storing in `storage`, run with `args`: for a cluster where it
/// must be the only one (see [`Isolated`]).
pub fn start_provisioner(
    plane: &ControlPlane,
    storage: &StorageServer,
    args: &[&str],
) -> Provisioner {
    Provisioner::start(ProvisionerOptions {
        kubeconfig: plane.kubeconfig().to_path_buf(),
        storage_url: storage.url().to_string(),
        storage_token: None,
        namespace: NAMESPACE.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
    })
}

/// The namespace and the default class `plain` (Automatic, plain HTTP to the shared registry)
/// a provisioner needs on `plane`; an admin client of it.
pub async fn setup(plane: &ControlPlane) -> Client {
    let client = plane.client().await;
    ensure_namespace(&client, NAMESPACE).await;
    apply_class(
        &client,
        DEFAULT_CLASS,
        class_spec(ApprovalPolicy::Automatic),
        true,
    )
    .await;
    client
}

// --- clusters of their own ------------------------------------------------------------------

/// A private control plane ([`ControlPlane::start_private`]) and, when asked, a Gantry of its
/// own on it. It derefs to its control plane: `cluster.client()`, `cluster.kubeconfig()`.
pub struct Cluster {
    // Declared first, so it is dropped first: the provisioner stops before its API server.
    gantry: Option<Gantry>,
    plane: ControlPlane,
}

impl Cluster {
    /// The cluster's control plane.
    pub fn plane(&self) -> &ControlPlane {
        &self.plane
    }

    /// The cluster's own Gantry.
    ///
    /// # Panics
    /// When the cluster was started without one ([`Isolated::new`]).
    pub fn gantry(&self) -> &Gantry {
        self.gantry
            .as_ref()
            .expect("this cluster was started without a Gantry")
    }
}

impl Deref for Cluster {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        &self.plane
    }
}

/// A cluster of their own for the tests of one module: for tests whose provisioner must be the
/// only one on its cluster, that run one with flags of their own, or that need none to run at
/// all. Declare one as a `static` of the module; each test holds what [`Isolated::get`]
/// returns, in a named binding, for as long as it runs.
///
/// The first test that asks starts the cluster; it stays up between the module's tests, and
/// stops once the cluster of another module has started and no test holds it any more. libtest
/// runs tests in the order of their names, so a module's tests run one after the other (or
/// side by side), and each cluster starts once.
pub struct Isolated {
    gantry_args: Option<&'static [&'static str]>,
    current: Mutex<Weak<Cluster>>,
}

/// The cluster started last, kept for the next test of its module.
static LINGERING: Mutex<Option<Arc<Cluster>>> = Mutex::new(None);

impl Isolated {
    /// A control plane without a Gantry: the tests start their own provisioner, or need none.
    pub const fn new() -> Self {
        Self {
            gantry_args: None,
            current: Mutex::new(Weak::new()),
        }
    }

    /// A control plane with a Gantry of its own ([`start_gantry`]) whose provisioner runs with
    /// `args`.
    pub const fn with_gantry(args: &'static [&'static str]) -> Self {
        Self {
            gantry_args: Some(args),
            current: Mutex::new(Weak::new()),
        }
    }

    /// The cluster, started if it is not running. Blocks while it starts (a few seconds).
    pub fn get(&self) -> Arc<Cluster> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cluster) = current.upgrade() {
            return cluster;
        }
        // The previous module's cluster goes first (once its last test is done), to leave the
        // machine to this one.
        let previous = LINGERING.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(previous);
        let cluster = Arc::new(self.start());
        *current = Arc::downgrade(&cluster);
        *LINGERING.lock().unwrap_or_else(|e| e.into_inner()) = Some(cluster.clone());
        cluster
    }

    fn start(&self) -> Cluster {
        crate::init_crypto();
        // A runtime of its own: the callers' runtimes end with their tests.
        let plane = std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building a runtime to start a control plane")
                .block_on(ControlPlane::start_private())
        })
        .join()
        .expect("the control-plane starter panicked")
        .unwrap_or_else(|e| panic!("starting a private control plane: {e}"));
        let gantry = self.gantry_args.map(|args| start_gantry(&plane, args));
        Cluster { gantry, plane }
    }
}

impl Default for Isolated {
    fn default() -> Self {
        Self::new()
    }
}

/// Deletes ConfigMap `namespace/name`.
pub async fn delete_config_map(client: &Client, namespace: &str, name: &str) {
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .expect("deleting a ConfigMap");
}

/// Sets ConfigMap `namespace/name`'s `value` by server-side apply, as a user (field manager
/// `someone`) editing a bundle's object.
pub async fn edit_config_map(client: &Client, namespace: &str, name: &str, value: &str) {
    let object = json!({ "apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": { "name": name }, "data": { "value": value } });
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply("someone").force(),
            &Patch::Apply(&object),
        )
        .await
        .expect("editing a ConfigMap");
}

/// Approves what Bundle `bundle` shows now, as `kubectl bundle approve` does: its resolved
/// digest, and for content a provisioner rendered, the configuration's digest and the
/// rendered content's.
pub async fn approve_shown(client: &Client, bundle: &Bundle) {
    let status = bundle.status.as_ref().expect("the bundle's status");
    let digest = digest_of(status.resolved_image.as_deref().expect("a resolved image"));
    let rendering = gantry_rules::approval::Rendering::of(status);
    let approval = json!({
        "apiVersion": "gantry.dev/v1alpha1", "kind": "Bundle",
        "metadata": { "name": bundle.name_any() },
        "status": { "approval": {
            "decision": "Approved", "digest": digest,
            "configDigest": rendering.config_digest,
            "contentDigest": rendering.content_digest,
        } }
    });
    Api::<Bundle>::all(client.clone())
        .patch_status(
            &bundle.name_any(),
            &PatchParams::apply("test-approver").force(),
            &Patch::Apply(&approval),
        )
        .await
        .expect("writing the approval");
}

/// Applies the namespaced `object` (JSON, its namespace in its metadata) server-side as
/// field manager `gantry-tests`: what a user or administrator writes.
pub async fn apply_object<K>(client: &Client, object: serde_json::Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let name = object["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .expect("a namespace");
    Api::<K>::namespaced(client.clone(), namespace)
        .patch(
            &name,
            &PatchParams::apply("gantry-tests").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {name}: {e}"))
}

/// Writes `status.approval` of Bundle `name` approving `digest`, as an approver does:
/// server-side apply on the status subresource, field manager `test-approver`.
pub async fn approve_digest(client: &Client, name: &str, digest: &str) {
    let approval = json!({
        "apiVersion": "gantry.dev/v1alpha1", "kind": "Bundle", "metadata": { "name": name },
        "status": { "approval": { "decision": "Approved", "digest": digest } }
    });
    Api::<Bundle>::all(client.clone())
        .patch_status(
            name,
            &PatchParams::apply("test-approver").force(),
            &Patch::Apply(&approval),
        )
        .await
        .expect("writing the approval");
}
