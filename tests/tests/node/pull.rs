//! Pull modes on a real node: the same bundle image pulled by the provisioner (`Direct`) and
//! by the node's container runtime through unpack Pods (`Node`) is stored byte for byte the
//! same; a bad bundle is refused with the same message in both modes; the node's platform is
//! taken from a two-platform index; a private registry is reached through pull secrets that
//! become the unpack Pod's `imagePullSecrets`; a missing tag fails with the kubelet's reason
//! and recovers once pushed (through the shipped class `plain-node`). No unpack Pod is left
//! behind once a bundle shows its outcome.

use std::os::unix::fs::PermissionsExt;

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    ApprovalPolicy, Bundle, BundleSpec, ProvisionerClassSpec, PullMode,
    RECONCILE_REQUESTED_ANNOTATION,
};
use gantry_image::{
    Credential, DockerConfig, Platform, RegistryClient, RegistryOptions as ClientOptions,
};
use gantry_tests::e2e::{
    apply_class, class_spec_for, condition, is_ready, push_to, push_with, spec_of_class,
};
use gantry_tests::{
    ImageConfig, NodeCluster, Registry, RegistryOptions, node_cluster, unique_name,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::gantry::{
    DISRUPTION, HOST_PROVISIONER, NAMESPACE, WAIT, bundle, config_map_yaml, installed,
    stored_content, wait_dumping, wait_ready,
};

#[tokio::test]
async fn direct_and_node_pulls_store_the_same_tarball() {
    let _shared = HOST_PROVISIONER.read().await;
    let (cluster, client) = gantry().await;
    let _undisturbed = DISRUPTION.read().await;
    let [direct, node] = classes(&client, "same").await;
    let name = unique_name("same");
    let image = push_to(
        cluster.registry(),
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
        no_unpack_pods(cluster, &client, &bundle).await;
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
    // The shipped class: Node mode as installed (no insecureRegistries of its own: the node's
    // runtime is configured for its registry).
    let node = SHIPPED_NODE_CLASS.to_string();
    let name = unique_name("tag");
    let repository = format!("{name}/bundle:v1");
    // A repository that exists, without the tag.
    push_to(
        cluster.registry(),
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
    no_unpack_pods(cluster, &client, &failed).await;

    push_to(
        cluster.registry(),
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
    let ready = bundle(&client, &name).await;
    assert_eq!(
        ready.spec.provisioner_class_name.as_deref(),
        Some(SHIPPED_NODE_CLASS)
    );
    no_unpack_pods(cluster, &client, &ready).await;
}

#[tokio::test]
async fn a_bad_bundle_is_refused_with_the_same_message_in_both_modes() {
    let _shared = HOST_PROVISIONER.read().await;
    let (cluster, client) = gantry().await;
    let _undisturbed = DISRUPTION.read().await;
    let [direct, node] = classes(&client, "bad").await;
    let name = unique_name("bad");
    // Packed by umoci, whose layer starts with an entry for the root directory "/".
    let rootfs = tempfile::tempdir().unwrap();
    std::fs::set_permissions(rootfs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(rootfs.path().join("manifests")).unwrap();
    std::fs::write(
        rootfs.path().join("manifests/10-config.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels:\n    app: nameless\ndata:\n  value: x\n",
    )
    .unwrap();
    let image = cluster
        .push_image(
            rootfs.path(),
            &ImageConfig::default(),
            &format!("{name}/bundle:v1"),
        )
        .unwrap_or_else(|e| panic!("pushing the bad bundle: {e}"));
    let mut messages = Vec::new();
    for class in [&direct, &node] {
        let bundle_name = format!("{name}-{class}");
        create_bundle(&client, &bundle_name, &image, class).await;
        let refused =
            wait_unpacked_false(cluster, &client, &bundle_name, reasons::INVALID_BUNDLE).await;
        let message = unpacked(&refused).unwrap().message;
        assert!(
            message.starts_with(&format!("invalid bundle {image}@sha256:"))
                && message.contains("10-config.yaml")
                && message.contains("metadata.name is missing"),
            "{bundle_name}: {message}"
        );
        no_unpack_pods(cluster, &client, &refused).await;
        let status = refused.status.unwrap();
        assert_eq!(status.content_digest, None, "{bundle_name} stored content");
        // The retry note after the message differs from pass to pass.
        let cut = message.find(" (attempt ").unwrap_or(message.len());
        messages.push(message[..cut].to_string());
    }
    assert_eq!(
        messages[0], messages[1],
        "Direct and Node refuse the bundle differently"
    );
}

#[tokio::test]
async fn a_two_platform_index_unpacks_the_nodes_platform() {
    let _shared = HOST_PROVISIONER.read().await;
    let (cluster, client) = gantry().await;
    let _undisturbed = DISRUPTION.read().await;
    let [direct, node] = classes(&client, "index").await;
    // The node's platform first, and another one.
    let node_platform = node_platform();
    let other = if node_platform == "linux/amd64" {
        "linux/arm64"
    } else {
        "linux/amd64"
    };
    // Node mode steered by the class's platform: the node's own labels match.
    let steered = node_class(&client, "index-steered", Some(&node_platform), &[]).await;
    let name = unique_name("index");
    let repository = format!("{}/{name}/bundle", cluster.registry());
    let registry = node_registry_client(cluster);
    let mut manifests = Vec::new();
    for platform in [node_platform.as_str(), other] {
        let arch = platform.rsplit('/').next().unwrap();
        let pushed = push_with(
            &registry,
            &format!("{repository}:{arch}"),
            &platform.parse().unwrap(),
            &[("10-config.yaml", config_map_yaml_unplaced(arch))],
        )
        .await;
        manifests.push((platform, pushed.digest));
    }
    let index = push_index(cluster, &format!("{name}/bundle"), "v1", &manifests).await;
    let image = format!("{repository}:v1");
    let nodes_manifest = &manifests[0].1;
    let node_arch = node_platform.rsplit('/').next().unwrap();

    let mut stored = Vec::new();
    for class in [&direct, &node, &steered] {
        let bundle_name = format!("{name}-{class}");
        cluster.create_namespace(&bundle_name).await;
        create_bundle(&client, &bundle_name, &image, class).await;
        wait_ready(cluster, &client, &bundle_name, &[&bundle_name]).await;
        let bundle = bundle(&client, &bundle_name).await;
        let status = bundle.status.clone().unwrap();
        assert_eq!(
            status.resolved_image.as_deref(),
            Some(format!("{repository}@{index}").as_str()),
            "{bundle_name}: resolvedImage is the index"
        );
        assert_eq!(
            status.manifest_digest.as_deref(),
            Some(nodes_manifest.as_str()),
            "{bundle_name}: manifestDigest is the node's platform's manifest"
        );
        assert_eq!(
            status.platform.as_deref(),
            Some(node_platform.as_str()),
            "{bundle_name}"
        );
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &bundle_name);
        let installed = config_maps.get("installed").await.unwrap();
        assert_eq!(
            installed
                .data
                .unwrap_or_default()
                .get("value")
                .map(String::as_str),
            Some(node_arch),
            "{bundle_name} installed another platform's content"
        );
        stored.push(stored_content(&bundle).1);
        no_unpack_pods(cluster, &client, &bundle).await;
    }
    assert!(
        stored.iter().all(|digest| *digest == stored[0]),
        "the content stored through Direct, Node and a steered Node differs: {stored:?}"
    );
}

#[tokio::test]
async fn a_private_registry_through_pull_secrets_on_the_node() {
    let _shared = HOST_PROVISIONER.read().await;
    let (cluster, client) = gantry().await;
    let _undisturbed = DISRUPTION.read().await;
    // On 127.0.0.1, where the node's runtime reaches it and the provisioner's Pod does not.
    let (user, password) = ("puller", "pull-pass");
    let private = Registry::start(RegistryOptions {
        tls: false,
        auth: Some((user.into(), password.into())),
    });
    cluster
        .allow_plain_http_registry(private.host())
        .unwrap_or_else(|e| panic!("configuring the node for the private registry: {e}"));
    let name = unique_name("private");
    let mut credentials = DockerConfig::default();
    credentials.insert(
        private.host(),
        Credential {
            username: user.into(),
            password: password.into(),
        },
    );
    let pusher = RegistryClient::new(ClientOptions {
        credentials,
        insecure_registries: vec![private.host().to_string()],
        ..Default::default()
    })
    .unwrap();
    let image = format!("{}/{name}/bundle:v1", private.host());
    let pushed = push_with(
        &pusher,
        &image,
        &Platform::current(),
        &[("10-config.yaml", config_map_yaml_unplaced("private"))],
    )
    .await;

    let secret = unique_name("pull");
    let auth = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    };
    let config = json!({ "auths": { private.host(): { "auth": auth } } }).to_string();
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(secret.clone()),
                    ..Default::default()
                },
                type_: Some("kubernetes.io/dockerconfigjson".into()),
                string_data: Some([(".dockerconfigjson".to_string(), config)].into()),
                ..Default::default()
            },
        )
        .await
        .expect("creating the pull secret");
    let plain = node_class(&client, "private", None, &[]).await;
    let with_secret = node_class(&client, "private-secret", None, &[&secret]).await;

    // Without a secret the kubelet is refused, and says so.
    let refused = format!("{name}-none");
    create_bundle(&client, &refused, &image, &plain).await;
    let failed = wait_unpacked_false(cluster, &client, &refused, reasons::PULL_FAILED).await;
    let message = unpacked(&failed).unwrap().message;
    assert!(
        ["ErrImagePull", "ImagePullBackOff"]
            .iter()
            .any(|reason| message.contains(reason))
            && ["401", "nauthorized", "authorization"]
                .iter()
                .any(|why| message.contains(why)),
        "PullFailed without the kubelet's reason: {message}"
    );
    no_unpack_pods(cluster, &client, &failed).await;
    Api::<Bundle>::all(client.clone())
        .delete(&refused, &DeleteParams::default())
        .await
        .expect("deleting the refused Bundle");

    // The bundle's pull secret, then the class's, become the unpack Pod's imagePullSecrets.
    let by_bundle = format!("{name}-bundle");
    let by_class = format!("{name}-class");
    for (bundle_name, class, pull_secret) in [
        (&by_bundle, &plain, Some(secret.clone())),
        (&by_class, &with_secret, None),
    ] {
        cluster.create_namespace(bundle_name).await;
        let spec = BundleSpec {
            pull_secret,
            ..spec_of_class(&image, Some(bundle_name), class)
        };
        gantry_tests::e2e::create_bundle(&client, bundle_name, spec).await;
        wait_ready(cluster, &client, bundle_name, &[bundle_name]).await;
        let ready = bundle(&client, bundle_name).await;
        no_unpack_pods(cluster, &client, &ready).await;
        let status = ready.status.unwrap();
        assert_eq!(
            status.resolved_image.as_deref(),
            Some(pushed.pinned.as_str()),
            "{bundle_name}"
        );
        // The provisioner cannot ask this registry which manifest that is: left empty.
        assert_eq!(status.manifest_digest, None, "{bundle_name}");
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), bundle_name);
        assert!(
            config_maps.get_opt("installed").await.unwrap().is_some(),
            "{bundle_name} did not install its ConfigMap"
        );
    }
}

