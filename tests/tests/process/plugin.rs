//! `kubectl bundle`, found and run by kubectl itself from PATH, against a running Gantry:
//! approve and deny bound to the digest, list and status, kubectl's flags and output formats,
//! watching, events, tree, version, check, validate, completion, push and pull errors.

use std::io::BufRead;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalPolicy, Bundle, BundlePhase};
use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use gantry_tests::{Registry, RegistryOptions, bundle_dir, registry, unique_name, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use serde_json::json;

/// A running `kubectl bundle ... --watch` whose stdout lines arrive on a channel.
struct Watching {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Watching {
    fn start(args: &[&str]) -> Self {
        let kc = kubeconfig();
        let mut child = kubectl_bundle_command(args)
            .args(["--kubeconfig", &kc])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting kubectl bundle --watch");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watching {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a printed line satisfying `check`.
    fn wait_line(&mut self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if check(&line) => return line,
                Ok(line) => self.seen.push(line),
                Err(_) => panic!(
                    "no line with {what} within {WAIT:?}; printed:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bundle of `class` (else the default class, Automatic) holding `files`, once it is Ready;
/// its name and namespace.
async fn installed_with(
    client: &Client,
    prefix: &str,
    class: Option<&str>,
    files: &[(&str, String)],
) -> (String, String) {
    let ns = unique_namespace(client, prefix).await;
    let pinned = push(&format!("{ns}/app:v1"), files).await;
    let name = unique_name(prefix);
    let mut bundle_spec = spec(&pinned, Some(&ns));
    bundle_spec.provisioner_class_name = class.map(Into::into);
    create_bundle_ready(client, &name, bundle_spec).await;
    (name, ns)
}

/// A Ready bundle of the default class holding one ConfigMap `cm`.
async fn installed(client: &Client, prefix: &str) -> (String, String) {
    let files = [("a.yaml", config_map("cm", None, "v1"))];
    installed_with(client, prefix, None, &files).await
}

#[tokio::test]
async fn approve_and_deny_through_kubectl() {
    let client = shared_gantry_client().await;
    let UnderReview {
        name,
        namespace: ns,
        repository: repo,
        pinned: first,
        ..
    } = config_map_under_review(&client, "plugin").await;
    let first_digest = first.rsplit_once('@').unwrap().1.to_string();
    let kc = kubeconfig();

    // kubectl finds the plugin; list shows the pending approval.
    let listed = kubectl_bundle(&["--kubeconfig", &kc, "list"]);
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
    assert_config_map(&client, &ns, "cm", Some("v1")).await;
    // history shows the manual approval: who decided when, and why.
    let history = ok(&["history", &name]);
    let row = history
        .lines()
        .find(|l| l.starts_with(&format!("{first_digest} (installed)")))
        .unwrap_or_else(|| panic!("the approved digest in history: {history}"));
    let approved_at = manual_approval_time(row);
    assert!(
        row.contains(&format!(
            "Manual by gantry-tests-admin at {approved_at}: reviewed"
        )) && row.contains(" ago ("),
        "{history}"
    );
    let again = kubectl_bundle(&["approve", &name, "--yes", "--kubeconfig", &kc]);
    assert!(
        !again.status.success() && text(&again).contains("already approved"),
        "{}",
        text(&again)
    );

    // A new digest needs a new approval; deny it.
    let second = push_config_map(&repo, "cm", None, "v2").await;
    wait_bundle(&client, &name, "awaiting the new digest", |b| {
        b.status.as_ref().and_then(|s| s.resolved_image.as_deref()) == Some(second.as_str())
            && condition(b, types::APPROVED).is_some_and(|c| c.reason == reasons::AWAITING_APPROVAL)
    })
    .await;
    let denied = kubectl_bundle(&["deny", &name, "--reason", "not now", "--kubeconfig", &kc]);
    assert!(denied.status.success(), "{}", text(&denied));
    let bundle = wait_bundle(&client, &name, "Denied", phase_is(BundlePhase::Denied)).await;
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
    let list: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("list -o json is JSON");
    assert_eq!(
        (list["apiVersion"].as_str(), list["kind"].as_str()),
        (Some("v1"), Some("List"))
    );
    let item = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["metadata"]["name"] == name.as_str())
        .expect("the bundle is in the List");
    assert!(item["metadata"].get("managedFields").is_none(), "{item}");
}

#[tokio::test]
async fn approve_refuses_a_bundle_that_is_not_unpacked() {
    let client = shared_gantry_client().await;
    let name = unique_name("not-unpacked");
    // A class that does not exist: the bundle never unpacks.
    let s = spec_of_class(
        &in_registry("none/none:v1"),
        Some("default"),
        &unique_name("absent"),
    );
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

#[tokio::test]
async fn decisions_are_refused_where_the_class_approves_automatically() {
    let client = shared_gantry_client().await;
    let (name, _) = installed(&client, "auto").await;
    let refused = fails(&["deny", &name, "--reason", "no"]);
    assert!(
        refused.contains(&format!("the default class {DEFAULT_CLASS}"))
            && refused.contains("Automatic"),
        "{refused}"
    );

    // A class named by the bundle is named too.
    let class = unique_name("auto-class");
    apply_class(
        &client,
        &class,
        class_spec(ApprovalPolicy::Automatic),
        false,
    )
    .await;
    let (named, _) = installed_with(
        &client,
        "auto-named",
        Some(&class),
        &[("a.yaml", config_map("cm", None, "v1"))],
    )
    .await;
    let refused = fails(&["approve", &named, "--yes"]);
    assert!(
        refused.contains(&format!("class {class}")) && refused.contains("Automatic"),
        "{refused}"
    );

    // Nothing was written.
    for bundle in [&name, &named] {
        let status = get_bundle(&client, bundle).await.status.unwrap();
        assert!(status.approval.is_none(), "{bundle}: {:?}", status.approval);
        assert_eq!(status.phase, Some(BundlePhase::Installed));
    }
}

#[tokio::test]
async fn kubectl_flags_and_output_formats() {
    let client = shared_gantry_client().await;
    let (name, _) = installed(&client, "flags").await;
    let kc = kubeconfig();
    let row = |out: &str| out.lines().any(|l| l.starts_with(&name));

    // Global flags before or after the verb; -n accepted (bundles are cluster-scoped).
    for args in [
        vec!["--kubeconfig", kc.as_str(), "-n", "kube-system", "list"],
        vec![
            "list",
            "--namespace",
            "anything",
            "--kubeconfig",
            kc.as_str(),
        ],
        vec![
            "--request-timeout",
            "20s",
            "list",
            "--kubeconfig",
            kc.as_str(),
        ],
    ] {
        let out = kubectl_bundle(&args);
        assert!(
            out.status.success() && row(&text(&out)),
            "{args:?}: {}",
            text(&out)
        );
    }
    let bad_timeout = kubectl_bundle(&["list", "--request-timeout", "soon", "--kubeconfig", &kc]);
    assert_eq!(bad_timeout.status.code(), Some(2), "{}", text(&bad_timeout));

    // $KUBECONFIG lists: a missing file is skipped, as kubectl does.
    let listed = kubectl_bundle_command(&["list"])
        .env("KUBECONFIG", format!("/nonexistent/kubeconfig:{kc}"))
        .output()
        .unwrap();
    assert!(
        listed.status.success() && row(&text(&listed)),
        "{}",
        text(&listed)
    );

    // Unknown context, cluster or user: named, with the files read.
    for (flag, what) in [
        ("--context", "context"),
        ("--cluster", "cluster"),
        ("--user", "user"),
    ] {
        let refused = fails(&["list", flag, "nope"]);
        assert!(
            refused.contains(&format!("{what} \"nope\" not found")) && refused.contains(&kc),
            "{refused}"
        );
    }

    // -v logs the requests.
    let verbose = kubectl_bundle(&["list", "-v", "6", "--kubeconfig", &kc]);
    assert!(
        String::from_utf8_lossy(&verbose.stderr).contains("/apis/gantry.dev/v1alpha1/bundles"),
        "{}",
        text(&verbose)
    );

    // -o name, jsonpath, yaml.
    assert!(
        ok(&["list", "-o", "name"])
            .lines()
            .any(|l| l == format!("bundle.gantry.dev/{name}")),
    );
    let names = ok(&["list", "-o", "jsonpath={.items[*].metadata.name}"]);
    assert!(names.split(' ').any(|n| n == name), "{names}");
    assert_eq!(
        ok(&["status", &name, "-o", "jsonpath={.status.phase}"]),
        "Installed"
    );
    assert_eq!(
        ok(&["status", &name, "-o", "name"]).trim(),
        format!("bundle.gantry.dev/{name}")
    );
    let yaml = ok(&["list", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: List") && !yaml.contains("managedFields"),
        "{yaml}"
    );
    let wide = ok(&["list", "-o", "wide"]);
    assert!(wide.lines().next().unwrap().contains("RESOLVED"), "{wide}");
}

/// The first RFC 3339 time after "Manual [by USER] at " in a history row.
fn manual_approval_time(row: &str) -> &str {
    let after = row
        .split_once("Manual ")
        .and_then(|(_, after)| after.split_once("at "))
        .unwrap_or_else(|| panic!("no manual approval in {row:?}"))
        .1;
    let end = after.find(": ").expect("a reason after the time");
    let at = &after[..end];
    assert!(
        at.len() >= 20 && at.as_bytes()[4] == b'-' && at.contains('T') && at.ends_with('Z'),
        "not a time: {at:?} in {row:?}"
    );
    at
}

/// A kubeconfig file written from parts of the test cluster's kubeconfig.
fn kubeconfig_file(dir: &std::path::Path, name: &str, config: &Kubeconfig) -> String {
    let path = dir.join(name);
    // JSON is YAML: kubectl and the plugin read it as a kubeconfig.
    std::fs::write(&path, serde_json::to_vec(config).unwrap()).unwrap();
    path.display().to_string()
}

fn named_cluster(name: &str, server: &str) -> NamedCluster {
    NamedCluster {
        name: name.into(),
        cluster: Some(Cluster {
            server: Some(server.into()),
            ..Cluster::default()
        }),
        other: Default::default(),
    }
}

fn named_context(name: &str, cluster: &str, user: &str) -> NamedContext {
    NamedContext {
        name: name.into(),
        context: Some(Context {
            cluster: cluster.into(),
            user: Some(user.into()),
            ..Context::default()
        }),
        other: Default::default(),
    }
}

#[tokio::test]
async fn contexts_clusters_users_and_kubeconfig_lists_as_kubectl_reads_them() {
    gantry();
    let test = Kubeconfig::read_from(kubeconfig()).unwrap();
    let mut real = test.clusters[0].clone();
    real.name = "real".into();
    let mut admin = test.auth_infos[0].clone();
    admin.name = "admin".into();
    let nobody = NamedAuthInfo {
        name: "nobody".into(),
        auth_info: Some(AuthInfo {
            token: Some("not-a-token".to_string().into()),
            ..AuthInfo::default()
        }),
        other: Default::default(),
    };
    // Nothing listens on port 1: the current context fails unless a flag chooses another.
    let refused = named_cluster("refused", "https://127.0.0.1:1");
    let dir = tempfile::tempdir().unwrap();
    let one = kubeconfig_file(
        dir.path(),
        "one",
        &Kubeconfig {
            clusters: vec![real.clone(), refused.clone()],
            auth_infos: vec![admin.clone(), nobody.clone()],
            contexts: vec![
                named_context("refused", "refused", "admin"),
                named_context("real", "real", "admin"),
                named_context("real-as-nobody", "real", "nobody"),
            ],
            current_context: Some("refused".into()),
            ..Kubeconfig::default()
        },
    );
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", one.as_str()]);
        kubectl_bundle(&all)
    };
    let current = run(&["list"]);
    assert!(
        !current.status.success() && text(&current).contains("127.0.0.1:1"),
        "the current context's cluster is used by default: {}",
        text(&current)
    );
    for args in [
        vec!["--context", "real", "list"],
        vec!["list", "--cluster", "real"],
        vec!["--context", "real-as-nobody", "--user", "admin", "list"],
    ] {
        let out = run(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        assert!(text(&out).starts_with("NAME"), "{args:?}: {}", text(&out));
    }
    let unauthorized = run(&["--context", "real-as-nobody", "list"]);
    assert!(
        !unauthorized.status.success() && text(&unauthorized).contains("Unauthorized"),
        "the context's own user is used: {}",
        text(&unauthorized)
    );

    // $KUBECONFIG lists merge as kubectl merges them: the first file that sets a value wins
    // (current-context and the cluster "real" from the first), the rest adds what is missing
    // (the context and the user from the second).
    let mut shadowed = refused.clone();
    shadowed.name = "real".into();
    let first = kubeconfig_file(
        dir.path(),
        "first",
        &Kubeconfig {
            clusters: vec![real.clone()],
            current_context: Some("real".into()),
            ..Kubeconfig::default()
        },
    );
    let second = kubeconfig_file(
        dir.path(),
        "second",
        &Kubeconfig {
            clusters: vec![shadowed],
            auth_infos: vec![admin.clone()],
            contexts: vec![named_context("real", "real", "admin")],
            current_context: Some("elsewhere".into()),
            ..Kubeconfig::default()
        },
    );
    let merged = kubectl_bundle_command(&["list"])
        .env("KUBECONFIG", format!("{first}:{second}"))
        .output()
        .unwrap();
    assert!(merged.status.success(), "{}", text(&merged));
    let kubectl_agrees = std::process::Command::new("kubectl")
        .args([
            "config",
            "view",
            "-o",
            "jsonpath={.current-context} {.clusters[0].cluster.server}",
        ])
        .env("KUBECONFIG", format!("{first}:{second}"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&kubectl_agrees.stdout),
        format!(
            "real {}",
            real.cluster.as_ref().unwrap().server.as_ref().unwrap()
        ),
        "kubectl reads the same merge"
    );
    let swapped = kubectl_bundle_command(&["list"])
        .env("KUBECONFIG", format!("{second}:{first}"))
        .output()
        .unwrap();
    assert!(
        !swapped.status.success() && text(&swapped).contains("elsewhere"),
        "the second file's current-context wins once it comes first: {}",
        text(&swapped)
    );

    // --request-timeout bounds a request to a server that accepts and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_server = format!("http://{}", silent.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        // Holds the connections open without a byte of answer until the test ends.
        let connections: Vec<_> = silent.incoming().take(4).collect();
        connections.len()
    });
    let quiet = kubeconfig_file(
        dir.path(),
        "silent",
        &Kubeconfig {
            clusters: vec![named_cluster("silent", &silent_server)],
            auth_infos: vec![admin],
            contexts: vec![named_context("silent", "silent", "admin")],
            current_context: Some("silent".into()),
            ..Kubeconfig::default()
        },
    );
    let started = Instant::now();
    let mut child =
        kubectl_bundle_command(&["list", "--request-timeout", "2s", "--kubeconfig", &quiet])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
    // kube's own read timeout is 295 s: without the flag the plugin would still be waiting.
    let deadline = started + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("--request-timeout 2s: still waiting after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let timed_out = child.wait_with_output().unwrap();
    assert!(
        !timed_out.status.success()
            && ["timed out", "timeout", "deadline"]
                .iter()
                .any(|word| text(&timed_out).to_lowercase().contains(word)),
        "{}",
        text(&timed_out)
    );
    drop(held);
}

#[tokio::test]
async fn watch_and_approve_wait() {
    let client = shared_gantry_client().await;
    let review = config_map_under_review(&client, "watch").await;
    let name = review.name.clone();
    let mut list = Watching::start(&["list", "--watch"]);
    list.wait_line("the bundle awaiting approval", |l| {
        l.starts_with(&name) && l.contains("AwaitingApproval")
    });
    let mut status = Watching::start(&["status", &name, "-w"]);
    status.wait_line("the phase awaiting approval", |l| {
        l.starts_with("Phase:") && l.contains("AwaitingApproval")
    });

    // --wait returns once the content is installed.
    let approved = ok(&["approve", &name, "--yes", "--wait", "--timeout", "60s"]);
    assert!(
        approved.contains(&format!("bundle {name} is Ready")),
        "{approved}"
    );
    assert_eq!(
        config_map_data(&client, &review.namespace, "cm")
            .await
            .as_deref(),
        Some("v1"),
        "installed when approve --wait returns"
    );
    list.wait_line("the installed bundle", |l| {
        l.starts_with(&name) && l.contains("Installed") && l.contains("True")
    });
    status.wait_line("the installed phase", |l| {
        l.starts_with("Phase:") && l.contains("Installed")
    });

    // --wait reports a failed install: an object in a namespace that does not exist.
    let broken = under_review(&client, "wait-fails", |_| {
        vec![(
            "a.yaml",
            config_map("cm", Some("no-such-namespace-here"), "v1"),
        )]
    })
    .await;
    let failed = fails(&[
        "approve",
        &broken.name,
        "--yes",
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert!(
        failed.contains(&format!("bundle {} failed", broken.name)),
        "{failed}"
    );
}

#[tokio::test]
async fn events_are_the_bundles_own_with_age_and_count() {
    let client = shared_gantry_client().await;
    let (name, ns) = installed(&client, "events").await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    // An event of an earlier bundle of the same name (another UID) is not shown.
    let earlier: Event = serde_json::from_value(json!({
        "metadata": { "generateName": "earlier-" },
        "involvedObject": { "apiVersion": "gantry.dev/v1alpha1", "kind": "Bundle", "name": name,
                            "uid": "00000000-0000-0000-0000-000000000000" },
        "reason": "FromAnEarlierBundle", "message": "not this one", "type": "Normal",
    }))
    .unwrap();
    events
        .create(&PostParams::default(), &earlier)
        .await
        .unwrap();
    // A Warning of a managed object is shown, with its count.
    let in_ns: Api<Event> = Api::namespaced(client.clone(), &ns);
    let warning: Event = serde_json::from_value(json!({
        "metadata": { "generateName": "cm-" },
        "involvedObject": { "apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "namespace": ns },
        "reason": "SomethingOdd", "message": "odd", "type": "Warning", "count": 7,
        // Last seen 10 minutes ago: shown as kubectl shows it, "10m".
        "lastTimestamp": k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(600),
    }))
    .unwrap();
    in_ns
        .create(&PostParams::default(), &warning)
        .await
        .unwrap();

    let out = wait_until("the bundle's own event", WAIT, || async {
        let out = ok(&["events", &name]);
        out.lines()
            .any(|l| l.contains("Normal") && l.contains(&format!("bundle/{name}")))
            .then_some(out)
    })
    .await;
    assert!(
        out.lines().next().unwrap().starts_with("LAST SEEN"),
        "{out}"
    );
    let odd = out
        .lines()
        .find(|l| l.contains("SomethingOdd"))
        .unwrap_or_else(|| panic!("the object's warning: {out}"));
    assert!(odd.contains("configmap/cm") && odd.contains(" 7 "), "{odd}");
    assert!(odd.starts_with("10m "), "the last-seen age: {odd}");
    assert!(!out.contains("FromAnEarlierBundle"), "{out}");
    let status = ok(&["status", &name]);
    assert!(
        !status.contains("FromAnEarlierBundle")
            && status.contains("LAST SEEN")
            && status.contains("\nInventory: 1 object\n"),
        "{status}"
    );
    let list: serde_json::Value =
        serde_json::from_str(&ok(&["events", &name, "-o", "json"])).unwrap();
    assert_eq!(list["kind"], "List");
}

#[tokio::test]
async fn tree_shows_the_managed_objects_live() {
    let client = shared_gantry_client().await;
    // No namespace: it goes to the bundle's installNamespace.
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: example.org/web:1\n";
    let (name, ns) = installed_with(
        &client,
        "tree",
        None,
        &[
            ("a.yaml", config_map("cm", None, "v1")),
            ("b.yaml", deployment.to_string()),
        ],
    )
    .await;
    // No controller-manager runs here: the Deployment's status is what the test says.
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2, "readyReplicas": 1}})),
        )
        .await
        .unwrap();
    // The provisioner assesses the objects again on the status change: health per object.
    let bundle = wait_bundle(
        &client,
        &name,
        "the Deployment listed as progressing",
        |b| {
            b.status
                .as_ref()
                .and_then(|s| s.object_health.as_ref())
                .is_some_and(|h| {
                    h.healthy == 1
                        && h.progressing == 1
                        && h.not_healthy
                            .iter()
                            .any(|o| o.name == "web" && o.state == "Progressing")
                })
        },
    )
    .await;
    let why = &bundle.status.unwrap().object_health.unwrap().not_healthy[0].message;
    // No controller-manager: kstatus says it is not observed yet.
    assert!(why.contains("not been observed"), "{why}");
    let out = ok(&["tree", &name]);
    let line = |what: &str| {
        out.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what} in {out}"))
            .to_string()
    };
    assert!(
        line(&format!("Bundle/{name}")).contains("Installed"),
        "{out}"
    );
    let cm = line("ConfigMap/cm");
    assert!(cm.contains("Exists") && cm.contains("Healthy"), "{out}");
    let web = line("Deployment.apps/web");
    assert!(
        web.contains("Exists")
            && web.contains("Progressing")
            && web.contains("1/2 ready")
            && web.contains(&ns),
        "{web}"
    );
    // Not a terminal: no colours.
    assert!(!out.contains('\x1b'), "{out:?}");
    let reasons = out
        .split_once("Not healthy:")
        .map(|(_, r)| r)
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        reasons.contains("Deployment.apps/web: ") && reasons.contains(why.as_str()),
        "{out}"
    );
    let list: serde_json::Value =
        serde_json::from_str(&ok(&["tree", &name, "-o", "json"])).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "{list}");
    assert_eq!(list["items"][0]["exists"], true);
    assert_eq!(list["items"][0]["health"], "Healthy", "{list}");
    assert_eq!(list["items"][1]["health"], "Progressing", "{list}");
    assert_eq!(list["items"][1]["healthMessage"], why.as_str(), "{list}");
}

#[tokio::test]
async fn version_and_check_read_the_cluster() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "system").await;
    let version = ok(&["version", "--system-namespace", &ns]);
    assert!(
        version.contains(env!("CARGO_PKG_VERSION"))
            && version.contains("Controller version: unknown"),
        "{version}"
    );
    let failed = fails(&["check", "--system-namespace", &ns]);
    assert!(
        failed.contains(&format!("Deployment {ns}/gantry-provisioner not found"))
            && failed.contains("checks failed"),
        "{failed}"
    );

    // What manifests/ installs, as the API shows it once the pods run.
    for (deployment, image) in [
        (
            "gantry-provisioner",
            "example.org/gantry/provisioner:v9.8.7",
        ),
        ("gantry-storage", "example.org/gantry/storage-server:v9.8.7"),
    ] {
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let object: Deployment = serde_json::from_value(json!({
            "metadata": { "name": deployment },
            "spec": { "selector": { "matchLabels": { "app": deployment } },
                      "template": { "metadata": { "labels": { "app": deployment } },
                                    "spec": { "containers": [{ "name": "provisioner", "image": image }] } } },
        }))
        .unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
        api.patch_status(
            deployment,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}}),
            ),
        )
        .await
        .unwrap();
    }
    let lease: Lease = serde_json::from_value(json!({
        "metadata": { "name": "gantry-provisioner" },
        "spec": { "holderIdentity": "provisioner-0", "leaseDurationSeconds": 3600,
                  "renewTime": k8s_openapi::jiff::Timestamp::now() },
    }))
    .unwrap();
    Api::<Lease>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();

    let version = ok(&["version", "--system-namespace", &ns]);
    assert!(version.contains("Controller version: v9.8.7"), "{version}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["version", "--system-namespace", &ns, "-o", "json"])).unwrap();
    assert_eq!(json["controller"], "v9.8.7");
    // Classes other tests create are accepted shortly after: wait for every check to pass.
    let kc = kubeconfig();
    let passed = wait_until("every check to pass", WAIT, || async {
        let out = kubectl_bundle(&["check", "--system-namespace", &ns, "--kubeconfig", &kc]);
        out.status.success().then(|| text(&out))
    })
    .await;
    assert!(
        passed.contains("held by provisioner-0") && !passed.contains("FAIL"),
        "{passed}"
    );
}

