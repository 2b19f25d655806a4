//! `suspend`, `resume` and `reconcile`: steering the controller's work on a bundle.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::conditions::{ReasonKind, types};
use gantry_api::{Bundle, RECONCILE_REQUESTED_ANNOTATION};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::cluster::GlobalArgs;
use super::review::get_bundle;

#[derive(Args, Debug)]
#[command(after_help = "Example:\n  kubectl bundle suspend my-app")]
pub struct SuspendArgs {
    /// The bundle.
    name: String,
}

#[derive(Args, Debug)]
#[command(after_help = "Example:\n  kubectl bundle resume my-app")]
pub struct ResumeArgs {
    /// The bundle.
    name: String,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle reconcile my-app\n  kubectl bundle reconcile my-app --timeout 30s"
)]
pub struct ReconcileArgs {
    /// The bundle.
    name: String,
    /// How long to wait for the outcome (e.g. 30s, 5m).
    #[arg(long, default_value = "5m", value_parser = super::cluster::parse_timeout)]
    timeout: Duration,
}

/// Merge-patches bundle `name` with `patch`, after checking that it exists.
async fn patch_bundle(global: &GlobalArgs, name: &str, patch: Value) -> anyhow::Result<Bundle> {
    let bundles: Api<Bundle> = Api::all(global.client().await?);
    get_bundle(&bundles, name).await?;
    bundles
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("updating bundle {name}"))
}

pub async fn suspend(global: &GlobalArgs, args: SuspendArgs) -> anyhow::Result<()> {
    patch_bundle(global, &args.name, json!({ "spec": { "suspend": true } })).await?;
    println!(
        "bundle {} suspended: nothing is applied, pruned or repaired until `kubectl bundle resume {}`",
        args.name, args.name
    );
    Ok(())
}

pub async fn resume(global: &GlobalArgs, args: ResumeArgs) -> anyhow::Result<()> {
    patch_bundle(global, &args.name, json!({ "spec": { "suspend": null } })).await?;
    println!("bundle {} resumed", args.name);
    Ok(())
}

/// What a handled request to reconcile ended in: `Some(Ok)` Ready, `Some(Err)` a failure, `None`
/// not known yet (not handled, or still under way).
fn outcome(bundle: &Bundle, requested: &str) -> Option<Result<(), String>> {
    let status = bundle.status.as_ref()?;
    if status.last_handled_reconcile_at.as_deref() != Some(requested) {
        return None;
    }
    let ready = status.conditions.iter().find(|c| c.type_ == types::READY)?;
    if ready.status == "True" && ready.observed_generation == bundle.metadata.generation {
        return Some(Ok(()));
    }
    (ready.status != "True" && ReasonKind::of(&ready.reason) == ReasonKind::Failure)
        .then(|| Err(format!("{}: {}", ready.reason, ready.message)))
}

pub async fn reconcile(global: &GlobalArgs, args: ReconcileArgs) -> anyhow::Result<()> {
    let name = &args.name;
    let bundles: Api<Bundle> = Api::all(global.client().await?);
    if get_bundle(&bundles, name).await?.spec.suspend {
        bail!("bundle {name} is suspended: resume it first (`kubectl bundle resume {name}`)");
    }
    let requested = Timestamp::now().to_string();
    patch_bundle(
        global,
        name,
        json!({ "metadata": { "annotations": { RECONCILE_REQUESTED_ANNOTATION: requested } } }),
    )
    .await?;
    eprintln!(
        "reconcile of bundle {name} requested; waiting up to {:?}",
        args.timeout
    );
    let settled = |bundle: Option<&Bundle>| bundle.is_none_or(|b| outcome(b, &requested).is_some());
    let waited = tokio::time::timeout(
        args.timeout,
        kube::runtime::wait::await_condition(bundles.clone(), name, settled),
    )
    .await;
    let bundle = match waited {
        Ok(result) => result.with_context(|| format!("watching bundle {name}"))?,
        Err(_) => {
            let now = bundles.get_opt(name).await.ok().flatten();
            let ready = now
                .as_ref()
                .and_then(|b| b.status.as_ref())
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == types::READY))
                .map(|c| format!(" (Ready {}: {}: {})", c.status, c.reason, c.message))
                .unwrap_or_default();
            bail!("bundle {name} is not Ready after {:?}{ready}", args.timeout)
        }
    };
    let Some(bundle) = bundle else {
        bail!("bundle {name} was deleted while waiting");
    };
    match outcome(&bundle, &requested) {
        Some(Ok(())) => {
            println!("bundle {name} reconciled: Ready");
            Ok(())
        }
        Some(Err(why)) => bail!("bundle {name} reconciled and failed: {why}"),
        None => bail!("bundle {name}: no outcome"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::conditions::reasons;
    use gantry_api::{BundleSpec, BundleStatus, Condition};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn bundle(handled: Option<&str>, ready: bool, reason: &str) -> Bundle {
        let mut bundle = Bundle::new("b", BundleSpec::default());
        bundle.metadata.generation = Some(2);
        bundle.status = Some(BundleStatus {
            last_handled_reconcile_at: handled.map(str::to_string),
            conditions: vec![Condition {
                type_: types::READY.into(),
                status: if ready { "True" } else { "False" }.into(),
                reason: reason.into(),
                message: "m".into(),
                observed_generation: Some(2),
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
            }],
            ..Default::default()
        });
        bundle
    }

    #[test]
    fn only_a_handled_request_has_an_outcome() {
        let ready = bundle(Some("t1"), true, reasons::INSTALL_SUCCEEDED);
        assert_eq!(outcome(&ready, "t1"), Some(Ok(())));
        assert_eq!(outcome(&ready, "t2"), None, "an older request");
        let failing = bundle(Some("t1"), false, reasons::PULL_FAILED);
        assert!(matches!(outcome(&failing, "t1"), Some(Err(_))));
        let installing = bundle(Some("t1"), false, reasons::INSTALLING);
        assert_eq!(outcome(&installing, "t1"), None, "still under way");
    }
}
