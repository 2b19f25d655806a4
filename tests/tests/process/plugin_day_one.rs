//! `kubectl bundle` as a new user meets it on day one: `approve --wait` right after a
//! `deny`, `reconcile` of a bundle that waits for a person, kubectl's habits (`-A`, `-l`,
//! several names and `--all`, a SUSPENDED column) and errors that say each cause once. Run by
//! kubectl itself from PATH against a running Gantry, as the other plugin tests.

use std::time::{Duration, Instant};

use gantry_api::conditions::types;
use gantry_api::{Bundle, BundlePhase};
use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use gantry_tests::unique_name;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// A cluster of its own for the test of `--all`: on the shared one, `suspend --all` would hold
/// the other tests' bundles back.
static CLUSTER: Isolated = Isolated::with_gantry(&SHARED_GANTRY_FLAGS);

/// A Ready bundle of the default class (Automatic) holding one ConfigMap; its name.
async fn installed(client: &Client, prefix: &str) -> String {
    let ns = unique_namespace(client, prefix).await;
    let pinned = push_config_map(&format!("{ns}/app:v1"), "cm", None, "v1").await;
    let name = unique_name(prefix);
    create_bundle_ready(client, &name, spec(&pinned, Some(&ns))).await;
    name
}

/// The row of bundle `name` in `list` output, split into columns.
fn row<'a>(listed: &'a str, name: &str) -> Vec<&'a str> {
    listed
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("{name} is not listed:\n{listed}"))
        .split_whitespace()
        .collect()
}

/// The value of column `column` of bundle `name` in `list` output.
fn cell(listed: &str, name: &str, column: &str) -> String {
    let header: Vec<&str> = listed.lines().next().unwrap().split_whitespace().collect();
    let at = header
        .iter()
        .position(|h| *h == column)
        .unwrap_or_else(|| panic!("no column {column}: {header:?}"));
    row(listed, name)[at].to_string()
}

async fn suspended(client: &Client, name: &str) -> bool {
    Api::<Bundle>::all(client.clone())
        .get(name)
        .await
        .unwrap()
        .spec
        .suspend
}

#[tokio::test]
async fn approve_wait_after_a_deny_waits_for_this_approval() {
    let client = shared_gantry_client().await;
    let review = config_map_under_review(&client, "after-deny").await;
    let name = review.name.as_str();
    ok(&["deny", name, "--reason", "not yet"]);
    // The status the deny leaves: what an approval must not be judged by.
    wait_bundle(&client, name, "Denied", phase_is(BundlePhase::Denied)).await;

    let out = ok(&[
        "approve",
        name,
        "--yes",
        "--reason",
        "reviewed again",
        "--wait",
        "--timeout",
        "60s",
    ]);
    assert!(out.contains(&format!("bundle {name} is Ready")), "{out}");
    assert_eq!(
        config_map_data(&client, &review.namespace, "cm")
            .await
            .as_deref(),
        Some("v1"),
        "the approved content is installed when --wait returns"
    );
}

#[tokio::test]
async fn reconcile_of_a_bundle_awaiting_approval_returns_and_says_so() {
    let client = shared_gantry_client().await;
    let review = config_map_under_review(&client, "reconcile-awaiting").await;
    let name = review.name.as_str();
    let started = Instant::now();
    // Far below the timeout: the pass is handled within seconds.
    let out = ok(&["reconcile", name, "--timeout", "45s"]);
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "{:?}",
        started.elapsed()
    );
    assert!(
        out.contains(&format!(
            "bundle {name} reconciled: it now waits for an approver"
        )) && out.contains(digest_of(&review.pinned)),
        "{out}"
    );

    // Denied: said so, exit 1, at once.
    ok(&["deny", name, "--reason", "grants too much"]);
    wait_bundle(&client, name, "Denied", phase_is(BundlePhase::Denied)).await;
    let refused = fails(&["reconcile", name, "--timeout", "45s"]);
    assert!(
        refused.contains("its digest is denied")
            && refused.contains("grants too much")
            && refused.contains(&format!("kubectl bundle approve {name}")),
        "{refused}"
    );

    // Suspended: refused before anything is requested.
    ok(&["suspend", name]);
    let refused = fails(&["reconcile", name]);
    assert!(
        refused.contains("is suspended: resume it first"),
        "{refused}"
    );
}

