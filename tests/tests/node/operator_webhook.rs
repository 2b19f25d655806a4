//! prometheus-operator with its admission webhook, installed as three bundles on the node and
//! left to run beside the controllers that co-own its objects:
//!
//! - A: the operator's CRDs, RBAC and Deployment, its images taken from the node's registry
//!   with `spec.images`, told the config reloader's image with its own flag;
//! - B (`dependsOn: [A]`): the admission webhook (Deployment without replicas, Service,
//!   ServiceAccount, PDB, ServiceMonitor, moved into the test's namespace and trimmed with
//!   `spec.patches`), its serving certificate, and a
//!   ValidatingWebhookConfiguration for PrometheusRules without a caBundle; a Job the test
//!   starts patches the caBundle in with a field manager of its own, as cert-manager's
//!   cainjector does, and an HPA the test creates scales the webhook to two replicas;
//! - C: a PrometheusRule with invalid PromQL, refused by the real webhook (Gantry reports its
//!   message), then a valid rule, a ServiceMonitor and a Prometheus the operator turns into a
//!   StatefulSet; Gantry's health follows the Prometheus's own `Available` condition.
//!
//! Once everything is Ready and Healthy, two minutes of steady state cost no write by the
//! provisioner, and the caBundle and the replicas are still the other controllers'.
//!
//! The class pulls directly (`pullMode: Direct`): the host provisioner's storage server
//! listens on loopback only, where unpack Pods cannot reach it (pull.rs covers `Node` with
//! Gantry as Pods).

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use gantry_api::conditions::{reasons, types};
use gantry_api::images::image_name;
use gantry_api::{
    Bundle, BundlePatch, BundleSpec, HealthPolicy, ImageOverride, ObjectSelector,
    ProvisionerClassSpec,
};
use gantry_tests::e2e::{apply_class, push_to, spec_of_class};
use gantry_tests::{ImageConfig, NodeCluster, Pki, node_cluster, unique_name};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use super::health::{HostGantry, condition, host_gantry, wait};
use super::operators::{
    OPERATOR, VERSION, operator_dir, push_operator_image, ready_and_healthy, yaml_files,
};

const WEBHOOK: &str = "prometheus-operator-admission-webhook";
const UPSTREAM_WEBHOOK_IMAGE: &str = "quay.io/prometheus-operator/admission-webhook";
const UPSTREAM_OPERATOR_IMAGE: &str = "quay.io/prometheus-operator/prometheus-operator";
const RELOADER_FLAG: &str = "--prometheus-config-reloader=";
/// The webhook's handler for PrometheusRules (upstream's Documentation/platform/webhook.md).
const RULES_PATH: &str = "/admission-prometheusrules/validate";
/// The Secret the upstream Deployment mounts its serving certificate from.
const CERT_SECRET: &str = "admission-webhook-certs";
/// The field manager the caBundle is written with, as cert-manager's cainjector would.
const INJECTOR: &str = "cainjector";
/// The replicas the HPA asks for: not the 1 a Deployment without replicas defaults to.
const HPA_REPLICAS: i32 = 2;
/// The steady state measured for writes.
const STEADY: Duration = Duration::from_secs(120);
/// The Prometheus custom resource of bundle C, and the one before it that cannot run.
const PROMETHEUS: &str = "main";
const BROKEN_PROMETHEUS: &str = "broken";
const INVALID_EXPR: &str = "sum(rate(http_requests_total[5m]) by";

