//! Zero values the API server drops: a Deployment written as upstream manifests write them
//! (ingress-nginx's controller: `minReadySeconds: 0`, `hostNetwork: false`, an env `value: ""`,
//! `securityContext: {}`, `creationTimestamp: null`, fields the API server defaults) is stored
//! without those fields. That is no drift: `drift: Report` finds none, and a pass over an
//! unchanged bundle sends nothing. A real change of such a field still is drift.
//!
//! A control plane and Gantry of its own: the test counts the provisioner's writes
//! (`gantry_provisioner_objects_applied_total`), which other tests' bundles would move.

use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, DriftMode};
use gantry_tests::e2e::*;
use gantry_tests::wait_until;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

static CLUSTER: Isolated = Isolated::with_gantry(&SHARED_GANTRY_FLAGS);

/// ingress-nginx's controller Deployment as its upstream manifest writes it.
const CONTROLLER: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  labels:
    app.kubernetes.io/component: controller
    app.kubernetes.io/name: ingress-nginx
  name: ingress-nginx-controller
spec:
  minReadySeconds: 0
  revisionHistoryLimit: 10
  selector:
    matchLabels:
      app.kubernetes.io/component: controller
      app.kubernetes.io/name: ingress-nginx
  strategy:
    rollingUpdate:
      maxUnavailable: 1
    type: RollingUpdate
  template:
    metadata:
      creationTimestamp: null
      labels:
        app.kubernetes.io/component: controller
        app.kubernetes.io/name: ingress-nginx
    spec:
      containers:
      - args:
        - /nginx-ingress-controller
        - --election-id=ingress-nginx-leader
        env:
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: EXTRA_ARGS
          value: ""
        image: registry.k8s.io/ingress-nginx/controller:v1.11.2
        imagePullPolicy: IfNotPresent
        livenessProbe:
          failureThreshold: 5
          httpGet:
            path: /healthz
            port: 10254
            scheme: HTTP
          initialDelaySeconds: 10
          periodSeconds: 10
          successThreshold: 1
          timeoutSeconds: 1
        name: controller
        ports:
        - containerPort: 80
          hostPort: 0
          name: http
          protocol: TCP
        resources:
          requests:
            cpu: 100m
            memory: 90Mi
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: false
          runAsNonRoot: true
          runAsUser: 101
        volumeMounts:
        - mountPath: /usr/local/certificates/
          name: webhook-cert
          readOnly: false
      - name: sidecar
        image: registry.k8s.io/pause:3.10
        resources: {}
      dnsPolicy: ClusterFirst
      hostNetwork: false
      nodeSelector:
        kubernetes.io/os: linux
      securityContext: {}
      serviceAccountName: ingress-nginx
      terminationGracePeriodSeconds: 300
      tolerations: null
      volumes:
      - name: webhook-cert
        secret:
          secretName: ingress-nginx-admission
status: {}
"#;

const APPLIED: &str = "gantry_provisioner_objects_applied_total";

fn drifted(bundle: &Bundle) -> Option<(&str, &str)> {
    condition(bundle, types::DRIFTED)
        .filter(|c| c.observed_generation == bundle.metadata.generation)
        .map(|c| (c.status.as_str(), c.message.as_str()))
}

#[tokio::test]
async fn zero_values_the_api_server_drops_are_no_drift_and_not_sent_again() {
    let cluster = CLUSTER.get();
    let client = cluster.client().await;
    let provisioner = &cluster.gantry().provisioner;
    let ns = unique_namespace(&client, "zeros").await;
    let image = push(
        &format!("{ns}/app:v1"),
        &[
            ("controller.yaml", CONTROLLER.to_string()),
            ("other.yaml", config_map("other", None, "1")),
        ],
    )
    .await;
    let name = ns.clone();
    let mut bundle_spec = spec(&image, Some(&ns));
    bundle_spec.drift = Some(DriftMode::Report);
    create_bundle(&client, &name, bundle_spec).await;
    wait_bundle(&client, &name, "Ready and Drifted=False", |b| {
        is_ready(b) && drifted(b).is_some_and(|(status, _)| status == "False")
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let min_ready = || async {
        let live = deployments.get("ingress-nginx-controller").await.unwrap();
        live.spec.unwrap().min_ready_seconds
    };
    assert_eq!(min_ready().await, None, "the API server stores no zero");

    // Passes over the unchanged bundle find no drift.
    for _ in 0..2 {
        let bundle = reconcile_handled(&client, &name).await;
        assert_eq!(
            drifted(&bundle).map(|(status, _)| status),
            Some("False"),
            "{:?}",
            drifted(&bundle)
        );
    }

    // Someone edits the other object: only that is drift.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let edit = json!({ "data": { "value": "2" } });
    config_maps
        .patch("other", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let bundle = wait_bundle(&client, &name, "Drifted=True", |b| {
        drifted(b).is_some_and(|(status, _)| status == "True")
    })
    .await;
    let (_, message) = drifted(&bundle).unwrap();
    assert!(
        message.contains(&format!("ConfigMap {ns}/other")) && message.contains("1 object drifted"),
        "{message}"
    );
    assert!(!message.contains("Deployment"), "{message}");

    // A real change of the zero is drift.
    let scale = async || {
        let scaled = json!({ "spec": { "minReadySeconds": 5 } });
        let patch = Patch::Merge(&scaled);
        let params = PatchParams::default();
        deployments
            .patch("ingress-nginx-controller", &params, &patch)
            .await
            .unwrap();
    };
    scale().await;
    let bundle = wait_bundle(&client, &name, "the Deployment drifted", |b| {
        drifted(b).is_some_and(|(_, message)| message.contains(".spec.minReadySeconds"))
    })
    .await;
    let (_, message) = drifted(&bundle).unwrap();
    let line = message.lines().find(|l| l.contains("Deployment"));
    assert_eq!(
        line,
        Some(
            format!(
                "- Deployment.apps {ns}/ingress-nginx-controller (controller.yaml document 0): .spec.minReadySeconds"
            )
            .as_str()
        ),
        "only the changed field: {message}"
    );

    // Under `Correct` (a new spec: written in full, which repairs both), a pass over the
    // unchanged bundle sends nothing...
    patch_spec(&client, &name, json!({ "drift": "Correct" })).await;
    wait_bundle(&client, &name, "Ready under Correct", |b| {
        is_ready(b) && condition(b, types::DRIFTED).is_none()
    })
    .await;
    assert_eq!(min_ready().await, None, "repaired");
    let applied = provisioner.counter(APPLIED).await;
    for _ in 0..2 {
        let bundle = reconcile_handled(&client, &name).await;
        assert!(is_ready(&bundle));
        assert_eq!(provisioner.counter(APPLIED).await, applied, "nothing sent");
    }
    assert!(
        provisioner
            .counter("gantry_provisioner_objects_unchanged_total")
            .await
            > 0.0
    );

    // ...and a real change of the zero is corrected.
    scale().await;
    wait_until("minReadySeconds: 0 again", WAIT, || async {
        (min_ready().await.is_none() && provisioner.counter(APPLIED).await > applied).then_some(())
    })
    .await;
    let bundle = reconcile_handled(&client, &name).await;
    assert_eq!(
        condition(&bundle, types::INSTALLED).map(|c| c.reason.as_str()),
        Some(reasons::INSTALL_SUCCEEDED)
    );
    assert_eq!(
        provisioner.counter(APPLIED).await,
        applied + 1.0,
        "the Deployment alone, once"
    );
}
