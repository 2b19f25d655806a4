//! Reconcile scenarios against a mock API server (kube's `tower-test` pair): what the
//! controller asks, and what it leaves alone, without a cluster.

use std::sync::Arc;
use std::time::Duration;

use gantry_api::conditions::{reasons, types};
use gantry_api::{
    ApprovalPolicy, Bundle, BundleSpec, BundleStatus, PLAIN_PROVISIONER, ProvisionerClass,
    ProvisionerClassSpec, UNINSTALL_FINALIZER,
};
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use kube::runtime::events::Reporter;
use kube::runtime::{reflector, watcher};
use serde_json::Value;

use super::pass::installed_fingerprint;
use super::*;
use crate::source::storage::{StorageClient, Token};
use crate::state::Settings;
use crate::state::metrics::Metrics;
use crate::status::set_condition;

const IMAGE: &str =
    "127.0.0.1:1/app@sha256:0000000000000000000000000000000000000000000000000000000000000000";

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// What the controller asked the API server.
#[derive(Debug)]
struct Asked {
    method: Method,
    path: String,
    body: Value,
}

/// A client whose requests go to the returned handle.
fn mock_client() -> (Client, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// A fake API server: records every request, and answers a write to a bundle with `bundle`
/// and any other request with its own body (what a create returns, near enough).
fn serve(mut handle: Handle, bundle: Bundle) -> tokio::task::JoinHandle<Vec<Asked>> {
    tokio::spawn(async move {
        let mut asked = Vec::new();
        while let Some((request, respond)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let path = parts.uri.path().to_string();
            let answer = if path.contains("/bundles/") {
                serde_json::to_vec(&bundle).unwrap()
            } else {
                bytes.to_vec()
            };
            respond.send_response(Response::new(Body::from(answer)));
            asked.push(Asked {
                method: parts.method,
                path,
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            });
        }
        asked
    })
}

fn class(name: &str, provisioner: &str) -> ProvisionerClass {
    ProvisionerClass::new(
        name,
        ProvisionerClassSpec {
            provisioner: provisioner.into(),
            approval: ApprovalPolicy::Automatic,
            ..Default::default()
        },
    )
}

fn bundle(class: &str) -> Bundle {
    let mut bundle = Bundle::new(
        "b",
        BundleSpec {
            provisioner_class_name: Some(class.into()),
            image: IMAGE.into(),
            ..Default::default()
        },
    );
    bundle.metadata.generation = Some(1);
    bundle
}

fn context(client: Client, classes: &[ProvisionerClass]) -> Context {
    // The storage client's TLS needs a provider, as the binary's `main` installs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (store, mut writer) = reflector::store::<ProvisionerClass>();
    for class in classes {
        writer.apply_watcher_event(&watcher::Event::Apply(class.clone()));
    }
    Context::new(
        client.clone(),
        None,
        Settings::default(),
        // Never reached by these scenarios: nothing listens there.
        StorageClient::new("http://127.0.0.1:9", Token::None, None).unwrap(),
        store,
        Arc::new(Metrics::default()),
        Reporter {
            controller: "gantry-provisioner".into(),
            instance: None,
        },
    )
    .0
}

/// Reconciles `bundle` once; returns the action, the requests made, and the metrics text.
async fn reconcile_once(
    bundle: Bundle,
    classes: &[ProvisionerClass],
    prepare: impl FnOnce(&Context),
) -> (Action, Vec<Asked>, String) {
    let (client, handle) = mock_client();
    let server = serve(handle, bundle.clone());
    let ctx = Arc::new(context(client, classes));
    prepare(&ctx);
    let action = reconcile(Arc::new(bundle), ctx.clone()).await.unwrap();
    let metrics = ctx.metrics.encode();
    // Dropping every client ends the fake server, which then tells what it was asked.
    drop(ctx);
    let asked = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the mock client is dropped")
        .unwrap();
    (action, asked, metrics)
}

fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        (key == name).then(|| value.parse().ok())?
    })
}