#[tokio::test]
async fn prometheus_operator_with_its_webhook_works_and_co_owned_fields_stay() {
    let cluster = node_cluster();
    let gantry = host_gantry(cluster).await;
    let client = cluster.client().await;
    let namespace = unique_name("prom-webhook");
    cluster.create_namespace(&namespace).await;
    let class = unique_name("operators");
    let spec = ProvisionerClassSpec {
        health: Some(HealthPolicy {
            wait: Some(true),
            timeout: Some("10m".into()),
        }),
        ..super::health::host_class_spec(cluster.registry())
    };
    apply_class(&client, &class, spec, false).await;

    let (operator, reloader, webhook, kubectl, stand_in) = tokio::join!(
        push_operator_image(cluster, &namespace),
        push_binary(cluster, &namespace, "prometheus-config-reloader"),
        push_binary(cluster, &namespace, "admission-webhook"),
        push_kubectl(cluster, &namespace),
        push_prometheus_stand_in(cluster, &namespace),
    );

    // A and B at once, as a user applies them: B waits for A by `dependsOn`.
    let bundles: Api<Bundle> = Api::all(client.clone());
    let a = unique_name("prom-operator");
    let b = unique_name("prom-webhook");
    let vwc = unique_name("prometheusrules-validation");
    let pki = Pki::new("prometheus-operator-admission-webhook-ca").unwrap();
    let a_image = push_to(
        cluster.registry(),
        &format!("{namespace}/operator-bundle:{VERSION}"),
        &as_files(&operator_files(&namespace, &reloader)),
    )
    .await;
    let b_image = push_to(
        cluster.registry(),
        &format!("{namespace}/webhook-bundle:{VERSION}"),
        &as_files(&webhook_files(&namespace, &pki, &vwc)),
    )
    .await;
    let a_spec = BundleSpec {
        images: vec![override_of(UPSTREAM_OPERATOR_IMAGE, &operator)],
        ..spec_of_class(&a_image, Some(&namespace), &class)
    };
    let b_spec = BundleSpec {
        depends_on: vec![a.clone()],
        images: vec![override_of(UPSTREAM_WEBHOOK_IMAGE, &webhook)],
        patches: webhook_patches(&namespace),
        ..spec_of_class(&b_image, Some(&namespace), &class)
    };
    let created = Instant::now();
    gantry_tests::e2e::create_bundle(&client, &a, a_spec).await;
    gantry_tests::e2e::create_bundle(&client, &b, b_spec).await;
    let (a_healthy, b_healthy) = tokio::join!(
        async {
            healthy(cluster, &bundles, &namespace, &a).await;
            created.elapsed()
        },
        async {
            healthy(cluster, &bundles, &namespace, &b).await;
            created.elapsed()
        },
    );
    println!(
        "bundle A (operator: {} CRDs, RBAC, Deployment) created to Healthy: {:.1} s",
        yaml_files(&operator_dir().join("crds")).len(),
        a_healthy.as_secs_f64()
    );
    println!(
        "bundle B (admission webhook, dependsOn A) created to Healthy: {:.1} s",
        b_healthy.as_secs_f64()
    );
    // The reloader the operator was told of is the one pushed here.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let args = deployments
        .get(OPERATOR)
        .await
        .unwrap()
        .spec
        .unwrap()
        .template;
    let args = args.spec.unwrap().containers[0].args.clone().unwrap();
    assert!(
        args.contains(&format!("{RELOADER_FLAG}{reloader}")),
        "{args:?}"
    );

    // The caBundle, injected by a Job of the test with a field manager of its own.
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(pki.ca_pem());
    inject_ca_bundle(cluster, &client, &namespace, &vwc, &ca_bundle, &kubectl).await;
    let rules = dynamic(&client, &namespace, "PrometheusRule");
    let refusal = wait(
        cluster,
        &namespace,
        "the webhook to refuse an invalid PrometheusRule",
        || refused(&rules, "direct-broken"),
    )
    .await;
    assert!(
        refusal.contains(&format!(
            r#"admission webhook "{WEBHOOK_NAME}" denied the request"#
        )),
        "the webhook itself refused it: {refusal}"
    );
    let webhook_says = refusal
        .split_once("denied the request: ")
        .map(|(_, m)| m.to_string())
        .unwrap_or(refusal.clone());

    // C: the invalid rule is refused, Gantry says why with the webhook's words.
    let c = unique_name("prom-rules");
    let c_v1 = push_to(
        cluster.registry(),
        &format!("{namespace}/rules-bundle:v1"),
        &as_files(&[
            ("10-service-monitor.yaml".into(), service_monitor()),
            ("20-rule.yaml".into(), rule("valid", "up == 0")),
            ("30-rule-broken.yaml".into(), rule("broken", INVALID_EXPR)),
        ]),
    )
    .await;
    gantry_tests::e2e::create_bundle(&client, &c, spec_of_class(&c_v1, Some(&namespace), &class))
        .await;
    let (_, reason, message) = wait(
        cluster,
        &namespace,
        "bundle C to fail with the webhook's refusal",
        || async {
            let bundle = bundles.get(&c).await.ok()?;
            condition(&bundle, types::INSTALLED)
                .filter(|(s, _, m)| s == "False" && m.contains("denied the request"))
        },
    )
    .await;
    println!("bundle C v1, Installed=False {reason}: {message}");
    // The webhook answers 422 (Invalid): the dry run before the first write found it.
    assert_eq!(reason, reasons::INVALID_OBJECT, "{message}");
    assert!(
        message.contains(&format!(
            "PrometheusRule.monitoring.coreos.com {namespace}/broken"
        )) && message.contains(&webhook_says),
        "the condition names the rule and gives the webhook's message {webhook_says:?}: {message}"
    );
    let ready = condition(&bundles.get(&c).await.unwrap(), types::READY).unwrap();
    assert_eq!(ready.0, "False", "{ready:?}");

    // C v2: without the invalid rule, with a Prometheus whose image cannot serve (busybox's
    // shell given Prometheus's flags): its `Available=False` is what Gantry reports.
    let broken_prometheus = push_to(
        cluster.registry(),
        &format!("{namespace}/rules-bundle:v2"),
        &as_files(&c_files(BROKEN_PROMETHEUS, cluster.busybox_image())),
    )
    .await;
    set_image(&bundles, &c, &broken_prometheus).await;
    let service_monitors = dynamic(&client, &namespace, "ServiceMonitor");
    let prometheuses = dynamic(&client, &namespace, "Prometheus");
    let stateful_sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    let (_, _, message) = wait(
        cluster,
        &namespace,
        "bundle C Healthy=False, its Prometheus not Available",
        || async {
            let bundle = bundles.get(&c).await.ok()?;
            condition(&bundle, types::HEALTHY).filter(|(s, r, m)| {
                s == "False"
                    && r == reasons::PROGRESSING
                    && m.contains(&format!(
                        "Prometheus.monitoring.coreos.com {namespace}/{BROKEN_PROMETHEUS}: Resource is not Available"
                    ))
            })
        },
    )
    .await;
    println!("bundle C v2, Healthy=False: {message}");
    let live = prometheuses.get(BROKEN_PROMETHEUS).await.unwrap();
    let available = live.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Available"))
        .cloned()
        .unwrap_or_default();
    assert_ne!(available["status"], "True", "{available}");
    assert!(
        stateful_sets
            .get_opt(&format!("prometheus-{BROKEN_PROMETHEUS}"))
            .await
            .unwrap()
            .is_some(),
        "the operator made the Prometheus's StatefulSet"
    );
    assert!(rules.get_opt("valid").await.unwrap().is_some());
    assert!(rules.get_opt("broken").await.unwrap().is_none());
    assert!(service_monitors.get_opt("webhook").await.unwrap().is_some());

    // C v3: another Prometheus, of a stand-in that answers Prometheus's probes; the operator
    // reports it Available, and the broken one is pruned.
    let fixed = push_to(
        cluster.registry(),
        &format!("{namespace}/rules-bundle:v3"),
        &as_files(&c_files(PROMETHEUS, &stand_in)),
    )
    .await;
    let changed = Instant::now();
    set_image(&bundles, &c, &fixed).await;
    healthy(cluster, &bundles, &namespace, &c).await;
    let c_healthy = changed.elapsed();
    println!(
        "bundle C (rules, ServiceMonitor, Prometheus) new content to Healthy: {:.1} s",
        c_healthy.as_secs_f64()
    );
    assert!(
        prometheuses
            .get_opt(BROKEN_PROMETHEUS)
            .await
            .unwrap()
            .is_none(),
        "the Prometheus no longer in the bundle is pruned"
    );
    let live = prometheuses.get(PROMETHEUS).await.unwrap();
    assert!(
        live.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c
                .iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True")),
        "Healthy follows the Prometheus's Available condition: {}",
        live.data["status"]
    );

    // The HPA scales the webhook, whose manifest sets no replicas.
    scale_with_hpa(cluster, &client, &namespace, &deployments).await;
    for name in [&a, &b, &c] {
        healthy(cluster, &bundles, &namespace, name).await;
    }

    // Steady state: nothing to write. Bundles other tests left on the cluster are the same
    // provisioner's too (a Pod backing off a pull changes its health now and then), so status
    // writes are counted on these three bundles: their resourceVersions.
    let bundle_versions = || async {
        let mut versions = Vec::new();
        for name in [&a, &b, &c] {
            versions.push(bundles.get(name).await.unwrap().metadata.resource_version);
        }
        versions
    };
    let before = writes(&gantry).await;
    let bundles_before = bundle_versions().await;
    let versions_before = resource_versions(&client, &namespace, &vwc).await;
    tokio::time::sleep(STEADY).await;
    let after = writes(&gantry).await;
    let bundles_after = bundle_versions().await;
    let versions_after = resource_versions(&client, &namespace, &vwc).await;
    println!(
        "steady state of {}s: provisioner writes (applied, deleted, status) {before:?} -> {after:?}",
        STEADY.as_secs()
    );
    // Asserted after the uninstall: a failure here must not leave the operator's CRDs, owned by
    // bundle A, in the way of the tests after this one.
    let steady_log = gantry.last_status_writes(5);
    let configuration = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(&vwc)
        .await
        .unwrap();
    let injected = configuration.webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .clone()
        .map(|b| base64::engine::general_purpose::STANDARD.encode(b.0));
    assert_eq!(injected.as_deref(), Some(ca_bundle.as_str()));
    let replicas = deployments
        .get(WEBHOOK)
        .await
        .unwrap()
        .spec
        .unwrap()
        .replicas;
    assert_eq!(replicas, Some(HPA_REPLICAS), "the HPA's replicas stayed");
    let refusal = refused(&rules, "direct-broken-after").await;
    assert!(
        refusal
            .as_deref()
            .is_some_and(|m| m.contains(&webhook_says)),
        "the webhook still refuses an invalid rule: {refusal:?}"
    );
    for name in [&a, &b, &c] {
        let bundle = bundles.get(name).await.unwrap();
        assert_eq!(
            condition(&bundle, types::HEALTHY).map(|c| c.0),
            Some("True".into()),
            "{name}"
        );
    }

    // Uninstall, the custom resources first.
    bundles.delete(&c, &DeleteParams::default()).await.unwrap();
    wait(cluster, &namespace, "bundle C to be gone", || async {
        bundles.get_opt(&c).await.ok()?.is_none().then_some(())
    })
    .await;
    for name in [&b, &a] {
        bundles
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait(
        cluster,
        &namespace,
        "bundles A and B to be gone",
        || async {
            (bundles.get_opt(&a).await.ok()?.is_none() && bundles.get_opt(&b).await.ok()?.is_none())
                .then_some(())
        },
    )
    .await;

    assert_eq!(
        (before.0, before.1),
        (after.0, after.1),
        "the provisioner applied or deleted objects during the steady state"
    );
    assert_eq!(
        bundles_before, bundles_after,
        "the provisioner wrote these bundles' status during the steady state; its last status writes:\n{steady_log}"
    );
    assert_eq!(
        versions_before, versions_after,
        "co-owned objects changed during the steady state"
    );
}

/// The webhook's name in the ValidatingWebhookConfiguration (upstream's).
const WEBHOOK_NAME: &str = "prometheusrulevalidate.monitoring.coreos.com";

fn as_files(files: &[(String, String)]) -> Vec<(&str, String)> {
    files
        .iter()
        .map(|(name, text)| (name.as_str(), text.clone()))
        .collect()
}

fn yaml(value: &Value) -> String {
    serde_saphyr::to_string(value).unwrap()
}

/// `spec.images` entry taking `upstream` from `pushed` (`registry/repository:tag`).
fn override_of(upstream: &str, pushed: &str) -> ImageOverride {
    let name = image_name(pushed);
    ImageOverride {
        name: upstream.into(),
        new_name: Some(name.into()),
        new_tag: Some(pushed[name.len() + 1..].into()),
        digest: None,
    }
}

/// An upstream manifest moved from `default` into `namespace`.
fn placed(text: &str, namespace: &str) -> Value {
    let mut object: Value = serde_saphyr::from_str(text).unwrap();
    if let Some(ns) = object.pointer_mut("/metadata/namespace") {
        *ns = json!(namespace);
    }
    if let Some(subjects) = object.get_mut("subjects").and_then(Value::as_array_mut) {
        for subject in subjects {
            subject["namespace"] = json!(namespace);
        }
    }
    object
}

/// Bundle A: every CRD, then the upstream RBAC and Deployment, the operator told to run
/// `reloader` as the config reloader.
fn operator_files(namespace: &str, reloader: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = yaml_files(&operator_dir().join("crds"))
        .into_iter()
        .map(|(name, text)| (format!("10-{name}"), text))
        .collect();
    for (name, text) in yaml_files(&operator_dir().join("rbac")) {
        let mut object = placed(&text, namespace);
        if object["kind"] == "Deployment" {
            let args = object
                .pointer_mut("/spec/template/spec/containers/0/args")
                .and_then(Value::as_array_mut)
                .unwrap();
            let flag = args
                .iter_mut()
                .find(|a| a.as_str().is_some_and(|a| a.starts_with(RELOADER_FLAG)))
                .expect("the upstream Deployment names the config reloader");
            *flag = json!(format!("{RELOADER_FLAG}{reloader}"));
        }
        files.push((format!("20-{name}"), yaml(&object)));
    }
    files
}

/// Bundle B: the upstream webhook manifests, its certificate, and the webhook configuration
/// without a caBundle.
fn webhook_files(namespace: &str, pki: &Pki, vwc: &str) -> Vec<(String, String)> {
    let host = format!("{WEBHOOK}.{namespace}.svc");
    let cert = pki.server(&[&host], &[]).unwrap();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": CERT_SECRET, "namespace": namespace},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert.cert_pem, "tls.key": cert.key_pem},
    });
    let mut files = vec![("10-secret.yaml".to_string(), yaml(&secret))];
    // As upstream ships them: `spec.patches` moves them and drops the replicas.
    for (name, text) in yaml_files(&operator_dir().join("webhook")) {
        files.push((format!("20-{name}"), text));
    }
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": vwc},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "clientConfig": {"service": {"name": WEBHOOK, "namespace": namespace, "path": RULES_PATH}},
            "failurePolicy": "Fail",
            // This test's namespace only: the other tests' rules are not its business.
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{
                "apiGroups": ["monitoring.coreos.com"],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["prometheusrules"],
            }],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    });
    files.push(("30-validating-webhook.yaml".into(), yaml(&configuration)));
    files
}

