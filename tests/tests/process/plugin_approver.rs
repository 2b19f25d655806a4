//! Who decided, and waiting for a denial: `kubectl bundle approve` and `deny` record the
//! approver the API server authenticates (`status.approval.approvedBy`, from a
//! SelfSubjectReview), `status` and `history` show it, a refused SelfSubjectReview still lets
//! the decision through; `deny --wait` returns once the provisioner has handled the denial;
//! `version` warns when the plugin and the controller differ in major or minor version.

use gantry_api::conditions::{reasons, types};
use gantry_api::{BundlePhase, HistoryApproval};
use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use gantry_tests::{control_plane, unique_name};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use serde_json::{Value, json};

/// A user `user` bound to the rules of the ClusterRole `gantry-bundle-approver` as
/// `manifests/06-rbac-users.yaml` defines it (under a name of its own); the user's kubeconfig,
/// once the user can read bundle `bundle`. The user has a client certificate, or, when
/// `unauthenticated`, is the admin impersonating `user` in the group `system:unauthenticated`
/// alone.
async fn approver(
    client: &Client,
    dir: &std::path::Path,
    user: &str,
    bundle: &str,
    unauthenticated: bool,
) -> String {
    const ROLE: &str = "gantry-bundle-approver";
    if !unauthenticated {
        return shipped_role_user(client, dir, user, ROLE, bundle).await;
    }
    bind_shipped_role(client, user, ROLE).await;
    let mut config = Kubeconfig::read_from(control_plane().kubeconfig()).unwrap();
    for named in &mut config.auth_infos {
        let auth = named.auth_info.as_mut().unwrap();
        auth.impersonate = Some(user.into());
        auth.impersonate_groups = Some(vec!["system:unauthenticated".into()]);
    }
    let path = dir.join(format!("kubeconfig-{user}"));
    // JSON is YAML: kubectl and the plugin read it as a kubeconfig.
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    let kc = path.display().to_string();
    wait_user_reads(&kc, user, bundle).await;
    kc
}

#[tokio::test]
async fn the_approver_is_recorded_and_shown() {
    let client = shared_gantry_client().await;
    let review = config_map_under_review(&client, "approver").await;
    let name = review.name.clone();
    let first = digest_of(&review.pinned).to_string();
    let dir = tempfile::tempdir().unwrap();
    let alice = unique_name("alice");
    let alice_kc = approver(&client, dir.path(), &alice, &name, false).await;

    // A denial names who denied.
    let denied = kubectl_bundle(&[
        "deny",
        &name,
        "--reason",
        "not yet",
        "--wait",
        "--kubeconfig",
        &alice_kc,
    ]);
    assert!(denied.status.success(), "{}", text(&denied));
    assert!(
        text(&denied).contains(&format!("bundle {name} denied for {first} by {alice}")),
        "{}",
        text(&denied)
    );
    let approval = get_bundle(&client, &name)
        .await
        .status
        .unwrap()
        .approval
        .unwrap();
    assert_eq!(approval.approved_by.as_deref(), Some(alice.as_str()));
    let status = ok(&["status", &name]);
    assert!(
        status.contains(&format!("Denied {first} by {alice}: not yet")),
        "{status}"
    );

    // So does an approval, in status and in history.
    let approved = kubectl_bundle(&[
        "approve",
        &name,
        "--yes",
        "--reason",
        "reviewed",
        "--wait",
        "--timeout",
        "60s",
        "--kubeconfig",
        &alice_kc,
    ]);
    assert!(approved.status.success(), "{}", text(&approved));
    assert!(
        !text(&approved).contains("approvedBy"),
        "no warning when the API server says who: {}",
        text(&approved)
    );
    let installed = get_bundle(&client, &name).await;
    let status_ = installed.status.clone().unwrap();
    assert_eq!(
        status_.approval.as_ref().unwrap().approved_by.as_deref(),
        Some(alice.as_str())
    );
    assert_eq!(status_.history[0].digest, first);
    assert_eq!(status_.history[0].approval, HistoryApproval::Manual);
    assert_eq!(
        status_.history[0].approved_by.as_deref(),
        Some(alice.as_str())
    );
    let status = ok(&["status", &name]);
    assert!(
        status.contains(&format!("Approved {first} by {alice}: reviewed")),
        "{status}"
    );
    let history = ok(&["history", &name]);
    let row = history
        .lines()
        .find(|l| l.starts_with(&first))
        .unwrap_or_else(|| panic!("the approved digest in history: {history}"));
    assert!(
        row.contains(&format!("Manual by {alice} at ")) && row.contains(": reviewed"),
        "{history}"
    );

    // A user RBAC refuses SelfSubjectReviews still decides; the plugin says the approver is
    // not recorded, in one line, and nothing names one. The admin impersonates bob outside
    // `system:authenticated`, the group that may create SelfSubjectReviews.
    let bob = unique_name("bob");
    let bob_kc = approver(&client, dir.path(), &bob, &name, true).await;
    let whoami = std::process::Command::new("kubectl")
        .args(["auth", "whoami", "--kubeconfig", &bob_kc])
        .output()
        .unwrap();
    assert!(!whoami.status.success(), "{}", text(&whoami));
    let second = push_config_map(&review.repository, "cm", None, "v2").await;
    let second_digest = digest_of(&second).to_string();
    wait_bundle(&client, &name, "awaiting the new digest", |b| {
        b.status.as_ref().and_then(|s| s.resolved_image.as_deref()) == Some(second.as_str())
            && condition(b, types::APPROVED).is_some_and(|c| c.reason == reasons::AWAITING_APPROVAL)
    })
    .await;
    let approved = kubectl_bundle(&[
        "approve",
        &name,
        "--yes",
        "--reason",
        "looks fine",
        "--wait",
        "--timeout",
        "60s",
        "--kubeconfig",
        &bob_kc,
    ]);
    assert!(approved.status.success(), "{}", text(&approved));
    let stderr = String::from_utf8_lossy(&approved.stderr);
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("approvedBy"))
        .collect();
    assert!(
        notes.len() == 1
            && notes[0].contains("recorded without approvedBy")
            && notes[0].contains("forbidden"),
        "{stderr}"
    );
    let installed = get_bundle(&client, &name).await.status.unwrap();
    let approval = installed.approval.unwrap();
    assert_eq!(
        (approval.digest.as_str(), approval.approved_by),
        (second_digest.as_str(), None)
    );
    assert_eq!(installed.history[0].digest, second_digest);
    assert_eq!(installed.history[0].approved_by, None);
    let history = ok(&["history", &name]);
    let row = history
        .lines()
        .find(|l| l.starts_with(&second_digest))
        .unwrap_or_else(|| panic!("the second digest in history: {history}"));
    assert!(
        row.contains("Manual at ") && !row.contains(" by "),
        "{history}"
    );
}

