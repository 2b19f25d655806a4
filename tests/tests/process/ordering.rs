//! Ordering and control: bundles that depend on others, suspend and resume, reconcile on
//! request (skipping the backoff), custom resources before or after their CRD in one bundle,
//! and an uninstall that waits for finalizers. The provisioner here backs off for long (30 s),
//! so that a reconcile on request is visibly faster than the backoff. A control plane of its
//! own: its provisioner's flags are not the shared one's.

use std::time::{Duration, Instant};

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalPolicy, Bundle, BundlePhase};
use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use gantry_tests::{unique_name, wait_until};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// This module's cluster, with one storage server and one provisioner, backing off from 30 s.
static CLUSTER: Isolated = Isolated::with_gantry(&[
    "--resolve-interval=1s",
    "--resync-interval=60s",
    "--backoff-base=30s",
    "--backoff-cap=30s",
]);

fn ready_reason(bundle: &Bundle) -> Option<(String, String)> {
    condition(bundle, types::READY).map(|c| (c.status.clone(), c.reason.clone()))
}

/// Waits until `Ready` has `reason` (and `status`), and its message mentions every `mention`.
async fn wait_ready_reason(
    client: &Client,
    name: &str,
    status: &str,
    reason: &str,
    mentions: &[&str],
) -> Bundle {
    let bundle = wait_bundle(client, name, reason, |b| {
        ready_reason(b) == Some((status.to_string(), reason.to_string()))
    })
    .await;
    let message = &condition(&bundle, types::READY).unwrap().message;
    for mention in mentions {
        assert!(
            message.contains(mention),
            "{reason} names {mention}: {message}"
        );
    }
    bundle
}

/// A namespace, and a bundle image per name holding a ConfigMap of that name: the pinned
/// references, in order.
async fn images(client: &Client, ns: &str, names: &[&str]) -> Vec<String> {
    ensure_namespace(client, ns).await;
    let mut pinned = Vec::new();
    for name in names {
        pinned.push(
            push(
                &format!("{ns}/{name}:v1"),
                &[("cm.yaml", config_map(name, None, name))],
            )
            .await,
        );
    }
    pinned
}

fn depending(image: &str, ns: &str, depends_on: &[&str]) -> gantry_api::BundleSpec {
    let mut spec = spec(image, Some(ns));
    spec.depends_on = depends_on.iter().map(|s| s.to_string()).collect();
    spec
}

async fn exists(client: &Client, ns: &str, name: &str) -> bool {
    config_map_data(client, ns, name).await.is_some()
}

#[tokio::test]
async fn a_chain_installs_in_order() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_name("chain");
    let pinned = images(&client, &ns, &["a", "b", "c"]).await;
    let class = unique_name("chain-manual");
    apply_class(&client, &class, class_spec(ApprovalPolicy::Manual), false).await;
    let [a, b, c] = ["a", "b", "c"].map(|n| unique_name(&format!("chain-{n}")));
    // A waits for a person; B depends on A, C on B.
    let mut a_spec = spec(&pinned[0], Some(&ns));
    a_spec.provisioner_class_name = Some(class);
    create_bundle(&client, &c, depending(&pinned[2], &ns, &[&b])).await;
    create_bundle(&client, &b, depending(&pinned[1], &ns, &[&a])).await;
    create_bundle(&client, &a, a_spec).await;

    wait_bundle(&client, &a, "AwaitingApproval", |b| {
        b.status.as_ref().and_then(|s| s.phase) == Some(BundlePhase::AwaitingApproval)
    })
    .await;
    let waiting =
        wait_ready_reason(&client, &b, "False", reasons::DEPENDENCY_NOT_READY, &[&a]).await;
    assert_eq!(
        waiting.status.as_ref().and_then(|s| s.phase),
        Some(BundlePhase::Pending)
    );
    wait_ready_reason(&client, &c, "False", reasons::DEPENDENCY_NOT_READY, &[&b]).await;
    assert!(
        !exists(&client, &ns, "b").await,
        "B is not applied before A is Ready"
    );
    assert!(
        !exists(&client, &ns, "c").await,
        "C is not applied before B is Ready"
    );

    ok_on(&cluster, &["approve", &a, "--yes"]);
    // Until C is Ready, each object present means the bundle before it is Ready.
    let bundles: Api<Bundle> = Api::all(client.clone());
    let ready = |name: String| {
        let bundles = bundles.clone();
        async move { bundles.get(&name).await.is_ok_and(|b| is_ready(&b)) }
    };
    wait_until("C Ready", WAIT, || async {
        let c_ready = ready(c.clone()).await;
        if exists(&client, &ns, "c").await {
            assert!(
                ready(b.clone()).await,
                "C's objects exist while B is not Ready"
            );
        }
        if exists(&client, &ns, "b").await {
            assert!(
                ready(a.clone()).await,
                "B's objects exist while A is not Ready"
            );
        }
        c_ready.then_some(())
    })
    .await;
    assert!(exists(&client, &ns, "b").await && exists(&client, &ns, "a").await);
}