#[tokio::test]
async fn validate_push_and_pull_name_the_cause_and_the_fix() {
    let good = bundle_dir(&[("a.yaml", &config_map("cm", Some("x"), "v1"))]);
    let dir = good.path().display().to_string();
    let valid = kubectl_bundle(&["validate", &dir]);
    assert!(valid.status.success(), "{}", text(&valid));
    assert!(
        text(&valid).contains("ConfigMap")
            && text(&valid).contains("a valid plain+v0 bundle, 1 object in 1 file\n"),
        "{}",
        text(&valid)
    );
    let manifests = format!("{dir}/manifests");
    for verb in [
        vec!["validate", manifests.as_str()],
        vec!["push", manifests.as_str(), "example.org/x:v1"],
    ] {
        let out = kubectl_bundle(&verb);
        assert_fails_saying(
            &out,
            &format!("is the manifests/ directory itself: give its parent, {dir}"),
        );
    }
    let missing = kubectl_bundle(&["push", "/no/such/bundle", "example.org/x:v1"]);
    assert!(
        !missing.status.success() && text(&missing).contains("/no/such/bundle does not exist"),
        "{}",
        text(&missing)
    );
    let empty = tempfile::tempdir().unwrap();
    let no_manifests = kubectl_bundle(&["validate", &empty.path().display().to_string()]);
    assert_fails_saying(
        &no_manifests,
        "has no manifests/ directory: a bundle directory holds manifests/",
    );
    let bad = bundle_dir(&[("a.yaml", "kind: [")]);
    let invalid = kubectl_bundle(&["validate", &bad.path().display().to_string()]);
    assert!(
        !invalid.status.success() && text(&invalid).contains("a.yaml"),
        "{}",
        text(&invalid)
    );

    // TLS spoken to a plain-HTTP registry.
    let image = registry().reference(&format!("{}/app:v1", unique_name("push")));
    let tls = kubectl_bundle(&["push", &dir, &image]);
    assert_fails_saying(&tls, "speaks plain HTTP, not TLS: use --plain-http");
    let pushed = kubectl_bundle(&["push", &dir, &image, "--plain-http"]);
    assert!(pushed.status.success(), "{}", text(&pushed));
    // No progress drawing when stderr is not a terminal.
    let stderr = String::from_utf8_lossy(&pushed.stderr);
    assert!(
        !stderr.contains('\r') && !stderr.contains('\u{1b}'),
        "{stderr:?}"
    );
    assert!(stderr.contains("pushed 1 object as"), "{stderr}");

    let target = tempfile::tempdir().unwrap();
    let into = target.path().join("copy");
    let into = into.display().to_string();
    let pulled = kubectl_bundle(&["pull", &image, "--dir", &into, "--plain-http"]);
    assert!(pulled.status.success(), "{}", text(&pulled));
    assert!(
        std::path::Path::new(&into)
            .join("manifests/a.yaml")
            .is_file()
    );
    let stderr = String::from_utf8_lossy(&pulled.stderr);
    assert!(stderr.contains("): 1 object in 1 file\n"), "{stderr}");
    assert!(
        !stderr.contains('\r') && !stderr.contains('\u{1b}'),
        "no progress drawing when stderr is not a terminal: {stderr:?}"
    );
    let old_flag = kubectl_bundle(&["pull", &image, "-o", &into, "--plain-http"]);
    assert_eq!(old_flag.status.code(), Some(2), "{}", text(&old_flag));
    let into_manifests = kubectl_bundle(&[
        "pull",
        &image,
        "-d",
        &format!("{into}/manifests"),
        "--plain-http",
    ]);
    assert_fails_saying(&into_manifests, &format!("give its parent, {into}"));
}