/// The benchmark of `bench/pull-mode/run.sh`: Bundle created to Ready through `Direct` and
/// through `Node`, in the same run, each round with content of its own (nothing cached), the
/// order of the modes alternating. A first round warms up (the node pulls the unpack image).
#[tokio::test]
#[ignore = "a benchmark: bash bench/pull-mode/run.sh"]
async fn benchmark_ready_through_node_versus_direct() {
    let _shared = HOST_PROVISIONER.read().await;
    let (cluster, client) = gantry().await;
    let _undisturbed = DISRUPTION.read().await;
    let rounds: usize = std::env::var("GANTRY_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let [direct, node] = classes(&client, "bench").await;
    let name = unique_name("bench");
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..=rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for mode in order {
            let class = [&direct, &node][mode];
            let bundle_name = format!("{name}-{round}-{}", ["direct", "node"][mode]);
            let image = push_to(
                cluster.registry(),
                &format!("{bundle_name}/bundle:v1"),
                &[("10-config.yaml", config_map_yaml_unplaced(&bundle_name))],
            )
            .await;
            cluster.create_namespace(&bundle_name).await;
            let started = std::time::Instant::now();
            create_bundle(&client, &bundle_name, &image, class).await;
            wait_ready(cluster, &client, &bundle_name, &[&bundle_name]).await;
            let seconds = started.elapsed().as_secs_f64();
            no_unpack_pods(cluster, &client, &bundle(&client, &bundle_name).await).await;
            if round > 0 {
                times[mode].push(seconds);
            }
            eprintln!(
                "round {round}{}: {} {seconds:.2} s",
                if round == 0 { " (warm-up)" } else { "" },
                ["Direct", "Node"][mode]
            );
        }
    }
    let median = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        if sorted.len().is_multiple_of(2) {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        } else {
            sorted[middle]
        }
    };
    let (direct, node) = (median(&times[0]), median(&times[1]));
    println!("Bundle created to Ready, median of {rounds} rounds:");
    println!("  pullMode Direct  {direct:.2} s  (all: {:.2?})", times[0]);
    println!("  pullMode Node    {node:.2} s  (all: {:.2?})", times[1]);
    println!("  Node / Direct    {:.2}", node / direct);
}