/// A client, a namespace, images of ConfigMaps `first` and `second` (pinned), and two bundle
/// names, for `prefix`.
async fn two_images(prefix: &str) -> (Client, String, Vec<String>, [String; 2]) {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_name(prefix);
    let pinned = images(&client, &ns, &["first", "second"]).await;
    let names = ["first", "second"].map(|n| unique_name(&format!("{prefix}-{n}")));
    (client, ns, pinned, names)
}

#[tokio::test]
async fn a_missing_dependency_is_reported_then_resolved_when_created() {
    let (client, ns, pinned, [first, second]) = two_images("missing").await;
    create_bundle(&client, &second, depending(&pinned[1], &ns, &[&first])).await;
    let bundle = wait_ready_reason(
        &client,
        &second,
        "False",
        reasons::DEPENDENCY_NOT_FOUND,
        &[&first],
    )
    .await;
    assert_eq!(
        bundle.status.as_ref().and_then(|s| s.phase),
        Some(BundlePhase::Failing)
    );
    assert!(!exists(&client, &ns, "second").await);

    // Creating the missing bundle wakes the one waiting (no retry on a timer is needed).
    create_bundle(&client, &first, spec(&pinned[0], Some(&ns))).await;
    wait_bundle(&client, &second, "Ready", is_ready).await;
    assert!(exists(&client, &ns, "second").await);
}

#[tokio::test]
async fn a_cycle_is_reported_and_broken() {
    let (client, ns, pinned, [x, y]) = two_images("cycle").await;
    create_bundle(&client, &x, depending(&pinned[0], &ns, &[&y])).await;
    create_bundle(&client, &y, depending(&pinned[1], &ns, &[&x])).await;
    let cycle = format!("{x} -> {y} -> {x}");
    wait_ready_reason(&client, &x, "False", reasons::DEPENDENCY_CYCLE, &[&cycle]).await;
    wait_ready_reason(
        &client,
        &y,
        "False",
        reasons::DEPENDENCY_CYCLE,
        &[&format!("{y} -> {x} -> {y}")],
    )
    .await;
    assert!(!exists(&client, &ns, "first").await && !exists(&client, &ns, "second").await);

    patch_spec(&client, &y, json!({ "dependsOn": null })).await;
    wait_bundle(&client, &y, "Ready", is_ready).await;
    wait_bundle(&client, &x, "Ready", is_ready).await;
}

#[tokio::test]
async fn suspend_stops_repairs_until_resume() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_name("suspend");
    let pinned = images(&client, &ns, &["kept"]).await;
    let name = unique_name("suspend");
    create_bundle_ready(&client, &name, spec(&pinned[0], Some(&ns))).await;

    ok_on(&cluster, &["suspend", &name]);
    let suspended =
        wait_ready_reason(&client, &name, "True", reasons::SUSPENDED, &["suspend"]).await;
    assert!(suspended.spec.suspend);

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    config_maps
        .patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { "value": "drifted" } })),
        )
        .await
        .unwrap();
    // A pass ran after the drift (the request was handled), and repaired nothing.
    reconcile_handled(&client, &name).await;
    assert_eq!(
        config_map_data(&client, &ns, "kept").await.as_deref(),
        Some("drifted"),
        "a suspended bundle repairs nothing"
    );
    let output = fails_on(&cluster, &["reconcile", &name, "--timeout", "5s"]);
    assert!(output.contains("suspended"), "{output}");

    ok_on(&cluster, &["resume", &name]);
    wait_config_map(
        &client,
        &ns,
        "kept",
        "kept",
        "the drift repaired after resume",
    )
    .await;
    wait_ready_reason(&client, &name, "True", reasons::INSTALL_SUCCEEDED, &[]).await;
}

