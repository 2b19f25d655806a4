//! docs/install.md, "Installing an upstream operator, air-gapped", run as it is written: its
//! shell block, with only the registries' names replaced by local TLS registries. A stand-in
//! for the upstream manifest names its images on a registry standing in for quay.io; the
//! block pins them, relocates the bundle and the images to the mirror, and installs the bundle
//! through a class `mirror` that trusts the mirror's CA, as the page says the administrator
//! made it.

use std::collections::BTreeMap;
use std::process::Command;

use gantry_api::{PLAIN_PROVISIONER, ProvisionerClassSpec};
use gantry_tests::e2e::kubectl::{plugin_path, text};
use gantry_tests::e2e::*;
use gantry_tests::{
    ImageConfig, Registry, RegistryOptions, control_plane, push_rootfs, workspace_root,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

const SECTION: &str = "## Installing an upstream operator, air-gapped";
/// The names the page uses, and what the test puts in their place.
const UPSTREAM_REGISTRY: &str = "registry.example";
const IMAGES_REGISTRY: &str = "quay.io";
const MIRROR: &str = "mirror.internal:5000";
const CLASS: &str = "mirror";

/// The shell block of the section that the page says is run as written: the one that pins,
/// relocates and installs.
fn documented_block() -> String {
    let page = std::fs::read_to_string(workspace_root().join("docs/install.md")).unwrap();
    let section = page
        .split_once(SECTION)
        .unwrap_or_else(|| panic!("docs/install.md has no section {SECTION:?}"))
        .1;
    let section = section.split("\n## ").next().unwrap();
    let blocks: Vec<&str> = section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    let block = blocks
        .iter()
        .find(|b| b.contains("kubectl bundle relocate"))
        .unwrap_or_else(|| panic!("no shell block with `kubectl bundle relocate` in {SECTION:?}"));
    block.to_string()
}

/// A stand-in for cert-manager's install manifest: its namespace and two Deployments whose
/// images are named by tag on `registry`, as upstream's are on quay.io.
fn upstream_manifest(registry: &str) -> String {
    let deployment = |name: &str| {
        format!(
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: cert-manager\nspec:\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: {name}\n        image: \"{registry}/jetstack/{name}:v1.19.1\"\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cert-manager\n{}{}",
        deployment("cert-manager-controller"),
        deployment("cert-manager-webhook")
    )
}

/// The digest the registry serves for `reference`, read by skopeo.
fn digest_of(reference: &str) -> String {
    let output = Command::new("skopeo")
        .args(["inspect", "--tls-verify=false", "--format", "{{.Digest}}"])
        .arg(format!("docker://{reference}"))
        .output()
        .expect("running skopeo");
    assert!(
        output.status.success(),
        "skopeo inspect {reference}: {}",
        text(&output)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[tokio::test]
async fn the_air_gapped_install_of_install_md_works_as_written() {
    gantry();
    let plane = control_plane();
    let client = plane.client().await;
    let tls = RegistryOptions {
        tls: true,
        ..Default::default()
    };
    let upstream = Registry::start(tls.clone());
    let mirror = Registry::start(tls);

    // The upstream images, by tag.
    let work = tempfile::tempdir().unwrap();
    let rootfs = work.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    let mut digests = BTreeMap::new();
    for name in ["cert-manager-controller", "cert-manager-webhook"] {
        std::fs::write(rootfs.join("etc/name"), format!("{name}\n")).unwrap();
        push_rootfs(
            &rootfs,
            &ImageConfig::default(),
            upstream.host(),
            &format!("jetstack/{name}:v1.19.1"),
            work.path(),
        )
        .unwrap();
        digests.insert(
            name,
            digest_of(&format!("{}/jetstack/{name}:v1.19.1", upstream.host())),
        );
    }

    // What the administrator made: the CA the mirror's certificate is signed by, and the class.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let ca_secret = gantry_tests::unique_name("mirror-ca");
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": ca_secret},
        "stringData": {"ca.crt": mirror.ca_pem().unwrap()},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    apply_class(
        &client,
        CLASS,
        ProvisionerClassSpec {
            provisioner: PLAIN_PROVISIONER.into(),
            registry_ca_secret: Some(ca_secret),
            ..Default::default()
        },
        false,
    )
    .await;

    // The machine that runs the block trusts both registries' CAs, as one trusts public
    // registries and the organisation's CA.
    let dir = tempfile::tempdir().unwrap();
    let cas = dir.path().join("ca.pem");
    std::fs::write(
        &cas,
        format!("{}{}", upstream.ca_pem().unwrap(), mirror.ca_pem().unwrap()),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("cert-manager.yaml"),
        upstream_manifest(IMAGES_REGISTRY),
    )
    .unwrap();
    let local = |text: &str| {
        text.replace(IMAGES_REGISTRY, upstream.host())
            .replace(UPSTREAM_REGISTRY, upstream.host())
            .replace(MIRROR, mirror.host())
    };
    let manifest = dir.path().join("cert-manager.yaml");
    let stand_in = local(&std::fs::read_to_string(&manifest).unwrap());
    std::fs::write(&manifest, stand_in).unwrap();
    let block = local(&documented_block());
    let script = dir.path().join("block.sh");
    std::fs::write(&script, &block).unwrap();

    let output = Command::new("bash")
        .args(["-euo", "pipefail"])
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", plugin_path())
        .env("KUBECONFIG", plane.kubeconfig())
        .env("SSL_CERT_FILE", &cas)
        .output()
        .expect("running bash");
    assert!(
        output.status.success(),
        "the block of docs/install.md failed ({}):\n{block}\n{}",
        output.status,
        text(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let relocated = format!("{}/mirror/bundles/cert-manager@sha256:", mirror.host());
    assert!(
        stdout.contains(&relocated),
        "the block prints the relocated bundle ({relocated}…):\n{}",
        text(&output)
    );

    // The workloads name the mirror's copies by the digests upstream had.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "cert-manager");
    for (name, digest) in &digests {
        let deployment = deployments.get(name).await.unwrap();
        let image = first_container(&deployment).image.clone().unwrap();
        assert_eq!(
            image,
            format!("{}/mirror/jetstack/{name}@{digest}", mirror.host()),
            "{name}"
        );
    }
}
