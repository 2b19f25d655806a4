//! The provisioner end to end: real kube-apiserver + etcd, real registry, real storage server,
//! the real `gantry-provisioner` binary.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    ApprovalPolicy, BUNDLE_LABEL, Bundle, BundlePhase, BundleSpec, PLAIN_PROVISIONER,
    ProvisionerClass, ProvisionerClassSpec, UNINSTALL_FINALIZER,
};
use gantry_image::{Platform, RegistryClient, RegistryOptions};
use gantry_tests::audit::AuditLog;
use gantry_tests::e2e::*;
use gantry_tests::{control_plane, registry, unique_name, wait_until};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

#[tokio::test]
async fn a_bundle_installs_and_reports_its_digest() {
    let gantry = gantry();
    let client = control_plane().client().await;
    let ns = unique_name("ready");
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("00-namespace.yaml", namespace_yaml(&ns)),
            (
                "10-config.yaml",
                format!(
                    "{}---\n{}",
                    config_map("one", None, "1"),
                    config_map("two", None, "2")
                ),
            ),
        ],
    )
    .await;
    let name = unique_name("ready");
    let bundle = create_bundle_ready(
        &client,
        &name,
        spec(&in_registry(&format!("{ns}/app:v1")), Some(&ns)),
    )
    .await;
    let status = bundle.status.clone().unwrap();

    assert_eq!(status.phase, Some(BundlePhase::Installed));
    assert_eq!(
        status.resolved_image.as_deref(),
        Some(image.as_str()),
        "the tag resolved to the pushed digest"
    );
    assert_eq!(status.platform, Some(Platform::current().to_string()));
    assert!(
        status
            .manifest_digest
            .as_deref()
            .is_some_and(|d| d.starts_with("sha256:"))
    );
    assert!(bundle.finalizers().iter().any(|f| f == UNINSTALL_FINALIZER));
    let kinds: Vec<(&str, &str)> = status
        .inventory
        .iter()
        .map(|e| (e.kind.as_str(), e.name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("Namespace", ns.as_str()),
            ("ConfigMap", "one"),
            ("ConfigMap", "two")
        ]
    );

    // The objects are there, labelled, owned by field manager `gantry`.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let one = api.get("one").await.expect("ConfigMap one exists");
    assert_eq!(one.labels().get(BUNDLE_LABEL), Some(&name));
    assert!(
        one.managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some("gantry"))
    );

    // The stored content is where status says, with the digest status says.
    let url = status.content_url.clone().expect("contentURL");
    assert!(url.starts_with(gantry.storage.url()), "{url}");
    let body = reqwest::get(&url).await.unwrap().bytes().await.unwrap();
    let digest = status.content_digest.clone().unwrap();
    use sha2::Digest;
    assert_eq!(
        digest,
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&body)))
    );

    // Events record the outcome; the steps under way (`Unpacking`, `Installing`) are shown in
    // status only.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let reasons_seen = wait_until("Events of the bundle", WAIT, || {
        let events = events.clone();
        let name = name.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            let seen: Vec<String> = list
                .items
                .iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
                })
                .filter_map(|e| e.reason.clone())
                .collect();
            seen.iter()
                .any(|r| r == reasons::INSTALL_SUCCEEDED)
                .then_some(seen)
        }
    })
    .await;
    for reason in [reasons::UNPACKING, reasons::INSTALLING] {
        assert!(
            !reasons_seen.iter().any(|r| r == reason),
            "no Event {reason}: {reasons_seen:?}"
        );
    }

    // Requested permissions count what was installed.
    let permissions = status.requested_permissions.expect("requestedPermissions");
    assert_eq!(permissions.cluster_scoped[0].kind, "Namespace");
    assert_eq!(permissions.namespaced[0].namespace, ns);
    assert_eq!(permissions.namespaced[0].kinds[0].count, 2);
}

/// A TCP proxy to `upstream` on loopback that holds every chunk a client sends for `delay`:
/// each request to the registry behind it takes that much longer. Returns its address.
async fn slow_proxy(upstream: String, delay: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                let requests = async {
                    let mut buffer = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = from_client.read(&mut buffer).await {
                        tokio::time::sleep(delay).await;
                        if to_server.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = to_server.shutdown().await;
                };
                let answers = async {
                    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                    let _ = to_client.shutdown().await;
                };
                tokio::join!(requests, answers);
            });
        }
    });
    address
}

/// Pushes an image of one ConfigMap into a new namespace and creates a bundle of it pulled
/// through `proxy` (a class of its own trusts it over plain HTTP). Returns the bundle's name
/// and the namespace.
async fn bundle_through(client: &Client, proxy: &str, what: &str) -> (String, String) {
    let ns = unique_name(what);
    push(
        &format!("{ns}/app:v1"),
        &[("cm.yaml", config_map(what, Some(&ns), "k: v"))],
    )
    .await;
    ensure_namespace(client, &ns).await;
    let class = unique_name(&format!("{what}-class"));
    let mut class_body = class_spec(ApprovalPolicy::Automatic);
    class_body.insecure_registries.push(proxy.to_string());
    apply_class(client, &class, class_body, false).await;
    let name = unique_name(what);
    let bundle_spec = spec_of_class(&format!("{proxy}/{ns}/app:v1"), Some(&ns), &class);
    create_bundle(client, &name, bundle_spec).await;
    (name, ns)
}

#[tokio::test]
async fn a_slow_pull_shows_unpacking_while_it_lasts() {
    gantry();
    let client = setup(control_plane()).await;
    // Each request to the registry takes 700 ms more: a pull (manifest, config, layer) takes
    // two seconds, past the moment `Unpacking` is shown.
    let proxy = slow_proxy(registry().host().to_string(), Duration::from_millis(700)).await;
    let (name, ns) = bundle_through(&client, &proxy, "slow-pull").await;
    let unpacking = wait_bundle(
        &client,
        &name,
        "Ready=False Unpacking",
        reason_is(types::READY, reasons::UNPACKING),
    )
    .await;
    let message = &condition(&unpacking, types::UNPACKED).unwrap().message;
    assert!(
        message.starts_with(&format!("pulling {proxy}/{ns}/app@sha256:")),
        "{message}"
    );
    wait_bundle(&client, &name, "Ready", is_ready).await;
}

