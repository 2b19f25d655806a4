//! Per-bundle timing against a provisioner whose own flags are long: `spec.interval` resolves
//! a moved tag sooner, `spec.retryInterval` caps the retry delay, `spec.timeout` ends an apply
//! that waits; bad values are refused by the API server with the field named. A control plane
//! of its own for the bundles: its provisioner's flags are not the shared one's.

use gantry_api::conditions::{reasons, types};
use gantry_tests::e2e::*;
use gantry_tests::{control_plane, unique_name};

/// This module's cluster, with one provisioner whose flags would make every test here time
/// out: tags resolved hourly, retries up to an hour apart, ten minutes for a CRD.
static CLUSTER: Isolated = Isolated::with_gantry(&[
    "--resolve-interval=1h",
    "--resync-interval=1h",
    "--backoff-base=4s",
    "--backoff-cap=1h",
    "--crd-timeout=10m",
    "--apply-timeout=1h",
]);

fn tagged(ns: &str, tag: &str) -> String {
    in_registry(&format!("{ns}/app:{tag}"))
}

#[tokio::test]
async fn a_bundle_interval_resolves_a_moved_tag_while_the_flag_is_long() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "interval").await;
    for tag in ["fast", "slow"] {
        push_config_map(&format!("{ns}/app:{tag}"), &format!("{tag}-cm"), None, "v1").await;
    }
    let fast = unique_name("fast");
    let slow = unique_name("slow");
    let mut fast_spec = spec(&tagged(&ns, "fast"), Some(&ns));
    fast_spec.interval = Some("2s".into());
    create_bundle(&client, &fast, fast_spec).await;
    let slow_before =
        create_bundle_ready(&client, &slow, spec(&tagged(&ns, "slow"), Some(&ns))).await;
    wait_bundle(&client, &fast, "Ready", is_ready).await;

    for tag in ["fast", "slow"] {
        push_config_map(&format!("{ns}/app:{tag}"), &format!("{tag}-cm"), None, "v2").await;
    }
    wait_config_map(&client, &ns, "fast-cm", "v2", "the moved tag installed").await;
    // The other bundle follows the provisioner's hour: its tag is not asked again.
    let slow_now = get_bundle(&client, &slow).await;
    assert_eq!(
        slow_now.status.unwrap().resolved_image,
        slow_before.status.unwrap().resolved_image
    );
    assert_config_map(&client, &ns, "slow-cm", Some("v1")).await;
}

/// The delay in a failure message: `(attempt N, next retry in 1.2s)`.
fn retry(message: &str) -> Option<(u32, f64)> {
    let (_, rest) = message.rsplit_once("(attempt ")?;
    let (attempt, rest) = rest.split_once(", next retry in ")?;
    let seconds = rest.strip_suffix("s)")?;
    Some((attempt.parse().ok()?, seconds.parse().ok()?))
}

#[tokio::test]
async fn a_bundle_retry_interval_caps_the_backoff() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "retry").await;
    let name = unique_name("retry");
    let mut bundle_spec = spec(&tagged(&ns, "later"), Some(&ns));
    bundle_spec.retry_interval = Some("1s".into());
    create_bundle(&client, &name, bundle_spec).await;
    // The provisioner's own backoff would wait 4s, 8s, 16s, ... between attempts.
    let bundle = wait_bundle(&client, &name, "a fifth attempt", |b| {
        condition(b, types::UNPACKED)
            .and_then(|c| retry(&c.message))
            .is_some_and(|(attempt, _)| attempt >= 5)
    })
    .await;
    let message = &condition(&bundle, types::UNPACKED).unwrap().message;
    assert_eq!(
        condition(&bundle, types::UNPACKED).unwrap().reason,
        reasons::PULL_FAILED
    );
    let (_, delay) = retry(message).unwrap();
    assert!(delay <= 1.0, "capped at spec.retryInterval: {message}");

    push_config_map(&format!("{ns}/app:later"), "cm", None, "v1").await;
    wait_config_map(&client, &ns, "cm", "v1", "installed at the next retry").await;
}

#[tokio::test]
async fn a_bundle_timeout_ends_an_apply_that_waits() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let ns = unique_namespace(&client, "timeout").await;
    let group = format!("{ns}.example.test");
    // The Widget names a version the CRD defines but does not serve: the apply waits for it.
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    kind: Widget\n    plural: widgets\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n  - name: v2\n    served: false\n    storage: false\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    );
    let widget = format!("apiVersion: {group}/v2\nkind: Widget\nmetadata:\n  name: w\n");
    let image = push(
        &format!("{ns}/app:v1"),
        &[("01-crd.yaml", crd), ("02-widget.yaml", widget)],
    )
    .await;
    let name = unique_name("timeout");
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.timeout = Some("3s".into());
    create_bundle(&client, &name, bundle_spec).await;
    wait_failure(
        &client,
        &name,
        types::INSTALLED,
        reasons::APPLY_FAILED,
        "not done within 3s",
    )
    .await;
}

#[test]
fn bad_durations_are_refused_with_the_field_named() {
    // The API server refuses them before any provisioner sees them: the shared control plane.
    let kubeconfig = control_plane().kubeconfig().display().to_string();
    for (field, value, says) in [
        ("interval", "5x", "should match"),
        ("retryInterval", "0s", "must be at least 1s"),
        ("timeout", "500ms", "must be at least 1s"),
    ] {
        let name = unique_name("bad-duration");
        let manifest = serde_json::json!({
            "apiVersion": "gantry.dev/v1alpha1",
            "kind": "Bundle",
            "metadata": { "name": name },
            "spec": { "image": "registry.invalid/app:v1", field: value },
        });
        let mut child = std::process::Command::new("kubectl")
            .args(["apply", "-f", "-", "--kubeconfig", &kubeconfig])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running kubectl apply");
        std::io::Write::write_all(
            child.stdin.as_mut().unwrap(),
            manifest.to_string().as_bytes(),
        )
        .unwrap();
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{field}={value} was accepted");
        assert!(
            text.contains(&format!("spec.{field}")) && text.contains(says),
            "{field}={value}: {text}"
        );
    }
}
