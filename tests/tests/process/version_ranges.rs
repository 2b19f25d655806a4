//! `spec.ref`: a Bundle names a repository and a version range; Gantry lists the tags, installs
//! the highest version within the range (by the digest of its tag), follows new versions, and
//! under a Manual class lets a newer one wait for approval while the installed one stays.

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalPolicy, Bundle, BundlePhase, BundleSpec, VersionRef};
use gantry_image::{RegistryClient, RegistryOptions, TagListing};
use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use gantry_tests::{registry, unique_name};
use kube::Client;
use kube::api::{Api, PostParams};

/// Pushes one small plain bundle per tag to `repository` (its ConfigMap `version` says which),
/// returning the pinned references in the order given.
async fn push_versions(repository: &str, namespace: &str, tags: &[&str]) -> Vec<String> {
    let mut pinned = Vec::new();
    for tag in tags {
        pinned.push(
            push_config_map(
                &format!("{repository}:{tag}"),
                "version",
                Some(namespace),
                tag,
            )
            .await,
        );
    }
    pinned
}

fn ranged(repository: &str, namespace: &str, semver: &str) -> BundleSpec {
    BundleSpec {
        r#ref: Some(VersionRef {
            semver: semver.into(),
            semver_filter: None,
        }),
        ..spec(&in_registry(repository), Some(namespace))
    }
}

fn status_of(bundle: &Bundle) -> &gantry_api::BundleStatus {
    bundle.status.as_ref().expect("a status")
}

async fn installed(client: &Client, name: &str, pinned: &str) -> Bundle {
    wait_bundle(client, name, &format!("{pinned} installed"), |b| {
        is_ready(b) && b.status.as_ref().and_then(|s| s.installed_image.as_deref()) == Some(pinned)
    })
    .await
}

#[tokio::test]
async fn the_highest_version_in_range_is_installed_and_followed() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "ranges").await;
    let repository = unique_name("ranges/follow");
    let pinned = push_versions(
        &repository,
        &ns,
        &["1.0.0", "1.4.2", "2.0.0", "1.5.0-rc.1", "latest"],
    )
    .await;
    let name = unique_name("ranges-follow");
    create_bundle(&client, &name, ranged(&repository, &ns, ">=1.0.0 <2.0.0")).await;

    // 1.4.2: 2.0.0 is out of range, 1.5.0-rc.1 a pre-release, `latest` no version.
    let bundle = installed(&client, &name, &pinned[1]).await;
    let status = status_of(&bundle);
    assert_eq!(status.resolved_tag.as_deref(), Some("1.4.2"));
    assert_eq!(status.resolved_version.as_deref(), Some("1.4.2"));
    assert_eq!(status.resolved_image.as_deref(), Some(pinned[1].as_str()));
    // The digest is the one the registry gives for the tag's manifest.
    let by_registry = RegistryClient::new(RegistryOptions {
        insecure_registries: vec![registry().host().to_string()],
        ..Default::default()
    })
    .unwrap()
    .resolve(&format!("{}:1.4.2", in_registry(&repository)))
    .await
    .unwrap();
    assert_eq!(
        Some(by_registry.digest.as_str()),
        status.resolved_image.as_deref().map(digest_of)
    );
    assert_eq!(status.history[0].tag.as_deref(), Some("1.4.2"));
    assert_config_map(&client, &ns, "version", Some("1.4.2")).await;
    // `kubectl get bundles -o wide` shows the version.
    let out = std::process::Command::new("kubectl")
        .args([
            "get",
            "bundles",
            &name,
            "-o",
            "wide",
            "--kubeconfig",
            &kubeconfig(),
        ])
        .output()
        .expect("running kubectl get");
    assert!(out.status.success(), "{}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("VERSION") && listed.contains("1.4.2"),
        "{listed}"
    );

    // A new version within the range is installed once the tags are listed again.
    let newer = push_versions(&repository, &ns, &["1.5.0"]).await;
    reconcile_handled(&client, &name).await;
    let bundle = installed(&client, &name, &newer[0]).await;
    assert_eq!(status_of(&bundle).resolved_tag.as_deref(), Some("1.5.0"));
    assert_config_map(&client, &ns, "version", Some("1.5.0")).await;
}

