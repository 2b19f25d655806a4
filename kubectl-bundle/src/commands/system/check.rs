//! `check`: whether Gantry can serve bundles, one preflight check after the other.

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::conditions::types;
use gantry_api::{Bundle, PLAIN_PROVISIONER, ProvisionerClass, STORAGE_URL_ANNOTATION};
use gantry_rules::conditions::{ConditionStatus, find};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};

use super::{PROVISIONER, STORAGE, SystemArgs};
use crate::commands::cluster::GlobalArgs;
use crate::commands::output::{causes, print_table};

#[derive(Args, Debug)]
#[command(after_help = "Example:\n  kubectl bundle check")]
pub struct CheckArgs {
    #[command(flatten)]
    system: SystemArgs,
}

/// One preflight check: what, whether it passed, and why.
struct Outcome {
    what: String,
    ok: bool,
    detail: String,
}

fn outcome(what: impl Into<String>, result: anyhow::Result<String>) -> Outcome {
    let (ok, detail) = match result {
        Ok(detail) => (true, detail),
        Err(e) => (false, causes(&e)),
    };
    Outcome {
        what: what.into(),
        ok,
        detail,
    }
}

async fn crd_served(client: &Client, name: &str) -> anyhow::Result<String> {
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(name)
        .await
        .with_context(|| format!("reading CRD {name}"))?
        .with_context(|| format!("CRD {name} is not installed: apply manifests/01-crds.yaml"))?;
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == ConditionStatus::True)
        });
    let version = gantry_api::VERSION;
    let served = crd
        .spec
        .versions
        .iter()
        .any(|v| v.name == version && v.served);
    match (established, served) {
        (true, true) => Ok(format!("established, {version} served")),
        (false, _) => bail!("CRD {name} is not established yet"),
        (true, false) => bail!("CRD {name} does not serve {version}"),
    }
}

async fn deployment(
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<Deployment>> {
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("reading Deployment {namespace}/{name}"))
}

fn deployment_available(
    deployment: Deployment,
    namespace: &str,
    name: &str,
) -> anyhow::Result<String> {
    let status = deployment.status.unwrap_or_default();
    let wanted = deployment.spec.and_then(|s| s.replicas).unwrap_or(1);
    let available = status.available_replicas.unwrap_or(0);
    if available < 1 {
        bail!(
            "Deployment {namespace}/{name} has no available replica (0/{wanted}): see `kubectl -n {namespace} describe deployment {name}`"
        );
    }
    Ok(format!("{available}/{wanted} replicas available"))
}

/// The provisioner: its Deployment's replicas when the Deployment exists; else a provisioner
/// running outside it (as processes, as `scripts/demo` runs it), seen by the Lease it holds and
/// renews (`leading`).
async fn provisioner_running(
    client: &Client,
    namespace: &str,
    leading: &Outcome,
) -> anyhow::Result<String> {
    if let Some(deployment) = deployment(client, namespace, PROVISIONER).await? {
        return deployment_available(deployment, namespace, PROVISIONER);
    }
    let Outcome { ok, detail, .. } = leading;
    if !ok {
        bail!(
            "Deployment {namespace}/{PROVISIONER} not found, nor a provisioner outside it ({detail}): is Gantry installed (manifests/)?"
        );
    }
    Ok(format!(
        "no Deployment {namespace}/{PROVISIONER}: a provisioner outside it leads, Lease {PROVISIONER} {detail}"
    ))
}

/// The storage server: its Deployment's replicas when the Deployment exists; else the one the
/// leading provisioner uses (the `--storage-url` it publishes on its Lease), asked for its
/// `/readyz`.
async fn storage_ready(
    client: &Client,
    namespace: &str,
    lease: Option<&Lease>,
) -> anyhow::Result<String> {
    if let Some(deployment) = deployment(client, namespace, STORAGE).await? {
        return deployment_available(deployment, namespace, STORAGE);
    }
    let url = lease
        .and_then(|l| l.annotations().get(STORAGE_URL_ANNOTATION))
        .with_context(|| {
            format!(
                "Deployment {namespace}/{STORAGE} not found, and no provisioner names the storage server it uses (annotation {STORAGE_URL_ANNOTATION} of Lease {namespace}/{PROVISIONER}): is Gantry installed (manifests/)?"
            )
        })?;
    let readyz = format!("{}/readyz", url.trim_end_matches('/'));
    let mut http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(5));
    if !readyz.starts_with("https://") {
        http = http.tls_certs_only([]);
    }
    let response = http
        .build()
        .context("building the HTTP client")?
        .get(&readyz)
        .send()
        .await
        .with_context(|| {
            format!("no Deployment {namespace}/{STORAGE}, and the provisioner's storage server does not answer {readyz}")
        })?;
    let status = response.status();
    if !status.is_success() {
        bail!(
            "no Deployment {namespace}/{STORAGE}, and the provisioner's storage server answers {readyz} with {status}"
        );
    }
    Ok(format!(
        "no Deployment {namespace}/{STORAGE}: the provisioner's storage server answers {readyz}"
    ))
}