/// Checks that the run failed and its output says `expected`.
fn assert_fails_saying(output: &std::process::Output, expected: &str) {
    assert!(
        !output.status.success() && text(output).contains(expected),
        "{}",
        text(output)
    );
}

/// The `error:` line of a failed run says `cause` once, and no cause twice in a row (error
/// types that print their source in their own message and also return it as their source).
fn assert_each_cause_once(output: &std::process::Output, cause: &str) {
    assert!(!output.status.success(), "{}", text(output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert_eq!(line.matches(cause).count(), 1, "{cause:?} once in {line:?}");
    let parts: Vec<&str> = line.split(": ").collect();
    for pair in parts.windows(2) {
        assert_ne!(pair[0], pair[1], "a cause said twice: {line:?}");
    }
}

#[test]
fn errors_say_each_cause_once() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().display().to_string();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        kubectl_bundle_command(args)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .envs(env.iter().copied())
            .output()
            .expect("running kubectl bundle")
    };
    // $KUBECONFIG names a missing file, no ~/.kube/config, not in a cluster: kube reads the
    // in-cluster variables, which are not set.
    let missing_kubeconfig = run(
        &["list"],
        &[("KUBECONFIG", "/no/such/kubeconfig"), ("HOME", &home)],
    );
    assert_each_cause_once(&missing_kubeconfig, "environment variable not found");
    // No $HOME at all: the same.
    let no_home = kubectl_bundle_command(&["status", "x"])
        .env_remove("HOME")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_each_cause_once(&no_home, "environment variable not found");
    let kubeconfig_flag = run(&["list", "--kubeconfig", "/no/such/kubeconfig"], &[]);
    assert_each_cause_once(&kubeconfig_flag, "(os error 2)");
    assert_each_cause_once(&kubeconfig_flag, "/no/such/kubeconfig");

    let bundle = bundle_dir(&[("a.yaml", &config_map("cm", Some("x"), "v1"))]);
    let dir = bundle.path().display().to_string();
    let image = registry().reference(&format!("{}/app:v1", unique_name("errors")));
    let missing_dir = run(&["push", "/no/such/bundle", &image], &[]);
    assert_each_cause_once(&missing_dir, "/no/such/bundle");
    let missing_ca = run(&["push", &dir, &image, "--ca-file", "/no/such/ca.pem"], &[]);
    assert_each_cause_once(&missing_ca, "(os error 2)");
    assert_each_cause_once(&missing_ca, "/no/such/ca.pem");
    let pull_ca = run(
        &["pull", &image, "-d", &dir, "--ca-file", "/no/such/ca.pem"],
        &[],
    );
    assert_each_cause_once(&pull_ca, "(os error 2)");
}

