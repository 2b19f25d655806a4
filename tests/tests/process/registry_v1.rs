//! `gantry.dev/registry`: an OLM `registry+v1` bundle image, as OperatorHub ships it
//! (`manifests/` with a ClusterServiceVersion and CRDs, `metadata/annotations.yaml`), packed by
//! umoci and pushed by skopeo, installs as OLM v1 renders it (object for object against OLM
//! v1's own rendering of the same bundle); `spec.config` and `spec.configFrom` choose the install
//! mode; an approval covers the configuration; what cannot be installed is `Stalled` naming the
//! field.

use std::collections::BTreeSet;
use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalPolicy, Bundle, BundlePhase, BundleSpec, ProvisionerClassSpec};
use gantry_tests::e2e::operator_bundles::{
    argocd_testdata, own_cluster_objects, push_argocd_bundle,
};
use gantry_tests::e2e::*;
use gantry_tests::{unique_name, wait_until};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// A class of the registry+v1 provisioner with `approval`.
async fn registry_class(client: &Client, approval: ApprovalPolicy) -> String {
    let name = unique_name("registry-v1");
    let spec = ProvisionerClassSpec {
        provisioner: gantry_api::REGISTRY_PROVISIONER.into(),
        ..class_spec(approval)
    };
    apply_class(client, &name, spec, false).await;
    name
}

/// `(kind, namespace, name)` of each object of OLM v1's rendering in `scenario`.
fn expected(scenario: &str, namespace: &str) -> BTreeSet<(String, String, String)> {
    let dir = argocd_testdata().join("expected").join(scenario);
    let mut objects = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let object: Value = serde_saphyr::from_str(&text).unwrap();
        let namespaced = object["metadata"]["namespace"].is_string();
        objects.insert((
            object["kind"].as_str().unwrap().to_string(),
            if namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            object["metadata"]["name"].as_str().unwrap().to_string(),
        ));
    }
    objects
}

/// `(kind, namespace, name)` of each object of the bundle's inventory, but its CRDs (OLM v1's
/// expected manifests leave them out).
fn installed(bundle: &Bundle) -> BTreeSet<(String, String, String)> {
    bundle
        .status
        .as_ref()
        .unwrap()
        .inventory
        .iter()
        .filter(|e| e.kind != "CustomResourceDefinition")
        .map(|e| {
            (
                e.kind.clone(),
                e.namespace.clone().unwrap_or_default(),
                e.name.clone(),
            )
        })
        .collect()
}

fn crds(bundle: &Bundle) -> BTreeSet<String> {
    bundle
        .status
        .as_ref()
        .unwrap()
        .inventory
        .iter()
        .filter(|e| e.kind == "CustomResourceDefinition")
        .map(|e| e.name.clone())
        .collect()
}

