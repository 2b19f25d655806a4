//! `kubectl bundle status` of a bundle rendered by `gantry.dev/registry` (the argocd-operator
//! registry+v1 bundle of `registry_v1`): it names the provisioner and its version, the
//! operator's ClusterServiceVersion, the configuration's digest and where it comes from (a
//! Secret among them, by name and key), and says when the configuration changed since the
//! last decision; a Secret's values are never printed nor stored in the Bundle.

use gantry_api::{ApprovalPolicy, Bundle, BundlePhase, BundleSpec, ProvisionerClassSpec};
use gantry_tests::e2e::kubectl::ok;
use gantry_tests::e2e::operator_bundles::{own_cluster_objects, push_argocd_bundle};
use gantry_tests::e2e::*;
use gantry_tests::unique_name;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

/// What the Secret holds, which nothing shown or stored may contain.
const SECRET_VALUE: &str = "supersecret-value";

/// Pushes the argocd-operator v0.6.0 bundle as `repository:tag`, its cluster-scoped objects
/// made this test's own (group `GROUP.argoproj.io`), so that no other test's argocd-operator
/// bundle owns any of them.
fn push_bundle(repository_tag: &str, group: &str) -> String {
    push_argocd_bundle(repository_tag, |root| own_cluster_objects(root, group))
}

fn map(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().unwrap().clone()
}

/// The Secret `name` in `ns`, its `values.yaml` holding `values` and the secret value.
async fn set_secret(client: &Client, ns: &str, name: &str, values: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": name, "namespace": ns },
        "stringData": {
            "values.yaml": format!("{values}# the token: {SECRET_VALUE}\n"),
            "token": SECRET_VALUE,
        },
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("test-config").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

/// The Bundle as the API server stores it, whole.
async fn stored(client: &Client, name: &str) -> String {
    serde_json::to_string(&get_bundle(client, name).await).unwrap()
}

#[tokio::test]
async fn status_names_the_rendering_and_its_configuration_but_no_secret_value() {
    let client = shared_gantry_client().await;
    let ns = unique_name("rendered");
    ensure_namespace(&client, &ns).await;
    let class = unique_name("rendered");
    apply_class(
        &client,
        &class,
        ProvisionerClassSpec {
            provisioner: gantry_api::REGISTRY_PROVISIONER.into(),
            ..class_spec(ApprovalPolicy::Manual)
        },
        false,
    )
    .await;
    let image = push_bundle(
        &format!("{}/argocd-operator-bundle:v0.6.0", unique_name("rendered")),
        &unique_name("rendered"),
    );
    let secret = "operator-values";
    set_secret(&client, &ns, secret, &format!("watchNamespace: {ns}\n")).await;
    let name = unique_name("argocd-rendered");
    let spec = BundleSpec {
        config: Some(map(json!({ "watchNamespace": ns }))),
        config_from: serde_json::from_value(json!([
            { "kind": "Secret", "name": secret, "optional": true },
        ]))
        .unwrap(),
        ..spec_of_class(&image, Some(&ns), &class)
    };
    create_bundle(&client, &name, spec).await;
    let own = gantry_rules::config::digest(&map(json!({ "watchNamespace": ns })));
    wait_bundle(&client, &name, "awaiting approval", |b| {
        phase_is(BundlePhase::AwaitingApproval)(b)
            && b.status.as_ref().unwrap().config_digest.as_deref() == Some(own.as_str())
    })
    .await;
    ok(&["approve", &name, "--yes", "--wait"]);
    let bundle = wait_bundle(&client, &name, "Ready", is_ready).await;
    let version = &bundle
        .status
        .as_ref()
        .unwrap()
        .rendered
        .as_ref()
        .expect("status.rendered")
        .version;

    let shown = ok(&["status", &name]);
    for line in [
        format!("Rendered by: gantry.dev/registry {version}\n"),
        "Source:     argocd-operator.v0.6.0\n".to_string(),
        format!("Configuration: {own} from (later ones win):\n"),
        format!("            Secret/{secret}[values.yaml] (optional)\n"),
        "            spec.config\n".to_string(),
    ] {
        assert!(shown.contains(&line), "{line:?} in:\n{shown}");
    }
    assert!(
        !shown.contains("changed since the last decision"),
        "{shown}"
    );
    assert!(!shown.contains(SECRET_VALUE), "{shown}");
    let document = ok(&["status", &name, "-o", "json"]);
    assert!(document.contains(&own), "{document}");
    assert!(!document.contains(SECRET_VALUE), "{document}");
    let whole = stored(&client, &name).await;
    assert!(whole.contains(&own), "{whole}");
    assert!(!whole.contains(SECRET_VALUE), "{whole}");

    // Another watched namespace: another configuration, which the approval does not cover.
    let watched = unique_name("rendered-watch");
    ensure_namespace(&client, &watched).await;
    patch_spec(
        &client,
        &name,
        json!({ "config": { "watchNamespace": watched } }),
    )
    .await;
    let other = gantry_rules::config::digest(&map(json!({ "watchNamespace": watched })));
    wait_bundle(
        &client,
        &name,
        "the new configuration awaiting approval",
        |b| {
            phase_is(BundlePhase::AwaitingApproval)(b)
                && b.status.as_ref().unwrap().config_digest.as_deref() == Some(other.as_str())
        },
    )
    .await;
    let shown = ok(&["status", &name]);
    let short = |digest: &str| format!("sha256:{}", &digest["sha256:".len()..][..12]);
    let changed = format!(
        "the configuration changed since the last decision (decided with {}, now {}): awaiting a new one\n",
        short(&own),
        short(&other)
    );
    assert!(shown.contains(&changed), "{changed:?} in:\n{shown}");
    assert!(
        shown.contains(&format!("Configuration: {other} from")),
        "{shown}"
    );
    assert!(!shown.contains(SECRET_VALUE), "{shown}");
    assert!(!stored(&client, &name).await.contains(SECRET_VALUE));

    Api::<Bundle>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}