/// A TCP proxy to `upstream` on loopback that can be taken down, as a registry that went away:
/// while down it closes the connections it holds and each new one at once.
struct SwitchableProxy {
    address: String,
    up: tokio::sync::watch::Sender<bool>,
}

impl SwitchableProxy {
    async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (up, _) = tokio::sync::watch::channel(true);
        let switch = up.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut up = switch.subscribe();
                if !*up.borrow_and_update() {
                    continue;
                }
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = up.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Self { address, up }
    }

    fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }
}

/// A pass that failed while the registry was away reports Ready again at the first pass after
/// it is back. The digest did not change, so that pass could take the shortcut of a bundle
/// unchanged since its last full check, which writes nothing: the failure would stay in the
/// status until the next resync (30 s here).
#[tokio::test]
async fn a_failure_is_cleared_by_the_first_pass_after_the_registry_is_back() {
    gantry();
    let client = setup(control_plane()).await;
    let proxy = SwitchableProxy::start(registry().host().to_string()).await;
    let (name, _) = bundle_through(&client, &proxy.address, "outage").await;
    wait_bundle(&client, &name, "Ready", is_ready).await;

    // The tag is resolved again every second: the first resolution while the registry is
    // away fails.
    proxy.set_up(false);
    wait_bundle(
        &client,
        &name,
        "Ready=False PullFailed",
        reason_is(types::READY, reasons::PULL_FAILED),
    )
    .await;
    proxy.set_up(true);
    let back = std::time::Instant::now();
    let bundle = wait_bundle(&client, &name, "Ready again", is_ready).await;
    // The retries back off from 200 ms to at most 5 s: one comes within seconds.
    assert!(
        back.elapsed() < Duration::from_secs(12),
        "Ready again {:.1} s after the registry came back, not at the first retry",
        back.elapsed().as_secs_f64()
    );
    assert_eq!(
        condition(&bundle, types::UNPACKED).map(|c| c.status.as_str()),
        Some("True"),
        "the pull failure is gone from Unpacked too"
    );
}

#[tokio::test]
async fn a_moved_tag_rolls_out_and_prunes() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "moved").await;
    let repo = format!("{ns}/app:stable");
    let first = push(
        &repo,
        &[
            (
                "a.yaml",
                format!(
                    "{}  extra: \"only-in-v1\"\n",
                    config_map("kept", None, "v1")
                ),
            ),
            ("b.yaml", config_map("dropped", None, "v1")),
        ],
    )
    .await;
    let name = unique_name("moved");
    create_bundle(&client, &name, spec(&in_registry(&repo), Some(&ns))).await;
    let bundle = wait_bundle(&client, &name, "Ready on the first digest", is_ready).await;
    assert_eq!(
        bundle.status.unwrap().resolved_image.as_deref(),
        Some(first.as_str())
    );
    assert_config_map(&client, &ns, "dropped", Some("v1")).await;

    // The tag moves: the new digest is noticed, applied, and what it no longer has is pruned.
    let second = push(
        &repo,
        &[
            ("a.yaml", config_map("kept", None, "v2")),
            ("c.yaml", config_map("added", None, "v2")),
        ],
    )
    .await;
    assert_ne!(first, second);
    wait_bundle(&client, &name, "Ready on the second digest", |b| {
        is_ready(b)
            && b.status.as_ref().and_then(|s| s.resolved_image.as_deref()) == Some(second.as_str())
    })
    .await;
    assert_config_map(&client, &ns, "kept", Some("v2")).await;
    assert_config_map(&client, &ns, "added", Some("v2")).await;
    assert_eq!(
        config_map_data(&client, &ns, "dropped").await,
        None,
        "pruned"
    );
    // Only the installed content stays stored.
    let bundle: Bundle = Api::<Bundle>::all(client.clone()).get(&name).await.unwrap();
    let current = bundle.status.unwrap().content_digest.unwrap();
    assert_eq!(
        stored_content(&name).await,
        [current.trim_start_matches("sha256:")],
        "older content removed"
    );

    // A field the new content no longer has is removed, not left behind.
    let kept: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let kept = kept.get("kept").await.unwrap().data.unwrap_or_default();
    assert!(
        !kept.contains_key("extra"),
        "dropped field removed: {kept:?}"
    );
}

#[tokio::test]
async fn bundles_of_another_provisioner_are_left_untouched() {
    let client = shared_gantry_client().await;
    let other = unique_name("other-class");
    apply_class(
        &client,
        &other,
        ProvisionerClassSpec {
            provisioner: "example.com/other".into(),
            ..Default::default()
        },
        false,
    )
    .await;
    let ns = unique_namespace(&client, "untouched").await;
    let image = format!("{}/{ns}/app:v1", registry().host());
    push_config_map(&format!("{ns}/app:v1"), "never", None, "x").await;
    let foreign = unique_name("foreign");
    create_bundle(&client, &foreign, spec_of_class(&image, Some(&ns), &other)).await;
    // A bundle of ours created afterwards reaching Ready shows the controller has seen both.
    let ours = unique_name("ours");
    create_bundle(&client, &ours, spec(&image, Some(&ns))).await;
    wait_bundle(&client, &ours, "Ready", is_ready).await;

    let bundles: Api<Bundle> = Api::all(client.clone());
    let foreign = bundles.get(&foreign).await.unwrap();
    assert_eq!(
        foreign.status, None,
        "no status written on another provisioner's bundle"
    );
    assert!(foreign.finalizers().is_empty(), "no finalizer added");
}