/// The upstream webhook objects (all labelled with its name) moved from `default` into
/// `namespace`; its Deployment without replicas (the HPA's) and without its required
/// anti-affinity (one node cannot run two replicas under it).
fn webhook_patches(namespace: &str) -> Vec<BundlePatch> {
    let ops = |ops: Value| ops.to_string();
    vec![
        BundlePatch {
            patch: ops(
                json!([{"op": "replace", "path": "/metadata/namespace", "value": namespace}]),
            ),
            target: ObjectSelector {
                label_selector: Some(format!("app.kubernetes.io/name={WEBHOOK}")),
                ..Default::default()
            },
        },
        BundlePatch {
            patch: ops(json!([
                {"op": "remove", "path": "/spec/replicas"},
                {"op": "remove", "path": "/spec/template/spec/affinity"}
            ])),
            target: ObjectSelector {
                kind: Some("Deployment".into()),
                name: Some(WEBHOOK.into()),
                ..Default::default()
            },
        },
    ]
}

fn rule(name: &str, expr: &str) -> String {
    yaml(&json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": name},
        "spec": {"groups": [{"name": name, "rules": [{"alert": "Down", "expr": expr}]}]},
    }))
}

fn service_monitor() -> String {
    yaml(&json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "webhook"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": WEBHOOK}},
            "endpoints": [{"port": "https", "scheme": "https"}],
        },
    }))
}