#[tokio::test]
async fn a_bundle_of_another_provisioner_is_untouched() {
    let (action, asked, metrics) = reconcile_once(
        bundle("other"),
        &[class("other", "example.com/other")],
        |_| {},
    )
    .await;
    assert!(asked.is_empty(), "no request: {asked:?}");
    assert_eq!(action, Action::await_change());
    assert_eq!(
        metric(
            &metrics,
            "gantry_provisioner_reconciles_total{result=\"untouched\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &metrics,
            "gantry_provisioner_reconcile_duration_seconds_count"
        ),
        Some(1.0),
        "the duration is recorded on early returns too"
    );
}

/// A bundle installed at its generation, as the controller would have written it.
fn installed_bundle() -> Bundle {
    let mut bundle = bundle("plain");
    bundle.metadata.finalizers = Some(vec![UNINSTALL_FINALIZER.into()]);
    let mut status = BundleStatus {
        class_name: Some("plain".into()),
        resolved_image: Some(IMAGE.into()),
        installed_image: Some(IMAGE.into()),
        content_digest: Some(format!("sha256:{}", "1".repeat(64))),
        observed_generation: Some(1),
        ..Default::default()
    };
    for (type_, reason) in [
        (types::UNPACKED, reasons::UNPACK_SUCCEEDED),
        (types::APPROVED, reasons::AUTOMATIC_APPROVAL),
        (types::INSTALLED, reasons::INSTALL_SUCCEEDED),
    ] {
        set_condition(&mut status.conditions, type_, true, reason, "done", Some(1));
    }
    summarize(
        &mut status,
        &crate::status::Facts {
            generation: Some(1),
            ..Default::default()
        },
    );
    bundle.status = Some(status);
    bundle
}

#[tokio::test]
async fn an_unchanged_installed_bundle_is_neither_read_nor_written() {
    let bundle = installed_bundle();
    let plain = class("plain", PLAIN_PROVISIONER);
    let check = installed_fingerprint(&bundle, &plain, IMAGE, bundle.status.as_ref().unwrap())
        .expect("installed");
    let (action, asked, metrics) =
        reconcile_once(bundle.clone(), std::slice::from_ref(&plain), |ctx| {
            ctx.resolved.record("b", IMAGE.into());
            ctx.checked.record("b", check);
        })
        .await;
    assert!(asked.is_empty(), "no request: {asked:?}");
    assert!(action != Action::await_change(), "it comes back to resync");
    assert_eq!(
        metric(
            &metrics,
            "gantry_provisioner_reconciles_total{result=\"success\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(&metrics, "gantry_provisioner_status_writes_total"),
        Some(0.0)
    );
}

#[tokio::test]
async fn a_missing_class_is_reported_once_with_a_warning() {
    let (_, asked, metrics) = reconcile_once(bundle("absent"), &[], |_| {}).await;
    let status_writes: Vec<&Asked> = asked
        .iter()
        .filter(|a| a.path == "/apis/gantry.dev/v1alpha1/bundles/b/status")
        .collect();
    assert_eq!(status_writes.len(), 1, "{asked:?}");
    assert_eq!(status_writes[0].method, Method::PATCH);
    let status = &status_writes[0].body["status"];
    assert_eq!(status["phase"], "Failing");
    assert!(
        status.get("approval").is_none(),
        "the approval is never sent"
    );
    let unpacked = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == types::UNPACKED)
        .unwrap();
    assert_eq!(unpacked["reason"], reasons::CLASS_NOT_FOUND);

    let events: Vec<&Asked> = asked
        .iter()
        .filter(|a| a.path.ends_with("/events"))
        .collect();
    assert_eq!(events.len(), 1, "{asked:?}");
    assert_eq!(events[0].body["type"], "Warning");
    assert_eq!(events[0].body["reason"], reasons::CLASS_NOT_FOUND);
    assert_eq!(
        metric(
            &metrics,
            "gantry_provisioner_failures_total{reason=\"ClassNotFound\"}"
        ),
        Some(1.0)
    );
    assert!(
        asked.len() == 2,
        "nothing but the status and the Event: {asked:?}"
    );
}
