//! CEL health rules (`healthCheckExprs`) for a custom kind whose health the built-in rules
//! cannot see: a Widget reports `status.phase`, not conditions, so kstatus calls it Current
//! as soon as it exists. With a rule, the bundle is healthy only once the phase says so, and
//! fails at once when the `failed` expression holds. Expressions that do not parse are refused
//! when the bundle or the class is accepted, naming the field, line and column.

use gantry_api::conditions::{reasons, types};
use gantry_api::{HealthCheckExpr, PLAIN_PROVISIONER, ProvisionerClass, ProvisionerClassSpec};
use gantry_tests::e2e::*;
use gantry_tests::unique_name;
use kube::api::Api;
use serde_json::json;

use super::health::{at, crd, health, set_widget_status, wait_health};

fn rule(group: &str, current: &str) -> HealthCheckExpr {
    HealthCheckExpr {
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        in_progress: None,
        failed: Some("has(status.phase) && status.phase == 'Broken'".into()),
        current: current.into(),
    }
}

#[tokio::test]
async fn a_cel_rule_decides_the_health_of_a_custom_kind() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "health-cel").await;
    let group = format!("{ns}.example.com");
    let widget =
        format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 1\n");
    let image = push(
        &format!("{ns}/app:v1"),
        &[("00-crd.yaml", crd(&group)), ("10-widget.yaml", widget)],
    )
    .await;
    let name = ns.clone();
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.health = health(true, "5m");
    bundle_spec.health_check_exprs = vec![rule(
        &group,
        "has(status.phase) && status.phase == 'Running'",
    )];
    create_bundle(&client, &name, bundle_spec).await;

    // Installed, but the rule's `current` is not true: in progress, and not Ready.
    let bundle = wait_health(&client, &name, "False", reasons::PROGRESSING).await;
    let message = &condition(&bundle, types::HEALTHY).unwrap().message;
    assert!(
        message.contains(&format!("Widget.{group} {ns}/w"))
            && message.contains("current is not yet true"),
        "{message}"
    );
    assert!(
        at(types::READY, "False", reasons::PROGRESSING)(&bundle),
        "{:?}",
        bundle.status
    );

    let widgets = widgets(&client, &ns, &group);
    let set_phase = |phase: &'static str| set_widget_status(&widgets, json!({ "phase": phase }));
    // The phase the rule calls current: healthy and Ready, woken by the object's change.
    set_phase("Running").await;
    wait_bundle(&client, &name, "Healthy=True and Ready=True", |b| {
        at(types::HEALTHY, "True", reasons::HEALTHY)(b) && is_ready(b)
    })
    .await;

    // The phase the rule calls failed: HealthCheckFailed at once, not after the timeout.
    set_phase("Broken").await;
    let bundle = wait_health(&client, &name, "False", reasons::HEALTH_CHECK_FAILED).await;
    let message = &condition(&bundle, types::HEALTHY).unwrap().message;
    assert!(message.contains("failed is true"), "{message}");
}

#[tokio::test]
async fn an_expression_that_does_not_parse_is_refused_with_its_position() {
    let client = shared_gantry_client().await;
    let ns = unique_namespace(&client, "health-cel-bad").await;
    let group = format!("{ns}.example.com");
    let image = push(&format!("{ns}/app:v1"), &[("00-crd.yaml", crd(&group))]).await;
    let name = ns.clone();
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.health_check_exprs = vec![rule(&group, "status.phase == ")];
    create_bundle(&client, &name, bundle_spec).await;
    let bundle = wait_failure(
        &client,
        &name,
        types::UNPACKED,
        reasons::INVALID_HEALTH_EXPRESSION,
        "spec.healthCheckExprs[0].current",
    )
    .await;
    let message = &condition(&bundle, types::UNPACKED).unwrap().message;
    assert!(message.contains("line 1, column"), "{message}");
    // Refused before anything was pulled or applied.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    assert!(
        crds.get_opt(&format!("widgets.{group}"))
            .await
            .unwrap()
            .is_none(),
        "nothing of the bundle is applied"
    );

    // A class with such a rule is not accepted, with the same message.
    let class = unique_name("cel-class");
    apply_class(
        &client,
        &class,
        ProvisionerClassSpec {
            provisioner: PLAIN_PROVISIONER.into(),
            health_check_exprs: vec![rule(&group, "status.phase == 'Running' &&")],
            ..Default::default()
        },
        false,
    )
    .await;
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    let accepted = gantry_tests::wait_until("the class's Accepted=False", WAIT, || async {
        let class = classes.get(&class).await.ok()?;
        let accepted = class
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == types::ACCEPTED)?;
        (accepted.status == "False").then_some(accepted)
    })
    .await;
    assert_eq!(accepted.reason, reasons::INVALID_PARAMETERS);
    assert!(
        accepted
            .message
            .contains("spec.healthCheckExprs[0].current")
            && accepted.message.contains("line 1, column"),
        "{}",
        accepted.message
    );
    // Not left behind: `kubectl bundle check` fails while any class is not accepted, and other
    // tests of this control plane run it.
    classes
        .delete(&class, &Default::default())
        .await
        .expect("deleting the class");
}