/// Whether the leader Lease (`lease`, read once for every check) has a holder that renews it.
fn lease_held(
    namespace: &str,
    lease: &Result<Option<Lease>, kube::Error>,
) -> anyhow::Result<String> {
    let lease = match lease {
        Ok(lease) => lease.as_ref(),
        Err(e) => bail!("reading Lease {namespace}/{PROVISIONER}: {e}"),
    }
    .with_context(|| {
        format!("Lease {namespace}/{PROVISIONER} not found: no provisioner has led yet")
    })?;
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec
        .holder_identity
        .filter(|h| !h.is_empty())
        .with_context(|| {
            format!("Lease {namespace}/{PROVISIONER} has no holder: no provisioner leads")
        })?;
    let renewed = spec.renew_time.map(|t| t.0);
    let duration = SignedDuration::from_secs(spec.lease_duration_seconds.unwrap_or(15).into());
    let now = Timestamp::now();
    match renewed {
        Some(renewed) if renewed + duration >= now => {
            let ago = now.duration_since(renewed).as_secs().max(0);
            Ok(format!("held by {holder}, renewed {ago}s ago"))
        }
        _ => bail!(
            "Lease {namespace}/{PROVISIONER} held by {holder} has expired: the leader stopped renewing it"
        ),
    }
}

async fn classes_accepted(client: &Client) -> anyhow::Result<String> {
    let classes = Api::<ProvisionerClass>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing ProvisionerClasses")?
        .items;
    let ours: Vec<&ProvisionerClass> = classes
        .iter()
        .filter(|c| c.spec.provisioner == PLAIN_PROVISIONER)
        .collect();
    if ours.is_empty() {
        bail!("no ProvisionerClass names {PLAIN_PROVISIONER}: apply manifests/20-classes.yaml");
    }
    let refused: Vec<String> = ours
        .iter()
        .filter_map(|c| {
            let accepted = c
                .status
                .as_ref()
                .and_then(|s| find(&s.conditions, types::ACCEPTED));
            match accepted {
                Some(a) if a.status == ConditionStatus::True => None,
                Some(a) => Some(format!("{} ({}: {})", c.name_any(), a.reason, a.message)),
                None => Some(format!(
                    "{} (not reviewed by a provisioner yet)",
                    c.name_any()
                )),
            }
        })
        .collect();
    if !refused.is_empty() {
        bail!("not Accepted: {}", refused.join("; "));
    }
    Ok(format!(
        "{} accepted: {}",
        ours.len(),
        ours.iter()
            .map(|c| c.name_any())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

pub async fn check(global: &GlobalArgs, args: CheckArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let namespace = &args.system.system_namespace;
    let bundles = format!("{}.{}", Bundle::plural(&()), gantry_api::GROUP);
    let classes = format!("{}.{}", ProvisionerClass::plural(&()), gantry_api::GROUP);
    let lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(PROVISIONER)
        .await;
    let leading = outcome("provisioner leading", lease_held(namespace, &lease));
    let outcomes = vec![
        outcome(
            format!("CRD {bundles}"),
            crd_served(&client, &bundles).await,
        ),
        outcome(
            format!("CRD {classes}"),
            crd_served(&client, &classes).await,
        ),
        outcome(
            "provisioner running",
            provisioner_running(&client, namespace, &leading).await,
        ),
        leading,
        outcome(
            "storage server ready",
            storage_ready(
                &client,
                namespace,
                lease.as_ref().ok().and_then(Option::as_ref),
            )
            .await,
        ),
        outcome("classes accepted", classes_accepted(&client).await),
    ];
    let mut rows = vec![vec!["CHECK".to_string(), "RESULT".into(), "DETAIL".into()]];
    for o in &outcomes {
        rows.push(vec![
            o.what.clone(),
            if o.ok { "OK" } else { "FAIL" }.into(),
            o.detail.clone(),
        ]);
    }
    print_table(&rows);
    let failed = outcomes.iter().filter(|o| !o.ok).count();
    if failed > 0 {
        bail!("{failed} of {} checks failed", outcomes.len());
    }
    Ok(())
}
