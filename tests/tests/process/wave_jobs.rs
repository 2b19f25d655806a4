//! The waves of rendered content go out one after the other, each once every Job of the wave
//! before it completed (docs/plugins.md): a Helm chart with a `pre-install` hook Job and a
//! `post-install` hook ConfigMap, pushed by the real `helm push` and rendered by the real
//! `gantry-helm-plugin`. No controller-manager runs here, so the test plays the Job controller:
//! it writes the Job's status (`Complete` or `Failed`) through the status subresource, as the
//! controller would; what is under test is the provisioner's wait, not Jobs running.
//!
//! While the hook Job runs, the templates' and the post-install objects do not exist and the
//! bundle says which Job it waits for; once it completes they are applied and the bundle is
//! Ready. A failed Job, or one not complete within `spec.health.timeout`, fails the bundle
//! (`JobFailed`, retried) and the later waves never go out. A pass over what is installed does
//! not wait again, and an upgrade waits for its own hook Job as the install did.
//!
//! A cluster of its own: its provisioner runs with a token for plugins, and the plugin is
//! registered in its namespace.

use std::path::Path;

use gantry_api::conditions::{reasons, types};
use gantry_api::{Bundle, BundlePhase, HealthPolicy};
use gantry_tests::e2e::*;
use gantry_tests::helm::helm_push;
use gantry_tests::helm_plugin::{chart_archive, gantry_with_helm_plugin};
use gantry_tests::{registry, wait_until};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

static CLUSTER: Isolated = Isolated::new();

/// The namespace the releases install into.
const NS: &str = "waves";

/// A chart whose `pre-install` hook is a Job named after the release and `.Values.revision`
/// (wave 1), whose template is a ConfigMap `<release>-app` (wave 2), and whose `post-install`
/// hook is a ConfigMap `<release>-done` (wave 3); both ConfigMaps hold the revision.
fn hooks_chart() -> Vec<u8> {
    chart_archive(
        "hooks",
        &[
            (
                "Chart.yaml",
                "apiVersion: v2\nname: hooks\nversion: 0.1.0\n",
            ),
            ("values.yaml", "revision: \"1\"\n"),
            (
                "templates/migrate.yaml",
                "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}-migrate-{{ .Values.revision }}\n  annotations:\n    helm.sh/hook: pre-install\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: migrate\n        image: registry.invalid/migrate:{{ .Values.revision }}\n",
            ),
            (
                "templates/app.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-app\ndata:\n  value: {{ .Values.revision | quote }}\n",
            ),
            (
                "templates/done.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-done\n  annotations:\n    helm.sh/hook: post-install\ndata:\n  value: {{ .Values.revision | quote }}\n",
            ),
        ],
    )
}

/// Pushes the chart archive `archive` with `helm push` to the shared registry; the reference
/// `host/charts/hooks:0.1.0`.
fn push_chart(home: &Path, archive: &[u8]) -> String {
    let path = home.join("hooks-0.1.0.tgz");
    std::fs::create_dir_all(home).unwrap();
    std::fs::write(&path, archive).unwrap();
    helm_push(home, &path, registry().host(), "charts")
}

/// A bundle of release `name` of the chart `reference` at `revision`.
fn release(reference: &str, revision: &str) -> gantry_api::BundleSpec {
    gantry_api::BundleSpec {
        config: json!({ "revision": revision }).as_object().cloned(),
        ..spec_of_class(reference, Some(NS), "helm")
    }
}