/// Two installations on one cluster: a second one (its own namespace, storage server and
/// provisioner ID, sharded) serves the classes naming its ID. The shared provisioner leaves
/// their bundles alone, and the second one's sharder neither assigns nor serves the shared
/// one's bundles, before and after a reconcile request to both.
#[tokio::test]
async fn a_second_installation_serves_only_the_classes_naming_its_id() {
    const SECOND_ID: &str = "gantry.dev/plain-second";
    let shared = gantry();
    let client = control_plane().client().await;
    let second =
        start_installation(&client, SECOND_ID, &["--sharding", "--backoff-base=200ms"]).await;
    let (second_storage, second_class) = (&second.storage, second.class.clone());
    let ns = unique_namespace(&client, "installations").await;
    let image = push_config_map(&format!("{ns}/app:v1"), "installed", None, "x").await;
    let theirs = unique_name("theirs");
    create_bundle(
        &client,
        &theirs,
        BundleSpec {
            provisioner_class_name: Some(second_class.clone()),
            install_namespace: Some(format!("{ns}-theirs")),
            ..spec(&image, None)
        },
    )
    .await;
    ensure_namespace(&client, &format!("{ns}-theirs")).await;
    let ours = unique_name("ours");
    create_bundle(&client, &ours, spec(&image, Some(&ns))).await;
    wait_bundle(&client, &theirs, "Ready", is_ready).await;
    wait_bundle(&client, &ours, "Ready", is_ready).await;

    let bundles: Api<Bundle> = Api::all(client.clone());
    let check = |when: &str, theirs: &Bundle, ours: &Bundle| {
        let url = |b: &Bundle| {
            b.status
                .as_ref()
                .and_then(|s| s.content_url.clone())
                .unwrap_or_default()
        };
        assert!(
            url(theirs).starts_with(second_storage.url()),
            "{when}: the second installation stored its bundle's content: {}",
            url(theirs)
        );
        assert!(
            url(ours).starts_with(shared.storage.url()),
            "{when}: the shared installation stored its bundle's content: {}",
            url(ours)
        );
        assert!(
            theirs.labels().contains_key(gantry_api::SLOT_LABEL),
            "{when}: the second installation's sharder gave its bundle a slot"
        );
        assert_eq!(
            ours.labels().get(gantry_api::SLOT_LABEL),
            None,
            "{when}: the second installation's sharder left the shared one's bundle alone"
        );
    };
    let (t, o) = (
        bundles.get(&theirs).await.unwrap(),
        bundles.get(&ours).await.unwrap(),
    );
    check("once Ready", &t, &o);

    // A reconcile request wakes every provisioner watching the bundle: each bundle's pass
    // must come from its own installation.
    let requested = "2026-01-01T00:00:00Z";
    for name in [&theirs, &ours] {
        let patch = json!({"metadata": {"annotations": {
            gantry_api::RECONCILE_REQUESTED_ANNOTATION: requested}}});
        bundles
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let handled = |name: String| {
        let bundles = bundles.clone();
        async move {
            let b = bundles.get(&name).await.ok()?;
            (b.status.as_ref()?.last_handled_reconcile_at.as_deref() == Some(requested))
                .then_some(b)
        }
    };
    let t = wait_until(
        "the second installation's bundle to handle the request",
        WAIT,
        || handled(theirs.clone()),
    )
    .await;
    let o = wait_until(
        "the shared installation's bundle to handle the request",
        WAIT,
        || handled(ours.clone()),
    )
    .await;
    check("after a reconcile request", &t, &o);

    // The second installation removes its own bundle's objects when the bundle goes.
    delete_bundle(&client, &theirs).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("{ns}-theirs"));
    wait_until(
        "the second installation's bundle and its ConfigMap to go",
        WAIT,
        || async {
            (bundles.get_opt(&theirs).await.ok()?.is_none()
                && config_maps.get_opt("installed").await.ok()?.is_none())
            .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn the_default_class_serves_bundles_without_a_class() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "default").await;
    push_config_map(&format!("{ns}/app:v1"), "c", None, "x").await;
    let name = unique_name("default");
    let created = create_bundle(
        &client,
        &name,
        spec(&in_registry(&format!("{ns}/app:v1")), Some(&ns)),
    )
    .await;
    assert_eq!(created.spec.provisioner_class_name, None);
    let bundle = wait_bundle(&client, &name, "Ready", is_ready).await;
    let approved = condition(&bundle, types::APPROVED).unwrap();
    assert!(
        approved.message.contains(DEFAULT_CLASS),
        "{}",
        approved.message
    );
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    let class = classes.get(DEFAULT_CLASS).await.unwrap();
    let accepted = class.status.unwrap().conditions;
    assert!(
        accepted
            .iter()
            .any(|c| c.type_ == types::ACCEPTED && c.status == "True")
    );
}

#[tokio::test]
async fn a_missing_class_waits_and_proceeds_when_it_appears() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "late-class").await;
    push_config_map(&format!("{ns}/app:v1"), "c", None, "x").await;
    let class = unique_name("late");
    let name = unique_name("late-class");
    let bundle_spec = spec_of_class(&in_registry(&format!("{ns}/app:v1")), Some(&ns), &class);
    create_bundle(&client, &name, bundle_spec).await;
    let waiting = wait_bundle(
        &client,
        &name,
        "ClassNotFound",
        reason_is(types::UNPACKED, reasons::CLASS_NOT_FOUND),
    )
    .await;
    assert!(
        condition(&waiting, types::UNPACKED)
            .unwrap()
            .message
            .contains(&class)
    );
    apply_class(
        &client,
        &class,
        class_spec(ApprovalPolicy::Automatic),
        false,
    )
    .await;
    wait_bundle(&client, &name, "Ready once the class exists", is_ready).await;
}

