//! `history` and `rollback`: the digests a bundle installed, and going back to one of them.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::conditions::{reasons, types};
use gantry_api::{
    Bundle, CRD_UPGRADE_ALLOWED_ANNOTATION, Condition, HistoryApproval, HistoryEntry,
    RECONCILE_REQUESTED_ANNOTATION,
};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::cluster::GlobalArgs;
use super::cluster::get_bundle;
use super::output::{OutputFormat, age, parse_output, print_structured, print_table};

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle history my-app\n  kubectl bundle history my-app -o yaml"
)]
pub struct HistoryArgs {
    /// The bundle.
    name: String,
    /// Output format: json, yaml, jsonpath=TEMPLATE or custom-columns=SPEC (applied to the list
    /// of entries).
    #[arg(short = 'o', long = "output", value_parser = parse_output)]
    output: Option<OutputFormat>,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle history my-app\n  kubectl bundle rollback my-app --wait\n  kubectl bundle rollback my-app --to sha256:4f1c...\n  kubectl bundle rollback my-app --to sha256:4f1c... --allow-unsafe-crd-changes --wait"
)]
pub struct RollbackArgs {
    /// The bundle.
    name: String,
    /// A digest from `kubectl bundle history NAME` (`sha256:...`, or a unique prefix of its hex);
    /// by default the newest one that is not installed now.
    #[arg(long, value_name = "DIGEST")]
    to: Option<String>,
    /// Accept the CRD changes the provisioner refuses as unsafe (UnsafeCRDUpgrade) for this one
    /// digest: recorded on the bundle as the annotation gantry.dev/crd-upgrade-allowed.
    #[arg(long)]
    allow_unsafe_crd_changes: bool,
    /// Wait for the outcome: the bundle Ready with the digest (exit 0), or its CRD changes
    /// refused (the findings are printed, exit 1).
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (e.g. 90s, 5m).
    #[arg(long, default_value = "5m", value_parser = super::cluster::parse_timeout, requires = "wait")]
    timeout: Duration,
}

pub async fn history(global: &GlobalArgs, args: HistoryArgs) -> anyhow::Result<()> {
    let bundles: Api<Bundle> = Api::all(global.client().await?);
    let bundle = get_bundle(&bundles, &args.name).await?;
    let status = bundle.status.unwrap_or_default();
    if print_structured(
        &serde_json::to_value(&status.history)?,
        args.output.as_ref(),
    )? {
        return Ok(());
    }
    if status.history.is_empty() {
        println!("bundle {} has installed nothing yet", args.name);
        return Ok(());
    }
    let mut rows = vec![
        ["DIGEST", "INSTALLED", "APPROVAL", "IMAGE"]
            .map(String::from)
            .to_vec(),
    ];
    for entry in &status.history {
        let current = status.installed_image.as_deref() == Some(entry.image.as_str());
        rows.push(vec![
            format!(
                "{}{}",
                entry.digest,
                if current { " (installed)" } else { "" }
            ),
            format!(
                "{} ago ({})",
                age(entry.installed_at.0),
                entry.installed_at.0
            ),
            approval(entry),
            entry.image.clone(),
        ]);
    }
    print_table(&rows);
    Ok(())
}

/// `Automatic`, or `Manual` with the approver, the time and the reason.
pub(crate) fn approval(entry: &HistoryEntry) -> String {
    match entry.approval {
        HistoryApproval::Automatic => "Automatic".to_string(),
        HistoryApproval::Manual => {
            let mut text = "Manual".to_string();
            if let Some(who) = &entry.approved_by {
                text.push_str(&format!(" by {who}"));
            }
            if let Some(at) = &entry.approved_at {
                text.push_str(&format!(" at {}", at.0));
            }
            if let Some(reason) = &entry.approval_reason {
                text.push_str(&format!(": {reason}"));
            }
            text
        }
    }
}

/// The entry `wanted` names: a full digest, or a prefix of its hex that only one entry has.
fn find<'a>(history: &'a [HistoryEntry], wanted: &str) -> Result<&'a HistoryEntry, String> {
    let hex = wanted.trim_start_matches("sha256:");
    let matching: Vec<&HistoryEntry> = history
        .iter()
        .filter(|e| !hex.is_empty() && e.digest.trim_start_matches("sha256:").starts_with(hex))
        .collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err("it is not in the bundle's history".to_string()),
        _ => Err(format!(
            "{} digests of the history start with it: give more of it",
            matching.len()
        )),
    }
}

/// The entry a rollback without `--to` goes back to: the newest that is not installed now.
fn previous<'a>(history: &'a [HistoryEntry], installed: Option<&str>) -> Option<&'a HistoryEntry> {
    history.iter().find(|e| Some(e.image.as_str()) != installed)
}