fn map(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn content_digest(bundle: &Bundle) -> Option<String> {
    bundle.status.as_ref()?.content_digest.clone()
}

#[tokio::test]
async fn an_operatorhub_bundle_installs_as_olm_v1_renders_it_in_each_install_mode() {
    let client = shared_gantry_client().await;
    // OLM v1's expected manifests install into argocd-system: the names of namespaced
    // objects and the hashed names of roles depend on it.
    let ns = "argocd-system";
    ensure_namespace(&client, ns).await;
    let class = registry_class(&client, ApprovalPolicy::Automatic).await;
    let image = push_argocd_bundle(
        &format!("{}/argocd-operator-bundle:v0.6.0", unique_name("olm")),
        |_| {},
    );
    let name = unique_name("argocd-operator");
    let bundle = create_bundle_ready(&client, &name, spec_of_class(&image, Some(ns), &class)).await;

    let status = bundle.status.as_ref().unwrap();
    let rendered = status.rendered.as_ref().expect("status.rendered");
    assert_eq!(rendered.provisioner, "gantry.dev/registry");
    assert_eq!(rendered.source.as_deref(), Some("argocd-operator.v0.6.0"));
    assert_eq!(
        status.config_digest.as_deref(),
        Some(gantry_rules::config::digest(&Default::default()).as_str()),
        "no configuration: the digest of an empty mapping"
    );
    assert_eq!(
        installed(&bundle),
        expected("all-namespaces", ns),
        "watching all namespaces, the objects are OLM v1's"
    );
    assert_eq!(
        crds(&bundle),
        [
            "applications.argoproj.io",
            "applicationsets.argoproj.io",
            "appprojects.argoproj.io",
            "argocdexports.argoproj.io",
            "argocds.argoproj.io"
        ]
        .into_iter()
        .map(String::from)
        .collect(),
        "the owned CRDs are applied"
    );
    // The Deployment carries the install mode for the operator to read.
    let deployment: Value = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
    )
    .get("argocd-operator-controller-manager")
    .await
    .map(|d| serde_json::to_value(d).unwrap())
    .unwrap();
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["olm.targetNamespaces"], "");
    assert_eq!(annotations["olm.operatorNamespace"], ns);

    // Its own namespace: a Role and RoleBinding instead of the permissions' ClusterRole,
    // which is pruned; new content, since the rendering's input changed.
    let before = content_digest(&bundle);
    patch_spec(
        &client,
        &name,
        json!({ "config": { "watchNamespace": ns } }),
    )
    .await;
    let bundle = wait_bundle(&client, &name, "Ready watching its own namespace", |b| {
        is_ready(b) && content_digest(b) != before
    })
    .await;
    assert_eq!(installed(&bundle), expected("own-namespace", ns));
    assert_ne!(
        bundle.status.as_ref().unwrap().config_digest,
        bundle
            .status
            .as_ref()
            .unwrap()
            .approval
            .as_ref()
            .and_then(|a| a.config_digest.clone()),
        "an Automatic class records no decision"
    );

    // Another namespace.
    ensure_namespace(&client, "argocd-watch").await;
    let before = content_digest(&bundle);
    patch_spec(
        &client,
        &name,
        json!({ "config": { "watchNamespace": "argocd-watch" } }),
    )
    .await;
    let bundle = wait_bundle(&client, &name, "Ready watching argocd-watch", |b| {
        is_ready(b) && content_digest(b) != before
    })
    .await;
    let mut single = expected("single-namespace", ns);
    // The Role and RoleBinding go to the watched namespace.
    single = single
        .into_iter()
        .map(|(kind, namespace, name)| match kind.as_str() {
            "Role" | "RoleBinding" => (kind, "argocd-watch".into(), name),
            _ => (kind, namespace, name),
        })
        .collect();
    assert_eq!(installed(&bundle), single);

    // Uninstalling rendered content is tested with the Helm plugin (helm_charts.rs), on a
    // cluster of its own: here, side by side with other argocd-operator bundles, the API
    // server's deletion of these CRDs was seen to stall.
}

#[tokio::test]
async fn what_olm_v1_cannot_install_is_stalled_naming_the_field() {
    let client = shared_gantry_client().await;
    let ns = unique_name("olm-refused");
    ensure_namespace(&client, &ns).await;
    let class = registry_class(&client, ApprovalPolicy::Automatic).await;
    let repository = unique_name("olm-refused");

    // An option gantry.dev/registry does not have.
    let image = push_argocd_bundle(&format!("{repository}/bundle:v1"), |_| {});
    let mut unknown = spec_of_class(&image, Some(&ns), &class);
    unknown.config = Some(map(json!({ "watchNamespace": ns, "replicas": 2 })));
    let (message, bundle) =
        stalled(&client, "unknown-option", unknown, reasons::RENDER_FAILED).await;
    assert!(
        message.contains("spec.config: replicas is not an option of gantry.dev/registry"),
        "{message}"
    );
    assert!(
        bundle.status.as_ref().unwrap().inventory.is_empty(),
        "nothing applied"
    );

    // A webhook, which needs a certificate provider.
    let image = push_argocd_bundle(&format!("{repository}/bundle:webhooks"), |root| {
        let csv = root.join("manifests/argocd-operator.v0.6.0.clusterserviceversion.yaml");
        let text = std::fs::read_to_string(&csv).unwrap();
        let text = text.replacen(
            "\n  installModes:\n",
            "\n  webhookdefinitions:\n  - type: ValidatingAdmissionWebhook\n    generateName: vargocd.kb.io\n    deploymentName: argocd-operator-controller-manager\n    containerPort: 443\n    admissionReviewVersions: [v1]\n    sideEffects: None\n  installModes:\n",
            1,
        );
        std::fs::write(&csv, text).unwrap();
    });
    let webhooks = spec_of_class(&image, Some(&ns), &class);
    let (message, _) = stalled(&client, "webhooks", webhooks, reasons::RENDER_FAILED).await;
    assert!(
        message.contains("argocd-operator.v0.6.0, spec.webhookdefinitions"),
        "{message}"
    );

    // Not a registry+v1 bundle at all: a plain one.
    let plain = push(
        &format!("{repository}/plain:v1"),
        &[("a.yaml", config_map("a", None, "x"))],
    )
    .await;
    let not_registry = spec_of_class(&plain, Some(&ns), &class);
    let (message, _) = stalled(
        &client,
        "not-registry",
        not_registry,
        reasons::RENDER_FAILED,
    )
    .await;
    assert!(
        message.contains("metadata/annotations.yaml is missing"),
        "{message}"
    );

    // The plain provisioner takes no configuration.
    let mut configured = spec(&plain, Some(&ns));
    configured.config = Some(map(json!({ "replicas": 2 })));
    let (message, _) = stalled(
        &client,
        "plain-configured",
        configured,
        reasons::INVALID_CONFIG,
    )
    .await;
    assert!(
        message.contains("gantry.dev/plain takes no configuration"),
        "{message}"
    );
    assert!(
        config_map_data(&client, &ns, "a").await.is_none(),
        "nothing applied"
    );
}