#[tokio::test]
async fn all_namespaces_is_accepted_on_every_verb() {
    let client = shared_gantry_client().await;
    let name = installed(&client, "all-ns").await;
    let dir = tempfile::tempdir().unwrap();
    write_bundle(dir.path(), &[("a.yaml", config_map("cm", Some("x"), "v"))]);
    let bundle_dir = dir.path().display().to_string();
    let verbs: Vec<Vec<&str>> = vec![
        vec!["list"],
        vec!["status", &name],
        vec!["events", &name],
        vec!["tree", &name],
        vec!["history", &name],
        vec!["validate", &bundle_dir],
        vec!["version"],
        vec!["check"],
        vec!["suspend", &name],
        vec!["resume", &name],
        vec!["reconcile", &name, "--timeout", "45s"],
        vec!["diff", &name],
        vec!["approve", &name, "--yes"],
        vec!["deny", &name, "--reason", "r"],
        vec!["rollback", &name, "--to", "sha256:0"],
        vec!["push", &bundle_dir, "127.0.0.1:1/x:v1", "--plain-http"],
        vec![
            "pull",
            "127.0.0.1:1/x:v1",
            "--dir",
            &bundle_dir,
            "--plain-http",
        ],
        vec!["completion", "bash"],
    ];
    let kc = kubeconfig();
    for verb in verbs {
        for flag in ["-A", "--all-namespaces"] {
            let mut args = verb.clone();
            args.extend([flag, "--kubeconfig", &kc]);
            let out = kubectl_bundle(&args);
            // "unexpected argument" (exit 2) is the parser refusing the flag; other failures
            // (approve of an Automatic class, a registry that is not there, `check` without
            // the Deployments, `diff` without a storage token, exit 2 there) are the verbs' own.
            assert!(
                (out.status.code() != Some(2) || verb[0] == "diff")
                    && !text(&out).contains("unexpected argument"),
                "{args:?}: {}",
                text(&out)
            );
        }
    }
}