/// Bundle C after the refusal: the valid rule, the ServiceMonitor, and Prometheus `name`
/// running `image`.
fn c_files(name: &str, image: &str) -> Vec<(String, String)> {
    let prometheus = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
        "metadata": {"name": name},
        "spec": {
            "image": image,
            "replicas": 1,
            "ruleSelector": {},
            "serviceMonitorSelector": {},
        },
    });
    vec![
        ("10-service-monitor.yaml".into(), service_monitor()),
        ("20-rule.yaml".into(), rule("valid", "up == 0")),
        ("30-prometheus.yaml".into(), yaml(&prometheus)),
    ]
}

fn dynamic(client: &Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("monitoring.coreos.com", "v1", kind)),
    )
}

/// The API server's refusal of an invalid PrometheusRule `name` created directly, once it
/// comes from the webhook (not from a webhook it cannot call yet).
async fn refused(rules: &Api<DynamicObject>, name: &str) -> Option<String> {
    let text = rule(name, INVALID_EXPR);
    let object: DynamicObject = serde_saphyr::from_str(&text).unwrap();
    match rules.create(&PostParams::default(), &object).await {
        Ok(_) => panic!("an invalid PrometheusRule was accepted: the webhook is not called"),
        Err(kube::Error::Api(e)) if e.message.contains("denied the request") => Some(e.message),
        Err(e) => {
            eprintln!("creating {name}: {e}");
            None
        }
    }
}

