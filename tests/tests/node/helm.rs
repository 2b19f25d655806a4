//! Gantry installed with `helm install` from `charts/gantry`, with the images the node tier
//! builds (`scripts/images`, as for `manifests/`): the release deploys, Gantry runs as Pods, and
//! a bundle becomes Ready. Gantry stays installed (by Helm) for the tests that come after.

use std::process::{Command, Output};

use gantry_api::{ApprovalPolicy, Bundle};
use gantry_tests::e2e::{
    apply_class, class_spec_for, create_bundle, namespace_yaml, push_to, spec_of_class,
};
use gantry_tests::{NodeCluster, gantry_images, helm_binary, node_cluster, unique_name};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};

use super::gantry::{
    HOST_PROVISIONER, NAMESPACE, PROVISIONER, STORAGE, WAIT, config_map_yaml, kubectl_ok, running,
    storage_volume, wait_dumping, wait_ready,
};

const RELEASE: &str = "gantry";

#[tokio::test]
async fn helm_installs_gantry_from_the_chart_and_a_bundle_becomes_ready() {
    let cluster = node_cluster();
    let client = cluster.client().await;
    // No other Gantry runs meanwhile: the Pods of the manifests' install are replaced.
    let _alone = HOST_PROVISIONER.write().await;
    let images = gantry_images(cluster.registry()).unwrap_or_else(|e| panic!("{e}"));
    remove_manifests_install(cluster, &client, &images.kustomization).await;

    // The storage server's volume, kept for the life of the test binary.
    static VOLUME: std::sync::Mutex<Vec<tempfile::TempDir>> = std::sync::Mutex::new(Vec::new());
    let volume = storage_volume(&client).await;
    VOLUME.lock().unwrap().push(volume);

    let (provisioner, provisioner_digest) = split_digest(&images.provisioner);
    let (storage, storage_digest) = split_digest(&images.storage);
    // The pushed references are whole: no registry in front of them.
    let values = format!(
        "image.registry=,provisioner.image.repository={provisioner},provisioner.image.digest={provisioner_digest},\
         storage.image.repository={storage},storage.image.digest={storage_digest}"
    );
    helm_ok(
        cluster,
        &[
            "install",
            RELEASE,
            "charts/gantry",
            "--namespace",
            "default",
            "--set",
            &values,
        ],
    );
    running(cluster, &client).await;

    // Helm's release, and its objects.
    let status = helm_ok(
        cluster,
        &["status", RELEASE, "--namespace", "default", "-o", "json"],
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        status.pointer("/info/status").and_then(|s| s.as_str()),
        Some("deployed"),
        "helm status: {status}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    for (name, image) in [
        (PROVISIONER, &images.provisioner),
        (STORAGE, &images.storage),
    ] {
        let deployment = deployments.get(name).await.expect("reading a Deployment");
        assert_eq!(
            deployment.labels().get("app.kubernetes.io/managed-by"),
            Some(&"Helm".to_string()),
            "{name} is Helm's"
        );
        assert_eq!(
            deployment
                .annotations()
                .get("meta.helm.sh/release-name")
                .map(String::as_str),
            Some(RELEASE),
            "{name} belongs to the release"
        );
        let spec = deployment.spec.unwrap().template.spec.unwrap();
        assert_eq!(spec.containers[0].image.as_ref(), Some(image), "{name}");
    }

    // A bundle, of a class of the test's own (the node's registry speaks plain HTTP).
    let class = unique_name("helm");
    apply_class(
        &client,
        &class,
        class_spec_for(cluster.registry(), ApprovalPolicy::Automatic),
        false,
    )
    .await;
    let name = unique_name("helm-config");
    let image = push_to(
        cluster.registry(),
        &format!("{name}/bundle:v1"),
        &[
            ("00-namespace.yaml", namespace_yaml(&name)),
            (
                "10-config.yaml",
                config_map_yaml(&name, "installed-by-helm"),
            ),
        ],
    )
    .await;
    create_bundle(&client, &name, spec_of_class(&image, None, &class)).await;
    wait_ready(cluster, &client, &name, &[&name]).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    assert!(
        config_maps.get_opt("installed").await.unwrap().is_some(),
        "the bundle's ConfigMap is installed"
    );

    // The bundle goes with its objects; Gantry stays, for the tests after this one.
    let bundles: Api<Bundle> = Api::all(client.clone());
    bundles
        .delete(&name, &DeleteParams::default())
        .await
        .expect("deleting the Bundle");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_dumping(
        cluster,
        &format!("Bundle {name} and its namespace to be gone"),
        WAIT,
        &[],
        || async {
            (bundles.get_opt(&name).await.ok()?.is_none()
                && namespaces.get_opt(&name).await.ok()?.is_none())
            .then_some(())
        },
    )
    .await;
}

/// `repository@sha256:...` split in two.
fn split_digest(reference: &str) -> (&str, &str) {
    reference
        .split_once('@')
        .unwrap_or_else(|| panic!("{reference} is not pinned by digest"))
}

/// When the manifests' install ran first (the test `gantry_runs_as_pods_from_the_manifests`),
/// deletes its objects but the CRDs (Bundles of other tests stay) and waits for its namespace
/// to be gone, so that Helm installs afresh.
async fn remove_manifests_install(cluster: &NodeCluster, client: &Client, dir: &std::path::Path) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let Some(existing) = deployments.get_opt(PROVISIONER).await.unwrap() else {
        return;
    };
    if existing
        .labels()
        .contains_key("app.kubernetes.io/managed-by")
    {
        panic!(
            "{PROVISIONER} is installed already, by {:?}",
            existing.labels()
        );
    }
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.ends_with(".yaml") && name != "01-crds.yaml" && name != "kustomization.yaml"
        })
        .collect();
    files.sort();
    let mut args = vec!["delete", "--wait", "--timeout=180s", "--ignore-not-found"];
    for file in &files {
        args.extend(["-f", file.to_str().unwrap()]);
    }
    kubectl_ok(cluster, &args);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_dumping(
        cluster,
        "the manifests' namespace to be gone",
        WAIT,
        &[],
        || async {
            namespaces
                .get_opt(NAMESPACE)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
}

/// Runs helm against the node's cluster from the workspace root; fails the test on failure.
fn helm_ok(cluster: &NodeCluster, args: &[&str]) -> Output {
    let home = std::env::temp_dir().join(format!("gantry-helm-home-{}", std::process::id()));
    let output = Command::new(helm_binary())
        .current_dir(gantry_tests::workspace_root())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(args)
        .output()
        .expect("running helm");
    assert!(
        output.status.success(),
        "helm {} failed:\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
