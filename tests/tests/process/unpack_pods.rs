//! `pullMode: Node` against a real API server without a kubelet: the test plays the kubelet
//! (and the scheduler) by writing the unpack Pod's status, and checks what the provisioner
//! makes of it. A control plane of its own: its provisioner must be the only one, so its tests
//! run one at a time, each with a provisioner of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::TryStreamExt;
use gantry_api::conditions::{reasons, types};
use gantry_api::unpack::{APP_LABEL, BUNDLE_ANNOTATION};
use gantry_api::unpack::{EXIT_INVALID_BUNDLE, UnpackReport};
use gantry_api::{ApprovalPolicy, Bundle, PullMode};
use gantry_image::{BundleFiles, EffectiveLimits, write_canonical};
use gantry_tests::e2e::*;
use gantry_tests::{Provisioner, StorageOptions, StorageServer, registry, unique_name, wait_until};
use k8s_openapi::api::core::v1::{LimitRange, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

const CLASS: &str = "node";

/// This module's cluster, without a Gantry: each test starts its own provisioner.
static CLUSTER: Isolated = Isolated::new();

/// One provisioner at a time: each test starts its own.
static ONE_PROVISIONER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Retries soon, without leader election: what most tests here run the provisioner with.
const QUICK_RETRIES: [&str; 3] = [
    "--leader-election=false",
    "--backoff-base=200ms",
    "--backoff-cap=1s",
];

/// One test's storage server and provisioner, the only provisioner while the test runs. Bind
/// every field: a field left to `..` is dropped at once (the storage server stops, the lock
/// is released, the cluster may stop).
struct Harness {
    client: Client,
    provisioner: Provisioner,
    storage: StorageServer,
    _alone: (tokio::sync::MutexGuard<'static, ()>, Arc<Cluster>),
}

/// A storage server and a provisioner run with `args` (and the unpack image), the unpack
/// ServiceAccount, and the `Node` class.
async fn start(args: &[&str]) -> Harness {
    let alone = ONE_PROVISIONER.lock().await;
    let cluster = CLUSTER.get();
    let storage = StorageServer::start(StorageOptions::default());
    let client = setup(&cluster).await;
    let mut all = vec!["--unpack-image=gantry/provisioner:test"];
    all.extend_from_slice(args);
    let provisioner = start_provisioner(&cluster, &storage, &all);
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
    Harness {
        client,
        provisioner,
        storage,
        _alone: (alone, cluster),
    }
}

/// A `Node` bundle of an image nobody pushed: in Node mode the provisioner never asks the
/// registry, and the test decides what the kubelet says.
async fn node_bundle(client: &Client, prefix: &str) -> (String, String) {
    let ns = unique_name(prefix);
    let image = format!("{}/{ns}/app:v1", registry().host());
    ensure_namespace(client, &ns).await;
    let name = unique_name(prefix);
    create_bundle(client, &name, spec_of_class(&image, Some(&ns), CLASS)).await;
    (name, image)
}

/// Deletes the bundles (while their provisioner runs, which removes its finalizer).
async fn delete_bundles(client: &Client, names: &[&str]) {
    let bundles: Api<Bundle> = Api::all(client.clone());
    for name in names {
        let _ = bundles.delete(name, &DeleteParams::default()).await;
    }
    for name in names {
        wait_bundle_gone(client, name).await;
    }
}

/// Writes the Pod's status (a merge patch), as the kubelet or the scheduler would.
async fn set_pod_status(client: &Client, pod: &Pod, status: serde_json::Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": status })),
    )
    .await
    .expect("writing the unpack Pod's status");
}

/// The unpack Pods of bundle `name` that exist now.
async fn unpack_pods_of(client: &Client, name: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = format!("{}={}", APP_LABEL.0, APP_LABEL.1);
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("listing unpack Pods");
    list.items
        .into_iter()
        .filter(|p| p.annotations().get(BUNDLE_ANNOTATION).map(String::as_str) == Some(name))
        .collect()
}

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

/// What a successful unpack program does, played by the test: stores `files` as bundle
/// `name`'s content, then reports success on `pod` with the kubelet's `image_id`. The content
/// digest.
async fn unpacked_by_the_program(
    client: &Client,
    storage: &StorageServer,
    name: &str,
    pod: &Pod,
    image_id: &str,
    files: &[(&str, String)],
) -> String {
    let dir = tempfile::tempdir().unwrap();
    write_bundle(dir.path(), files);
    let files = BundleFiles::from_dir(dir.path(), &EffectiveLimits::default()).unwrap();
    let mut tarball = Vec::new();
    let digest = write_canonical(&files, &mut tarball).unwrap();
    let response = reqwest::Client::new()
        .put(format!(
            "{}{}",
            storage.url(),
            gantry_api::storage::tarball_path(name, digest.hex())
        ))
        .body(tarball)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let report = UnpackReport {
        content_digest: digest.digest.clone(),
        platform: "linux/amd64".into(),
        objects: files.files.len(),
    };
    set_unpack_state(
        client,
        pod,
        image_id,
        json!({ "terminated": {
            "exitCode": 0, "message": serde_json::to_string(&report).unwrap(),
        } }),
    )
    .await;
    digest.digest
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
    let Harness {
        client,
        storage,
        provisioner: _provisioner,
        _alone,
    } = start(&QUICK_RETRIES).await;
    let (name, image) = node_bundle(&client, "node-pull").await;
    let ns = spec_namespace(&client, &name).await;

    // The Pod: restricted, steered to the class's platform, running the bundle image, owned
    // by the Bundle.
    let first = unpack_pod(&client, &name, None).await;
    let pod_spec = first.spec.clone().expect("a Pod spec");
    assert_eq!(pod_spec.automount_service_account_token, Some(false));
    assert!(pod_spec.active_deadline_seconds.is_some());
    assert_eq!(
        pod_spec
            .security_context
            .as_ref()
            .and_then(|s| s.seccomp_profile.as_ref())
            .map(|p| p.type_.as_str()),
        Some("RuntimeDefault")
    );
    for container in pod_spec
        .init_containers
        .iter()
        .flatten()
        .chain(&pod_spec.containers)
    {
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(
            security.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            Some("RuntimeDefault"),
            "container {}",
            container.name
        );
    }
    // Its only token is the projected one for the storage server: none is mounted for the
    // Kubernetes API, and no other volume carries one.
    let volumes = pod_spec.volumes.clone().unwrap_or_default();
    let tokens: Vec<_> = volumes
        .iter()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.clone().unwrap_or_default())
        .filter_map(|s| s.service_account_token)
        .collect();
    assert_eq!(tokens.len(), 1, "{volumes:?}");
    assert_eq!(tokens[0].audience.as_deref(), Some("gantry-storage"));
    assert!(
        volumes.iter().all(|v| v.secret.is_none()),
        "no Secret volume: {volumes:?}"
    );
    let bundle_uid = get_bundle(&client, &name).await.uid();
    let owners = first.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == "Bundle" && o.name == name && Some(&o.uid) == bundle_uid.as_ref()),
        "the unpack Pod is owned by its Bundle: {owners:?}"
    );
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
    let refused = refused.status.unwrap();
    assert_eq!(refused.content_digest, None);
    // No retry can fix invalid content: the bundle is Stalled, and says what must change.
    let stalled = refused
        .conditions
        .iter()
        .find(|c| c.type_ == types::STALLED)
        .expect("a Stalled condition");
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", reasons::INVALID_BUNDLE)
    );
    assert!(stalled.message.contains("changes"), "{}", stalled.message);
    wait_removed(&client, &second).await;

    // A change of the bundle (here a request to reconcile) lets it through at once.
    Api::<Bundle>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                gantry_api::RECONCILE_REQUESTED_ANNOTATION: "after-the-fix" } } })),
        )
        .await
        .unwrap();

    // The program stored the content: the bundle installs it, at the runtime's digest.
    let third = unpack_pod(&client, &name, second.uid().as_deref()).await;
    let pulled = format!("sha256:{}", "ab".repeat(32));
    let repository = image.trim_end_matches(":v1");
    let content_digest = unpacked_by_the_program(
        &client,
        &storage,
        &name,
        &third,
        &format!("{repository}@{pulled}"),
        &[("cm.yaml", config_map("from-node", Some(&ns), "node"))],
    )
    .await;
    let ready = wait_bundle(&client, &name, "Ready", is_ready).await;
    let status = ready.status.unwrap();
    assert!(
        !status.conditions.iter().any(|c| c.type_ == types::STALLED),
        "a successful pass removes Stalled: {:?}",
        status.conditions
    );
    assert_eq!(
        status.resolved_image.as_deref(),
        Some(format!("{repository}@{pulled}").as_str())
    );
    assert_eq!(
        status.content_digest.as_deref(),
        Some(content_digest.as_str())
    );
    assert_eq!(status.platform.as_deref(), Some("linux/amd64"));
    assert_config_map(&client, &ns, "from-node", Some("node")).await;
    wait_removed(&client, &third).await;
    delete_bundles(&client, &[&name]).await;
}