async fn set_image(bundles: &Api<Bundle>, name: &str, image: &str) {
    bundles
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": image}})),
        )
        .await
        .unwrap();
}

async fn healthy(cluster: &NodeCluster, bundles: &Api<Bundle>, namespace: &str, name: &str) {
    wait(
        cluster,
        namespace,
        &format!("bundle {name} Ready=True and Healthy=True"),
        || ready_and_healthy(bundles, name),
    )
    .await;
}

/// A ServiceAccount allowed to patch the one webhook configuration, and a Job running as it
/// that adds the caBundle with `kubectl patch --field-manager=cainjector`; waits for the Job
/// to complete and the field to be the injector's.
async fn inject_ca_bundle(
    cluster: &NodeCluster,
    client: &Client,
    namespace: &str,
    vwc: &str,
    ca_bundle: &str,
    kubectl: &str,
) {
    let apply = PatchParams::apply("gantry-tests");
    let role = format!("{vwc}-injector");
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": INJECTOR, "namespace": namespace}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations"], "resourceNames": [vwc],
                "verbs": ["get", "patch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": INJECTOR, "namespace": namespace}]}),
    ];
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .patch(INJECTOR, &apply, &Patch::Apply(&objects[0]))
        .await
        .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .patch(&role, &apply, &Patch::Apply(&objects[1]))
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&role, &apply, &Patch::Apply(&objects[2]))
        .await
        .unwrap();
    let patch =
        json!([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca_bundle}]);
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": INJECTOR, "namespace": namespace},
        "spec": {
            "backoffLimit": 4,
            "template": {"spec": {
                "restartPolicy": "Never",
                "serviceAccountName": INJECTOR,
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "inject",
                    "image": kubectl,
                    "args": ["patch", "validatingwebhookconfiguration", vwc, "--type=json",
                        format!("--field-manager={INJECTOR}"), "-p", patch.to_string()],
                }],
            }},
        },
    });
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(job).unwrap(),
    )
    .await
    .unwrap();
    wait(
        cluster,
        namespace,
        "the cainjector Job to complete",
        || async {
            let job = jobs.get(INJECTOR).await.ok()?;
            job.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
                .then_some(())
        },
    )
    .await;
    let configuration = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(vwc)
        .await
        .unwrap();
    let managers: Vec<String> = configuration
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|f| {
            f.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.to_string().contains("f:caBundle"))
        })
        .filter_map(|f| f.manager)
        .collect();
    assert_eq!(managers, [INJECTOR], "the caBundle is the injector's alone");
}

