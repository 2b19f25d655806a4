//! `kubectl bundle install` and `uninstall`, run by kubectl from PATH: install applies the
//! embedded manifests in order with server-side apply, `--export` prints exactly what it
//! applies, and uninstall removes it. Each test has a control plane of its own: install and
//! uninstall write and delete the cluster-scoped CRDs and classes the shared Gantry uses. There
//! is no kubelet (nor controller-manager) here: the workloads never become ready, and a
//! deleted namespace and PersistentVolumeClaim stay terminating.

use std::path::Path;
use std::process::Output;

use gantry_api::{Bundle, ProvisionerClass};
use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use gantry_tests::{ControlPlane, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use serde_json::Value;

/// The cluster of the install test.
static INSTALL: Isolated = Isolated::new();
/// The cluster of the uninstall test (it leaves `gantry-system` terminating).
static UNINSTALL: Isolated = Isolated::new();

const OPTIONS: [&str; 4] = [
    "--registry",
    "localhost:5000/mirror",
    "--storage-class",
    "fast",
];

/// `kubectl ARGS -f FILE` as admin of `plane`.
fn kubectl_file(plane: &ControlPlane, args: &[&str], file: &Path) -> Output {
    plane
        .kubectl()
        .args(args)
        .arg("-f")
        .arg(file)
        .output()
        .expect("running kubectl")
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("the export parses as YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn position(text: &str, what: &str) -> usize {
    text.find(what)
        .unwrap_or_else(|| panic!("{what:?} not in:\n{text}"))
}

#[tokio::test]
async fn install_applies_what_export_prints_then_times_out_naming_the_workload() {
    let cluster = INSTALL.get();
    let plane = cluster.plane();
    let client = plane.client().await;

    let mut export_args = vec!["install", "--export"];
    export_args.extend(OPTIONS);
    let exported = ok_on(plane, &export_args);
    let objects = documents(&exported);
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"CustomResourceDefinition"));
    assert_eq!(kinds.last(), Some(&"ProvisionerClass"));
    for kind in [
        "Namespace",
        "ClusterRole",
        "Deployment",
        "PersistentVolumeClaim",
    ] {
        assert!(kinds.contains(&kind), "{kind} not exported: {kinds:?}");
    }
    // Nothing was applied by --export.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    assert!(
        deployments
            .get_opt("gantry-provisioner")
            .await
            .unwrap()
            .is_none()
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gantry.yaml");
    std::fs::write(&file, &exported).unwrap();

    // No kubelet: the storage server never becomes ready, and install says so.
    let mut install_args = vec!["install", "--timeout", "3s"];
    install_args.extend(OPTIONS);
    let output = fails_on(plane, &install_args);
    let crds = position(&output, "✚ applied the CRDs");
    let established = position(&output, "✔ CRDs established");
    let access = position(&output, "✚ applied the namespace and RBAC");
    let storage = position(&output, "✚ applied the storage server");
    let provisioner = position(&output, "✚ applied the provisioner");
    let classes = position(&output, "✚ applied the default classes");
    assert!(
        crds < established
            && established < access
            && access < storage
            && storage < provisioner
            && provisioner < classes,
        "steps out of order:\n{output}"
    );
    assert!(
        output.contains("namespace/gantry-system created"),
        "{output}"
    );
    assert!(
        output.contains("provisionerclass.gantry.dev/plain created"),
        "{output}"
    );
    assert!(
        output.contains("timed out after 3s waiting for deployment gantry-system/gantry-storage"),
        "{output}"
    );
    assert!(
        output.contains("deployment gantry-system/gantry-provisioner (0/3 replicas available"),
        "{output}"
    );

    // Applied, with the options, by the plugin's field manager.
    let provisioner = deployments.get("gantry-provisioner").await.unwrap();
    let image = first_container(&provisioner).image.clone();
    assert_eq!(
        image.as_deref(),
        Some("localhost:5000/mirror/gantry-provisioner:0.1.0")
    );
    assert!(
        provisioner
            .metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|m| m.manager.as_deref() == Some("kubectl-bundle")
                && m.operation.as_deref() == Some("Apply")),
        "applied with server-side apply by kubectl-bundle"
    );
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), NAMESPACE)
        .get("gantry-storage")
        .await
        .unwrap();
    assert_eq!(
        claim.spec.unwrap().storage_class_name.as_deref(),
        Some("fast")
    );
    Api::<ClusterRole>::all(client.clone())
        .get("gantry-provisioner")
        .await
        .unwrap();
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    for class in ["plain", "plain-reviewed", "plain-node"] {
        classes.get(class).await.unwrap();
    }

    // The export is valid for the API server and is exactly what was applied.
    let dry_run = kubectl_file(plane, &["apply", "--dry-run=server"], &file);
    assert!(dry_run.status.success(), "dry run: {}", text(&dry_run));
    let diff = kubectl_file(
        plane,
        &["diff", "--server-side", "--field-manager=kubectl-bundle"],
        &file,
    );
    assert!(
        diff.status.success(),
        "the export differs from what install applied: {}",
        text(&diff)
    );

    // Again, not waiting: every object is unchanged.
    let mut again = vec!["install", "--wait=false"];
    again.extend(OPTIONS);
    let output = ok_on(plane, &again);
    assert!(
        !output.contains(" created") && !output.contains(" configured"),
        "{output}"
    );
    assert_eq!(
        output.matches(" unchanged").count(),
        objects.len(),
        "{output}"
    );
    assert!(output.contains("--wait=false"), "{output}");
}