#[tokio::test]
async fn list_selects_by_label_and_shows_suspended() {
    let client = shared_gantry_client().await;
    let (a, b) = (
        installed(&client, "label-a").await,
        installed(&client, "label-b").await,
    );
    let team = unique_name("team");
    Api::<Bundle>::all(client.clone())
        .patch(
            &a,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "team": team } } })),
        )
        .await
        .unwrap();
    for selector in [format!("team={team}"), format!("team in ({team})")] {
        for flag in ["-l", "--selector"] {
            let listed = ok(&["list", flag, &selector]);
            assert!(
                listed.lines().count() == 2 && row(&listed, &a)[0] == a && !listed.contains(&b),
                "{selector}: {listed}"
            );
        }
    }
    let names = ok(&[
        "list",
        "-l",
        &format!("team={team}"),
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert_eq!(names, a);
    let refused = fails(&["list", "-l", "team in (a"]);
    assert!(refused.contains("selector"), "{refused}");

    // SUSPENDED: spec.suspend, as `flux get` shows it.
    ok(&["suspend", &b]);
    let listed = ok(&["list"]);
    assert_eq!(cell(&listed, &b, "SUSPENDED"), "True", "{listed}");
    assert_eq!(cell(&listed, &a, "SUSPENDED"), "False", "{listed}");
    assert_eq!(cell(&listed, &a, "PHASE"), "Installed", "{listed}");
    let wide = ok(&["list", "-o", "wide"]);
    assert_eq!(cell(&wide, &b, "SUSPENDED"), "True", "{wide}");
    ok(&["resume", &b]);
}

/// `list`, `status` and `tree` take names as `kubectl get bundles A B` does: those alone, in
/// the order given, and for an unknown one kubectl's NotFound line with the others still
/// printed, exit 1. `list` shows HEALTHY; a closed standard output ends it quietly.
#[tokio::test]
async fn list_status_and_tree_take_names_as_kubectl_get_does() {
    let client = shared_gantry_client().await;
    let (a, b) = (
        installed(&client, "names-a").await,
        installed(&client, "names-b").await,
    );
    wait_bundle(&client, &a, "Healthy", |b| {
        condition(b, types::HEALTHY).is_some_and(|c| c.status == "True")
    })
    .await;
    let listed = ok(&["list", &b, &a]);
    let names: Vec<&str> = listed
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, [b.as_str(), a.as_str()], "{listed}");
    assert_eq!(cell(&listed, &a, "HEALTHY"), "True", "{listed}");

    let missing = unique_name("missing");
    let kc = kubeconfig();
    for verb in ["list", "status", "tree"] {
        let out = kubectl_bundle(&[verb, &a, &missing, &b, "--kubeconfig", &kc]);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(1), "{verb}: {stdout}{stderr}");
        assert_eq!(
            stderr.trim(),
            format!("Error from server (NotFound): bundles.gantry.dev \"{missing}\" not found"),
            "{verb}"
        );
        assert!(
            stdout.contains(&a) && stdout.contains(&b),
            "{verb}: {stdout}"
        );
    }
    // One name: the object, as `kubectl get bundle NAME -o json` prints it; several: a List.
    let one: serde_json::Value = serde_json::from_str(&ok(&["list", &a, "-o", "json"])).unwrap();
    assert_eq!(one["kind"], "Bundle", "{one}");
    let several = ok(&["status", &a, &b, "-o", "jsonpath={.items[*].metadata.name}"]);
    assert_eq!(several, format!("{a} {b}"));
    let objects = ok(&["tree", &a, &b, "-o", "jsonpath={.items[*].bundle}"]);
    assert_eq!(objects, format!("{a} {b}"), "one ConfigMap each");
    let with_selector = kubectl_bundle(&["list", &a, "-l", "team=x", "--kubeconfig", &kc]);
    assert_eq!(
        with_selector.status.code(),
        Some(2),
        "{}",
        text(&with_selector)
    );

    // `kubectl bundle list -o json | head -1`: whoever closed the pipe read what they wanted.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = kubectl_bundle_command(&["list", "-o", "json", "--kubeconfig", &kc])
        .stdout(writer)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn several_names_and_all_on_suspend_resume_and_reconcile() {
    let cluster = CLUSTER.get();
    let plane = cluster.plane();
    let client = plane.client().await;
    let (a, b) = (
        installed(&client, "many-a").await,
        installed(&client, "many-b").await,
    );
    let review = config_map_under_review(&client, "many-review").await;
    let c = review.name.as_str();

    // Several names.
    let out = ok_on(plane, &["suspend", &a, &b]);
    assert!(
        out.contains(&format!("bundle {a} suspended"))
            && out.contains(&format!("bundle {b} suspended")),
        "{out}"
    );
    assert!(suspended(&client, &a).await && suspended(&client, &b).await);
    assert!(!suspended(&client, c).await);
    ok_on(plane, &["resume", &a, &b]);
    assert!(!suspended(&client, &a).await && !suspended(&client, &b).await);

    // --all, and names with it refused by the parser. A bundle already as asked is left
    // unwritten and said to be, as kubectl says "unchanged".
    ok_on(plane, &["suspend", &a]);
    let out = ok_on(plane, &["suspend", "--all"]);
    for name in [a.as_str(), b.as_str(), c] {
        assert!(suspended(&client, name).await, "{name}");
    }
    assert!(
        out.contains(&format!(
            "bundle.gantry.dev/{a} already suspended (unchanged)"
        )) && !out.contains(&format!("bundle {a} suspended"))
            && out.contains(&format!("bundle {b} suspended")),
        "{out}"
    );
    ok_on(plane, &["resume", &b]);
    let out = ok_on(plane, &["resume", "--all"]);
    for name in [a.as_str(), b.as_str(), c] {
        assert!(!suspended(&client, name).await, "{name}");
    }
    assert!(
        out.contains(&format!("bundle.gantry.dev/{b} not suspended (unchanged)"))
            && !out.contains(&format!("bundle {b} resumed"))
            && out.contains(&format!("bundle {a} resumed"))
            && out.contains(&format!("bundle {c} resumed")),
        "{out}"
    );
    let both = kubectl_bundle(&[
        "suspend",
        &a,
        "--all",
        "--kubeconfig",
        &plane.kubeconfig().display().to_string(),
    ]);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
    let neither = kubectl_bundle(&[
        "resume",
        "--kubeconfig",
        &plane.kubeconfig().display().to_string(),
    ]);
    assert_eq!(neither.status.code(), Some(2), "{}", text(&neither));

    // reconcile --all: each bundle's outcome; a suspended one is skipped, and said so.
    ok_on(plane, &["suspend", &b]);
    let kc = plane.kubeconfig().display().to_string();
    let out = kubectl_bundle(&[
        "reconcile",
        "--all",
        "--timeout",
        "45s",
        "--kubeconfig",
        &kc,
    ]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!("bundle {a} reconciled: Ready"))
            && said.contains(&format!("bundle {b} is suspended: skipped"))
            && said.contains(&format!(
                "bundle {c} reconciled: it now waits for an approver"
            )),
        "{said}"
    );

    // Several names, one missing: the others are still reconciled; exit 1 with each error once.
    let missing = unique_name("missing");
    let refused = fails_on(plane, &["reconcile", &a, &missing, "--timeout", "45s"]);
    assert!(
        refused.contains(&format!("bundle {a} reconciled: Ready"))
            && refused
                .matches(&format!("bundle {missing} not found"))
                .count()
                == 1
            && refused.contains("1 of 2 bundles failed"),
        "{refused}"
    );
}