/// The install namespace the bundle was created with.
async fn spec_namespace(client: &Client, name: &str) -> String {
    get_bundle(client, name)
        .await
        .spec
        .install_namespace
        .expect("an install namespace")
}

#[tokio::test]
async fn node_pull_pods_report_scheduling_deadlines_and_refusals() {
    // Failures are not retried while the test looks at them.
    let Harness {
        client,
        storage: _storage,
        provisioner: _provisioner,
        _alone,
    } = start(&[
        "--leader-election=false",
        "--backoff-base=60s",
        "--unpack-schedule-timeout=3s",
    ])
    .await;

    // No node fits: the scheduler's message is shown at once, while the Pod waits; after
    // --unpack-schedule-timeout the bundle fails with UnpackPodUnschedulable and the Pod goes.
    let (unschedulable, _) = node_bundle(&client, "unschedulable").await;
    let pod = unpack_pod(&client, &unschedulable, None).await;
    let why = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.";
    set_pod_status(
        &client,
        &pod,
        json!({ "phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": why, "lastTransitionTime": "2026-01-01T00:00:00Z",
        }] }),
    )
    .await;
    let waiting = wait_bundle(
        &client,
        &unschedulable,
        "Unpacking with the scheduler's message",
        |b| {
            condition(b, types::UNPACKED).is_some_and(|c| {
                c.status == "False" && c.reason == reasons::UNPACKING && c.message.contains(why)
            })
        },
    )
    .await;
    let message = &condition(&waiting, types::UNPACKED).unwrap().message;
    assert!(
        message.contains(&format!(
            "unpack Pod {} is not scheduled yet",
            pod.name_any()
        )),
        "{message}"
    );
    let failed = wait_failure(
        &client,
        &unschedulable,
        types::UNPACKED,
        reasons::UNPACK_POD_UNSCHEDULABLE,
        why,
    )
    .await;
    let message = &condition(&failed, types::UNPACKED).unwrap().message;
    assert!(
        message.contains("could not be scheduled within"),
        "{message}"
    );
    wait_removed(&client, &pod).await;

    // Stopped by the kubelet at activeDeadlineSeconds: the Pod's reason, not the exit code of
    // the container it killed.
    let (deadline, _) = node_bundle(&client, "deadline").await;
    let pod = unpack_pod(&client, &deadline, None).await;
    set_pod_status(
        &client,
        &pod,
        json!({
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline",
            "containerStatuses": [{
                "name": "unpack", "image": "bundle", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": { "terminated": { "exitCode": 137, "reason": "Error" } },
            }],
        }),
    )
    .await;
    let failed = wait_failure(
        &client,
        &deadline,
        types::UNPACKED,
        reasons::UNPACK_POD_FAILED,
        "DeadlineExceeded: Pod was active on the node longer than the specified deadline",
    )
    .await;
    let message = &condition(&failed, types::UNPACKED).unwrap().message;
    assert!(!message.contains("exit code 137"), "{message}");
    wait_removed(&client, &pod).await;

    // A reference the kubelet refuses: PullFailed with its reason.
    let (invalid, _) = node_bundle(&client, "invalid-name").await;
    let pod = unpack_pod(&client, &invalid, None).await;
    let refusal = "Failed to apply default image tag \"registry.test/A:v1\": couldn't parse image name \"registry.test/A:v1\": invalid reference format: repository name must be lowercase";
    set_unpack_state(
        &client,
        &pod,
        "",
        json!({ "waiting": { "reason": "InvalidImageName", "message": refusal } }),
    )
    .await;
    wait_failure(
        &client,
        &invalid,
        types::UNPACKED,
        reasons::PULL_FAILED,
        &format!("InvalidImageName: {refusal}"),
    )
    .await;
    wait_removed(&client, &pod).await;

    // The API server refuses the Pod (here a LimitRange below its memory limit): an Unpacked
    // failure with the API server's message, not an apply failure.
    let limit_ranges: Api<LimitRange> = Api::namespaced(client.clone(), NAMESPACE);
    let range = unique_name("unpack-memory");
    limit_ranges
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": { "name": range },
                "spec": { "limits": [{ "type": "Container", "max": { "memory": "100Mi" } }] },
            }))
            .unwrap(),
        )
        .await
        .expect("creating a LimitRange");
    let (refused, _) = node_bundle(&client, "refused").await;
    let failed = wait_failure(
        &client,
        &refused,
        types::UNPACKED,
        reasons::UNPACK_POD_FAILED,
        "maximum memory usage per Container is 100Mi",
    )
    .await;
    let message = &condition(&failed, types::UNPACKED).unwrap().message;
    assert!(
        message.contains("the API server refused unpack Pod"),
        "{message}"
    );
    assert!(
        condition(&failed, types::INSTALLED).is_none_or(|c| c.reason != reasons::APPLY_FAILED),
        "a refused unpack Pod is not an apply failure"
    );
    assert!(unpack_pods_of(&client, &refused).await.is_empty());
    limit_ranges
        .delete(&range, &DeleteParams::default())
        .await
        .expect("deleting the LimitRange");

    delete_bundles(&client, &[&unschedulable, &deadline, &invalid, &refused]).await;
}