#[tokio::test]
async fn under_a_manual_class_a_newer_version_waits_for_approval() {
    let client = shared_gantry_client().await;
    let class = unique_name("ranges-manual");
    apply_class(&client, &class, class_spec(ApprovalPolicy::Manual), false).await;
    let ns = unique_namespace(&client, "ranges-manual").await;
    let repository = unique_name("ranges/manual");
    let first = push_versions(&repository, &ns, &["1.4.2", "1.5.0"]).await;
    let name = unique_name("ranges-manual");
    let spec = BundleSpec {
        provisioner_class_name: Some(class),
        ..ranged(&repository, &ns, "^1")
    };
    create_bundle(&client, &name, spec).await;
    wait_bundle(&client, &name, "awaiting approval of 1.5.0", |b| {
        b.status.as_ref().is_some_and(|s| {
            s.phase == Some(BundlePhase::AwaitingApproval)
                && s.resolved_image.as_deref() == Some(first[1].as_str())
        })
    })
    .await;
    approve_digest(&client, &name, digest_of(&first[1])).await;
    installed(&client, &name, &first[1]).await;

    let newer = push_versions(&repository, &ns, &["1.6.0"]).await;
    reconcile_handled(&client, &name).await;
    let bundle = wait_bundle(&client, &name, "1.6.0 awaiting approval", |b| {
        b.status.as_ref().is_some_and(|s| {
            s.phase == Some(BundlePhase::AwaitingApproval)
                && s.resolved_image.as_deref() == Some(newer[0].as_str())
        })
    })
    .await;
    let status = status_of(&bundle);
    assert_eq!(status.resolved_tag.as_deref(), Some("1.6.0"));
    assert_eq!(status.installed_image.as_deref(), Some(first[1].as_str()));
    assert_config_map(&client, &ns, "version", Some("1.5.0")).await;
    let shown = ok(&["status", &name]);
    assert!(shown.contains("1.5.0 installed, 1.6.0 waiting"), "{shown}");
}

#[tokio::test]
async fn a_range_matching_nothing_names_the_range_and_the_highest_tags() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "ranges-none").await;
    let repository = unique_name("ranges/none");
    push_versions(
        &repository,
        &ns,
        &["1.0.0", "1.4.2", "2.0.0", "1.5.0-rc.1", "latest"],
    )
    .await;
    let name = unique_name("ranges-none");
    create_bundle(&client, &name, ranged(&repository, &ns, ">=3.0.0")).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::NO_MATCHING_VERSION,
        &format!(
            "no tag of {} matches >=3.0.0; highest tags seen: 2.0.0, 1.5.0-rc.1, 1.4.2, 1.0.0",
            in_registry(&repository)
        ),
    )
    .await;
    assert_stalled(&bundle, reasons::NO_MATCHING_VERSION);

    // A range that does not parse stalls, naming the field.
    patch_spec(
        &client,
        &name,
        serde_json::json!({"ref": {"semver": ">= >= 1"}}),
    )
    .await;
    let bundle = wait_bundle(&client, &name, "the range refused", |b| {
        condition(b, types::UNPACKED).is_some_and(|c| {
            c.reason == reasons::NO_MATCHING_VERSION
                && c.message
                    .starts_with(r#"spec.ref.semver ">= >= 1" is not a version range"#)
        })
    })
    .await;
    assert_retry_class(&bundle, types::UNPACKED, reasons::NO_MATCHING_VERSION);
    assert_stalled(&bundle, reasons::NO_MATCHING_VERSION);

    // A tag besides the range is refused by the API server, naming the fields.
    let tagged = Bundle::new(
        &unique_name("ranges-tagged"),
        ranged(&format!("{repository}:1.0.0"), &ns, "^1"),
    );
    let refused = Api::<Bundle>::all(client.clone())
        .create(&PostParams::default(), &tagged)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(
            "spec.image must name a repository without a tag or digest when spec.ref is set"
        ),
        "{refused}"
    );
}

#[tokio::test]
async fn tag_lists_are_read_page_by_page() {
    gantry_tests::init_crypto();
    let repository = unique_name("ranges/pages");
    let tags = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"];
    push_versions(&repository, "default", &tags).await;
    let client = RegistryClient::new(RegistryOptions {
        insecure_registries: vec![registry().host().to_string()],
        ..Default::default()
    })
    .unwrap();
    // Two tags a page: the registry names the next page in a `Link` header.
    let listing = TagListing {
        page_size: Some(2),
        ..Default::default()
    };
    let mut listed = client
        .list_tags(&in_registry(&repository), listing)
        .await
        .unwrap();
    listed.sort();
    assert_eq!(listed, tags);
}