#[tokio::test]
async fn reconcile_skips_the_backoff_and_resolves_the_tag_again() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "retry").await;
    let name = unique_name("retry");
    let tag = format!("{ns}/app:v1");
    create_bundle(&client, &name, spec(&in_registry(&tag), Some(&ns))).await;
    let failed = wait_failure(&client, &name, types::UNPACKED, reasons::PULL_FAILED, &tag).await;
    let message = &condition(&failed, types::UNPACKED).unwrap().message;
    let retry_in: f64 = message
        .rsplit_once("next retry in ")
        .and_then(|(_, rest)| rest.trim_end_matches("s)").parse().ok())
        .unwrap_or_else(|| panic!("the message names the next retry: {message}"));
    assert!(retry_in >= 20.0, "the backoff is long: {message}");

    push(&tag, &[("cm.yaml", config_map("late", None, "1"))]).await;
    let started = Instant::now();
    let out = ok_on(&cluster, &["reconcile", &name, "--timeout", "15s"]);
    let took = started.elapsed();
    assert!(out.contains("Ready"), "{out}");
    assert!(
        took < Duration::from_secs(15) && took.as_secs_f64() < retry_in,
        "the reconcile took {took:?}, the backoff was {retry_in}s"
    );
    let bundle = wait_bundle(&client, &name, "Ready", is_ready).await;
    assert!(
        bundle
            .status
            .as_ref()
            .is_some_and(|s| s.last_handled_reconcile_at.is_some())
    );
    assert!(exists(&client, &ns, "late").await);
}

fn crd_yaml(group: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    kind: Widget\n    plural: widgets\n    singular: widget\n    listKind: WidgetList\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    )
}

fn widget_yaml(group: &str) -> String {
    format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 3\n")
}

/// A bundle of a CRD and a Widget, in the file order given; the Widget must come up.
async fn crd_bundle_installs(client: &Client, widget_first: bool) {
    let ns = unique_namespace(client, "crd-order").await;
    let group = format!("{ns}.example.com");
    let (first, second) = if widget_first {
        (widget_yaml(&group), crd_yaml(&group))
    } else {
        (crd_yaml(&group), widget_yaml(&group))
    };
    let pinned = push(
        &format!("{ns}/app:v1"),
        &[("00-first.yaml", first), ("10-second.yaml", second)],
    )
    .await;
    let name = unique_name("crd-order");
    let bundle = create_bundle_ready(client, &name, spec(&pinned, Some(&ns))).await;
    assert_eq!(
        inventory_kinds(&bundle),
        ["CustomResourceDefinition", "Widget"],
        "the CRD goes first"
    );
    let widgets = widgets(client, &ns, &group);
    assert!(
        widgets.get_opt("w").await.unwrap().is_some(),
        "the Widget exists"
    );
}

#[tokio::test]
async fn a_custom_resource_before_its_crd_installs() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    crd_bundle_installs(&client, true).await;
}

#[tokio::test]
async fn a_custom_resource_after_its_crd_installs() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    crd_bundle_installs(&client, false).await;
}

/// A CRD of kind `kind` in `group`, served in two versions.
fn two_version_crd_yaml(group: &str, kind: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    let schema = "    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n";
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    kind: {kind}\n    plural: {plural}\n  versions:\n  - name: v1beta1\n    served: true\n    storage: false\n{schema}  - name: v1\n    served: true\n    storage: true\n{schema}"
    )
}