#[tokio::test]
async fn deny_wait_returns_once_the_provisioner_handled_the_denial() {
    let client = shared_gantry_client().await;
    let review = config_map_under_review(&client, "deny-wait").await;
    let name = review.name.clone();
    let digest = digest_of(&review.pinned).to_string();

    // --timeout belongs to --wait.
    let refused = fails(&["deny", &name, "--reason", "no", "--timeout", "1m"]);
    assert!(refused.contains("--wait"), "{refused}");

    let denied = ok(&[
        "deny",
        &name,
        "--reason",
        "grants too much",
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert!(
        denied.contains(&format!("bundle {name} is Denied")) && denied.contains(&digest),
        "{denied}"
    );
    // Handled when the command returned: read once, no waiting here.
    let status = get_bundle(&client, &name).await.status.unwrap();
    assert_eq!(status.phase, Some(BundlePhase::Denied));
    let approved = status
        .conditions
        .iter()
        .find(|c| c.type_ == types::APPROVED)
        .unwrap();
    assert_eq!(
        (
            approved.status.as_str(),
            approved.reason.as_str(),
            approved.message.as_str()
        ),
        (
            "False",
            reasons::DENIED,
            format!("{digest} denied: grants too much").as_str()
        )
    );

    // Denying the same digest again for another reason waits for that denial, not the first.
    let again = ok(&[
        "deny",
        &name,
        "--reason",
        "still too much",
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert!(
        again.contains(&format!("bundle {name} is Denied")),
        "{again}"
    );
    let status = get_bundle(&client, &name).await.status.unwrap();
    let approved = status
        .conditions
        .iter()
        .find(|c| c.type_ == types::APPROVED)
        .unwrap();
    assert_eq!(approved.message, format!("{digest} denied: still too much"));
    assert_eq!(
        config_map_data(&client, &review.namespace, "cm").await,
        None,
        "nothing of a denied digest is applied"
    );
}

#[tokio::test]
async fn version_warns_when_plugin_and_controller_differ_in_minor() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "skew").await;
    let plugin = env!("CARGO_PKG_VERSION");
    let (major, minor) = {
        let mut parts = plugin.split('.');
        let major: u64 = parts.next().unwrap().parse().unwrap();
        let minor: u64 = parts.next().unwrap().parse().unwrap();
        (major, minor)
    };
    // The provisioner's Deployment as manifests/ installs it, labelled with its version.
    let same = format!("v{major}.{minor}.99");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "gantry-provisioner", "labels": { "app.kubernetes.io/version": same } },
        "spec": { "selector": { "matchLabels": { "app": "gantry-provisioner" } },
                  "template": { "metadata": { "labels": { "app": "gantry-provisioner" } },
                                "spec": { "containers": [{ "name": "provisioner", "image": "example.org/gantry/provisioner" }] } } },
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let kc = kubeconfig();
    let version = |extra: &[&str]| {
        let mut args = vec!["version", "--system-namespace", &ns, "--kubeconfig", &kc];
        args.extend_from_slice(extra);
        let out = kubectl_bundle(&args);
        assert!(out.status.success(), "{}", text(&out));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // A patch release apart: within the supported skew, no warning.
    let (stdout, stderr) = version(&[]);
    assert!(
        stdout.contains(&format!("Plugin version:     {plugin}"))
            && stdout.contains(&format!("Controller version: {same}")),
        "{stdout}"
    );
    assert!(!stderr.contains("warning"), "{stderr}");

    // A minor release ahead: one warning naming both, what to upgrade and the supported skew.
    let newer = format!("v{major}.{}.0", minor + 1);
    deployments
        .patch(
            "gantry-provisioner",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "metadata": { "labels": { "app.kubernetes.io/version": newer } } }),
            ),
        )
        .await
        .unwrap();
    let (stdout, stderr) = version(&[]);
    assert!(
        stdout.contains(&format!("Controller version: {newer}")),
        "{stdout}"
    );
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains(&format!("plugin version {plugin}"))
            && warnings[0].contains(&format!("controller version {newer}"))
            && warnings[0].contains("same major.minor")
            && warnings[0].contains(&format!("upgrade the plugin to {major}.{}", minor + 1)),
        "{stderr}"
    );
    // -o json stays JSON on stdout; the warning is on stderr.
    let (stdout, stderr) = version(&["-o", "json"]);
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["controller"], newer.as_str());
    assert!(stderr.contains("upgrade the plugin"), "{stderr}");
}
