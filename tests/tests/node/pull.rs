//! Pull modes on a real node: the same bundle image pulled by the provisioner (`Direct`) and
//! by the node's container runtime through unpack Pods (`Node`) is stored byte for byte the
//! same, and a missing tag fails with the kubelet's reason and recovers once pushed. No unpack
//! Pod is left behind.

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    Bundle, BundleSpec, PLAIN_PROVISIONER, ProvisionerClass, ProvisionerClassSpec, PullMode,
    RECONCILE_REQUESTED_ANNOTATION,
};
use gantry_tests::{NodeCluster, node_cluster, unique_name};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::gantry::{
    DISRUPTION, HOST_PROVISIONER, NAMESPACE, WAIT, apply, bundle, config_map_yaml, installed,
    is_ready, push_bundle, stored_content, wait_dumping, wait_ready,
};

#[tokio::test]
async fn direct_and_node_pulls_store_the_same_tarball() {
    let _shared = HOST_PROVISIONER.read().await;
    let (cluster, client) = gantry().await;
    let _undisturbed = DISRUPTION.read().await;
    let [direct, node] = classes(&client, "same").await;
    let name = unique_name("same");
    let image = push_bundle(
        cluster,
        &format!("{name}/bundle:v1"),
        &[("10-config.yaml", config_map_yaml_unplaced("same"))],
    )
    .await;
    let mut stored = Vec::new();
    for class in [&direct, &node] {
        let bundle_name = format!("{name}-{class}");
        cluster.create_namespace(&bundle_name).await;
        create_bundle(&client, &bundle_name, &image, class).await;
        wait_ready(cluster, &client, &bundle_name, &[&bundle_name]).await;
        let bundle = bundle(&client, &bundle_name).await;
        let status = bundle.status.clone().unwrap();
        assert!(
            status
                .resolved_image
                .as_deref()
                .is_some_and(|r| r.contains("@sha256:")),
            "{bundle_name}: resolvedImage {:?}",
            status.resolved_image
        );
        assert!(
            status
                .manifest_digest
                .as_deref()
                .is_some_and(|d| d.starts_with("sha256:")),
            "{bundle_name}: manifestDigest {:?}",
            status.manifest_digest
        );
        stored.push((status.manifest_digest.clone(), stored_content(&bundle).1));
        no_unpack_pods(cluster, &client, &bundle_name).await;
    }
    assert_eq!(
        stored[0], stored[1],
        "(manifestDigest, contentDigest) through Direct and through Node differ"
    );
}

#[tokio::test]
async fn a_missing_tag_fails_with_the_kubelets_reason_and_recovers() {
    let _shared = HOST_PROVISIONER.read().await;
    let (cluster, client) = gantry().await;
    let _undisturbed = DISRUPTION.read().await;
    let [_, node] = classes(&client, "tag").await;
    let name = unique_name("tag");
    let repository = format!("{name}/bundle:v1");
    // A repository that exists, without the tag.
    push_bundle(
        cluster,
        &format!("{name}/bundle:other"),
        &[("10-config.yaml", config_map_yaml_unplaced("other"))],
    )
    .await;
    cluster.create_namespace(&name).await;
    let image = format!("{}/{repository}", cluster.registry());
    create_bundle(&client, &name, &image, &node).await;
    let failed = wait_unpacked_false(cluster, &client, &name, reasons::PULL_FAILED).await;
    let message = unpacked(&failed).unwrap().message;
    assert!(
        ["ErrImagePull", "ImagePullBackOff", "not found"]
            .iter()
            .any(|reason| message.contains(reason)),
        "PullFailed without the kubelet's reason: {message}"
    );
    no_unpack_pods(cluster, &client, &name).await;

    push_bundle(
        cluster,
        &repository,
        &[("10-config.yaml", config_map_yaml_unplaced("tagged"))],
    )
    .await;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    bundles
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": { "annotations": { RECONCILE_REQUESTED_ANNOTATION: now } }
            })),
        )
        .await
        .expect("requesting a reconcile");
    wait_ready(cluster, &client, &name, &[&name]).await;
    no_unpack_pods(cluster, &client, &name).await;
}

// --- helpers --------------------------------------------------------------------------------

async fn gantry() -> (&'static NodeCluster, Client) {
    let cluster = node_cluster();
    let client = cluster.client().await;
    installed(cluster, &client).await;
    (cluster, client)
}

/// A class pulling directly and one pulling through the node, both allowed plain HTTP to the
/// node's registry.
async fn classes(client: &Client, prefix: &str) -> [String; 2] {
    let mut names = Vec::new();
    for mode in [PullMode::Direct, PullMode::Node] {
        let name = unique_name(prefix);
        let spec = ProvisionerClassSpec {
            provisioner: PLAIN_PROVISIONER.into(),
            insecure_registries: vec![node_cluster().registry().to_string()],
            pull_mode: mode,
            ..Default::default()
        };
        apply(
            &Api::all(client.clone()),
            &ProvisionerClass::new(&name, spec),
        )
        .await;
        names.push(name);
    }
    names.try_into().unwrap()
}

/// A ConfigMap with no namespace: it goes to each bundle's `installNamespace`.
fn config_map_yaml_unplaced(value: &str) -> String {
    config_map_yaml("unplaced", value).replace("  namespace: unplaced\n", "")
}

/// A Bundle installing into the namespace of its own name.
async fn create_bundle(client: &Client, name: &str, image: &str, class: &str) {
    let spec = BundleSpec {
        image: image.into(),
        provisioner_class_name: Some(class.into()),
        install_namespace: Some(name.into()),
        ..Default::default()
    };
    Api::<Bundle>::all(client.clone())
        .create(&PostParams::default(), &Bundle::new(name, spec))
        .await
        .expect("creating a Bundle");
}

fn unpacked(bundle: &Bundle) -> Option<Condition> {
    bundle
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == types::UNPACKED)
        .cloned()
}

async fn wait_unpacked_false(
    cluster: &NodeCluster,
    client: &Client,
    name: &str,
    reason: &str,
) -> Bundle {
    let bundles: Api<Bundle> = Api::all(client.clone());
    let what = format!("Bundle {name} to be Unpacked=False with reason {reason}");
    wait_dumping(cluster, &what, WAIT, &[], || async {
        let bundle = bundles.get(name).await.ok()?;
        let condition = unpacked(&bundle)?;
        (condition.status == "False"
            && condition.reason == reason
            && condition.observed_generation == bundle.metadata.generation
            && !is_ready(&bundle))
        .then_some(bundle)
    })
    .await
}

/// Waits until no unpack Pod for bundle `name` is left in the install namespace.
async fn no_unpack_pods(cluster: &NodeCluster, client: &Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let what = format!("the unpack Pods of {name} to be removed");
    wait_dumping(cluster, &what, WAIT, &[], || async {
        let list = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=gantry-unpack"))
            .await
            .ok()?;
        list.items
            .iter()
            .all(|pod| {
                pod.annotations()
                    .get("gantry.dev/bundle")
                    .map(String::as_str)
                    != Some(name)
            })
            .then_some(())
    })
    .await;
}