#[tokio::test]
async fn pull_failures_retry_with_growing_delays() {
    let client = shared_gantry_client().await;
    // A tag that does not exist.
    let missing = unique_name("missing-tag");
    create_bundle(
        &client,
        &missing,
        spec(&in_registry("nothing/here:v404"), Some("default")),
    )
    .await;
    let mut delays = Vec::new();
    let mut attempts_seen = Vec::new();
    wait_bundle(&client, &missing, "four failed attempts", |b| {
        let Some(c) = condition(b, types::UNPACKED) else {
            return false;
        };
        if c.reason != reasons::PULL_FAILED {
            return false;
        }
        assert!(
            c.message.contains("nothing/here:v404"),
            "the message names the reference: {}",
            c.message
        );
        if let Some((attempt, delay)) = parse_retry(&c.message)
            && attempts_seen.last() != Some(&attempt)
        {
            attempts_seen.push(attempt);
            delays.push(delay);
        }
        attempts_seen.last().is_some_and(|a| *a >= 4)
    })
    .await;
    assert!(
        attempts_seen.windows(2).all(|w| w[1] > w[0]),
        "attempts grow: {attempts_seen:?}"
    );
    // 200ms base, doubling, ±20% jitter: each delay after the first is clearly longer.
    let first = delays.first().copied().unwrap();
    let last = delays.last().copied().unwrap();
    assert!(last > first * 2.0, "delays grow: {delays:?}");
    let bundle = wait_bundle(&client, &missing, "Failing", phase_is(BundlePhase::Failing)).await;
    assert_eq!(
        condition(&bundle, types::READY).unwrap().reason,
        reasons::PULL_FAILED
    );

    // A registry that does not answer (a closed loopback port).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let unreachable = unique_name("unreachable");
    let class = unique_name("unreachable-class");
    let mut class_body = class_spec(ApprovalPolicy::Automatic);
    class_body
        .insecure_registries
        .push(format!("127.0.0.1:{port}"));
    apply_class(&client, &class, class_body, false).await;
    let s = spec_of_class(&format!("127.0.0.1:{port}/app:v1"), Some("default"), &class);
    create_bundle(&client, &unreachable, s).await;
    wait_failure(
        &client,
        &unreachable,
        types::UNPACKED,
        reasons::PULL_FAILED,
        &format!("127.0.0.1:{port}"),
    )
    .await;
}

/// `(attempt, delay seconds)` from "... (attempt N, next retry in X.Ys)".
fn parse_retry(message: &str) -> Option<(u32, f64)> {
    let rest = &message[message.rfind("(attempt ")? + "(attempt ".len()..];
    let (attempt, rest) = rest.split_once(", next retry in ")?;
    let delay = rest.strip_suffix("s)")?;
    Some((attempt.parse().ok()?, delay.parse().ok()?))
}

#[tokio::test]
async fn an_invalid_bundle_fails_with_nothing_applied() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "invalid").await;
    // The image is pushed by skipping validation: a raw layer with a broken second file.
    let image = push_unvalidated(
        &format!("{ns}/app:v1"),
        &[
            ("a.yaml", config_map("would-be-applied", None, "x")),
            (
                "b.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n".into(),
            ),
        ],
    )
    .await;
    let name = unique_name("invalid");
    create_bundle(&client, &name, spec(&image, Some(&ns))).await;
    let bundle = wait_bundle(
        &client,
        &name,
        "InvalidBundle",
        reason_is(types::UNPACKED, reasons::INVALID_BUNDLE),
    )
    .await;
    let message = &condition(&bundle, types::UNPACKED).unwrap().message;
    assert!(
        message.contains("b.yaml"),
        "the message names the file: {message}"
    );
    assert_eq!(
        config_map_data(&client, &ns, "would-be-applied").await,
        None,
        "nothing applied"
    );
    assert!(bundle.status.unwrap().inventory.is_empty());
}

/// Pushes files as a plain+v0 image without validating them (to test the controller's checks).
async fn push_unvalidated(repository_tag: &str, files: &[(&str, String)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    write_bundle(dir.path(), files);
    let layout = dir.path().join("layout");
    let image = format!("{}:v1", layout.display());
    let run = |args: &[&str]| {
        let out = std::process::Command::new("umoci")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "umoci {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["init", "--layout", layout.to_str().unwrap()]);
    run(&["new", "--image", &image]);
    run(&[
        "insert",
        "--image",
        &image,
        dir.path().join("manifests").to_str().unwrap(),
        "/manifests",
    ]);
    let target = format!("docker://{}/{repository_tag}", registry().host());
    let digest_file = dir.path().join("digest");
    let out = std::process::Command::new("skopeo")
        .args([
            "copy",
            "--dest-tls-verify=false",
            "--digestfile",
            digest_file.to_str().unwrap(),
        ])
        .arg(format!("oci:{image}"))
        .arg(&target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "skopeo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = std::fs::read_to_string(digest_file).unwrap();
    let repository = repository_tag.split(':').next().unwrap();
    format!("{}/{repository}@{}", registry().host(), digest.trim())
}

#[tokio::test]
async fn a_crd_and_its_resources_install_together() {
    let client = shared_gantry_client().await;
    let ns = unique_name("crd");
    let group = format!("{ns}.example.com");
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    kind: Widget\n    plural: widgets\n    singular: widget\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              size:\n                type: integer\n"
    );
    let widget = |name: &str| {
        format!(
            "apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  size: 3\n"
        )
    };
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("00-namespace.yaml", namespace_yaml(&ns)),
            ("01-crd.yaml", crd),
            (
                "02-widgets.yaml",
                format!("{}---\n{}", widget("small"), widget("large")),
            ),
        ],
    )
    .await;
    let name = unique_name("crd");
    let bundle = create_bundle_ready(&client, &name, spec(&image, Some(&ns))).await;
    assert_eq!(
        inventory_kinds(&bundle),
        ["Namespace", "CustomResourceDefinition", "Widget", "Widget"]
    );
    let small = widgets(&client, &ns, &group)
        .get("small")
        .await
        .expect("the custom resource exists");
    assert_eq!(small.data["spec"]["size"], 3);

    // Deleting the bundle removes everything, the CRD included, and the stored content.
    let content_url = bundle.status.unwrap().content_url.unwrap();
    delete_bundle(&client, &name).await;
    wait_bundle_gone(&client, &name).await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get_opt(&format!("widgets.{group}")).await.unwrap();
    assert!(
        crd.is_none_or(|c| c.metadata.deletion_timestamp.is_some()),
        "the CRD is deleted"
    );
    let status = reqwest::get(&content_url).await.unwrap().status();
    assert_eq!(
        status,
        reqwest::StatusCode::NOT_FOUND,
        "stored content removed"
    );
}

