//! `pullMode: Node` against a real API server without a kubelet: the test plays the kubelet by
//! writing the unpack Pod's status, and checks what the provisioner makes of it. A binary of
//! its own: this provisioner must be the only one.

mod common;

use common::*;
use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalPolicy, PullMode};
use gantry_image::{BundleFiles, EffectiveLimits, write_canonical};
use gantry_provisioner::controller::node_pull::pod::{APP_LABEL, BUNDLE_ANNOTATION};
use gantry_provisioner::controller::node_pull::{EXIT_INVALID_BUNDLE, UnpackReport};
use gantry_tests::{StorageOptions, StorageServer, registry, unique_name, wait_until};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const CLASS: &str = "node";

/// The unpack Pod of `bundle` other than `previous`, once it exists.
async fn unpack_pod(client: &Client, bundle: &str, previous: Option<&str>) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = format!("{}={}", APP_LABEL.0, APP_LABEL.1);
    wait_until("an unpack Pod", WAIT, || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?;
            list.items.into_iter().find(|p| {
                p.annotations().get(BUNDLE_ANNOTATION).map(String::as_str) == Some(bundle)
                    && p.uid().as_deref() != previous
                    && p.metadata.deletion_timestamp.is_none()
            })
        }
    })
    .await
}

/// Writes the unpack container's state, as the kubelet would.
async fn set_unpack_state(client: &Client, pod: &Pod, image_id: &str, state: serde_json::Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let status = json!({ "status": { "containerStatuses": [{
        "name": "unpack", "image": "bundle", "imageID": image_id, "ready": false,
        "restartCount": 0, "state": state,
    }] } });
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("writing the unpack Pod's status");
}

/// Waits until the Pod `pod` is gone.
async fn wait_removed(client: &Client, pod: &Pod) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let uid = pod.uid();
    wait_until("the unpack Pod to be removed", WAIT, || {
        let pods = pods.clone();
        let uid = uid.clone();
        let name = pod.name_any();
        async move {
            match pods.get_opt(&name).await.ok()? {
                None => Some(()),
                Some(p) if p.uid() != uid => Some(()),
                Some(_) => None,
            }
        }
    })
    .await;
}

#[tokio::test]
async fn node_pull_pods_report_pull_errors_content_errors_and_content() {
    let client = setup().await;
    let storage = StorageServer::start(StorageOptions::default());
    let _provisioner = start_provisioner(
        &storage,
        &[
            "--leader-election=false",
            "--unpack-image=gantry/provisioner:test",
            "--backoff-base=200ms",
            "--backoff-cap=1s",
        ],
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "gantry-unpack" } })).unwrap();
    match accounts.create(&PostParams::default(), &account).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating the unpack ServiceAccount: {e}"),
    }
    let mut class = class_spec(ApprovalPolicy::Automatic);
    class.pull_mode = PullMode::Node;
    class.platform = Some("linux/amd64".into());
    apply_class(&client, CLASS, class, false).await;

    // Nothing is pushed: in Node mode the provisioner never asks the registry.
    let ns = unique_name("node-pull");
    let image = format!("{}/{ns}/app:v1", registry().host());
    ensure_namespace(&client, &ns).await;
    let name = unique_name("node");
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.provisioner_class_name = Some(CLASS.into());
    create_bundle(&client, &name, bundle_spec).await;

    // The Pod: restricted, steered to the class's platform, running the bundle image.
    let first = unpack_pod(&client, &name, None).await;
    let pod_spec = first.spec.clone().expect("a Pod spec");
    assert_eq!(pod_spec.automount_service_account_token, Some(false));
    assert!(pod_spec.active_deadline_seconds.is_some());
    assert_eq!(
        pod_spec.node_selector.as_ref().unwrap()["kubernetes.io/arch"],
        "amd64"
    );
    assert_eq!(
        pod_spec.containers[0].image.as_deref(),
        Some(image.as_str())
    );
    assert_eq!(
        pod_spec.init_containers.as_ref().unwrap()[0]
            .image
            .as_deref(),
        Some("gantry/provisioner:test")
    );

    // The kubelet cannot pull: PullFailed with its reason, the Pod removed.
    set_unpack_state(
        &client,
        &first,
        "",
        json!({ "waiting": { "reason": "ErrImagePull", "message": "manifest unknown" } }),
    )
    .await;
    wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::PULL_FAILED,
        "ErrImagePull: manifest unknown",
    )
    .await;
    wait_removed(&client, &first).await;

    // The content is invalid: InvalidBundle with the program's text, as a direct pull says it.
    let second = unpack_pod(&client, &name, first.uid().as_deref()).await;
    let text = "invalid YAML in a.yaml at line 1: did not find expected node content";
    set_unpack_state(
        &client,
        &second,
        "",
        json!({ "terminated": { "exitCode": EXIT_INVALID_BUNDLE, "message": text } }),
    )
    .await;
    let refused = wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::INVALID_BUNDLE,
        &format!("invalid bundle {image}: {text}"),
    )
    .await;
    assert_eq!(refused.status.unwrap().content_digest, None);
    wait_removed(&client, &second).await;

    // The program stored the content: the bundle installs it, at the runtime's digest.
    let dir = tempfile::tempdir().unwrap();
    write_bundle(
        dir.path(),
        &[("cm.yaml", config_map("from-node", Some(&ns), "node"))],
    );
    let files = BundleFiles::from_dir(dir.path(), &EffectiveLimits::default()).unwrap();
    let mut tarball = Vec::new();
    let digest = write_canonical(&files, &mut tarball).unwrap();
    let response = reqwest::Client::new()
        .put(format!(
            "{}{}",
            storage.url(),
            gantry_api::storage::tarball_path(&name, digest.hex())
        ))
        .body(tarball)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let third = unpack_pod(&client, &name, second.uid().as_deref()).await;
    let report = UnpackReport {
        content_digest: digest.digest.clone(),
        platform: "linux/amd64".into(),
        objects: 1,
    };
    let pulled = format!("sha256:{}", "ab".repeat(32));
    let repository = image.trim_end_matches(":v1");
    set_unpack_state(
        &client,
        &third,
        &format!("{repository}@{pulled}"),
        json!({ "terminated": {
            "exitCode": 0, "message": serde_json::to_string(&report).unwrap(),
        } }),
    )
    .await;
    let ready = wait_bundle(&client, &name, "Ready", is_ready).await;
    let status = ready.status.unwrap();
    assert_eq!(
        status.resolved_image.as_deref(),
        Some(format!("{repository}@{pulled}").as_str())
    );
    assert_eq!(
        status.content_digest.as_deref(),
        Some(digest.digest.as_str())
    );
    assert_eq!(status.platform.as_deref(), Some("linux/amd64"));
    assert_eq!(
        config_map_data(&client, &ns, "from-node").await.as_deref(),
        Some("node")
    );
    wait_removed(&client, &third).await;
}
