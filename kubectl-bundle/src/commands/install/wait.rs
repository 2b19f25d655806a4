//! Waiting for what `install` applied: the CRDs established, the workloads ready.

use std::time::Duration;

use anyhow::{Context, bail};
use gantry_rules::kstatus;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;
use tokio::time::Instant;

use super::apply::Apis;
use super::manifests::name_of;

/// Waits until every CRD of `crds` is established and its kinds are served.
pub(super) async fn wait_established(
    client: &Client,
    apis: &mut Apis,
    crds: &[&Value],
    classes: &[&Value],
    deadline: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let (name, _) = name_of(crd);
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        match tokio::time::timeout_at(deadline, established).await {
            Err(_) => bail!(
                "CRD {name} is not established after {}: see `kubectl describe crd {name}`",
                humanize(timeout)
            ),
            Ok(result) => {
                result.with_context(|| format!("watching CRD {name}"))?;
            }
        }
    }
    // Discovery serves a new CRD's kinds shortly after it is established.
    for class in classes {
        let mut every = tokio::time::interval(Duration::from_millis(200));
        loop {
            every.tick().await;
            apis.known.clear();
            if apis.api(class).await?.is_some() {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} is not served after {}",
                    class["apiVersion"].as_str().unwrap_or_default(),
                    humanize(timeout)
                );
            }
        }
    }
    Ok(())
}

/// Whether a Deployment or StatefulSet is ready, by kstatus's rules as the provisioner applies
/// them (its current generation rolled out, every replica updated and available); `Err` says
/// why not.
fn workload_ready(kind: &str, object: &Value) -> Result<String, String> {
    let (word, field) = match kind {
        "StatefulSet" => ("ready", "readyReplicas"),
        _ => ("available", "availableReplicas"),
    };
    let counted = format!(
        "{}/{} replicas {word}",
        object["status"][field].as_i64().unwrap_or(0),
        object["spec"]["replicas"].as_i64().unwrap_or(1)
    );
    // A listed object carries no apiVersion and kind: kstatus chooses its rules by them.
    let mut object = object.clone();
    object["apiVersion"] = "apps/v1".into();
    object["kind"] = kind.into();
    let assessed = kstatus::assess(&object);
    match assessed.state {
        kstatus::State::Current => Ok(counted),
        _ => Err(format!("{counted}, {}", assessed.message)),
    }
}

/// The API of the Deployments or the StatefulSets (`kind`) of `namespace`.
fn workload_api(client: &Client, kind: &str, namespace: &str) -> Api<DynamicObject> {
    let resource = match kind {
        "StatefulSet" => ApiResource::erase::<StatefulSet>(&()),
        _ => ApiResource::erase::<Deployment>(&()),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

async fn read_workload(client: &Client, kind: &str, namespace: &str, name: &str) -> Value {
    let read = workload_api(client, kind, namespace).get_opt(name).await;
    read.ok()
        .flatten()
        .map_or(Value::Null, |o| serde_json::to_value(o).unwrap_or_default())
}

/// Waits for each workload in turn, until `deadline`.
pub(super) async fn wait_workloads(
    client: &Client,
    workloads: &[&Value],
    deadline: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    for (i, workload) in workloads.iter().enumerate() {
        let kind = workload["kind"].as_str().unwrap_or_default();
        let (name, namespace) = name_of(workload);
        let namespace = namespace.unwrap_or("default");
        let ready = |o: Option<&DynamicObject>| {
            o.and_then(|o| serde_json::to_value(o).ok())
                .is_some_and(|o| workload_ready(kind, &o).is_ok())
        };
        let api = workload_api(client, kind, namespace);
        let waited = tokio::time::timeout_at(
            deadline,
            kube::runtime::wait::await_condition(api, name, ready),
        )
        .await;
        let what = format!("{} {namespace}/{name}", kind.to_lowercase());
        match waited {
            Ok(result) => {
                result.with_context(|| format!("watching {what}"))?;
                let now = read_workload(client, kind, namespace, name).await;
                let detail = workload_ready(kind, &now).unwrap_or_default();
                println!("✔ {what} ready: {detail}");
            }
            Err(_) => {
                let mut waiting = Vec::new();
                for other in &workloads[i..] {
                    let kind = other["kind"].as_str().unwrap_or_default();
                    let (name, namespace) = name_of(other);
                    let namespace = namespace.unwrap_or("default");
                    let now = read_workload(client, kind, namespace, name).await;
                    let why = if now.is_null() {
                        Err("not found".to_string())
                    } else {
                        workload_ready(kind, &now)
                    };
                    if let Err(why) = why {
                        waiting.push(format!(
                            "{} {namespace}/{name} ({why}; see `kubectl -n {namespace} describe {} {name}`)",
                            kind.to_lowercase(),
                            kind.to_lowercase()
                        ));
                    }
                }
                bail!(
                    "timed out after {} waiting for {what} to be ready; not ready: {}",
                    humanize(timeout),
                    waiting.join("; ")
                );
            }
        }
    }
    Ok(())
}

pub(super) fn humanize(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if duration.subsec_millis() != 0 || seconds == 0 {
        format!("{duration:?}")
    } else if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}