/// An HPA scaling the webhook's Deployment to [`HPA_REPLICAS`] (its minimum: the node has no
/// metrics API, and the HPA controller raises a Deployment below the minimum without one);
/// waits until both replicas are available.
async fn scale_with_hpa(
    cluster: &NodeCluster,
    client: &Client,
    namespace: &str,
    deployments: &Api<Deployment>,
) {
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": WEBHOOK, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": WEBHOOK},
            "minReplicas": HPA_REPLICAS,
            "maxReplicas": HPA_REPLICAS + 1,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}],
        },
    });
    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &serde_json::from_value(hpa).unwrap(),
        )
        .await
        .unwrap();
    wait(
        cluster,
        namespace,
        "the HPA to scale the webhook to two available replicas",
        || async {
            let deployment = deployments.get(WEBHOOK).await.ok()?;
            let status = deployment.status?;
            (deployment.spec?.replicas == Some(HPA_REPLICAS)
                && status.available_replicas == Some(HPA_REPLICAS)
                && status.observed_generation == deployment.metadata.generation)
                .then_some(())
        },
    )
    .await;
}

/// The provisioner's writes so far: (objects applied, objects deleted, status writes).
async fn writes(gantry: &HostGantry) -> (u64, u64, u64) {
    let text = reqwest::get(format!("{}/metrics", gantry.metrics_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let metric = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in the provisioner's metrics"))
    };
    (
        metric("gantry_provisioner_objects_applied_total"),
        metric("gantry_provisioner_objects_deleted_total"),
        metric("gantry_provisioner_status_writes_total"),
    )
}

/// The resourceVersions of the objects other controllers co-own: the webhook configuration
/// (the injector's caBundle) and the webhook's Deployment (the HPA's replicas).
async fn resource_versions(client: &Client, namespace: &str, vwc: &str) -> Vec<Option<String>> {
    let configuration = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(vwc)
        .await
        .unwrap();
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(WEBHOOK)
        .await
        .unwrap();
    vec![
        configuration.metadata.resource_version,
        deployment.metadata.generation.map(|g| g.to_string()),
    ]
}

/// Pushes an image of the static prometheus-operator binary `binary` as `/bin/<binary>`, its
/// entrypoint, run as nobody as upstream's images are.
async fn push_binary(cluster: &'static NodeCluster, namespace: &str, binary: &str) -> String {
    let source = operator_dir().join(binary);
    let target = format!("/bin/{binary}");
    let repository = format!("{namespace}/{binary}:{VERSION}");
    push_rootfs(cluster, repository, move |rootfs| {
        std::fs::create_dir(rootfs.join("bin")).unwrap();
        std::fs::copy(&source, rootfs.join(&target[1..])).unwrap();
        ImageConfig {
            entrypoint: vec![target],
            user: Some("65534:65534".into()),
            ..Default::default()
        }
    })
    .await
}

/// The machine's static `kubectl` as an image's entrypoint, with a writable `/tmp` as its home
/// (its discovery cache).
async fn push_kubectl(cluster: &'static NodeCluster, namespace: &str) -> String {
    let repository = format!("{namespace}/kubectl:v1");
    push_rootfs(cluster, repository, |rootfs| {
        let kubectl = which("kubectl");
        std::fs::copy(&kubectl, rootfs.join("kubectl"))
            .unwrap_or_else(|e| panic!("copying {}: {e}", kubectl.display()));
        std::fs::create_dir(rootfs.join("tmp")).unwrap();
        ImageConfig {
            entrypoint: vec!["/kubectl".into()],
            env: vec!["HOME=/tmp".into()],
            ..Default::default()
        }
    })
    .await
}

/// A stand-in for the Prometheus image (none can be fetched here): busybox's httpd on
/// Prometheus's port 9090 answering its probes (`/-/ready`, `/-/healthy`), whatever flags the
/// operator passes.
async fn push_prometheus_stand_in(cluster: &'static NodeCluster, namespace: &str) -> String {
    let repository = format!("{namespace}/prometheus-stand-in:v1");
    push_rootfs(cluster, repository, |rootfs| {
        std::fs::create_dir_all(rootfs.join("bin")).unwrap();
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
        std::fs::create_dir_all(rootfs.join("www/-")).unwrap();
        for probe in ["ready", "healthy"] {
            std::fs::write(rootfs.join("www/-").join(probe), "ok\n").unwrap();
        }
        ImageConfig {
            // The operator's flags become the script's positional parameters, unused.
            entrypoint: vec![
                "/bin/busybox".into(),
                "sh".into(),
                "-c".into(),
                "exec /bin/busybox httpd -f -p 9090 -h /www".into(),
                "prometheus".into(),
            ],
            ..Default::default()
        }
    })
    .await
}

async fn push_rootfs(
    cluster: &'static NodeCluster,
    repository: String,
    fill: impl FnOnce(&Path) -> ImageConfig + Send + 'static,
) -> String {
    tokio::task::spawn_blocking(move || {
        let rootfs = tempfile::tempdir().unwrap();
        let config = fill(rootfs.path());
        cluster
            .push_image(rootfs.path(), &config, &repository)
            .unwrap_or_else(|e| panic!("pushing {repository}: {e}"))
    })
    .await
    .unwrap()
}

fn which(program: &str) -> std::path::PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{program} is not on PATH"))
}