// --- helpers --------------------------------------------------------------------------------

async fn gantry() -> (&'static NodeCluster, Client) {
    let cluster = node_cluster();
    let client = cluster.client().await;
    installed(cluster, &client).await;
    (cluster, client)
}

/// A `Node` class with `platform` and `pull_secrets`.
async fn node_class(
    client: &Client,
    prefix: &str,
    platform: Option<&str>,
    pull_secrets: &[&str],
) -> String {
    let name = unique_name(prefix);
    let spec = ProvisionerClassSpec {
        pull_mode: PullMode::Node,
        platform: platform.map(str::to_string),
        pull_secrets: pull_secrets.iter().map(|s| s.to_string()).collect(),
        ..class_spec_for(node_cluster().registry(), ApprovalPolicy::Automatic)
    };
    apply_class(client, &name, spec, false).await;
    name
}

/// A registry client for the node's (plain-HTTP) registry.
fn node_registry_client(cluster: &NodeCluster) -> RegistryClient {
    RegistryClient::new(ClientOptions {
        insecure_registries: vec![cluster.registry().to_string()],
        ..Default::default()
    })
    .unwrap()
}

/// Pushes an OCI index of `manifests` (`(platform, digest)`, already in `repository` of the
/// node's registry) as `repository:tag`; returns the index's digest.
async fn push_index(
    cluster: &NodeCluster,
    repository: &str,
    tag: &str,
    manifests: &[(&str, String)],
) -> String {
    let http = reqwest::Client::new();
    let base = format!("http://{}/v2/{repository}/manifests", cluster.registry());
    let mut entries = Vec::new();
    for (platform, digest) in manifests {
        let response = http
            .get(format!("{base}/{digest}"))
            .header(
                "Accept",
                "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
            )
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("reading manifest {digest}: {e}"));
        let media_type = response
            .headers()
            .get("Content-Type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/vnd.oci.image.manifest.v1+json")
            .to_string();
        let size = response.bytes().await.unwrap().len();
        let (os, architecture) = platform.split_once('/').unwrap();
        entries.push(json!({
            "mediaType": media_type,
            "digest": digest,
            "size": size,
            "platform": { "os": os, "architecture": architecture },
        }));
    }
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": entries,
    }))
    .unwrap();
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&index)));
    http.put(format!("{base}/{tag}"))
        .header("Content-Type", "application/vnd.oci.image.index.v1+json")
        .body(index)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("pushing the index {repository}:{tag}: {e}"));
    digest
}