pub async fn rollback(global: &GlobalArgs, args: RollbackArgs) -> anyhow::Result<()> {
    let name = &args.name;
    let bundles: Api<Bundle> = Api::all(global.client().await?);
    let bundle = get_bundle(&bundles, name).await?;
    let status = bundle.status.clone().unwrap_or_default();
    let known = || {
        let known: Vec<&str> = status.history.iter().map(|e| e.digest.as_str()).collect();
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    };
    let entry = match &args.to {
        Some(to) => match find(&status.history, to) {
            Ok(entry) => entry,
            Err(why) => bail!(
                "cannot roll bundle {name} back to {to}: {why}. Installed digests, newest first: {} (see `kubectl bundle history {name}`)",
                known()
            ),
        },
        None => match previous(&status.history, status.installed_image.as_deref()) {
            Some(entry) => entry,
            None => bail!(
                "cannot roll bundle {name} back: its history has no digest but the one installed. Installed digests: {}",
                known()
            ),
        },
    };
    let pinned = bundle.spec.image == entry.image;
    if pinned && !args.allow_unsafe_crd_changes {
        bail!(
            "bundle {name} is already pinned to {}{}",
            entry.image,
            refusal(&bundle)
                .map(|message| format!(
                    "; its CRD changes were refused: {message}. Accept them for this digest with --allow-unsafe-crd-changes"
                ))
                .unwrap_or_default()
        );
    }
    // An acceptance is recorded only when asked for, and one recorded for another digest is
    // removed. A new request to reconcile lets a refused bundle try again at once.
    let acceptance = args
        .allow_unsafe_crd_changes
        .then_some(entry.digest.as_str());
    // The resourceVersion makes the write fail if the bundle changed since it was read.
    let patch = json!({
        "metadata": {
            "resourceVersion": bundle.metadata.resource_version,
            "annotations": {
                CRD_UPGRADE_ALLOWED_ANNOTATION: acceptance,
                RECONCILE_REQUESTED_ANNOTATION: Timestamp::now().to_string(),
            },
        },
        "spec": { "image": entry.image },
    });
    bundles
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("pinning bundle {name} to {}", entry.image))?;
    if pinned {
        println!("bundle {name}: pinned to {} already", entry.image);
    } else {
        println!(
            "bundle {name}: spec.image {} -> {} (installed {} ago); it stays pinned until spec.image changes again",
            bundle.spec.image,
            entry.image,
            age(entry.installed_at.0)
        );
    }
    if let Some(digest) = acceptance {
        println!(
            "unsafe CRD changes accepted for {digest} only (annotation {CRD_UPGRADE_ALLOWED_ANNOTATION})"
        );
    }
    if entry.approval == HistoryApproval::Manual {
        println!(
            "its class asks for approval: approve {} again if the bundle waits (`kubectl bundle approve {name}`)",
            entry.digest
        );
    }
    if args.wait {
        wait_rolled_back(&bundles, name, &entry.image, args.timeout).await?;
    }
    Ok(())
}

/// Where a rolled-back bundle stands.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Waiting,
    /// Ready with the digest.
    Ready,
    /// Its CRD changes refused; the message of `Installed`.
    Refused(String),
}

fn outcome(bundle: Option<&Bundle>, image: &str) -> Outcome {
    let Some(bundle) = bundle else {
        return Outcome::Waiting;
    };
    if let Some(message) = refusal(bundle) {
        return Outcome::Refused(message);
    }
    let status = bundle.status.as_ref();
    let current = |c: &&Condition| c.observed_generation == bundle.metadata.generation;
    let ready = status
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == types::READY))
        .filter(current)
        .is_some_and(|c| c.status == "True");
    if ready && status.and_then(|s| s.installed_image.as_deref()) == Some(image) {
        Outcome::Ready
    } else {
        Outcome::Waiting
    }
}

/// The message of `Installed` when the bundle's current generation was refused with
/// `UnsafeCRDUpgrade`.
fn refusal(bundle: &Bundle) -> Option<String> {
    bundle
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| {
            c.type_ == types::INSTALLED
                && c.reason == reasons::UNSAFE_CRD_UPGRADE
                && c.observed_generation == bundle.metadata.generation
        })
        .map(|c| c.message.clone())
}

