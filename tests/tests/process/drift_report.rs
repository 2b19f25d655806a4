//! `spec.drift: Report`: drift is found and shown (`Drifted`, with objects and fields, and by
//! `kubectl bundle diff`), and left as it is until `kubectl bundle reconcile --force` corrects it
//! once; back to `Correct`, the condition goes and drift is repaired again.

use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, DriftMode};
use gantry_tests::e2e::kubectl::{kubeconfig, kubectl_bundle, ok, text};
use gantry_tests::e2e::*;
use serde_json::json;

fn drifted(status: &'static str, reason: &'static str) -> impl Fn(&Bundle) -> bool {
    move |bundle| {
        condition(bundle, types::DRIFTED).is_some_and(|c| {
            c.status == status
                && c.reason == reason
                && c.observed_generation == bundle.metadata.generation
        })
    }
}

#[tokio::test]
async fn reported_drift_is_shown_and_left_until_a_forced_reconcile() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "drift-report").await;
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("a.yaml", config_map("a", Some(&ns), "1")),
            ("b.yaml", config_map("b", Some(&ns), "1")),
        ],
    )
    .await;
    let name = ns.clone();
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.drift = Some(DriftMode::Report);
    create_bundle(&client, &name, bundle_spec).await;
    wait_bundle(&client, &name, "Ready and Drifted=False", |b| {
        is_ready(b) && drifted("False", reasons::NO_DRIFT)(b)
    })
    .await;

    // Someone edits one object and deletes the other.
    edit_config_map(&client, &ns, "a", "2").await;
    delete_config_map(&client, &ns, "b").await;
    let bundle = wait_bundle(&client, &name, "Drifted=True naming both", |b| {
        drifted("True", reasons::DRIFT_DETECTED)(b)
            && condition(b, types::DRIFTED).is_some_and(|c| c.message.contains("missing"))
    })
    .await;
    let message = &condition(&bundle, types::DRIFTED).unwrap().message;
    assert!(
        message.contains(&format!(
            "ConfigMap {ns}/a (a.yaml document 0): .data.value"
        )) && message.contains(&format!("ConfigMap {ns}/b (b.yaml document 0): missing"))
            && message.contains("2 objects drifted")
            && message.contains(&format!("kubectl bundle reconcile --force {name}")),
        "{message}"
    );
    // Reported, not corrected: the pass that found it wrote nothing, and Ready stays.
    assert_config_map(&client, &ns, "a", Some("2")).await;
    assert!(config_map_data(&client, &ns, "b").await.is_none());
    assert!(is_ready(&bundle), "{:?}", bundle.status);

    // `diff` shows live against desired.
    let diff = kubectl_bundle(&["diff", &name, "--kubeconfig", &kubeconfig()]);
    assert_eq!(diff.status.code(), Some(1), "{}", text(&diff));
    let shown = String::from_utf8_lossy(&diff.stdout);
    assert!(
        shown.contains("-  value: \"2\"") || shown.contains("value: \"2\""),
        "{shown}"
    );

    // A forced reconcile corrects it, once.
    ok(&["reconcile", &name, "--force"]);
    wait_bundle(&client, &name, "Drifted=False after the correction", |b| {
        drifted("False", reasons::NO_DRIFT)(b)
    })
    .await;
    assert_config_map(&client, &ns, "a", Some("1")).await;
    assert_config_map(&client, &ns, "b", Some("1")).await;
    // The next drift is reported again: the force was for that one pass.
    edit_config_map(&client, &ns, "a", "3").await;
    wait_bundle(
        &client,
        &name,
        "Drifted=True again",
        drifted("True", reasons::DRIFT_DETECTED),
    )
    .await;
    assert_config_map(&client, &ns, "a", Some("3")).await;

    // Back to Correct: no Drifted condition, and the drift is repaired.
    patch_spec(&client, &name, json!({"drift": "Correct"})).await;
    wait_bundle(&client, &name, "no Drifted condition", |b| {
        condition(b, types::DRIFTED).is_none() && is_ready(b)
    })
    .await;
    wait_config_map(&client, &ns, "a", "1", "the drift repaired under Correct").await;
}