/// A class pulling directly and one pulling through the node, both allowed plain HTTP to the
/// node's registry.
async fn classes(client: &Client, prefix: &str) -> [String; 2] {
    let mut names = Vec::new();
    for mode in [PullMode::Direct, PullMode::Node] {
        let name = unique_name(prefix);
        let spec = ProvisionerClassSpec {
            pull_mode: mode,
            ..class_spec_for(node_cluster().registry(), ApprovalPolicy::Automatic)
        };
        apply_class(client, &name, spec, false).await;
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
    gantry_tests::e2e::create_bundle(client, name, spec_of_class(image, Some(name), class)).await;
}

fn unpacked(bundle: &Bundle) -> Option<Condition> {
    condition(bundle, types::UNPACKED).cloned()
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

/// The shipped class of `pullMode: Node` (manifests/20-classes.yaml).
const SHIPPED_NODE_CLASS: &str = "plain-node";

/// How long a Pod already being deleted may take to go.
const DELETION: std::time::Duration = std::time::Duration::from_secs(30);

/// The node's platform: this machine's, with Go's architecture names, as the runtime names it.
fn node_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        "mips64" if cfg!(target_endian = "little") => "mips64le",
        other => other,
    };
    format!("linux/{arch}")
}

/// When the provisioner last wrote the bundle's status (as `bundle` was read).
fn status_written_at(bundle: &Bundle) -> Option<k8s_openapi::jiff::Timestamp> {
    bundle
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.subresource.as_deref() == Some("status"))
        .filter_map(|entry| entry.time.as_ref().map(|t| t.0))
        .max()
}