/// A CustomResourceDefinition of `kind` (plural `plural`, version v1) in `group`.
fn crd_yaml(group: &str, kind: &str, plural: &str, scope: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  \
         name: {plural}.{group}\nspec:\n  group: {group}\n  scope: {scope}\n  names:\n    \
         kind: {kind}\n    plural: {plural}\n  versions:\n  - name: v1\n    served: true\n    \
         storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        \
         x-kubernetes-preserve-unknown-fields: true\n"
    )
}

/// An object of `api_version` and `kind` named `name`, in no namespace.
fn bare_object(api_version: &str, kind: &str, name: &str) -> String {
    format!("apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n")
}

/// The `warning:` lines of a run.
fn warnings(output: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn validate_warns_about_namespaced_objects_without_a_namespace() {
    let dir = bundle_dir(&[
        ("a.yaml", &config_map("bare", None, "v1")),
        ("b.yaml", &bare_object("apps/v1", "Deployment", "web")),
        ("c.yaml", &config_map("placed", Some("team"), "v1")),
        ("d.yaml", &bare_object("example.com/v1", "Unknown", "u")),
        ("e.yaml", &namespace_yaml("team")),
    ]);
    let out = kubectl_bundle(&["validate", &dir.path().display().to_string()]);
    assert!(out.status.success(), "warnings only: {}", text(&out));
    let warned = warnings(&out);
    assert_eq!(warned.len(), 2, "{}", text(&out));
    assert!(
        warned[0].contains(
            "a.yaml: ConfigMap bare (apiVersion v1) is namespaced and has no metadata.namespace"
        ) && warned[0].contains("installNamespace"),
        "{warned:?}"
    );
    assert!(
        warned[1].contains("b.yaml: Deployment web (apiVersion apps/v1)"),
        "{warned:?}"
    );
    assert!(
        text(&out).contains("a valid plain+v0 bundle, 5 objects in 5 files"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn validate_against_the_cluster_checks_kinds_with_its_discovery() {
    let client = shared_gantry_client().await;
    // A namespaced kind the cluster serves and no built-in table knows.
    let group = format!("{}.example.com", unique_name("validate"));
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let crd = serde_saphyr::from_str(&crd_yaml(&group, "Widget", "widgets", "Namespaced")).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let gvk = kube::core::GroupVersionKind::gvk(&group, "v1", "Widget");
    wait_until("the Widget kind is served", WAIT, || async {
        kube::discovery::pinned_kind(&client, &gvk)
            .await
            .ok()
            .map(|_| ())
    })
    .await;

    let api_version = format!("{group}/v1");
    fn files_of<'a>(files: &'a [(&str, String)]) -> Vec<(&'a str, &'a str)> {
        files.iter().map(|(f, c)| (*f, c.as_str())).collect()
    }
    let mut files = vec![
        ("widget.yaml", bare_object(&api_version, "Widget", "w")),
        // Defined by a CRD of the bundle only: not served yet, namespaced by that CRD.
        (
            "sprockets.yaml",
            crd_yaml(&group, "Sprocket", "sprockets", "Namespaced"),
        ),
        ("sprocket.yaml", bare_object(&api_version, "Sprocket", "s")),
        // Served, cluster-scoped.
        (
            "class.yaml",
            bare_object("gantry.dev/v1alpha1", "ProvisionerClass", "c"),
        ),
        ("cm.yaml", config_map("placed", Some("team"), "v1")),
        ("gizmo.yaml", bare_object(&api_version, "Gizmo", "g")),
    ];
    let kc = kubeconfig();
    let dir = bundle_dir(&files_of(&files));
    let path = dir.path().display().to_string();
    let out = kubectl_bundle(&["validate", &path, "--against-cluster", "--kubeconfig", &kc]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "gizmo.yaml: Gizmo g (apiVersion {api_version}): the cluster does not serve {api_version}/Gizmo and no CustomResourceDefinition of the bundle defines it"
        )),
        "{}",
        text(&out)
    );
    assert!(
        !text(&out).contains(&format!(
            "Sprocket s (apiVersion {api_version}): the cluster"
        )),
        "a kind the bundle's CRD defines: {}",
        text(&out)
    );

    files.retain(|(f, _)| *f != "gizmo.yaml");
    let dir = bundle_dir(&files_of(&files));
    let path = dir.path().display().to_string();
    let out = kubectl_bundle(&["validate", &path, "--against-cluster", "--kubeconfig", &kc]);
    assert!(out.status.success(), "{}", text(&out));
    let warned = warnings(&out);
    assert_eq!(warned.len(), 2, "{}", text(&out));
    assert!(
        warned.iter().any(|w| w.contains(&format!(
            "widget.yaml: Widget w (apiVersion {api_version}) is namespaced"
        ))),
        "namespaced as discovery says: {warned:?}"
    );
    assert!(
        warned
            .iter()
            .any(|w| w.contains("sprocket.yaml: Sprocket s")),
        "namespaced as the bundle's CRD says: {warned:?}"
    );
    // Without the cluster the Widget's scope is not known: no warning about it.
    let offline = kubectl_bundle(&["validate", &path]);
    assert!(offline.status.success(), "{}", text(&offline));
    let warned = warnings(&offline);
    assert!(
        warned.len() == 1 && warned[0].contains("sprocket.yaml"),
        "{}",
        text(&offline)
    );
    crds.delete(&format!("widgets.{group}"), &Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn push_draws_its_progress_on_a_terminal() {
    // A bundle of about 1 MB: packing and sending it outlasts the first draws.
    let data: String = (0..4000)
        .map(|i| format!("  k{i}: {}\n", "x".repeat(200 + i % 7)))
        .collect();
    let big = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n{data}");
    let dir = bundle_dir(&[("a.yaml", &big)]);
    let image = registry().reference(&format!("{}/app:v1", unique_name("tty")));
    // util-linux's script runs the command on a pseudo-terminal, of a kind named as a
    // terminal emulator names it (without TERM, the progress bar draws nothing).
    let command = format!(
        "kubectl bundle push {} {image} --plain-http",
        dir.path().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("PATH", plugin_path())
        .env("TERM", "xterm-256color")
        .output()
        .expect("running script");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(&format!("pushing {image}: ")) && shown.contains("\u{1b}[2K"),
        "a progress line, redrawn: {shown:?}"
    );
}

#[test]
fn completion_scripts_for_three_shells() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef kubectl-bundle"),
        ("fish", "complete -c kubectl-bundle"),
    ] {
        let out = kubectl_bundle(&["completion", shell]);
        assert!(out.status.success(), "{}", text(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains(marker) && script.contains("approve") && script.contains("tree"),
            "{shell}: {script}"
        );
    }
    let unknown = kubectl_bundle(&["completion", "tcsh"]);
    assert_eq!(unknown.status.code(), Some(2));
}

/// `kubectl plugin list` finds the plugin in its directory and reports nothing wrong.
#[test]
fn kubectl_plugin_list_finds_the_plugin_and_nothing_wrong() {
    let out = std::process::Command::new("kubectl")
        .args(["plugin", "list"])
        .env("PATH", plugin_path())
        .output()
        .expect("running kubectl plugin list");
    assert!(out.status.success(), "{}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    let plugin = plugin_dir().join("kubectl-bundle");
    assert!(
        listed
            .lines()
            .any(|l| l.trim() == plugin.display().to_string()),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("warning"), "{}", text(&out));
}

/// kubectl completes `kubectl bundle ...` through `kubectl_complete-bundle`.
#[test]
fn kubectl_completes_the_plugins_verbs_and_flags() {
    let complete = |words: &[&str]| {
        let out = std::process::Command::new("kubectl")
            .arg("__complete")
            .arg("bundle")
            .args(words)
            .env("PATH", plugin_path())
            .output()
            .expect("running kubectl __complete");
        assert!(out.status.success(), "{words:?}: {}", text(&out));
        let candidates: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with(':'))
            .map(|l| l.split('\t').next().unwrap_or_default().to_string())
            .collect();
        candidates
    };
    assert_eq!(complete(&["ap"]), ["approve"]);
    let verbs = complete(&[""]);
    for verb in ["history", "rollback", "status", "list"] {
        assert!(verbs.iter().any(|v| v == verb), "{verb}: {verbs:?}");
    }
    assert!(
        complete(&["rollback", "my-app", "--t"]).contains(&"--to".to_string()),
        "flags of the verb"
    );
    assert_eq!(complete(&["completion", "z"]), ["zsh"]);
}

/// `diff --dir` compares a bundle directory with what the bundle installed: changed, added and
/// pruned objects are shown, and nothing is pushed or applied.
#[tokio::test]
async fn diff_of_a_directory_shows_what_it_would_change_and_changes_nothing() {
    let client = shared_gantry_client().await;
    let (name, ns) = installed_with(
        &client,
        "dir-diff",
        None,
        &[
            ("changed.yaml", config_map("changed", None, "v1")),
            ("same.yaml", config_map("same", None, "v1")),
            ("removed.yaml", config_map("removed", None, "v1")),
        ],
    )
    .await;
    let kc = kubeconfig();
    let before: Bundle = Api::all(client.clone()).get(&name).await.unwrap();

    let edited = bundle_dir(&[
        ("changed.yaml", &config_map("changed", None, "v2")),
        ("same.yaml", &config_map("same", None, "v1")),
        ("added.yaml", &config_map("added", None, "v1")),
    ]);
    let dir = edited.path().display().to_string();
    let out = kubectl_bundle(&["diff", "--dir", &dir, &name, "--kubeconfig", &kc]);
    assert_eq!(out.status.code(), Some(1), "changes: {}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    for header in [
        format!("+++ ConfigMap {ns}/changed (after apply)"),
        format!("+++ ConfigMap {ns}/added (after apply)"),
        format!("+++ ConfigMap {ns}/removed (pruned)"),
    ] {
        assert!(shown.contains(&header), "{header}: {shown}");
    }
    assert!(
        shown.contains("-  value: v1") && shown.contains("+  value: v2"),
        "{shown}"
    );
    assert!(!shown.contains(&format!("{ns}/same")), "{shown}");

    // Nothing changed in the cluster, and the bundle still installs what it did.
    assert_config_map(&client, &ns, "changed", Some("v1")).await;
    assert_eq!(config_map_data(&client, &ns, "added").await, None);
    assert_config_map(&client, &ns, "removed", Some("v1")).await;
    let after: Bundle = Api::all(client.clone()).get(&name).await.unwrap();
    assert_eq!(after.spec, before.spec);
    assert_eq!(
        after
            .status
            .as_ref()
            .and_then(|s| s.installed_image.clone()),
        before
            .status
            .as_ref()
            .and_then(|s| s.installed_image.clone())
    );

    // The directory the bundle was made from: no differences.
    let unchanged = bundle_dir(&[
        ("changed.yaml", &config_map("changed", None, "v1")),
        ("same.yaml", &config_map("same", None, "v1")),
        ("removed.yaml", &config_map("removed", None, "v1")),
    ]);
    let out = kubectl_bundle(&[
        "diff",
        "--dir",
        &unchanged.path().display().to_string(),
        &name,
        "--kubeconfig",
        &kc,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));

    // A directory push would refuse is an error (2), named as push names it.
    let out = kubectl_bundle(&[
        "diff",
        "--dir",
        "/no/such/bundle",
        &name,
        "--kubeconfig",
        &kc,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("/no/such/bundle does not exist"),
        "{}",
        text(&out)
    );
}

/// `kubectl __complete bundle WORDS` with `env` set: the candidates and cobra's directive line.
fn kubectl_complete(words: &[&str], env: &[(&str, &str)]) -> (Vec<String>, String) {
    let out = std::process::Command::new("kubectl")
        .arg("__complete")
        .arg("bundle")
        .args(words)
        .env("PATH", plugin_path())
        .env_remove("KUBECONFIG")
        .envs(env.iter().copied())
        .output()
        .expect("running kubectl __complete");
    assert!(out.status.success(), "{words:?}: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (directives, candidates): (Vec<&str>, Vec<&str>) =
        stdout.lines().partition(|l| l.starts_with(':'));
    (
        candidates
            .iter()
            .map(|l| l.split('\t').next().unwrap_or_default().to_string())
            .collect(),
        directives.last().unwrap_or(&"").to_string(),
    )
}

/// kubectl completes bundle names from the cluster the kubeconfig names, and `-o` values.
#[tokio::test]
async fn kubectl_completes_bundle_names_and_output_formats() {
    let client = shared_gantry_client().await;
    let prefix = unique_name("completed");
    let names = [format!("{prefix}-a"), format!("{prefix}-b")];
    let image = registry().reference(&format!("{prefix}/app:v1"));
    for name in &names {
        create_bundle(&client, name, spec(&image, None)).await;
    }
    let other = unique_name("not-completed");
    create_bundle(&client, &other, spec(&image, None)).await;
    let kc = kubeconfig();

    let (candidates, directive) = kubectl_complete(&["status", "--kubeconfig", &kc, &prefix], &[]);
    assert_eq!(candidates, names, "filtered by the typed prefix");
    assert_eq!(directive, ":4", "no file names");
    // $KUBECONFIG, as the verbs read it.
    let (candidates, _) = kubectl_complete(&["events", &prefix], &[("KUBECONFIG", &kc)]);
    assert_eq!(candidates, names);
    // Every verb that takes a bundle's name.
    for verb in [
        "status",
        "events",
        "tree",
        "history",
        "rollback",
        "diff",
        "suspend",
        "resume",
        "reconcile",
    ] {
        let (candidates, _) = kubectl_complete(&[verb, "--kubeconfig", &kc, &prefix], &[]);
        assert_eq!(candidates, names, "{verb}");
    }
    // A verb taking several names offers those not typed yet; one taking one offers no more.
    let (candidates, _) =
        kubectl_complete(&["suspend", "--kubeconfig", &kc, &names[0], &prefix], &[]);
    assert_eq!(candidates, [names[1].clone()]);
    let (candidates, _) =
        kubectl_complete(&["history", "--kubeconfig", &kc, &names[0], &prefix], &[]);
    assert!(candidates.is_empty(), "{candidates:?}");
    // A cluster that cannot be reached gives no candidates, and no error.
    let dir = tempfile::tempdir().unwrap();
    let refused = kubeconfig_file(
        dir.path(),
        "refused",
        &Kubeconfig {
            clusters: vec![named_cluster("refused", "https://127.0.0.1:1")],
            auth_infos: vec![NamedAuthInfo {
                name: "nobody".into(),
                auth_info: Some(AuthInfo::default()),
                other: Default::default(),
            }],
            contexts: vec![named_context("refused", "refused", "nobody")],
            current_context: Some("refused".into()),
            ..Kubeconfig::default()
        },
    );
    let (candidates, directive) =
        kubectl_complete(&["status", "--kubeconfig", &refused, &prefix], &[]);
    assert!(candidates.is_empty(), "{candidates:?}");
    assert_eq!(directive, ":4");
    let (candidates, _) = kubectl_complete(&["status", &prefix], &[("KUBECONFIG", "/no/such")]);
    assert!(candidates.is_empty(), "{candidates:?}");

    // -o: the formats the verb takes.
    let (formats, _) = kubectl_complete(&["list", "-o", ""], &[]);
    assert_eq!(
        formats,
        [
            "json",
            "yaml",
            "name",
            "wide",
            "jsonpath=",
            "custom-columns="
        ]
    );
    let (formats, _) = kubectl_complete(&["status", &names[0], "--output", ""], &[]);
    assert_eq!(
        formats,
        ["json", "yaml", "name", "jsonpath=", "custom-columns="]
    );
    let (formats, _) = kubectl_complete(&["history", &names[0], "-o", "j"], &[]);
    assert_eq!(formats, ["json", "jsonpath="]);
    let (formats, directive) = kubectl_complete(&["tree", &names[0], "-o", "custom"], &[]);
    assert_eq!(formats, ["custom-columns="]);
    assert_eq!(directive, ":6", "no space after the =");

    for name in names.iter().chain([&other]) {
        delete_bundle(&client, name).await;
    }
}

/// `approve` completes only the bundles it can decide on (a digest awaiting a decision, or
/// denied), `deny` those awaiting one or approved; neither offers a bundle its class approves
/// automatically.
#[tokio::test]
async fn approve_and_deny_complete_the_bundles_they_decide_on() {
    let client = shared_gantry_client().await;
    let prefix = unique_name("decide");
    let files = |_: &str| vec![("a.yaml", config_map("cm", None, "v1"))];
    let awaiting = under_review(&client, &format!("{prefix}-awaiting"), files).await;
    let approved = under_review(&client, &format!("{prefix}-approved"), files).await;
    let denied = under_review(&client, &format!("{prefix}-denied"), files).await;
    ok(&[
        "approve",
        &approved.name,
        "--yes",
        "--wait",
        "--timeout",
        "60s",
    ]);
    ok(&[
        "deny",
        &denied.name,
        "--reason",
        "no",
        "--wait",
        "--timeout",
        "60s",
    ]);
    let automatic = format!("{prefix}-automatic");
    let ns = unique_namespace(&client, "decide-automatic").await;
    create_bundle(&client, &automatic, spec(&approved.pinned, Some(&ns))).await;
    wait_bundle(&client, &automatic, "Ready", is_ready).await;

    let kc = kubeconfig();
    let (all, _) = kubectl_complete(&["status", "--kubeconfig", &kc, &prefix], &[]);
    assert_eq!(all.len(), 4, "{all:?}");
    let (approvable, _) = kubectl_complete(&["approve", "--kubeconfig", &kc, &prefix], &[]);
    assert_eq!(approvable, [awaiting.name.clone(), denied.name.clone()]);
    let (deniable, _) = kubectl_complete(&["deny", "--kubeconfig", &kc, &prefix], &[]);
    assert_eq!(deniable, [approved.name.clone(), awaiting.name.clone()]);
}

/// A class with `maxObjects: 1`: content of two objects passes push's checks and is refused by
/// the controller, as any invalid content would be.
async fn one_object_class(client: &Client) -> String {
    let class = unique_name("one-object");
    let mut spec = class_spec(ApprovalPolicy::Automatic);
    spec.require_digest = false;
    spec.limits = Some(gantry_api::Limits {
        max_objects: Some(1),
        ..Default::default()
    });
    apply_class(client, &class, spec, false).await;
    class
}

#[tokio::test]
async fn a_rejected_new_digest_is_named_and_the_installed_one_stays() {
    let client = shared_gantry_client().await;
    let class = one_object_class(&client).await;
    let ns = unique_namespace(&client, "rejected").await;
    let good = push_config_map(&format!("{ns}/app:live"), "cm", None, "v1").await;
    let name = unique_name("rejected");
    let bundle_spec = spec_of_class(&in_registry(&format!("{ns}/app:live")), Some(&ns), &class);
    create_bundle(&client, &name, bundle_spec).await;
    wait_bundle(&client, &name, "Ready", is_ready).await;

    // The tag moves to content the class refuses.
    let bad = push(
        &format!("{ns}/app:live"),
        &[
            ("a.yaml", config_map("cm", None, "v2")),
            ("b.yaml", config_map("extra", None, "v2")),
        ],
    )
    .await;
    let bundle = wait_bundle(&client, &name, "the new digest refused", |b| {
        b.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(BundlePhase::UpdateFailing))
    })
    .await;
    let status = bundle.status.clone().unwrap();
    assert_eq!(status.resolved_image.as_deref(), Some(bad.as_str()));
    assert_eq!(status.installed_image.as_deref(), Some(good.as_str()));
    assert_eq!(status.content_digest, None, "no content of the new digest");
    let ready = condition(&bundle, types::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", reasons::INVALID_BUNDLE)
    );
    assert!(
        ready.message.contains(digest_of(&bad))
            && ready.message.contains(&format!("{good} stays installed")),
        "{}",
        ready.message
    );
    let installed = condition(&bundle, types::INSTALLED).unwrap();
    assert_eq!(installed.status, "True");
    assert!(installed.message.contains(&good), "{}", installed.message);
    assert_eq!(
        config_map_data(&client, &ns, "cm").await.as_deref(),
        Some("v1"),
        "the installed content is untouched"
    );
    assert_eq!(config_map_data(&client, &ns, "extra").await, None);

    // No retry fixes invalid content: the bundle is Stalled until something changes.
    assert_stalled(&bundle, reasons::INVALID_BUNDLE);

    // kubectl bundle status tells the same, the stall first.
    let shown = ok(&["status", &name]);
    let stalled_line = shown
        .lines()
        .find(|l| l.starts_with("Stalled:"))
        .unwrap_or_else(|| panic!("a Stalled line: {shown}"));
    assert!(
        stalled_line.contains("InvalidBundle: ")
            && stalled_line.contains("no retry can fix this until")
            && stalled_line.contains(&format!("kubectl bundle reconcile {name}")),
        "{stalled_line}"
    );
    for part in [
        "UpdateFailing",
        &format!("Resolved:   {bad}"),
        &format!("Installed:  {good}"),
    ] {
        assert!(shown.contains(part), "{part}: {shown}");
    }

    // Only an installed digest can be rolled back to.
    let refused = fails(&["rollback", &name, "--to", digest_of(&bad)]);
    assert!(
        refused.contains("not in the bundle's history") && refused.contains(digest_of(&good)),
        "{refused}"
    );
}

#[tokio::test]
async fn history_and_rollback_through_kubectl() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "history").await;
    let first = push_config_map(&format!("{ns}/app:live"), "cm", None, "v1").await;
    let name = unique_name("history");
    create_bundle_ready(
        &client,
        &name,
        spec(&in_registry(&format!("{ns}/app:live")), Some(&ns)),
    )
    .await;
    let second = push_config_map(&format!("{ns}/app:live"), "cm", None, "v2").await;
    wait_config_map(&client, &ns, "cm", "v2", "the moved tag installed").await;
    wait_bundle(&client, &name, "the second digest in history", |b| {
        b.status.as_ref().is_some_and(|s| s.history.len() == 2)
    })
    .await;

    // Newest first, the installed one marked, both approved automatically.
    let shown = ok(&["history", &name]);
    let rows: Vec<&str> = shown.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{shown}");
    assert!(
        rows[0].starts_with(&format!("{} (installed)", digest_of(&second))),
        "{shown}"
    );
    assert!(rows[1].starts_with(digest_of(&first)), "{shown}");
    assert!(rows.iter().all(|r| r.contains("Automatic")), "{shown}");
    let structured = ok(&["history", &name, "-o", "jsonpath={[*].digest}"]);
    assert_eq!(
        structured.trim(),
        format!("{} {}", digest_of(&second), digest_of(&first))
    );

    // Back to the first digest by a prefix of it: the spec is pinned and v1 comes back.
    let prefix = &digest_of(&first)["sha256:".len()..][..12];
    let rolled = ok(&["rollback", &name, "--to", prefix]);
    assert!(rolled.contains(&first), "{rolled}");
    assert_eq!(get_bundle(&client, &name).await.spec.image, first);
    wait_config_map(&client, &ns, "cm", "v1", "the first digest installed again").await;
    let bundle = wait_bundle(&client, &name, "Ready at the first digest", |b| {
        is_ready(b)
            && b.status
                .as_ref()
                .is_some_and(|s| s.installed_image.as_deref() == Some(first.as_str()))
    })
    .await;
    let history = bundle.status.unwrap().history;
    assert_eq!(
        history
            .iter()
            .map(|e| e.digest.as_str())
            .collect::<Vec<_>>(),
        [digest_of(&first), digest_of(&second)],
        "a digest installed again moves to the front"
    );
    let again = fails(&["rollback", &name, "--to", digest_of(&first)]);
    assert!(again.contains("already pinned"), "{again}");
}

/// A digest installed automatically and then approved by hand (its bundle moved to a class with
/// `approval: Manual`): `history` says who approved it, not `Automatic`.
#[tokio::test]
async fn history_names_the_approver_of_a_digest_approved_after_its_install() {
    let client = shared_gantry_client().await;
    let (name, _) = installed(&client, "approved-later").await;
    let shown = ok(&["history", &name]);
    assert!(
        shown.lines().nth(1).unwrap().contains("Automatic"),
        "{shown}"
    );
    let class = unique_name("approved-later-class");
    apply_class(&client, &class, class_spec(ApprovalPolicy::Manual), false).await;
    patch_spec(&client, &name, json!({ "provisionerClassName": class })).await;
    wait_bundle(
        &client,
        &name,
        "awaiting approval",
        reason_is(types::APPROVED, reasons::AWAITING_APPROVAL),
    )
    .await;
    ok(&[
        "approve",
        &name,
        "--yes",
        "--reason",
        "reviewed",
        "--wait",
        "--timeout",
        "60s",
    ]);
    let shown = ok(&["history", &name]);
    let rows: Vec<&str> = shown.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "one digest: {shown}");
    assert!(
        rows[0].contains("(installed)")
            && rows[0].contains("Manual by ")
            && rows[0].contains(": reviewed"),
        "{shown}"
    );
}