#[tokio::test]
async fn install_namespace_defaulting_absence_and_late_namespace() {
    let client = shared_gantry_client().await;
    let ns = unique_name("late-ns");
    let image = push_config_map(&format!("{ns}/app:v1"), "c", None, "x").await;

    // No namespace on the object and none set on the bundle: the objects are named.
    let without = unique_name("no-ns");
    create_bundle(&client, &without, spec(&image, None)).await;
    wait_failure(
        &client,
        &without,
        types::INSTALLED,
        reasons::NAMESPACE_REQUIRED,
        "ConfigMap c (a.yaml",
    )
    .await;

    // An install namespace that does not exist yet: wait, then install once it appears.
    let later = unique_name("later");
    create_bundle(&client, &later, spec(&image, Some(&ns))).await;
    wait_failure(
        &client,
        &later,
        types::INSTALLED,
        reasons::NAMESPACE_NOT_FOUND,
        &ns,
    )
    .await;
    ensure_namespace(&client, &ns).await;
    wait_bundle(&client, &later, "Ready once the namespace exists", is_ready).await;
    assert_eq!(
        config_map_data(&client, &ns, "c").await.as_deref(),
        Some("x"),
        "defaulted into the install namespace"
    );
}

#[tokio::test]
async fn drift_is_corrected() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "drift").await;
    let image = push_config_map(&format!("{ns}/app:v1"), "watched", None, "desired").await;
    let name = unique_name("drift");
    create_bundle_ready(&client, &name, spec(&image, Some(&ns))).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // A changed field comes back.
    let patch = json!({ "data": { "value": "tampered" } });
    api.patch("watched", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_config_map(
        &client,
        &ns,
        "watched",
        "desired",
        "the changed field to be restored",
    )
    .await;

    // A deleted object comes back.
    api.delete("watched", &DeleteParams::default())
        .await
        .unwrap();
    wait_config_map(
        &client,
        &ns,
        "watched",
        "desired",
        "the deleted object to be restored",
    )
    .await;
}

/// A pass that checks live objects (drift repaired, a bundle taken over by another replica,
/// a restart) reads a namespace's objects of one kind with one list by the bundle's label, and
/// reads one by one only what that list did not find.
#[tokio::test]
async fn a_check_lists_a_kind_once_per_namespace_and_reads_only_what_the_list_missed() {
    gantry();
    let cluster = control_plane();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "listed").await;
    let files: Vec<(String, String)> = (0..20)
        .map(|i| {
            (
                format!("{i:02}.yaml"),
                config_map(&format!("cm-{i}"), None, "desired"),
            )
        })
        .collect();
    let files: Vec<(&str, String)> = files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let image = push(&format!("{ns}/app:v1"), &files).await;
    let name = unique_name("listed");
    create_bundle_ready(&client, &name, spec(&image, Some(&ns))).await;
    let reads_before = AuditLog::read(&cluster.audit_log())
        .unwrap()
        .config_map_reads(&ns)
        .len();

    // One object changed, one deleted: the passes that repair them check all twenty.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let patch = json!({ "data": { "value": "tampered" } });
    api.patch("cm-3", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    api.delete("cm-5", &DeleteParams::default()).await.unwrap();
    wait_config_map(&client, &ns, "cm-3", "desired", "cm-3 restored").await;
    wait_config_map(&client, &ns, "cm-5", "desired", "cm-5 restored").await;

    let reads: Vec<(String, String, String)> = AuditLog::read(&cluster.audit_log())
        .unwrap()
        .config_map_reads(&ns)
        .into_iter()
        .skip(reads_before)
        .filter(|(_, _, agent)| agent.starts_with("gantry-provisioner/"))
        .collect();
    let lists: Vec<&str> = reads
        .iter()
        .filter(|(verb, _, _)| verb == "list")
        .map(|(_, selector, _)| selector.as_str())
        .collect();
    let gets: BTreeSet<&str> = reads
        .iter()
        .filter(|(verb, _, _)| verb == "get")
        .map(|(_, object, _)| object.as_str())
        .collect();
    assert!(
        lists
            .iter()
            .any(|selector| *selector == format!("{BUNDLE_LABEL}={name}")),
        "the ConfigMaps were listed by the bundle's label: {reads:?}"
    );
    assert!(
        gets.iter().all(|object| *object == "cm-5"),
        "only the deleted ConfigMap, which no list found, was read on its own: {reads:?}"
    );
}

#[tokio::test]
async fn two_bundles_claiming_one_object_conflict_on_the_second() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "claim").await;
    let first_image = push_config_map(&format!("{ns}/first:v1"), "shared", None, "first").await;
    let second_image = push_config_map(&format!("{ns}/second:v1"), "shared", None, "second").await;
    let first = unique_name("first");
    create_bundle_ready(&client, &first, spec(&first_image, Some(&ns))).await;
    let second = unique_name("second");
    create_bundle(&client, &second, spec(&second_image, Some(&ns))).await;
    let bundle = wait_bundle(
        &client,
        &second,
        "Conflict",
        reason_is(types::INSTALLED, reasons::CONFLICT),
    )
    .await;
    let message = &condition(&bundle, types::INSTALLED).unwrap().message;
    assert!(
        message.contains("shared") && message.contains(&first),
        "{message}"
    );
    assert_eq!(
        config_map_data(&client, &ns, "shared").await.as_deref(),
        Some("first"),
        "no tug of war"
    );
    assert!(
        is_ready(&get_bundle(&client, &first).await),
        "the first bundle stays Ready"
    );

    // The owner suspended and the object deleted: it is still the first bundle's (its
    // inventory lists it), so the second does not take it.
    let suspend = |on: bool| patch_spec(&client, &first, json!({ "suspend": on }));
    suspend(true).await;
    wait_bundle(&client, &first, "Suspended", |b| {
        condition(b, types::READY).is_some_and(|c| c.reason == reasons::SUSPENDED)
    })
    .await;
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .delete("shared", &DeleteParams::default())
        .await
        .unwrap();
    let bundle = reconcile_handled(&client, &second).await;
    let installed = condition(&bundle, types::INSTALLED).unwrap();
    assert_eq!(installed.reason, reasons::CONFLICT, "{installed:?}");
    assert!(installed.message.contains(&first), "{}", installed.message);
    assert_eq!(config_map_data(&client, &ns, "shared").await, None);
    assert!(bundle.status.unwrap().inventory.is_empty());

    // Resumed, the first bundle puts its object back as its own.
    suspend(false).await;
    wait_until("the first bundle's object back", WAIT, || {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            (config_map_data(&client, &ns, "shared").await.as_deref() == Some("first"))
                .then_some(())
        }
    })
    .await;
    wait_bundle(&client, &first, "Ready again", is_ready).await;

    // Deleted while suspended, the first bundle uninstalls and lets go: the second installs.
    suspend(true).await;
    delete_bundle(&client, &first).await;
    wait_bundle_gone(&client, &first).await;
    reconcile_handled(&client, &second).await;
    wait_bundle(&client, &second, "Ready once the object is free", is_ready).await;
    assert_config_map(&client, &ns, "shared", Some("second")).await;
}

