//! A provisioner killed in the middle of a large apply converges when restarted. A control
//! plane of its own: this provisioner must be the only one.

use gantry_api::Bundle;
use gantry_tests::e2e::*;
use gantry_tests::{StorageOptions, StorageServer, unique_name, wait_until};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

/// This module's cluster, without a Gantry: each test starts its own provisioner.
static CLUSTER: Isolated = Isolated::new();

/// Each test runs its own provisioner, which must be the only one: they take turns.
static ONE_PROVISIONER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn a_restart_in_the_middle_of_a_large_apply_converges() {
    let _only = ONE_PROVISIONER.lock().await;
    let cluster = CLUSTER.get();
    let client = setup(&cluster).await;
    let storage = StorageServer::start(StorageOptions::default());
    let ns = unique_namespace(&client, "restart").await;
    const OBJECTS: usize = 400;
    let documents: String = (0..OBJECTS)
        .map(|i| format!("{}---\n", config_map(&format!("cm-{i:04}"), None, "x")))
        .collect();
    push(&format!("{ns}/big:v1"), &[("objects.yaml", documents)]).await;

    // One object at a time, so the kill lands in the middle of the apply.
    let mut provisioner = start_provisioner(
        &cluster,
        &storage,
        &["--apply-concurrency=1", "--leader-election=false"],
    );
    let name = unique_name("big");
    create_bundle(
        &client,
        &name,
        spec(&in_registry(&format!("{ns}/big:v1")), Some(&ns)),
    )
    .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let partial = wait_for_count("the apply to be under way", &config_maps, 20..OBJECTS).await;
    provisioner.kill();
    let after_kill = config_maps
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert!(
        after_kill < OBJECTS,
        "killed mid-apply ({partial} then {after_kill} of {OBJECTS})"
    );

    let _restarted = start_provisioner(&cluster, &storage, &["--leader-election=false"]);
    let bundle = wait_bundle(&client, &name, "Ready after the restart", is_ready).await;
    let inventory = bundle.status.unwrap().inventory;
    assert_eq!(inventory.len(), OBJECTS);
    let mut names: Vec<&str> = inventory.iter().map(|e| e.name.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), OBJECTS, "no duplicates in the inventory");
    let live = config_maps
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(live.len(), OBJECTS, "every object exists once");
    let bundles: Api<Bundle> = Api::all(client);
    assert!(bundles.get(&name).await.is_ok());
}

/// Objects of content whose apply was cut short, then replaced by other content before it was
/// applied again, are pruned: the inventory names them before they are written. Found by the
/// chaos run: such objects stayed forever.
#[tokio::test]
async fn objects_of_an_interrupted_apply_are_pruned_when_the_content_moves_on() {
    let _only = ONE_PROVISIONER.lock().await;
    let cluster = CLUSTER.get();
    let client = setup(&cluster).await;
    let storage = StorageServer::start(StorageOptions::default());
    let ns = unique_namespace(&client, "interrupted").await;
    let repository = format!("{ns}/app:live");
    push_config_map(&repository, "first", None, "v1").await;
    let mut provisioner = start_provisioner(
        &cluster,
        &storage,
        &[
            "--apply-concurrency=1",
            "--leader-election=false",
            "--resolve-interval=1s",
        ],
    );
    let name = unique_name("interrupted");
    create_bundle_ready(&client, &name, spec(&in_registry(&repository), Some(&ns))).await;

    // v2 adds many objects; the provisioner is killed while it applies them.
    const OBJECTS: usize = 300;
    let documents: String = (0..OBJECTS)
        .map(|i| format!("{}---\n", config_map(&format!("second-{i:04}"), None, "v2")))
        .collect();
    push(&repository, &[("a.yaml", documents)]).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    wait_for_count("v2's apply to be under way", &config_maps, 10..OBJECTS).await;
    provisioner.kill();

    // Before v2 is applied again, the tag moves on to v3, which has none of v2's objects.
    let third = push_config_map(&repository, "third", None, "v3").await;
    let _restarted = start_provisioner(
        &cluster,
        &storage,
        &["--leader-election=false", "--resolve-interval=1s"],
    );
    wait_bundle(&client, &name, "Ready at v3", |b| {
        is_ready(b)
            && b.status.as_ref().and_then(|s| s.resolved_image.as_deref()) == Some(third.as_str())
    })
    .await;
    let left: Vec<String> = config_maps
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .collect();
    assert_eq!(left, ["third"], "only v3's objects are left");
}

/// Waits until the number of ConfigMaps in `config_maps` lies in `range` (an apply under way);
/// returns it. kube-root-ca.crt is not created here (no controller-manager runs).
async fn wait_for_count(
    what: &str,
    config_maps: &Api<ConfigMap>,
    range: std::ops::Range<usize>,
) -> usize {
    wait_until(what, WAIT, || {
        let (config_maps, range) = (config_maps.clone(), range.clone());
        async move {
            let n = config_maps
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .len();
            range.contains(&n).then_some(n)
        }
    })
    .await
}
