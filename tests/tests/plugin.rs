//! `kubectl bundle`, found and run by kubectl itself from PATH, against a running Gantry:
//! approve and deny bound to the digest, list and status.

mod common;

use std::process::Output;

use common::*;
use gantry_api::BundlePhase;
use gantry_api::conditions::{reasons, types};
use gantry_tests::{binary, control_plane, registry, unique_name};

/// `kubectl bundle ARGS` with the plugin's directory first on PATH.
fn kubectl_bundle(args: &[&str]) -> Output {
    let plugin = binary("kubectl-bundle", "kubectl-bundle");
    let dir = plugin.parent().unwrap().to_path_buf();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(&path))).unwrap();
    // kubectl refuses flags before a plugin's name: the plugin parses --kubeconfig itself.
    std::process::Command::new("kubectl")
        .arg("bundle")
        .args(args)
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()
        .expect("running kubectl bundle")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn kubeconfig() -> String {
    control_plane().kubeconfig().display().to_string()
}

#[tokio::test]
async fn approve_and_deny_through_kubectl() {
    gantry();
    let client = control_plane().client().await;
    let UnderReview {
        name,
        namespace: ns,
        repository: repo,
        pinned: first,
        ..
    } = under_review(&client, "plugin", |_| {
        vec![("a.yaml", config_map("cm", None, "v1"))]
    })
    .await;
    let first_digest = first.rsplit_once('@').unwrap().1.to_string();
    let kc = kubeconfig();

    // kubectl finds the plugin; list shows the pending approval.
    let listed = kubectl_bundle(&["list", "--kubeconfig", &kc]);
    assert!(listed.status.success(), "{}", text(&listed));
    let row = text(&listed)
        .lines()
        .find(|l| l.starts_with(&name))
        .map(str::to_string)
        .expect("the bundle is listed");
    assert!(
        row.contains("AwaitingApproval") && row.contains("Pending"),
        "{row}"
    );
    assert!(
        row.contains(&first_digest.trim_start_matches("sha256:")[..12]),
        "{row}"
    );

    // status shows the requested permissions.
    let status = kubectl_bundle(&["status", &name, "--kubeconfig", &kc]);
    assert!(status.status.success(), "{}", text(&status));
    assert!(
        text(&status).contains(&format!("namespace {ns}")) && text(&status).contains("ConfigMap"),
        "{}",
        text(&status)
    );

    // Without a terminal and without --yes, approve refuses; with the wrong digest too.
    let unconfirmed = kubectl_bundle(&["approve", &name, "--kubeconfig", &kc]);
    assert!(!unconfirmed.status.success());
    assert!(
        text(&unconfirmed).contains("--yes"),
        "{}",
        text(&unconfirmed)
    );
    let wrong = format!("sha256:{}", "1".repeat(64));
    let mismatch = kubectl_bundle(&[
        "approve",
        &name,
        "--yes",
        "--digest",
        &wrong,
        "--kubeconfig",
        &kc,
    ]);
    assert!(!mismatch.status.success());
    assert!(
        text(&mismatch).contains(&first_digest),
        "{}",
        text(&mismatch)
    );
    assert_eq!(
        config_map_data(&client, &ns, "cm").await,
        None,
        "nothing applied yet"
    );

    // Approving the digest installs it.
    let approved = kubectl_bundle(&[
        "approve",
        &name,
        "--yes",
        "--digest",
        &first_digest,
        "--reason",
        "reviewed",
        "--kubeconfig",
        &kc,
    ]);
    assert!(approved.status.success(), "{}", text(&approved));
    wait_bundle(&client, &name, "Ready", is_ready).await;
    assert_eq!(
        config_map_data(&client, &ns, "cm").await.as_deref(),
        Some("v1")
    );
    let again = kubectl_bundle(&["approve", &name, "--yes", "--kubeconfig", &kc]);
    assert!(
        !again.status.success() && text(&again).contains("already approved"),
        "{}",
        text(&again)
    );

    // A new digest needs a new approval; deny it.
    let second = push(&repo, &[("a.yaml", config_map("cm", None, "v2"))]).await;
    wait_bundle(&client, &name, "awaiting the new digest", |b| {
        b.status.as_ref().and_then(|s| s.resolved_image.as_deref()) == Some(second.as_str())
            && condition(b, types::APPROVED).is_some_and(|c| c.reason == reasons::AWAITING_APPROVAL)
    })
    .await;
    let denied = kubectl_bundle(&["deny", &name, "--reason", "not now", "--kubeconfig", &kc]);
    assert!(denied.status.success(), "{}", text(&denied));
    let bundle = wait_bundle(&client, &name, "Denied", |b| {
        b.status.as_ref().and_then(|s| s.phase) == Some(BundlePhase::Denied)
    })
    .await;
    assert!(
        condition(&bundle, types::APPROVED)
            .unwrap()
            .message
            .contains("not now")
    );
    assert_eq!(
        config_map_data(&client, &ns, "cm").await.as_deref(),
        Some("v1"),
        "the denied digest is not applied"
    );

    let json = kubectl_bundle(&["list", "-o", "json", "--kubeconfig", &kc]);
    let items: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("list -o json is JSON");
    assert!(
        items
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["metadata"]["name"] == name.as_str())
    );
}

#[tokio::test]
async fn approve_refuses_a_bundle_that_is_not_unpacked() {
    gantry();
    let client = control_plane().client().await;
    let name = unique_name("not-unpacked");
    // A class that does not exist: the bundle never unpacks.
    let mut s = spec(
        &format!("{}/none/none:v1", registry().host()),
        Some("default"),
    );
    s.provisioner_class_name = Some(unique_name("absent"));
    create_bundle(&client, &name, s).await;
    let refused = kubectl_bundle(&["approve", &name, "--yes", "--kubeconfig", &kubeconfig()]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("not unpacked"),
        "{}",
        text(&refused)
    );
    let missing = kubectl_bundle(&["status", "no-such-bundle", "--kubeconfig", &kubeconfig()]);
    assert!(
        !missing.status.success() && text(&missing).contains("not found"),
        "{}",
        text(&missing)
    );
}