#[tokio::test]
async fn an_object_of_a_failed_first_install_stays_that_bundle_s() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "cut-short").await;
    // The second wave fails after the first (a Namespace) was written: a Service in that
    // Namespace the API server refuses (port 0), judged once the Namespace exists and before
    // the wave writes anything, so the ConfigMap of that wave is never written; the inventory
    // lists them all.
    let refused_namespace = unique_name("refused");
    let failing = push(
        &format!("{ns}/failing:v1"),
        &[
            ("00-namespace.yaml", namespace_yaml(&refused_namespace)),
            ("10-config.yaml", config_map("shared", Some(&ns), "failing")),
            (
                "20-service.yaml",
                format!(
                    "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {refused_namespace}\nspec:\n  ports:\n  - port: 0\n"
                ),
            ),
        ],
    )
    .await;
    let owner = unique_name("failing");
    create_bundle(&client, &owner, spec(&failing, None)).await;
    let bundle = wait_failure(
        &client,
        &owner,
        types::INSTALLED,
        reasons::INVALID_OBJECT,
        &refused_namespace,
    )
    .await;
    assert_eq!(config_map_data(&client, &ns, "shared").await, None);
    assert!(
        bundle
            .status
            .unwrap()
            .inventory
            .iter()
            .any(|e| e.kind == "ConfigMap" && e.name == "shared"),
        "recorded before applying"
    );

    let other = push_config_map(&format!("{ns}/other:v1"), "shared", None, "other").await;
    let claimant = unique_name("claimant");
    create_bundle(&client, &claimant, spec(&other, Some(&ns))).await;
    wait_failure(
        &client,
        &claimant,
        types::INSTALLED,
        reasons::CONFLICT,
        &owner,
    )
    .await;
    assert_eq!(config_map_data(&client, &ns, "shared").await, None);
}

#[tokio::test]
async fn require_digest_rejects_a_tag() {
    let client = shared_gantry_client().await;
    let class = unique_name("pinned-only");
    let mut body = class_spec(ApprovalPolicy::Automatic);
    body.require_digest = true;
    apply_class(&client, &class, body, false).await;
    let ns = unique_namespace(&client, "pinned").await;
    let pinned = push_config_map(&format!("{ns}/app:v1"), "c", None, "x").await;

    let tagged = unique_name("tagged");
    let s = spec_of_class(&in_registry(&format!("{ns}/app:v1")), Some(&ns), &class);
    create_bundle(&client, &tagged, s).await;
    wait_failure(
        &client,
        &tagged,
        types::UNPACKED,
        reasons::DIGEST_REQUIRED,
        ":v1",
    )
    .await;

    let by_digest = unique_name("by-digest");
    create_bundle_ready(
        &client,
        &by_digest,
        spec_of_class(&pinned, Some(&ns), &class),
    )
    .await;
}

#[tokio::test]
async fn a_private_registry_through_a_pull_secret() {
    let client = shared_gantry_client().await;
    let private = gantry_tests::Registry::start(gantry_tests::RegistryOptions {
        tls: true,
        auth: Some(("puller".into(), "pull-pass".into())),
    });
    let ns = unique_namespace(&client, "private").await;
    // Push with credentials and the registry's CA.
    let mut credentials = gantry_image::DockerConfig::default();
    credentials.insert(
        private.host(),
        gantry_image::Credential {
            username: "puller".into(),
            password: "pull-pass".into(),
        },
    );
    let pusher = RegistryClient::new(RegistryOptions {
        credentials,
        ca_pem: vec![private.ca_pem().unwrap().as_bytes().to_vec()],
        ..Default::default()
    })
    .unwrap();
    let files = [("a.yaml", config_map("secret-config", None, "private"))];
    let reference = format!("{}/{ns}/app:v1", private.host());
    let pushed = push_with(&pusher, &reference, &Platform::current(), &files).await;

    // The secrets: a dockerconfigjson pull secret and the CA.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let auth = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode("puller:pull-pass")
    };
    let config = json!({ "auths": { private.host(): { "auth": auth } } }).to_string();
    let pull_secret = unique_name("pull");
    let ca_secret = unique_name("ca");
    let mut string_data = BTreeMap::new();
    string_data.insert(".dockerconfigjson".to_string(), config);
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(pull_secret.clone()),
                    ..Default::default()
                },
                type_: Some("kubernetes.io/dockerconfigjson".into()),
                string_data: Some(string_data),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut ca_data = BTreeMap::new();
    ca_data.insert("ca.crt".to_string(), private.ca_pem().unwrap().to_string());
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(ca_secret.clone()),
                    ..Default::default()
                },
                string_data: Some(ca_data),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let class = unique_name("private-class");
    apply_class(
        &client,
        &class,
        ProvisionerClassSpec {
            provisioner: PLAIN_PROVISIONER.into(),
            registry_ca_secret: Some(ca_secret),
            ..Default::default()
        },
        false,
    )
    .await;

    // Without the pull secret, authentication is refused.
    let refused = unique_name("no-secret");
    let mut s = spec_of_class(&reference, Some(&ns), &class);
    create_bundle(&client, &refused, s.clone()).await;
    let bundle = wait_bundle(
        &client,
        &refused,
        "PullFailed",
        reason_is(types::UNPACKED, reasons::PULL_FAILED),
    )
    .await;
    let message = &condition(&bundle, types::UNPACKED).unwrap().message;
    assert!(
        message.contains("authentication")
            || message.contains("401")
            || message.contains("nauthorized"),
        "{message}"
    );

    // With it, the bundle installs.
    let allowed = unique_name("with-secret");
    s.pull_secret = Some(pull_secret);
    let bundle = create_bundle_ready(&client, &allowed, s).await;
    assert_eq!(
        bundle.status.unwrap().resolved_image.as_deref(),
        Some(pushed.pinned.as_str())
    );
    assert_config_map(&client, &ns, "secret-config", Some("private")).await;
}