#[tokio::test]
async fn kubectl_get_shows_the_class_the_message_and_the_last_transition() {
    let client = shared_gantry_client().await;
    let (name, _) = installed(&client, "columns").await;
    let out = std::process::Command::new("kubectl")
        .args(["get", "bundles", &name, "--kubeconfig", &kubeconfig()])
        .output()
        .expect("running kubectl get");
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    let mut lines = shown.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    // HEALTHY without -o wide: Ready can be True while the objects are not healthy.
    assert_eq!(
        header,
        [
            "NAME", "CLASS", "IMAGE", "PHASE", "READY", "HEALTHY", "SINCE", "AGE", "MESSAGE"
        ],
        "{shown}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row[1], DEFAULT_CLASS, "the default class is shown: {shown}");
    assert_eq!(
        (row[3], row[4], row[5]),
        ("Installed", "True", "True"),
        "{shown}"
    );
    assert!(
        row[6].ends_with('s') || row[6].ends_with('m'),
        "an age: {shown}"
    );
    assert_eq!(
        row[8..].join(" ").split(" of ").next(),
        Some("1 object"),
        "Ready's message: {shown}"
    );
    // kubectl bundle list agrees on the class.
    let listed = ok(&["list"]);
    let row = listed.lines().find(|l| l.starts_with(&name)).unwrap();
    assert!(
        row.contains(DEFAULT_CLASS) && !row.contains("<default>"),
        "{row}"
    );
}

/// A TLS registry of this test binary (its CA is not trusted by the class or the plugin).
fn tls_registry() -> &'static Registry {
    static TLS: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    TLS.get_or_init(|| {
        Registry::start(RegistryOptions {
            tls: true,
            auth: None,
        })
    })
}

