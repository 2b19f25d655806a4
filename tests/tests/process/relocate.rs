//! `kubectl bundle push --pin-images` and `kubectl bundle relocate`: workload images on a
//! registry A (a single-platform image and a two-platform index), a bundle naming them by
//! tag, pinned, relocated to a registry B, and installed from B. skopeo is the independent
//! check of what the registries hold.

use std::process::{Command, Output};

use gantry_api::ApprovalPolicy;
use gantry_image::{EffectiveLimits, Platform, RegistryClient, RegistryOptions};
use gantry_tests::e2e::kubectl::{kubectl_bundle, text};
use gantry_tests::e2e::*;
use gantry_tests::{
    ImageConfig, Registry, RegistryOptions as StartOptions, control_plane, push_rootfs, registry,
    unique_name,
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use sha2::{Digest, Sha256};

fn skopeo(args: &[&str]) -> Output {
    Command::new("skopeo")
        .args(args)
        .output()
        .expect("running skopeo")
}

/// `skopeo inspect --raw` of `reference`: the manifest or index as the registry serves it,
/// and its sha256.
fn raw(reference: &str) -> (serde_json::Value, String) {
    let out = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{reference}"),
    ]);
    assert!(
        out.status.success(),
        "skopeo inspect --raw {reference}: {}",
        text(&out)
    );
    let digest = format!("sha256:{}", hex(&Sha256::digest(&out.stdout)));
    (
        serde_json::from_slice(&out.stdout).expect("a manifest"),
        digest,
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn run_plugin(args: &[&str]) -> (String, String) {
    let out = kubectl_bundle(args);
    assert!(
        out.status.success(),
        "kubectl bundle {args:?}: {}",
        text(&out)
    );
    (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The manifests of a pulled bundle image, all files concatenated.
fn pulled_manifests(image: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("b");
    run_plugin(&[
        "pull",
        image,
        "--dir",
        target.to_str().unwrap(),
        "--plain-http",
    ]);
    let mut names: Vec<_> = std::fs::read_dir(target.join("manifests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// The images lock in the manifest annotations of `image`.
fn lock_of(image: &str) -> serde_json::Value {
    let (manifest, _) = raw(image);
    let lock = manifest["annotations"]["dev.gantry.images.lock"]
        .as_str()
        .unwrap_or_else(|| panic!("no images lock in {manifest}"));
    serde_json::from_str(lock).unwrap()
}

fn workloads(ns: &str, app: &str, tools: &str) -> Vec<(&'static str, String)> {
    vec![
        ("00-namespace.yaml", namespace_yaml(ns)),
        (
            "10-deployment.yaml",
            format!(
                "# the application\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: {app}   # by tag upstream\n"
            ),
        ),
        (
            "20-cronjob.yaml",
            format!(
                "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: nightly\n  namespace: {ns}\nspec:\n  schedule: \"0 3 * * *\"\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers:\n          - name: job\n            image: \"{tools}\"\n"
            ),
        ),
        (
            "30-pod.yaml",
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: probe\n  namespace: {ns}\nspec:\n  initContainers:\n  - name: setup\n    image: {tools}\n  containers:\n  - name: main\n    image: {app}\n"
            ),
        ),
    ]
}

#[tokio::test]
async fn pinned_images_are_relocated_with_their_digests_and_installed_from_the_target() {
    let gantry = gantry();
    let client = control_plane().client().await;
    let a = Registry::start(StartOptions::default());
    let b = Registry::start(StartOptions::default());
    let shared = registry().host();
    let ns = unique_name("relocate");

    // Registry A: a single-platform image (umoci + skopeo) and a two-platform index.
    let work = tempfile::tempdir().unwrap();
    let rootfs = work.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::write(rootfs.join("etc/app"), "app v1\n").unwrap();
    let app = push_rootfs(
        &rootfs,
        &ImageConfig::default(),
        a.host(),
        "upstream/app:v1",
        work.path(),
    )
    .unwrap();
    let index_client = RegistryClient::new(RegistryOptions {
        insecure_registries: vec![a.host().to_string()],
        ..Default::default()
    })
    .unwrap();
    let tools_dir = tempfile::tempdir().unwrap();
    write_bundle(
        tools_dir.path(),
        &[("a.yaml", config_map("tools", None, "t"))],
    );
    let tools = format!("{}/upstream/tools:v2", a.host());
    let pushed_index = index_client
        .push_dir(
            tools_dir.path(),
            &tools,
            &[
                "linux/amd64".parse::<Platform>().unwrap(),
                "linux/arm64".parse::<Platform>().unwrap(),
            ],
            &EffectiveLimits::default(),
        )
        .await
        .unwrap();
    let (app_manifest, app_digest) = raw(&app);
    assert!(app_manifest["layers"].is_array());
    let (tools_index, tools_digest) = raw(&tools);
    assert_eq!(tools_digest, pushed_index.digest);
    assert_eq!(tools_index["manifests"].as_array().unwrap().len(), 2);

    // push --pin-images: the manifests name the digests skopeo reports; the lock is printed
    // and is in the image.
    let dir = tempfile::tempdir().unwrap();
    write_bundle(dir.path(), &workloads(&ns, &app, &tools));
    let bundle_tag = format!("{shared}/{ns}/bundle:v1");
    let (pinned_bundle, stderr) = run_plugin(&[
        "push",
        dir.path().to_str().unwrap(),
        &bundle_tag,
        "--pin-images",
        "--plain-http",
        "--insecure-registry",
        a.host(),
    ]);
    let app_pinned = format!("{}/upstream/app@{app_digest}", a.host());
    let tools_pinned = format!("{}/upstream/tools@{tools_digest}", a.host());
    for expected in [
        "ORIGINAL",
        "PINNED",
        "Deployment/",
        "CronJob/",
        "setup",
        app.as_str(),
        app_pinned.as_str(),
        tools_pinned.as_str(),
    ] {
        assert!(stderr.contains(expected), "{expected} in:\n{stderr}");
    }
    let manifests = pulled_manifests(&pinned_bundle);
    assert_eq!(manifests.matches(&app_pinned).count(), 2, "{manifests}");
    assert_eq!(manifests.matches(&tools_pinned).count(), 2, "{manifests}");
    assert!(
        !manifests.contains(&app) && !manifests.contains(&tools),
        "{manifests}"
    );
    assert!(
        manifests.contains("# by tag upstream") && manifests.contains("# the application"),
        "comments are kept: {manifests}"
    );
    let lock = lock_of(&pinned_bundle);
    let entries = lock["images"].as_array().unwrap();
    assert_eq!(entries.len(), 4, "{lock}");
    assert!(entries.iter().any(|e| e["container"] == "setup"
        && e["original"] == tools.as_str()
        && e["pinned"] == tools_pinned.as_str()));

    // Registry B: the same digests, the index with its children, and a bundle naming B.
    let target_repo = format!("{}/mirror", b.host());
    let (relocated, stderr) = run_plugin(&[
        "relocate",
        &bundle_tag,
        &target_repo,
        "--plain-http",
        "--insecure-registry",
        a.host(),
    ]);
    assert!(
        relocated.starts_with(&format!("{target_repo}/{ns}/bundle@sha256:")),
        "{relocated}\n{stderr}"
    );
    let app_b = format!("{target_repo}/upstream/app@{app_digest}");
    let tools_b = format!("{target_repo}/upstream/tools@{tools_digest}");
    let (_, digest) = raw(&app_b);
    assert_eq!(digest, app_digest);
    let (index_b, digest) = raw(&tools_b);
    assert_eq!(digest, tools_digest);
    assert_eq!(index_b, tools_index, "the index is kept");
    for child in index_b["manifests"].as_array().unwrap() {
        let child_digest = child["digest"].as_str().unwrap();
        let (_, digest) = raw(&format!("{target_repo}/upstream/tools@{child_digest}"));
        assert_eq!(digest, child_digest);
    }
    let manifests = pulled_manifests(&relocated);
    assert_eq!(manifests.matches(&app_b).count(), 2, "{manifests}");
    assert_eq!(manifests.matches(&tools_b).count(), 2, "{manifests}");
    assert!(!manifests.contains(a.host()), "{manifests}");
    let lock = lock_of(&relocated);
    assert!(
        lock["images"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["pinned"].as_str().unwrap().starts_with(&target_repo)),
        "{lock}"
    );
    assert!(stderr.contains(&app_b), "{stderr}");

    // Gantry installs the relocated bundle from B.
    let class = unique_name("registry-b");
    apply_class(
        &client,
        &class,
        class_spec_for(b.host(), ApprovalPolicy::Automatic),
        false,
    )
    .await;
    let name = unique_name("relocated");
    create_bundle_ready(&client, &name, spec_of_class(&relocated, Some(&ns), &class)).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let web = deployments.get("web").await.unwrap();
    let image = first_container(&web).image.clone().unwrap();
    assert_eq!(image, app_b);
    let _ = gantry;
}

#[tokio::test]
async fn an_image_that_cannot_be_resolved_fails_the_push_before_anything_is_pushed() {
    let a = Registry::start(StartOptions::default());
    let ns = unique_name("unpinned");
    let missing = format!("{}/upstream/missing:v1", a.host());
    let dir = tempfile::tempdir().unwrap();
    write_bundle(
        dir.path(),
        &[(
            "10-deployment.yaml",
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: server\n        image: {missing}\n"
            ),
        )],
    );
    let target = in_registry(&format!("{ns}/bundle:v1"));
    let out = kubectl_bundle(&[
        "push",
        dir.path().to_str().unwrap(),
        &target,
        "--pin-images",
        "--plain-http",
        "--insecure-registry",
        a.host(),
    ]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    for expected in [
        "10-deployment.yaml",
        "Deployment/",
        "server",
        missing.as_str(),
        "not found",
        "nothing was pushed",
    ] {
        assert!(said.contains(expected), "{expected} in:\n{said}");
    }
    let inspect = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{target}"),
    ]);
    assert!(
        !inspect.status.success(),
        "the bundle was pushed: {}",
        text(&inspect)
    );

    // Without --pin-images the same directory pushes: the failure was the pinning.
    run_plugin(&[
        "push",
        dir.path().to_str().unwrap(),
        &target,
        "--plain-http",
    ]);
}
