//! The provisioner end to end: real kube-apiserver + etcd, real registry, real storage server,
//! the real `gantry-provisioner` binary.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    ApprovalPolicy, BUNDLE_LABEL, Bundle, BundlePhase, BundleSpec, DEFAULT_CLASS_ANNOTATION,
    PLAIN_PROVISIONER, ProvisionerClass, ProvisionerClassSpec, UNINSTALL_FINALIZER,
};
use gantry_provisioner::image::{EffectiveLimits, Platform, RegistryClient, RegistryOptions};
use gantry_tests::{
    Provisioner, ProvisionerOptions, StorageOptions, StorageServer, control_plane, registry,
    unique_name, wait_until,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const NAMESPACE: &str = "gantry-system";
const DEFAULT_CLASS: &str = "plain";
const WAIT: Duration = Duration::from_secs(60);

struct Gantry {
    storage: StorageServer,
    _provisioner: Provisioner,
}

/// One storage server and one provisioner for every test of this binary, with the default
/// class `plain` (Automatic, plain HTTP to the test registry).
fn gantry() -> &'static Gantry {
    static GANTRY: OnceLock<Gantry> = OnceLock::new();
    GANTRY.get_or_init(|| {
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
            args: vec![
                "--resolve-interval=1s".into(),
                "--resync-interval=30s".into(),
                "--backoff-base=200ms".into(),
                "--backoff-cap=5s".into(),
            ],
        });
        Gantry {
            storage,
            _provisioner: provisioner,
        }
    })
}

fn class_spec(approval: ApprovalPolicy) -> ProvisionerClassSpec {
    ProvisionerClassSpec {
        provisioner: PLAIN_PROVISIONER.into(),
        approval,
        insecure_registries: vec![registry().host().to_string()],
        ..Default::default()
    }
}

async fn apply_class(client: &Client, name: &str, spec: ProvisionerClassSpec, default: bool) {
    let mut class = ProvisionerClass::new(name, spec);
    if default {
        class
            .annotations_mut()
            .insert(DEFAULT_CLASS_ANNOTATION.into(), "true".into());
    }
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    classes
        .patch(name, &PatchParams::apply("gantry-tests").force(), &Patch::Apply(&class))
        .await
        .expect("applying a ProvisionerClass");
}

async fn ensure_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    namespaces
        .patch(name, &PatchParams::apply("gantry-tests").force(), &Patch::Apply(&ns))
        .await
        .expect("creating a namespace");
}

/// Pushes `files` (under `manifests/`) as `repository:tag` to the shared registry; returns the
/// pinned reference.
async fn push(repository_tag: &str, files: &[(&str, String)]) -> String {
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

fn write_bundle(dir: &Path, files: &[(&str, String)]) {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, content) in files {
        std::fs::write(manifests.join(name), content).unwrap();
    }
}

fn config_map(name: &str, namespace: Option<&str>, data: &str) -> String {
    let namespace = namespace
        .map(|ns| format!("  namespace: {ns}\n"))
        .unwrap_or_default();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{namespace}data:\n  value: \"{data}\"\n")
}

fn namespace_yaml(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n")
}

async fn create_bundle(client: &Client, name: &str, spec: BundleSpec) -> Bundle {
    let bundles: Api<Bundle> = Api::all(client.clone());
    bundles
        .create(&PostParams::default(), &Bundle::new(name, spec))
        .await
        .expect("creating a Bundle")
}

fn spec(image: &str, install_namespace: Option<&str>) -> BundleSpec {
    BundleSpec {
        image: image.into(),
        install_namespace: install_namespace.map(Into::into),
        ..Default::default()
    }
}

fn condition<'a>(bundle: &'a Bundle, type_: &str) -> Option<&'a gantry_api::Condition> {
    bundle
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Waits until the bundle satisfies `check`; the failure message shows its last status.
async fn wait_bundle(client: &Client, name: &str, what: &str, check: impl Fn(&Bundle) -> bool) -> Bundle {
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
            last.as_ref().and_then(|b| b.status.as_ref()).and_then(|s| s.phase),
            serde_json::to_string_pretty(&last.and_then(|b| b.status).map(|s| s.conditions)).unwrap_or_default()
        ),
    }
}

fn is_ready(bundle: &Bundle) -> bool {
    condition(bundle, types::READY).is_some_and(|c| {
        c.status == "True" && c.observed_generation == bundle.metadata.generation
    })
}

fn reason_is(type_: &'static str, reason: &'static str) -> impl Fn(&Bundle) -> bool {
    move |bundle| condition(bundle, type_).is_some_and(|c| c.status == "False" && c.reason == reason)
}

async fn config_map_data(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name)
        .await
        .unwrap()
        .and_then(|cm| cm.data?.get("value").cloned())
}

#[tokio::test]
async fn a_bundle_installs_and_reports_its_digest() {
    let gantry = gantry();
    let client = control_plane().client().await;
    let ns = unique_name("ready");
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("00-namespace.yaml", namespace_yaml(&ns)),
            ("10-config.yaml", format!("{}---\n{}", config_map("one", None, "1"), config_map("two", None, "2"))),
        ],
    )
    .await;
    let name = unique_name("ready");
    create_bundle(&client, &name, spec(&format!("{}/{ns}/app:v1", registry().host()), Some(&ns))).await;
    let bundle = wait_bundle(&client, &name, "Ready", is_ready).await;
    let status = bundle.status.clone().unwrap();

    assert_eq!(status.phase, Some(BundlePhase::Installed));
    assert_eq!(status.resolved_image.as_deref(), Some(image.as_str()), "the tag resolved to the pushed digest");
    assert_eq!(status.platform, Some(Platform::current().to_string()));
    assert!(status.manifest_digest.as_deref().is_some_and(|d| d.starts_with("sha256:")));
    assert!(bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER));
    let kinds: Vec<(&str, &str)> = status.inventory.iter().map(|e| (e.kind.as_str(), e.name.as_str())).collect();
    assert_eq!(kinds, [("Namespace", ns.as_str()), ("ConfigMap", "one"), ("ConfigMap", "two")]);

    // The objects are there, labelled, owned by field manager `gantry`.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let one = api.get("one").await.expect("ConfigMap one exists");
    assert_eq!(one.labels().get(BUNDLE_LABEL), Some(&name));
    assert!(one.managed_fields().iter().any(|m| m.manager.as_deref() == Some("gantry")));

    // The stored content is where status says, with the digest status says.
    let url = status.content_url.clone().expect("contentURL");
    assert!(url.starts_with(gantry.storage.url()), "{url}");
    let body = reqwest::get(&url).await.unwrap().bytes().await.unwrap();
    let digest = status.content_digest.clone().unwrap();
    use sha2::Digest;
    assert_eq!(digest, format!("sha256:{}", hex::encode(sha2::Sha256::digest(&body))));

    // Requested permissions count what was installed.
    let permissions = status.requested_permissions.expect("requestedPermissions");
    assert_eq!(permissions.cluster_scoped[0].kind, "Namespace");
    assert_eq!(permissions.namespaced[0].namespace, ns);
    assert_eq!(permissions.namespaced[0].kinds[0].count, 2);
}