/// A bundle of a class of its own with `insecure` as its insecureRegistries, naming `image`.
async fn bundle_with_insecure(
    client: &Client,
    prefix: &str,
    insecure: &[&str],
    image: &str,
) -> String {
    let class = unique_name(&format!("{prefix}-class"));
    let mut class_spec = class_spec(ApprovalPolicy::Automatic);
    class_spec.require_digest = false;
    class_spec.insecure_registries = insecure.iter().map(|r| r.to_string()).collect();
    apply_class(client, &class, class_spec, false).await;
    let name = unique_name(prefix);
    create_bundle(client, &name, spec_of_class(image, Some("default"), &class)).await;
    name
}

#[tokio::test]
async fn a_registry_reached_in_the_wrong_protocol_is_named_with_the_fix() {
    let client = shared_gantry_client().await;

    // The class does not list the plain-HTTP registry: the controller speaks TLS to it.
    let host = registry().host();
    let image = registry().reference(&format!("{}/app:v1", unique_name("plain")));
    let name = bundle_with_insecure(&client, "plain-http", &[], &image).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::PULL_FAILED,
        &format!(
            "pulling {image}: the registry {host} speaks plain HTTP, not TLS: add {host} to the class's insecureRegistries"
        ),
    )
    .await;
    let message = &condition(&bundle, types::UNPACKED).unwrap().message;
    assert!(!message.contains("InvalidContentType"), "{message}");
    assert_eq!(message.matches(&image).count(), 1, "{message}");
    let shown = ok(&["status", &name]);
    assert!(
        shown.contains(&format!("add {host} to the class's insecureRegistries")),
        "{shown}"
    );

    // The class lists a TLS registry as plain HTTP.
    let tls = tls_registry().host();
    let image = tls_registry().reference(&format!("{}/app:v1", unique_name("tls")));
    let name = bundle_with_insecure(&client, "tls", &[tls], &image).await;
    wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::PULL_FAILED,
        &format!(
            "pulling {image}: the registry {tls} speaks TLS, not plain HTTP: remove {tls} from the class's insecureRegistries"
        ),
    )
    .await;
}