#[tokio::test]
async fn uninstall_refuses_while_bundles_exist_then_removes_what_install_applied() {
    let cluster = UNINSTALL.get();
    let plane = cluster.plane();
    let client = plane.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());

    // The harness installed the CRDs: uninstall removes them, and finds nothing else.
    let output = ok_on(plane, &["uninstall", "--timeout", "60s"]);
    assert!(
        output.contains("customresourcedefinition.apiextensions.k8s.io/bundles.gantry.dev deleted"),
        "{output}"
    );
    assert!(
        output.contains("namespace/gantry-system not found"),
        "{output}"
    );
    assert!(crds.get_opt("bundles.gantry.dev").await.unwrap().is_none());

    // A fresh install: the CRDs are established before the classes are applied.
    let output = ok_on(plane, &["install", "--wait=false", "--timeout", "60s"]);
    assert!(
        output.contains("customresourcedefinition.apiextensions.k8s.io/bundles.gantry.dev created"),
        "{output}"
    );
    assert!(
        position(&output, "✔ CRDs established")
            < position(&output, "provisionerclass.gantry.dev/plain created"),
        "{output}"
    );

    // A Bundle exists: uninstall refuses and names it.
    let name = "kept";
    create_bundle(&client, name, spec(&in_registry("install/app:v1"), None)).await;
    let refused = fails_on(plane, &["uninstall"]);
    assert!(refused.contains("1 Bundle(s) exist: kept"), "{refused}");
    assert!(refused.contains("--delete-bundles"), "{refused}");
    assert!(crds.get_opt("bundles.gantry.dev").await.unwrap().is_some());
    Api::<Bundle>::all(client.clone()).get(name).await.unwrap();

    // --delete-bundles: the Bundle goes first, then everything install applied. Without a
    // namespace controller here the namespace stays terminating: not waited for.
    let output = ok_on(
        plane,
        &[
            "uninstall",
            "--delete-bundles",
            "--wait=false",
            "--timeout",
            "60s",
        ],
    );
    assert!(
        position(&output, "Bundles deleted") < position(&output, "✚ deleted the default classes"),
        "{output}"
    );
    let order: Vec<usize> = [
        "✚ deleted the default classes",
        "✚ deleted the provisioner",
        "✚ deleted the storage server",
        "✚ deleted the namespace and RBAC",
        "✚ deleted the CRDs",
    ]
    .iter()
    .map(|step| position(&output, step))
    .collect();
    assert!(order.is_sorted(), "steps out of order:\n{output}");

    // Every object install applies, but the classes (their kind went with the CRDs).
    let exported = ok_on(plane, &["install", "--export"]);
    let rest: String = documents(&exported)
        .iter()
        .filter(|o| o["kind"] != "ProvisionerClass")
        .map(|o| format!("---\n{}", serde_saphyr::to_string(o).unwrap()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gantry.yaml");
    std::fs::write(&file, &rest).unwrap();
    // The CRDs' deletion completes in the API server itself.
    wait_until(
        "the CRDs to be gone",
        std::time::Duration::from_secs(60),
        || {
            let crds = crds.clone();
            async move {
                let left = crds
                    .get_opt("bundles.gantry.dev")
                    .await
                    .unwrap()
                    .or(crds.get_opt("provisionerclasses.gantry.dev").await.unwrap());
                left.is_none().then_some(())
            }
        },
    )
    .await;
    let left = kubectl_file(plane, &["get", "--ignore-not-found", "-o", "name"], &file);
    assert!(left.status.success(), "{}", text(&left));
    // Both wait for the controller-manager (the namespace controller, the PVC protection
    // controller), which does not run here.
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "namespace/gantry-system\npersistentvolumeclaim/gantry-storage",
        "only what the controller-manager finishes deleting is left: {}",
        text(&left)
    );
    let namespace = Api::<Namespace>::all(client.clone())
        .get(NAMESPACE)
        .await
        .unwrap();
    assert!(namespace.metadata.deletion_timestamp.is_some());
    let claim = Api::<PersistentVolumeClaim>::namespaced(client, NAMESPACE)
        .get("gantry-storage")
        .await
        .unwrap();
    assert!(claim.metadata.deletion_timestamp.is_some());
}
