//! Bundle content and Bundle fields read as the hostile input they may be, through the debug
//! builds of the plugin and the provisioner: typed lists flattened as kubectl reads them, names
//! the API server would refuse refused before anything is applied, and input nested past the
//! limits refused with an error while the process goes on (an unoptimised build needs several
//! times the stack of an optimised one, so a missing bound shows here as an abort).

use gantry_api::HealthCheckExpr;
use gantry_api::conditions::{reasons, types};
use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use gantry_tests::{ImageConfig, bundle_dir, push_rootfs, registry, unique_name, workspace_root};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;

/// Pushes `files` under `manifests/` as `repository:v1` without validating them (as a registry
/// may hold anything); the reference pushed.
fn push_unchecked(repository: &str, files: &[(&str, &str)]) -> String {
    let work = tempfile::tempdir().unwrap();
    let rootfs = work.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("manifests")).unwrap();
    for (name, content) in files {
        std::fs::write(rootfs.join("manifests").join(name), content).unwrap();
    }
    push_rootfs(
        &rootfs,
        &ImageConfig::default(),
        registry().host(),
        &format!("{repository}:v1"),
        work.path(),
    )
    .unwrap()
}

/// A bundle installs (the provisioner still serves); returns nothing, fails the test otherwise.
async fn still_serving(client: &kube::Client) {
    let ns = unique_name("serving");
    let image = push(
        &format!("{ns}/app:v1"),
        &[("cm.yaml", config_map("after", Some(&ns), "ok"))],
    )
    .await;
    ensure_namespace(client, &ns).await;
    let name = unique_name("serving");
    create_bundle_ready(client, &name, spec(&image, None)).await;
}

#[tokio::test]
async fn typed_lists_are_flattened_by_the_plugin_and_the_provisioner() {
    // kube-prometheus's three files of typed lists: a ConfigMapList and, in the RBAC group, a
    // RoleList and a RoleBindingList across namespaces.
    let fixture = workspace_root().join("image/tests/fixtures/kube-prometheus");
    let out = kubectl_bundle(&["validate", &fixture.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(|line| {
            line.split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        rows,
        [
            "ConfigMap monitoring grafana-dashboard-alertmanager-overview",
            "ConfigMap monitoring grafana-dashboard-apiserver",
            "RoleBinding default prometheus-k8s",
            "RoleBinding kube-system prometheus-k8s",
            "RoleBinding monitoring prometheus-k8s",
            "Role default prometheus-k8s",
            "Role kube-system prometheus-k8s",
            "Role monitoring prometheus-k8s",
        ]
    );

    // The same shapes pushed, pulled and installed, in a namespace of this test.
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "lists").await;
    let config_maps = format!(
        "apiVersion: v1\nitems:\n{}{}kind: ConfigMapList\n",
        indent(&config_map("dashboard-a", Some(&ns), "a")),
        indent(&config_map("dashboard-b", Some(&ns), "b")),
    );
    let role = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nitems:\n- apiVersion: rbac.authorization.k8s.io/v1\n  kind: Role\n  metadata: {{name: prometheus-k8s, namespace: {ns}}}\n  rules:\n  - {{apiGroups: [\"\"], resources: [services], verbs: [get]}}\nkind: RoleList\n"
    );
    let binding = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nitems:\n- apiVersion: rbac.authorization.k8s.io/v1\n  kind: RoleBinding\n  metadata: {{name: prometheus-k8s, namespace: {ns}}}\n  roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: prometheus-k8s}}\n  subjects: [{{kind: ServiceAccount, name: default, namespace: {ns}}}]\nkind: RoleBindingList\n"
    );
    let dir = bundle_dir(&[
        ("dashboards.yaml", &config_maps),
        ("roles.yaml", &role),
        ("bindings.yaml", &binding),
    ]);
    let image = registry().reference(&format!("{ns}/lists:v1"));
    let dir = dir.path().display().to_string();
    let pushed = kubectl_bundle(&["push", &dir, &image, "--plain-http"]);
    assert!(pushed.status.success(), "{}", text(&pushed));
    assert!(
        text(&pushed).contains("pushed 4 objects as"),
        "{}",
        text(&pushed)
    );
    let target = tempfile::tempdir().unwrap();
    let into = target.path().join("copy").display().to_string();
    let pulled = kubectl_bundle(&["pull", &image, "--dir", &into, "--plain-http"]);
    assert!(pulled.status.success(), "{}", text(&pulled));
    assert!(
        text(&pulled).contains("4 objects in 3 files"),
        "{}",
        text(&pulled)
    );

    let name = unique_name("lists");
    create_bundle_ready(&client, &name, spec(&image, None)).await;
    for (cm, value) in [("dashboard-a", "a"), ("dashboard-b", "b")] {
        assert_config_map(&client, &ns, cm, Some(value)).await;
    }
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    assert!(roles.get_opt("prometheus-k8s").await.unwrap().is_some());
    assert!(bindings.get_opt("prometheus-k8s").await.unwrap().is_some());
}

/// `text` as one item of a YAML sequence.
fn indent(text: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, line)| format!("{} {line}\n", if i == 0 { "-" } else { " " }))
        .collect()
}