async fn wait_rolled_back(
    bundles: &Api<Bundle>,
    name: &str,
    image: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    eprintln!("waiting up to {timeout:?} for bundle {name} to be Ready with {image}");
    // A refusal shown before this request was handled would end the wait at once: the wait
    // starts from the bundle as the provisioner next writes it.
    let image_owned = image.to_string();
    let settled = move |bundle: Option<&Bundle>| {
        let handled = bundle
            .and_then(|b| b.status.as_ref())
            .and_then(|s| s.last_handled_reconcile_at.as_deref())
            == bundle.and_then(|b| {
                b.metadata
                    .annotations
                    .as_ref()?
                    .get(RECONCILE_REQUESTED_ANNOTATION)
                    .map(String::as_str)
            });
        match outcome(bundle, &image_owned) {
            Outcome::Waiting => false,
            Outcome::Ready => true,
            Outcome::Refused(_) => handled,
        }
    };
    let waited = tokio::time::timeout(
        timeout,
        kube::runtime::wait::await_condition(bundles.clone(), name, settled),
    )
    .await;
    let bundle = match waited {
        Err(_) => bail!(
            "bundle {name} is not Ready with {image} after {timeout:?}: see `kubectl bundle status {name}` and `kubectl bundle events {name}`"
        ),
        Ok(result) => result.with_context(|| format!("watching bundle {name}"))?,
    };
    match outcome(bundle.as_ref(), image) {
        Outcome::Ready => {
            println!("bundle {name} is Ready with {image}");
            Ok(())
        }
        Outcome::Refused(message) => bail!(
            "bundle {name}: the provisioner refuses the CRD changes of {image}: {message}. Nothing of it was applied; to accept these changes for this digest only, run `kubectl bundle rollback {name} --to {} --allow-unsafe-crd-changes`",
            image.rsplit_once('@').map_or(image, |(_, d)| d)
        ),
        Outcome::Waiting => bail!("bundle {name} is gone"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn entry(hex: &str) -> HistoryEntry {
        HistoryEntry {
            image: format!("r.test/app@sha256:{hex}"),
            digest: format!("sha256:{hex}"),
            installed_at: Time(Timestamp::UNIX_EPOCH),
            approval: HistoryApproval::Automatic,
            approved_at: None,
            approval_reason: None,
            approved_by: None,
        }
    }

    #[test]
    fn a_manual_approval_names_the_approver_the_time_and_the_reason() {
        assert_eq!(approval(&entry("aa")), "Automatic");
        let manual = HistoryEntry {
            approval: HistoryApproval::Manual,
            approved_at: Some(Time(Timestamp::UNIX_EPOCH)),
            approval_reason: Some("reviewed".into()),
            approved_by: Some("alice".into()),
            ..entry("aa")
        };
        assert_eq!(
            approval(&manual),
            "Manual by alice at 1970-01-01T00:00:00Z: reviewed"
        );
        let anonymous = HistoryEntry {
            approved_by: None,
            ..manual
        };
        assert_eq!(
            approval(&anonymous),
            "Manual at 1970-01-01T00:00:00Z: reviewed"
        );
    }

    #[test]
    fn without_to_the_newest_entry_not_installed_is_chosen() {
        let history = [entry("cc"), entry("bb"), entry("aa")];
        let installed = Some("r.test/app@sha256:cc");
        assert_eq!(previous(&history, installed).unwrap().digest, "sha256:bb");
        // Rolled back to bb already: the newest other one is cc again.
        assert_eq!(
            previous(&history, Some("r.test/app@sha256:bb"))
                .unwrap()
                .digest,
            "sha256:cc"
        );
        assert!(previous(&history[..1], installed).is_none());
    }

    #[test]
    fn a_refusal_of_the_current_generation_ends_the_wait() {
        let condition = |type_: &str, status: &str, reason: &str, generation: i64| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: "prometheuses.monitoring.coreos.com v1 ...: property removed".into(),
            observed_generation: Some(generation),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        };
        let image = "r.test/app@sha256:aa";
        let mut bundle = Bundle::new("app", Default::default());
        bundle.metadata.generation = Some(3);
        assert_eq!(outcome(Some(&bundle), image), Outcome::Waiting);
        let mut status = gantry_api::BundleStatus {
            conditions: vec![condition(
                types::INSTALLED,
                "False",
                reasons::UNSAFE_CRD_UPGRADE,
                2,
            )],
            ..Default::default()
        };
        bundle.status = Some(status.clone());
        // Refused at an older generation: not this rollback's outcome.
        assert_eq!(outcome(Some(&bundle), image), Outcome::Waiting);
        status.conditions[0].observed_generation = Some(3);
        bundle.status = Some(status.clone());
        assert!(matches!(
            outcome(Some(&bundle), image),
            Outcome::Refused(m) if m.contains("property removed")
        ));
        status.conditions = vec![condition(
            types::READY,
            "True",
            reasons::INSTALL_SUCCEEDED,
            3,
        )];
        status.installed_image = Some(image.into());
        bundle.status = Some(status);
        assert_eq!(outcome(Some(&bundle), image), Outcome::Ready);
        assert_eq!(
            outcome(Some(&bundle), "r.test/app@sha256:bb"),
            Outcome::Waiting
        );
    }

    #[test]
    fn a_digest_or_a_unique_prefix_finds_its_entry() {
        let history = [entry("aa11"), entry("aa22"), entry("bb33")];
        assert_eq!(find(&history, "sha256:bb33").unwrap().digest, "sha256:bb33");
        assert_eq!(find(&history, "aa2").unwrap().digest, "sha256:aa22");
        assert!(find(&history, "aa").unwrap_err().contains("2 digests"));
        assert!(find(&history, "cc").unwrap_err().contains("not in"));
        assert!(find(&history, "sha256:").is_err());
    }
}