/// Asserts that no unpack Pod of `bundle` (as read once it showed its outcome) is left. The
/// provisioner removes a Pod before it writes the outcome the Pod gave, so one list after the
/// outcome must find none. Only a Pod created after that status write may be there: the
/// retry of a failed bundle, which comes at least --backoff-base (2s) later. A Pod already
/// being deleted is given [`DELETION`] to go.
async fn no_unpack_pods(cluster: &NodeCluster, client: &Client, bundle: &Bundle) {
    let name = bundle.name_any();
    let written = status_written_at(bundle)
        .unwrap_or_else(|| panic!("bundle {name} has no status written by the provisioner"));
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=gantry-unpack"))
        .await
        .expect("listing unpack Pods");
    let (deleting, left): (Vec<Pod>, Vec<Pod>) = list
        .items
        .into_iter()
        .filter(|pod| {
            pod.annotations()
                .get("gantry.dev/bundle")
                .map(String::as_str)
                == Some(name.as_str())
                && pod.creation_timestamp().is_none_or(|t| t.0 <= written)
        })
        .partition(|pod| pod.metadata.deletion_timestamp.is_some());
    assert!(
        left.is_empty(),
        "unpack Pods of {name} left behind after its outcome (status written at {written}): {:?}",
        left.iter()
            .map(|p| (
                p.name_any(),
                p.creation_timestamp().map(|t| t.0.to_string())
            ))
            .collect::<Vec<_>>()
    );
    for pod in deleting {
        let what = format!(
            "unpack Pod {} of {name} to finish its deletion",
            pod.name_any()
        );
        wait_dumping(cluster, &what, DELETION, &[], || async {
            let now = pods.get_opt(&pod.name_any()).await.ok()?;
            now.is_none_or(|p| p.uid() != pod.uid()).then_some(())
        })
        .await;
    }
}