/// Writes `status.approval` as an approver does: server-side apply on the status subresource
/// with a field manager of its own.
async fn decide(client: &Client, bundle: &str, decision: &str, digest: &str, reason: &str) {
    let bundles: Api<Bundle> = Api::all(client.clone());
    let patch = json!({
        "apiVersion": "gantry.dev/v1alpha1",
        "kind": "Bundle",
        "metadata": { "name": bundle },
        "status": { "approval": { "decision": decision, "digest": digest, "reason": reason,
                                  "time": "2026-01-01T00:00:00Z" } }
    });
    bundles
        .patch_status(
            bundle,
            &PatchParams::apply("test-approver").force(),
            &Patch::Apply(&patch),
        )
        .await
        .expect("writing the approval");
}

/// The content digests (hex) the storage server holds for bundle `name`.
async fn stored_content(name: &str) -> Vec<String> {
    let listing: serde_json::Value =
        reqwest::get(format!("{}/bundles/{name}", gantry().storage.url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    listing["tarballs"]
        .as_array()
        .map(|tarballs| {
            tarballs
                .iter()
                .filter_map(|t| t["digest"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Content unpacked in one pass and installed in a later one (here: approved later) leaves
/// only itself stored. Found by the chaos run: the earlier content stayed stored for good.
#[tokio::test]
async fn content_approved_later_leaves_only_itself_stored() {
    let client = shared_gantry_client().await;
    let UnderReview {
        name,
        namespace: ns,
        repository: repo,
        pinned: first,
        ..
    } = under_review(&client, "stored", |_| {
        vec![("a.yaml", config_map("gated", None, "v1"))]
    })
    .await;
    decide(&client, &name, "Approved", digest_of(&first), "v1").await;
    wait_bundle(&client, &name, "Ready at v1", is_ready).await;

    let second = push_config_map(&repo, "gated", None, "v2").await;
    wait_bundle(&client, &name, "awaiting approval of v2", |b| {
        b.status.as_ref().and_then(|s| s.resolved_image.as_deref()) == Some(second.as_str())
            && b.status.as_ref().and_then(|s| s.phase) == Some(BundlePhase::AwaitingApproval)
    })
    .await;
    assert_eq!(
        stored_content(&name).await.len(),
        2,
        "v1 installed, v2 under review"
    );
    decide(&client, &name, "Approved", digest_of(&second), "v2").await;
    let bundle = wait_bundle(&client, &name, "Ready at v2", |b| {
        is_ready(b)
            && b.status.as_ref().and_then(|s| s.resolved_image.as_deref()) == Some(second.as_str())
    })
    .await;
    assert_config_map(&client, &ns, "gated", Some("v2")).await;
    let current = bundle.status.unwrap().content_digest.unwrap();
    assert_eq!(
        stored_content(&name).await,
        [current.trim_start_matches("sha256:")],
        "only the installed content stays stored"
    );
}

#[tokio::test]
async fn manual_approval_is_bound_to_the_digest() {
    let client = shared_gantry_client().await;
    let UnderReview {
        name,
        namespace: ns,
        repository: repo,
        pinned: first,
        bundle: waiting,
    } = under_review(&client, "approve", |_| {
        vec![("a.yaml", config_map("gated", None, "v1"))]
    })
    .await;

    // Unpacked, reviewed content in status, nothing applied.
    let approved = condition(&waiting, types::APPROVED).unwrap();
    assert_eq!(
        (approved.status.as_str(), approved.reason.as_str()),
        ("False", reasons::AWAITING_APPROVAL)
    );
    assert!(
        waiting
            .status
            .as_ref()
            .unwrap()
            .requested_permissions
            .is_some()
    );
    assert_eq!(
        config_map_data(&client, &ns, "gated").await,
        None,
        "nothing applied before approval"
    );

    // An approval of another digest is ignored.
    let other = format!("sha256:{}", "0".repeat(64));
    decide(&client, &name, "Approved", &other, "wrong digest").await;
    let bundle = wait_bundle(&client, &name, "still waiting", |b| {
        condition(b, types::APPROVED).is_some_and(|c| c.reason == reasons::AWAITING_APPROVAL)
            && b.status
                .as_ref()
                .and_then(|s| s.approval.as_ref())
                .is_some()
    })
    .await;
    assert_eq!(
        bundle.status.unwrap().phase,
        Some(BundlePhase::AwaitingApproval)
    );
    assert_eq!(config_map_data(&client, &ns, "gated").await, None);

    // Approving the resolved digest installs it.
    decide(&client, &name, "Approved", digest_of(&first), "looks good").await;
    let bundle = wait_bundle(&client, &name, "Ready after approval", is_ready).await;
    assert_eq!(
        condition(&bundle, types::APPROVED).unwrap().reason,
        reasons::APPROVED
    );
    assert_config_map(&client, &ns, "gated", Some("v1")).await;

    // The tag moves: the new digest waits for a new approval; the old objects stay.
    let second = push_config_map(&repo, "gated", None, "v2").await;
    let bundle = wait_bundle(&client, &name, "waiting for the new digest", |b| {
        b.status.as_ref().and_then(|s| s.resolved_image.as_deref()) == Some(second.as_str())
            && condition(b, types::APPROVED).is_some_and(|c| c.reason == reasons::AWAITING_APPROVAL)
    })
    .await;
    assert!(
        condition(&bundle, types::APPROVED)
            .unwrap()
            .message
            .contains("does not carry over")
    );
    assert_config_map(&client, &ns, "gated", Some("v1")).await;
    // The controller kept the approver's decision as it was written.
    let approval = bundle.status.unwrap().approval.unwrap();
    assert_eq!(approval.digest, digest_of(&first));
    assert_eq!(approval.reason.as_deref(), Some("looks good"));

    // Denying the new digest stops it: phase Denied, reason from the approver, an Event.
    decide(&client, &name, "Denied", digest_of(&second), "not this one").await;
    let bundle = wait_bundle(&client, &name, "Denied", phase_is(BundlePhase::Denied)).await;
    let denied = condition(&bundle, types::APPROVED).unwrap();
    assert_eq!(denied.reason, reasons::DENIED);
    assert!(
        denied.message.contains("not this one"),
        "{}",
        denied.message
    );
    assert_eq!(
        config_map_data(&client, &ns, "gated").await.as_deref(),
        Some("v1"),
        "nothing of the denied digest applied"
    );
    // Only an approver or another digest brings it on: Stalled says so.
    assert_stalled(&bundle, reasons::DENIED);
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    wait_until("a Denied event", WAIT, || {
        let events = events.clone();
        let name = name.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some(reasons::DENIED)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(name.as_str())
                })
                .then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn the_controller_never_rewrites_the_approval() {
    let client = shared_gantry_client().await;
    let UnderReview {
        name,
        namespace: ns,
        pinned: image,
        ..
    } = under_review(&client, "keep", |ns| {
        vec![("a.yaml", config_map("kept", Some(ns), "v1"))]
    })
    .await;
    decide(&client, &name, "Approved", digest_of(&image), "ok").await;
    wait_bundle(&client, &name, "Ready", is_ready).await;

    // Make the controller write status many times: new generations and drift corrections.
    let writes_before = gantry().status_writes().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for round in 0..5 {
        api.delete("kept", &DeleteParams::default()).await.unwrap();
        wait_until("the object to be restored", Duration::from_secs(20), || {
            let client = client.clone();
            let ns = ns.clone();
            async move { config_map_data(&client, &ns, "kept").await.map(|_| ()) }
        })
        .await;
        // A spec change is a new generation: status is rewritten with it. (The object names
        // its namespace, so the install namespace changes nothing else.)
        let install = if round % 2 == 0 {
            "default"
        } else {
            ns.as_str()
        };
        patch_spec(&client, &name, json!({ "installNamespace": install })).await;
        wait_bundle(&client, &name, "Ready at the new generation", is_ready).await;
    }
    let bundle = wait_bundle(&client, &name, "Ready", is_ready).await;
    assert!(
        gantry().status_writes().await >= writes_before + 5,
        "the controller wrote status at every generation"
    );
    let approval = bundle
        .status
        .clone()
        .unwrap()
        .approval
        .expect("the approval is still there");
    assert_eq!(approval.digest, digest_of(&image));
    assert_eq!(approval.reason.as_deref(), Some("ok"));
    // Field ownership proves who wrote it: the approval belongs to the approver alone.
    let approval_owners: Vec<String> = bundle
        .managed_fields()
        .iter()
        .filter(|m| {
            m.subresource.as_deref() == Some("status")
                && m.fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0.pointer("/f:status/f:approval").is_some())
        })
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(approval_owners, ["test-approver"]);
}

/// The Events of a bundle, oldest first, by reason.
async fn bundle_events(
    client: &Client,
    bundle: &Bundle,
    reason: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let mut found: Vec<_> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == bundle.uid().as_deref()
        })
        .collect();
    found.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    found
}

#[tokio::test]
async fn an_event_series_counts_only_the_same_message() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "series").await;
    // A ConfigMap in a namespace that does not exist: the dry run cannot judge it, and its
    // apply fails after `Installing` is shown, the same way on every attempt, retried with
    // backoff.
    let missing = unique_name("missing");
    let refused = push(
        &format!("{ns}/app:refused"),
        &[("a.yaml", config_map("refused", Some(&missing), "x"))],
    )
    .await;
    let name = unique_name("series");
    let bundle = create_bundle(&client, &name, spec(&refused, Some(&ns))).await;
    wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::APPLY_FAILED,
        "refused",
    )
    .await;
    // Every attempt is the same failure: one Event, counted again, without the attempt number.
    let repeated = wait_until("an ApplyFailed Event counted 3 times", WAIT, || {
        let (client, bundle) = (client.clone(), bundle.clone());
        async move {
            let events = bundle_events(&client, &bundle, reasons::APPLY_FAILED).await;
            events
                .iter()
                .any(|e| e.series.as_ref().is_some_and(|s| s.count >= 3))
                .then_some(events)
        }
    })
    .await;
    assert_eq!(repeated.len(), 1, "one Event for one failure: {repeated:?}");
    let note = repeated[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("ConfigMap") && !note.contains("attempt") && !note.contains("next retry"),
        "the note names the failure, not the attempt: {note}"
    );

    // Two installs of different digests are two Events, each counted once.
    let mut installed = Vec::new();
    for version in ["v1", "v2"] {
        let image = push_config_map(&format!("{ns}/app:{version}"), "ok", None, version).await;
        set_image(&client, &name, &image).await;
        wait_bundle(&client, &name, "installed", |b| {
            is_ready(b)
                && b.status.as_ref().and_then(|s| s.installed_image.as_deref())
                    == Some(image.as_str())
        })
        .await;
        installed.push(image);
    }
    let succeeded = wait_until("an InstallSucceeded Event per digest", WAIT, || {
        let (client, bundle) = (client.clone(), bundle.clone());
        async move {
            let events = bundle_events(&client, &bundle, reasons::INSTALL_SUCCEEDED).await;
            (events.len() >= 2).then_some(events)
        }
    })
    .await;
    assert_eq!(succeeded.len(), 2, "{succeeded:?}");
    for (event, image) in succeeded.iter().zip(&installed) {
        let note = event.note.as_deref().unwrap_or_default();
        assert!(note.contains(image.as_str()), "{image}: {note}");
        assert!(
            event.series.is_none(),
            "counted once, not under another digest's message: {event:?}"
        );
    }
}