/// Creates a bundle named after `prefix` with `spec`, and waits until it is `Stalled` for
/// `reason`; the `Unpacked` message, and the bundle.
async fn stalled(
    client: &Client,
    prefix: &str,
    spec: BundleSpec,
    reason: &str,
) -> (String, Bundle) {
    let name = unique_name(prefix);
    create_bundle(client, &name, spec).await;
    let bundle = wait_bundle(client, &name, &format!("Stalled for {reason}"), |b| {
        condition(b, types::STALLED).is_some_and(|c| c.reason == reason)
    })
    .await;
    let message = condition(&bundle, types::UNPACKED).unwrap().message.clone();
    (message, bundle)
}

async fn set_values(client: &Client, ns: &str, values: &str) {
    apply_object::<ConfigMap>(
        client,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "operator-config", "namespace": ns },
            "data": { "values.yaml": values },
        }),
    )
    .await;
}

#[tokio::test]
async fn a_configuration_change_waits_for_an_approval_while_the_approved_render_runs() {
    let client = shared_gantry_client().await;
    let ns = unique_name("olm-config");
    ensure_namespace(&client, &ns).await;
    let class = registry_class(&client, ApprovalPolicy::Manual).await;
    let group = unique_name("config");
    let image = push_argocd_bundle(&format!("{group}/bundle:v1"), |root| {
        own_cluster_objects(root, &group)
    });
    set_values(&client, &ns, &format!("watchNamespace: {ns}\n")).await;
    let name = unique_name("configured");
    let spec = BundleSpec {
        config_from: serde_json::from_value(json!([
            { "kind": "ConfigMap", "name": "operator-config" },
            { "kind": "Secret", "name": "absent", "optional": true },
        ]))
        .unwrap(),
        // Only a change of the ConfigMap can bring the bundle back soon.
        interval: Some("1h".into()),
        ..spec_of_class(&image, Some(&ns), &class)
    };
    Api::<Bundle>::all(client.clone())
        .create(&PostParams::default(), &Bundle::new(&name, spec))
        .await
        .unwrap();
    let own = gantry_rules::config::digest(&map(json!({ "watchNamespace": ns })));
    let bundle = wait_bundle(&client, &name, "awaiting approval", |b| {
        phase_is(BundlePhase::AwaitingApproval)(b)
            && b.status.as_ref().unwrap().config_digest.as_deref() == Some(own.as_str())
    })
    .await;
    approve_shown(&client, &bundle).await;
    let bundle = wait_bundle(&client, &name, "Ready", is_ready).await;
    let roles = |b: &Bundle| {
        installed(b)
            .into_iter()
            .filter(|(kind, _, _)| kind == "Role")
            .count()
    };
    assert_eq!(roles(&bundle), 1, "watching its own namespace: a Role");

    // The ConfigMap changes: noticed at once (the bundle's interval is an hour), and held
    // until approved; the approved render stays installed meanwhile.
    set_values(&client, &ns, "{}\n").await;
    let all = gantry_rules::config::digest(&Default::default());
    let waiting = wait_bundle(
        &client,
        &name,
        "the new configuration awaiting approval",
        |b| {
            b.status.as_ref().unwrap().config_digest.as_deref() == Some(all.as_str())
                && phase_is(BundlePhase::AwaitingApproval)(b)
        },
    )
    .await;
    let message = &condition(&waiting, types::APPROVED).unwrap().message;
    assert!(
        message.starts_with("the configuration (spec.config, spec.configFrom) changed since"),
        "{message}"
    );
    assert_eq!(
        condition(&waiting, types::INSTALLED).map(|c| c.status.as_str()),
        Some("True"),
        "the approved content stays installed"
    );
    assert_eq!(roles(&waiting), 1);

    approve_shown(&client, &waiting).await;
    let bundle = wait_until(
        "the new configuration installed",
        Duration::from_secs(60),
        || {
            let client = client.clone();
            let name = name.clone();
            async move {
                let bundle = get_bundle(&client, &name).await;
                (is_ready(&bundle) && roles(&bundle) == 0).then_some(bundle)
            }
        },
    )
    .await;
    assert!(
        installed(&bundle)
            .iter()
            .any(|(kind, _, _)| kind == "ClusterRoleBinding"),
        "watching all namespaces: the permissions become ClusterRoles"
    );
}