#[tokio::test]
async fn unpack_pods_left_behind_are_removed_at_start() {
    let Harness {
        client,
        storage,
        provisioner: first,
        _alone,
    } = start(&["--leader-election=false"]).await;
    // The provisioner dies while an unpack Pod of its runs.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pod = |name: &str, labels: serde_json::Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": name, "labels": labels,
                          "annotations": { BUNDLE_ANNOTATION: "gone" } },
            "spec": { "containers": [{ "name": "unpack", "image": "registry.test/gone:v1" }] },
        }))
        .unwrap()
    };
    let left = unique_name("unpack-left-behind");
    let other = unique_name("not-an-unpack-pod");
    pods.create(
        &PostParams::default(),
        &pod(&left, json!({ APP_LABEL.0: APP_LABEL.1 })),
    )
    .await
    .expect("creating an unpack Pod");
    pods.create(
        &PostParams::default(),
        &pod(&other, json!({ "app": "other" })),
    )
    .await
    .expect("creating another Pod");
    drop(first);

    // Its successor removes it once it leads; a Pod without the label stays.
    let lease = unique_name("unpack-sweep");
    let _second = start_provisioner(
        &CLUSTER.get(),
        &storage,
        &[
            "--unpack-image=gantry/provisioner:test",
            "--leader-election=true",
            &format!("--lease-name={lease}"),
        ],
    );
    wait_until("the unpack Pod left behind to be removed", WAIT, || {
        let pods = pods.clone();
        let left = left.clone();
        async move { pods.get_opt(&left).await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert!(
        pods.get_opt(&other).await.unwrap().is_some(),
        "a Pod without the unpack label was removed"
    );
    pods.delete(&other, &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting the other Pod");
}

#[tokio::test]
async fn unpack_pods_are_bounded_by_unpack_concurrency() {
    let Harness {
        client,
        storage: _storage,
        provisioner: _provisioner,
        _alone,
    } = start(&[
        "--leader-election=false",
        "--unpack-concurrency=2",
        "--backoff-base=60s",
    ])
    .await;

    // Every unpack Pod that exists at any moment, as a watch sees them come and go.
    #[derive(Default)]
    struct Seen {
        live: BTreeMap<String, String>,
        most: usize,
        bundles: BTreeSet<String>,
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = format!("{}={}", APP_LABEL.0, APP_LABEL.1);
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watching = {
        let seen = seen.clone();
        let mut ready_tx = Some(ready_tx);
        let events =
            watcher(pods.clone(), watcher::Config::default().labels(&selector)).default_backoff();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Ok(Some(event)) = events.try_next().await {
                let mut seen = seen.lock().unwrap();
                match event {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                        let bundle = pod.annotations().get(BUNDLE_ANNOTATION).cloned();
                        seen.live.insert(
                            pod.uid().unwrap_or_default(),
                            bundle.clone().unwrap_or_default(),
                        );
                        seen.bundles.extend(bundle);
                    }
                    watcher::Event::Delete(pod) => {
                        seen.live.remove(&pod.uid().unwrap_or_default());
                    }
                    watcher::Event::Init => seen.live.clear(),
                    watcher::Event::InitDone => {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                }
                seen.most = seen.most.max(seen.live.len());
            }
        })
    };
    ready_rx.await.expect("the Pod watch started");

    let mut names = Vec::new();
    for _ in 0..4 {
        names.push(node_bundle(&client, "bounded").await.0);
    }
    // Two Pods at once, then (as each one's image cannot be pulled) the next: never a third.
    let mut done = BTreeSet::new();
    while done.len() < names.len() {
        let running = wait_until("an unpack Pod of a waiting bundle", WAIT, || {
            let (client, names, done) = (client.clone(), names.clone(), done.clone());
            async move {
                for name in names.iter().filter(|n| !done.contains(*n)) {
                    if let Some(pod) = unpack_pods_of(&client, name).await.into_iter().next() {
                        return Some((name.clone(), pod));
                    }
                }
                None
            }
        })
        .await;
        if done.is_empty() {
            wait_until("two unpack Pods at once", WAIT, || {
                let seen = seen.clone();
                async move { (seen.lock().unwrap().live.len() >= 2).then_some(()) }
            })
            .await;
        }
        set_unpack_state(
            &client,
            &running.1,
            "",
            json!({ "waiting": { "reason": "ErrImagePull", "message": "manifest unknown" } }),
        )
        .await;
        wait_failure(
            &client,
            &running.0,
            types::UNPACKED,
            reasons::PULL_FAILED,
            "ErrImagePull",
        )
        .await;
        wait_removed(&client, &running.1).await;
        done.insert(running.0);
    }
    let seen_now = {
        let seen = seen.lock().unwrap();
        (seen.most, seen.bundles.clone())
    };
    watching.abort();
    assert_eq!(
        seen_now.0, 2,
        "--unpack-concurrency=2: the most unpack Pods that existed at once"
    );
    for name in &names {
        assert!(seen_now.1.contains(name), "bundle {name} had no unpack Pod");
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    delete_bundles(&client, &names).await;
}

#[tokio::test]
async fn a_manual_node_class_asks_approval_for_the_digest_the_node_pulled() {
    let Harness {
        client,
        storage,
        provisioner: _provisioner,
        _alone,
    } = start(&QUICK_RETRIES).await;
    let manual = unique_name("node-manual");
    let mut class = class_spec(ApprovalPolicy::Manual);
    class.pull_mode = PullMode::Node;
    apply_class(&client, &manual, class, false).await;
    let ns = unique_namespace(&client, "node-manual").await;
    let repository = format!("{}/{ns}/app", registry().host());
    let name = unique_name("node-manual");
    let bundle_spec = spec_of_class(&format!("{repository}:v1"), Some(&ns), &manual);
    create_bundle(&client, &name, bundle_spec).await;

    // The program stored the content and the kubelet reports the digest it pulled.
    let pod = unpack_pod(&client, &name, None).await;
    let pulled = format!("sha256:{}", "cd".repeat(32));
    unpacked_by_the_program(
        &client,
        &storage,
        &name,
        &pod,
        &format!("{repository}@{pulled}"),
        &[("cm.yaml", config_map("reviewed", Some(&ns), "node"))],
    )
    .await;

    // Awaiting approval of the runtime's digest, the one the approver reviews.
    let waiting = wait_bundle(&client, &name, "awaiting approval", |b| {
        condition(b, types::APPROVED).is_some_and(|c| c.reason == reasons::AWAITING_APPROVAL)
    })
    .await;
    assert_eq!(
        waiting.status.as_ref().unwrap().resolved_image.as_deref(),
        Some(format!("{repository}@{pulled}").as_str())
    );
    assert!(
        condition(&waiting, types::APPROVED)
            .unwrap()
            .message
            .contains(&pulled),
        "{:?}",
        condition(&waiting, types::APPROVED)
    );
    wait_removed(&client, &pod).await;

    // An approval of another digest installs nothing; the node's digest does.
    let other = format!("sha256:{}", "ef".repeat(32));
    approve_digest(&client, &name, &other).await;
    wait_bundle(&client, &name, "the other digest's approval refused", |b| {
        condition(b, types::APPROVED).is_some_and(|c| {
            c.reason == reasons::AWAITING_APPROVAL && c.message.contains("does not carry over")
        })
    })
    .await;
    assert_eq!(config_map_data(&client, &ns, "reviewed").await, None);
    approve_digest(&client, &name, &pulled).await;
    wait_bundle(&client, &name, "Ready", is_ready).await;
    assert_config_map(&client, &ns, "reviewed", Some("node")).await;
    delete_bundles(&client, &[&name]).await;
}