#[tokio::test]
async fn registry_errors_name_the_reference_once() {
    let client = shared_gantry_client().await;
    let image = registry().reference(&format!("{}/app:v1", unique_name("missing")));
    let name = unique_name("missing");
    create_bundle(&client, &name, spec(&image, Some("default"))).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::PULL_FAILED,
        &format!("pulling {image}: repository or tag not found"),
    )
    .await;
    let message = &condition(&bundle, types::READY).unwrap().message;
    assert_eq!(message.matches(&image).count(), 1, "{message}");

    // kubectl get shows it in one short line; the condition keeps the whole message.
    assert!(message.contains("(attempt "), "{message}");
    let out = std::process::Command::new("kubectl")
        .args(["get", "bundles", &name, "--kubeconfig", &kubeconfig()])
        .output()
        .expect("running kubectl get");
    let shown = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 2, "{shown}");
    let column = lines[0].find("MESSAGE").expect("a MESSAGE column");
    let short = lines[1][column..].trim_end();
    assert!(
        short.starts_with("pulling app:v1: repository or tag not found")
            && !short.contains("attempt")
            && short.chars().count() <= 100,
        "{shown}"
    );

    // The plugin says it once too.
    let dir = tempfile::tempdir().unwrap();
    let into = dir.path().join("copy").display().to_string();
    let out = kubectl_bundle(&["pull", &image, "-d", &into, "--plain-http"]);
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("pulling {image}: repository or tag not found"))
            && stderr.matches(&image).count() == 1,
        "{stderr}"
    );
}