fn installed_message(bundle: &Bundle) -> String {
    condition(bundle, types::INSTALLED)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Waits until bundle `name` says it waits for Job `job` (`NS/name`), and checks, at that
/// moment, that it is not Ready, that its `Ready` message names the Job too, and that
/// ConfigMap `<name>-app` holds `app` and `<name>-done` holds `done` (`None`: absent).
async fn waiting_for(
    client: &Client,
    name: &str,
    job: &str,
    app: Option<&str>,
    done: Option<&str>,
) -> Bundle {
    let said = format!("waiting for Job {NS}/{job} of wave 1 to complete before wave 2");
    let bundle = wait_bundle(client, name, &said, |b| {
        installed_message(b).contains(&said)
    })
    .await;
    assert_config_map(client, NS, &format!("{name}-app"), app).await;
    assert_config_map(client, NS, &format!("{name}-done"), done).await;
    let installed = condition(&bundle, types::INSTALLED).unwrap();
    assert_eq!(
        (installed.status.as_str(), installed.reason.as_str()),
        ("False", reasons::INSTALLING)
    );
    assert!(!is_ready(&bundle), "{:?}", bundle.status);
    let ready = condition(&bundle, types::READY).unwrap();
    assert!(ready.message.contains(job), "{}", ready.message);
    assert_eq!(
        bundle.status.as_ref().and_then(|s| s.phase),
        Some(BundlePhase::Installing)
    );
    assert!(
        Api::<Job>::namespaced(client.clone(), NS)
            .get_opt(job)
            .await
            .unwrap()
            .is_some(),
        "the Job {job} is applied before the bundle waits for it"
    );
    bundle
}

/// Writes the status the Job controller writes when Job `NS/name` completes (`complete`) or
/// fails: the conditions and the fields the API server requires with them.
async fn finish_job(client: &Client, name: &str, complete: bool) {
    let now = serde_json::to_value(Time(Timestamp::now())).unwrap();
    let condition = |type_: &str, reason: &str, message: &str| {
        json!({ "type": type_, "status": "True", "reason": reason, "message": message,
                "lastProbeTime": now, "lastTransitionTime": now })
    };
    let status = if complete {
        json!({
            "startTime": now, "completionTime": now, "succeeded": 1, "active": 0, "ready": 0,
            "terminating": 0,
            "conditions": [
                condition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"),
                condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
            ],
        })
    } else {
        json!({
            "startTime": now, "failed": 1, "active": 0, "ready": 0, "terminating": 0,
            "conditions": [
                condition("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
                condition("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
            ],
        })
    };
    Api::<Job>::namespaced(client.clone(), NS)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("writing the status of Job {name}: {e}"));
}

async fn job_uid(client: &Client, name: &str) -> Option<String> {
    Api::<Job>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|job| job.metadata.uid)
}

#[tokio::test]
async fn each_wave_of_a_chart_waits_for_the_jobs_of_the_wave_before() {
    let cluster = CLUSTER.get();
    let plane = cluster.plane();
    let client = plane.client().await;
    let work = tempfile::tempdir().unwrap();
    let (_gantry, plugin) = gantry_with_helm_plugin(plane, work.path(), &[]).await;
    let reference = push_chart(&work.path().join("helm"), &hooks_chart());
    ensure_namespace(&client, NS).await;

    // (a) While the pre-install Job runs, nothing of the later waves exists.
    let name = "migrated";
    create_bundle(&client, name, release(&reference, "1")).await;
    let waiting = waiting_for(&client, name, "migrated-migrate-1", None, None).await;
    let message = installed_message(&waiting);
    assert!(message.starts_with("1 of 3 objects applied; "), "{message}");
    assert!(message.contains("spec.health.timeout"), "{message}");

    // (b) Once it completes, the templates and the post-install hook go out: Ready.
    finish_job(&client, "migrated-migrate-1", true).await;
    let ready = wait_bundle(&client, name, "Ready", is_ready).await;
    assert_config_map(&client, NS, "migrated-app", Some("1")).await;
    assert_config_map(&client, NS, "migrated-done", Some("1")).await;
    assert_eq!(inventory_kinds(&ready).len(), 3);

    // (d) A pass over what is installed does not wait again: the Job, deleted (a TTL, a
    // delete policy), is restored by drift repair and not complete, and the bundle stays Ready
    // through a requested reconcile.
    let first = job_uid(&client, "migrated-migrate-1").await;
    Api::<Job>::namespaced(client.clone(), NS)
        .delete("migrated-migrate-1", &DeleteParams::background())
        .await
        .unwrap();
    let restored = wait_until("the Job restored", WAIT, || {
        let client = client.clone();
        let first = first.clone();
        async move {
            let uid = job_uid(&client, "migrated-migrate-1").await?;
            (Some(&uid) != first.as_ref()).then_some(uid)
        }
    })
    .await;
    let handled = reconcile_handled(&client, name).await;
    assert!(is_ready(&handled), "{:?}", handled.status);
    let installed = condition(&handled, types::INSTALLED).unwrap();
    assert_eq!(installed.reason, reasons::INSTALL_SUCCEEDED);
    assert!(
        !installed.message.contains("waiting"),
        "{}",
        installed.message
    );
    assert_eq!(
        job_uid(&client, "migrated-migrate-1").await,
        Some(restored),
        "the restored Job is the one the pass found, not complete"
    );

    // An upgrade waits for its own hook Job: the templates keep the old revision meanwhile.
    patch_spec(&client, name, json!({ "config": { "revision": "2" } })).await;
    waiting_for(&client, name, "migrated-migrate-2", Some("1"), Some("1")).await;
    finish_job(&client, "migrated-migrate-2", true).await;
    wait_bundle(&client, name, "Ready at revision 2", |b| {
        is_ready(b)
            && b.status
                .as_ref()
                .is_some_and(|s| s.inventory.iter().any(|e| e.name == "migrated-migrate-2"))
    })
    .await;
    assert_config_map(&client, NS, "migrated-app", Some("2")).await;
    assert_config_map(&client, NS, "migrated-done", Some("2")).await;
    assert_eq!(job_uid(&client, "migrated-migrate-1").await, None, "pruned");

    // (c) A failed hook Job fails the bundle, naming it and its wave; the later waves never
    // go out, however often it is retried.
    let name = "failing";
    create_bundle(&client, name, release(&reference, "1")).await;
    waiting_for(&client, name, "failing-migrate-1", None, None).await;
    finish_job(&client, "failing-migrate-1", false).await;
    let failed = wait_failure(
        &client,
        name,
        types::INSTALLED,
        reasons::JOB_FAILED,
        &format!(
            "Job {NS}/failing-migrate-1 of wave 1 failed: BackoffLimitExceeded: Job has reached the specified backoff limit; the waves after it are not applied"
        ),
    )
    .await;
    assert!(!is_ready(&failed));
    assert_eq!(
        condition(&failed, types::READY).unwrap().reason,
        reasons::JOB_FAILED
    );
    wait_bundle(&client, name, "a second attempt", |b| {
        installed_message(b).contains("(attempt 2")
    })
    .await;
    assert_config_map(&client, NS, "failing-app", None).await;
    assert_config_map(&client, NS, "failing-done", None).await;

    // A Job not complete within spec.health.timeout of its creation fails it too.
    let name = "slow";
    let mut slow = release(&reference, "1");
    slow.health = Some(HealthPolicy {
        wait: None,
        timeout: Some("3s".into()),
    });
    create_bundle(&client, name, slow).await;
    waiting_for(&client, name, "slow-migrate-1", None, None).await;
    wait_failure(
        &client,
        name,
        types::INSTALLED,
        reasons::JOB_FAILED,
        &format!("Job {NS}/slow-migrate-1 of wave 1 did not complete within 3s of its creation"),
    )
    .await;
    assert_config_map(&client, NS, "slow-app", None).await;
    assert_config_map(&client, NS, "slow-done", None).await;
    drop(plugin);
}