#[tokio::test]
async fn objects_after_crds_wait_until_every_crd_is_established() {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ListParams, WatchEvent, WatchParams};

    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "crds-first").await;
    let group = format!("{ns}.example.com");
    // No custom resource in the bundle: what comes after the CRDs is a workload that would use
    // them (an operator's Deployment; here a ConfigMap standing in for it).
    let kinds = ["Alpha", "Beta", "Gamma", "Delta"];
    let mut files: Vec<(String, String)> = kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| (format!("0{i}-crd.yaml"), two_version_crd_yaml(&group, kind)))
        .collect();
    files.push((
        "10-operator.yaml".into(),
        config_map("operator", None, "v1"),
    ));
    let files: Vec<(&str, String)> = files.iter().map(|(f, c)| (f.as_str(), c.clone())).collect();
    let pinned = push(&format!("{ns}/app:v1"), &files).await;

    // Both watches start at one revision of the one etcd: resourceVersions are comparable.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let start = crds
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let crd_events = crds
        .watch(&WatchParams::default(), &start)
        .await
        .unwrap()
        .boxed();
    let cm_events = config_maps
        .watch(&WatchParams::default(), &start)
        .await
        .unwrap()
        .boxed();

    let name = unique_name("crds-first");
    create_bundle(&client, &name, spec(&pinned, Some(&ns))).await;

    // The revision at which each CRD of the bundle was first seen Established.
    let suffix = format!(".{group}");
    let established = async {
        let mut seen: std::collections::BTreeMap<String, u64> = Default::default();
        let mut events = crd_events;
        while seen.len() < kinds.len() {
            let Some(event) = events.try_next().await.unwrap() else {
                break;
            };
            let (WatchEvent::Added(crd) | WatchEvent::Modified(crd)) = event else {
                continue;
            };
            let crd_name = crd.metadata.name.clone().unwrap_or_default();
            let is_established = crd.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if crd_name.ends_with(&suffix) && is_established {
                let revision = crd.metadata.resource_version.unwrap().parse().unwrap();
                seen.entry(crd_name).or_insert(revision);
            }
        }
        seen
    };
    let created = async {
        let mut events = cm_events;
        loop {
            if let Some(WatchEvent::Added(cm)) = events.try_next().await.unwrap()
                && cm.metadata.name.as_deref() == Some("operator")
            {
                let revision: u64 = cm.metadata.resource_version.unwrap().parse().unwrap();
                return revision;
            }
        }
    };
    let (established, created) =
        tokio::time::timeout(WAIT, async { futures::join!(established, created) })
            .await
            .expect("the CRDs established and the ConfigMap created");
    assert_eq!(established.len(), kinds.len(), "{established:?}");
    for (crd, revision) in &established {
        assert!(
            *revision < created,
            "{crd} was established at revision {revision}, after the object of the next wave \
             was created at {created}"
        );
    }
    wait_bundle(&client, &name, "Ready", is_ready).await;
}

#[tokio::test]
async fn deletion_waits_for_objects_with_finalizers() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "held").await;
    let held = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers:\n  - gantry.dev/test-hold\ndata:\n  value: \"1\"\n";
    let pinned = push(
        &format!("{ns}/app:v1"),
        &[
            ("a.yaml", config_map("free", None, "1")),
            ("b.yaml", held.to_string()),
        ],
    )
    .await;
    let name = unique_name("held");
    create_bundle_ready(&client, &name, spec(&pinned, Some(&ns))).await;

    delete_bundle(&client, &name).await;
    let waiting = wait_bundle(&client, &name, "Uninstalling", |b| {
        condition(b, types::INSTALLED).is_some_and(|c| c.reason == reasons::UNINSTALLING)
    })
    .await;
    let message = &condition(&waiting, types::INSTALLED).unwrap().message;
    assert!(
        message.contains(&format!("ConfigMap {ns}/held"))
            && message.contains("gantry.dev/test-hold"),
        "the bundle names what it waits for: {message}"
    );
    assert!(!message.contains("free"), "{message}");
    assert_eq!(
        waiting.status.as_ref().and_then(|s| s.phase),
        Some(BundlePhase::Deleting)
    );
    assert!(
        !exists(&client, &ns, "free").await,
        "objects without finalizers are gone"
    );
    assert!(
        Api::<Bundle>::all(client.clone())
            .get_opt(&name)
            .await
            .unwrap()
            .is_some(),
        "the bundle stays"
    );

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    config_maps
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await
        .unwrap();
    wait_bundle_gone(&client, &name).await;
    assert!(!exists(&client, &ns, "held").await);
}