#[tokio::test]
async fn deep_nesting_is_refused_by_pull_and_the_provisioner_which_go_on() {
    let client = shared_gantry_client().await;
    let deep_map = format!("x: {}1{}\n", "{a: ".repeat(60_000), "}".repeat(60_000));
    let deep_sequence = format!("x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    for (file, content) in [
        ("deep-map.yaml", deep_map),
        ("deep-sequence.yaml", deep_sequence),
    ] {
        let image = push_unchecked(&unique_name("deep"), &[(file, &content)]);
        let target = tempfile::tempdir().unwrap();
        let into = target.path().join("copy").display().to_string();
        let pulled = kubectl_bundle(&["pull", &image, "--dir", &into, "--plain-http"]);
        assert_eq!(pulled.status.code(), Some(1), "{}", text(&pulled));
        let said = text(&pulled);
        assert!(
            said.contains(&format!(
                "invalid YAML in {file} at line 1: nested deeper than 127 levels"
            )),
            "{said}"
        );

        let name = unique_name("deep");
        create_bundle(&client, &name, spec(&image, None)).await;
        let bundle = wait_failure(
            &client,
            &name,
            types::UNPACKED,
            reasons::INVALID_BUNDLE,
            file,
        )
        .await;
        let message = &condition(&bundle, types::UNPACKED).unwrap().message;
        assert!(
            message.contains("nested deeper than 127 levels"),
            "{message}"
        );
    }
    still_serving(&client).await;
}

#[tokio::test]
async fn a_health_rule_nested_past_the_bound_is_refused_and_the_provisioner_goes_on() {
    let client = shared_gantry_client().await;
    let ns = unique_name("cel");
    let image = push(
        &format!("{ns}/app:v1"),
        &[("cm.yaml", config_map("cm", Some(&ns), "v1"))],
    )
    .await;
    // As long as the Bundle's schema allows (4096 characters): deep enough that parsing it
    // unbounded takes more than a thread's stack in an unoptimised build.
    let nested = format!("{}true{}", "(".repeat(2000), ")".repeat(2000));
    let mut bundle = spec(&image, None);
    bundle.health_check_exprs = vec![HealthCheckExpr {
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        in_progress: None,
        failed: None,
        current: nested,
    }];
    let name = unique_name("cel");
    create_bundle(&client, &name, bundle).await;
    let failed = wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::INVALID_HEALTH_EXPRESSION,
        "spec.healthCheckExprs[0].current",
    )
    .await;
    let message = &condition(&failed, types::UNPACKED).unwrap().message;
    assert!(
        message.contains("nests brackets deeper than 24 levels"),
        "{message}"
    );
    still_serving(&client).await;
}

#[test]
fn names_the_api_server_refuses_are_refused_by_validate_and_push() {
    let content = format!(
        "{}---\n{}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Delta_Bad\n",
        config_map("alpha", None, "a"),
        config_map("beta", None, "b")
    );
    let dir = bundle_dir(&[("a.yaml", &content)]);
    let dir = dir.path().display().to_string();
    let expected = "invalid object in a.yaml, document 2 (ConfigMap Delta_Bad): metadata.name \
                    \"Delta_Bad\" is not a valid name: must consist of lower case alphanumeric \
                    characters, '-' or '.', and must start and end with an alphanumeric character";
    let image = registry().reference(&format!("{}/app:v1", unique_name("names")));
    for args in [
        vec!["validate", dir.as_str()],
        vec!["push", dir.as_str(), image.as_str(), "--plain-http"],
    ] {
        let out = kubectl_bundle(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(expected), "{args:?}: {}", text(&out));
    }
}