#[test]
fn errors_say_each_cause_once() {
    let home = tempfile::tempdir().unwrap();
    // No kubeconfig anywhere and not in a cluster: kube's error carries the variable's error
    // in its own text and as its source.
    let out = kubectl_bundle_command(&["list"])
        .env("HOME", home.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert_eq!(
        said.matches("environment variable not found").count(),
        1,
        "{said}"
    );

    let missing = home.path().join("nope");
    let missing = missing.display().to_string();
    let bundle = home.path().join("bundle");
    write_bundle(&bundle, &[("a.yaml", config_map("cm", Some("x"), "v"))]);
    // "No such file or directory (os error 2)"
    let io = std::io::Error::from_raw_os_error(2).to_string();
    for args in [
        vec!["list", "--kubeconfig", missing.as_str()],
        vec![
            "push",
            bundle.to_str().unwrap(),
            "127.0.0.1:1/x:v1",
            "--ca-file",
            missing.as_str(),
        ],
    ] {
        let out = kubectl_bundle(&args);
        let said = text(&out);
        assert!(!out.status.success(), "{args:?}: {said}");
        assert!(said.contains(&missing), "{args:?}: {said}");
        assert_eq!(said.matches(&io).count(), 1, "{args:?}: {said}");
    }
}

/// `kubectl ARGS` against the shared control plane: its stdout, or its error.
fn kubectl(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("kubectl")
        .args(args)
        .args(["--kubeconfig", &kubeconfig()])
        .output()
        .expect("running kubectl");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `kubectl bundle ARGS` against the shared control plane: its stdout, or its error.
fn plugin(args: &[&str]) -> Result<String, String> {
    let kc = kubeconfig();
    let mut all = args.to_vec();
    all.extend(["--kubeconfig", kc.as_str()]);
    let out = kubectl_bundle(&all);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn jsonpath_and_custom_columns_print_what_kubectl_prints() {
    let client = shared_gantry_client().await;
    // Two bundles in two states, labelled so that both commands select them alone.
    let installed = installed(&client, "kubectl-dialect").await;
    let review = config_map_under_review(&client, "kubectl-dialect").await;
    let label = unique_name("dialect");
    for name in [&installed, &review.name] {
        Api::<Bundle>::all(client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "labels": { "day-one": label } } })),
            )
            .await
            .unwrap();
    }
    let selector = format!("day-one={label}");

    // Whole objects are left out: kubectl's jsonpath sees metadata.managedFields, which the
    // plugin leaves out of every output (as kubectl's json and yaml do).
    let list_templates = [
        r#"{.items[*].metadata.name}"#,
        r#"{.kind} {.apiVersion}{"\n"}"#,
        r#"{range .items[*]}{.metadata.name}{"\t"}{.status.phase}{"\n"}{end}"#,
        r#"{range .items[*]}{.metadata.name}:{range .status.conditions[*]}{.type}={.status},{end}{"\n"}{end}"#,
        r#"{.items[?(@.status.phase=="AwaitingApproval")].metadata.name}"#,
        r#"{.items[?(@.metadata.generation>=1)].metadata.name}"#,
        r#"{.items[*].status.conditions[?(@.type=='Ready')].reason}"#,
        r#"{.items[?(@.spec.provisionerClassName)].metadata.name}"#,
        r#"{.items[0].spec} {.items[1].spec}"#,
        r#"{.items[*].metadata.labels}"#,
        r#"{.items[-1:].metadata.name} {.items[0:1].metadata.name} {.items[0,1].metadata.name}"#,
        r#"{.items[0]['metadata']['name']}"#,
        r#"{.items[*].metadata.labels.day-one}{.items[0].spec.nothing}"#,
        r#"literal text, no escapes: {.items[0].metadata.name}\n"#,
        r#"{.items[*].status.requestedPermissions}"#,
        r#"{.items[*].status.conditions[*].observedGeneration}"#,
        r#"{.items[*].metadata.finalizers[*]}"#,
        r#"{.items[7].metadata.name}"#,
    ];
    for template in list_templates {
        let format = format!("jsonpath={template}");
        let theirs = kubectl(&["get", "bundles", "-l", &selector, "-o", &format]);
        let ours = plugin(&["list", "-l", &selector, "-o", &format]);
        match (&theirs, &ours) {
            (Ok(theirs), Ok(ours)) => assert_eq!(ours, theirs, "{template}"),
            // An error in both (an index out of bounds): both say so.
            (Err(_), Err(ours)) => assert!(ours.contains("out of bounds"), "{template}: {ours}"),
            _ => panic!("{template}: kubectl {theirs:?}, plugin {ours:?}"),
        }
    }
    for template in [
        r#"{.metadata.name}{"\n"}"#,
        r#"{.status.conditions[?(@.type=="Ready")].message}"#,
        r#"{range .status.conditions[*]}{.type}{"\t"}{.reason}{"\n"}{end}"#,
        r#"{.spec.image} {.status.resolvedImage}"#,
    ] {
        let format = format!("jsonpath={template}");
        let theirs = kubectl(&["get", "bundle", &review.name, "-o", &format]).unwrap();
        let ours = plugin(&["status", &review.name, "-o", &format]).unwrap();
        assert_eq!(ours, theirs, "{template}");
    }

    for spec in [
        "custom-columns=NAME:.metadata.name,PHASE:.status.phase,GEN:metadata.generation,TYPES:{.status.conditions[*].type},SPEC:.spec,NONE:.spec.nothing,FINALIZERS:.metadata.finalizers,LABELS:.metadata.labels",
        r#"custom-columns=READY:.status.conditions[?(@.type=="Ready")].status,KINDS:.status.requestedPermissions.namespaced[*].kinds[*].kind"#,
    ] {
        let theirs = kubectl(&["get", "bundles", "-l", &selector, "-o", spec]).unwrap();
        let ours = plugin(&["list", "-l", &selector, "-o", spec]).unwrap();
        assert_eq!(ours, theirs, "{spec}");
        let theirs = kubectl(&["get", "bundle", &installed, "-o", spec]).unwrap();
        let ours = plugin(&["status", &installed, "-o", spec]).unwrap();
        assert_eq!(ours, theirs, "{spec}");
    }
}