#[test]
fn pull_names_the_protocol_the_registry_speaks() {
    let dir = tempfile::tempdir().unwrap();
    let into = dir.path().join("copy").display().to_string();

    // TLS spoken to the plain-HTTP registry.
    let host = registry().host();
    let image = registry().reference("any/app:v1");
    let out = kubectl_bundle(&["pull", &image, "-d", &into]);
    assert_fails_saying(
        &out,
        &format!("the registry {host} speaks plain HTTP, not TLS: use --plain-http"),
    );
    assert!(!text(&out).contains("InvalidContentType"), "{}", text(&out));

    // Plain HTTP spoken to a TLS registry.
    let tls = tls_registry().host();
    let image = tls_registry().reference("any/app:v1");
    let out = kubectl_bundle(&["pull", &image, "-d", &into, "--plain-http"]);
    assert_fails_saying(
        &out,
        &format!("the registry {tls} speaks TLS, not plain HTTP: drop --plain-http"),
    );
}

#[tokio::test]
async fn spec_images_rewrite_what_is_applied_and_an_approval_covers_the_rewrite() {
    let client = shared_gantry_client().await;
    let deployment = |ns: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: op\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: op}}\n  template:\n    metadata:\n      labels: {{app: op}}\n    spec:\n      initContainers:\n      - name: init\n        image: registry.example/tools/init:v1\n      containers:\n      - name: op\n        image: registry.example/team/op:v1\n      - name: side\n        image: registry.example/team/sidecar:v1\n"
        )
    };
    let UnderReview {
        name,
        namespace: ns,
        ..
    } = under_review(&client, "images", |ns| vec![("a.yaml", deployment(ns))]).await;
    let set_images =
        |images: serde_json::Value| patch_spec(&client, &name, json!({ "images": images }));
    set_images(json!([
        { "name": "registry.example/team/op", "newName": "mirror.example/team/op" },
        { "name": "registry.example/tools/init", "newTag": "v2" },
    ]))
    .await;
    wait_bundle(&client, &name, "awaiting approval of the new spec", |b| {
        b.status.as_ref().and_then(|s| s.observed_generation) == b.metadata.generation
            && b.status.as_ref().and_then(|s| s.phase) == Some(BundlePhase::AwaitingApproval)
    })
    .await;
    let shown = ok(&["status", &name]);
    assert!(
        shown.contains("registry.example/team/op -> mirror.example/team/op (tag or digest kept)"),
        "{shown}"
    );

    // The approver sees the rewrites, and the decision records them.
    let approved = ok(&["approve", &name, "--yes", "--wait"]);
    assert!(
        approved.contains("With its images rewritten")
            && approved.contains("registry.example/tools/init -> registry.example/tools/init:v2"),
        "{approved}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let images = |d: &Deployment| {
        let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let mut all: Vec<String> = pod
            .init_containers
            .iter()
            .flatten()
            .chain(&pod.containers)
            .filter_map(|c| c.image.clone())
            .collect();
        all.sort();
        all
    };
    assert_eq!(
        images(&deployments.get("op").await.unwrap()),
        [
            "mirror.example/team/op:v1",
            "registry.example/team/sidecar:v1",
            "registry.example/tools/init:v2",
        ]
    );

    // Other rewrites are other objects: the approval of the digest does not cover them.
    set_images(json!([
        { "name": "registry.example/team/op", "newName": "elsewhere.example/op" },
    ]))
    .await;
    let bundle = wait_bundle(&client, &name, "a new approval needed", |b| {
        b.status.as_ref().and_then(|s| s.observed_generation) == b.metadata.generation
            && condition(b, types::APPROVED).is_some_and(|c| c.reason == reasons::AWAITING_APPROVAL)
    })
    .await;
    let message = &condition(&bundle, types::APPROVED).unwrap().message;
    assert!(message.contains("spec.images changed"), "{message}");
    assert_eq!(
        images(&deployments.get("op").await.unwrap())[0],
        "mirror.example/team/op:v1",
        "nothing applied before the approval"
    );
    // kubectl bundle diff shows the rewritten object that an approval would apply.
    let diff = kubectl_bundle(&["diff", &name, "--kubeconfig", &kubeconfig()]);
    let shown = text(&diff);
    assert_eq!(diff.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("+          image: elsewhere.example/op:v1")
            || shown
                .lines()
                .any(|l| l.starts_with('+') && l.contains("elsewhere.example/op:v1")),
        "{shown}"
    );
    ok(&["approve", &name, "--yes", "--wait"]);
    assert!(
        images(&deployments.get("op").await.unwrap())
            .contains(&"elsewhere.example/op:v1".to_string())
    );
}
