//! `rollback`: pinning a bundle to a digest it installed before. The entry is chosen from the
//! bundle alone ([`plan`]: the entry, or why there is none), then pinned ([`pin`]); the review
//! page calls the same parts through [`roll_back`].

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::conditions::{reasons, types};
use gantry_api::{
    Bundle, CRD_UPGRADE_ALLOWED_ANNOTATION, HistoryApproval, HistoryEntry,
    RECONCILE_REQUESTED_ANNOTATION,
};
use gantry_rules::conditions::{self, ConditionStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::cluster::{BundleNotRead, GlobalArgs, read_bundle};
use super::output::age;

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

/// Why a rollback was not made.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    #[error(
        "cannot roll bundle {bundle} back to {to}: {why}. Installed digests, newest first: {known} (see `kubectl bundle history {bundle}`)"
    )]
    NotInHistory {
        bundle: String,
        to: String,
        why: String,
        known: String,
    },
    #[error(
        "cannot roll bundle {bundle} back: its history has no digest but the one installed. Installed digests: {known}"
    )]
    NothingBefore { bundle: String, known: String },
    #[error("bundle {bundle} is already pinned to {image}{}", refused_crds(.refused))]
    AlreadyPinned {
        bundle: String,
        image: String,
        /// Why its CRD changes were refused, when they were.
        refused: Option<String>,
    },
    #[error(transparent)]
    Bundle(#[from] BundleNotRead),
    #[error("pinning bundle {bundle} to {image}")]
    Pin {
        bundle: String,
        image: String,
        #[source]
        source: kube::Error,
    },
}

fn refused_crds(refused: &Option<String>) -> String {
    refused
        .as_ref()
        .map(|message| format!("; its CRD changes were refused: {message}. Accept them for this digest with --allow-unsafe-crd-changes"))
        .unwrap_or_default()
}

/// A rollback decided: the entry gone back to, whether `spec.image` names it already, and the
/// digest whose unsafe CRD changes are accepted.
#[derive(Debug)]
pub struct Rollback {
    pub entry: HistoryEntry,
    pub pinned: bool,
    pub acceptance: Option<String>,
}

/// The rollback of `bundle` to the entry `to` names (by default the newest not installed now),
/// or why there is none.
pub fn plan(
    bundle: &Bundle,
    to: Option<&str>,
    allow_unsafe_crd_changes: bool,
) -> Result<Rollback, RollbackError> {
    let name = bundle.name_any();
    let status = bundle.status.clone().unwrap_or_default();
    let known = || {
        let known: Vec<&str> = status.history.iter().map(|e| e.digest.as_str()).collect();
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    };
    let entry = match to {
        Some(to) => find(&status.history, to).map_err(|why| RollbackError::NotInHistory {
            bundle: name.clone(),
            to: to.into(),
            why,
            known: known(),
        })?,
        None => previous(&status.history, status.installed_image.as_deref()).ok_or_else(|| {
            RollbackError::NothingBefore {
                bundle: name.clone(),
                known: known(),
            }
        })?,
    };
    let pinned = bundle.spec.image == entry.image;
    if pinned && !allow_unsafe_crd_changes {
        return Err(RollbackError::AlreadyPinned {
            bundle: name,
            image: entry.image.clone(),
            refused: refusal(bundle),
        });
    }
    Ok(Rollback {
        // An acceptance is recorded only when asked for.
        acceptance: allow_unsafe_crd_changes.then(|| entry.digest.clone()),
        entry: entry.clone(),
        pinned,
    })
}

/// Pins `bundle` (as it was read) to the rollback's entry.
pub async fn pin(
    client: &Client,
    bundle: &Bundle,
    rollback: &Rollback,
) -> Result<(), RollbackError> {
    let name = bundle.name_any();
    let image = &rollback.entry.image;
    // One acceptance recorded for another digest is removed. A new request to reconcile lets a
    // refused bundle try again at once. The resourceVersion makes the write fail if the bundle
    // changed since it was read.
    let patch = json!({
        "metadata": {
            "resourceVersion": bundle.metadata.resource_version,
            "annotations": {
                CRD_UPGRADE_ALLOWED_ANNOTATION: rollback.acceptance,
                RECONCILE_REQUESTED_ANNOTATION: Timestamp::now().to_string(),
            },
        },
        "spec": { "image": image },
    });
    Api::<Bundle>::all(client.clone())
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| RollbackError::Pin {
            bundle: name.clone(),
            image: image.clone(),
            source,
        })?;
    Ok(())
}

/// Rolls bundle `name` back (see [`plan`]): the bundle as it was read, and the rollback made.
pub async fn roll_back(
    client: &Client,
    name: &str,
    to: Option<&str>,
    allow_unsafe_crd_changes: bool,
) -> Result<(Bundle, Rollback), RollbackError> {
    let bundle = read_bundle(&Api::all(client.clone()), name).await?;
    let rollback = plan(&bundle, to, allow_unsafe_crd_changes)?;
    pin(client, &bundle, &rollback).await?;
    Ok((bundle, rollback))
}

/// What a rollback of `bundle` did, and what it needs next.
fn rolled_back(bundle: &Bundle, rollback: &Rollback) -> String {
    let name = bundle.name_any();
    let entry = &rollback.entry;
    let mut out = if rollback.pinned {
        format!("bundle {name}: pinned to {} already\n", entry.image)
    } else {
        format!(
            "bundle {name}: spec.image {} -> {} (installed {} ago); it stays pinned until spec.image changes again\n",
            bundle.spec.image,
            entry.image,
            age(entry.installed_at.0)
        )
    };
    if let Some(digest) = &rollback.acceptance {
        out.push_str(&format!(
            "unsafe CRD changes accepted for {digest} only (annotation {CRD_UPGRADE_ALLOWED_ANNOTATION})\n"
        ));
    }
    if entry.approval == HistoryApproval::Manual {
        out.push_str(&format!(
            "its class asks for approval: approve {} again if the bundle waits (`kubectl bundle approve {name}`)\n",
            entry.digest
        ));
    }
    out
}

pub async fn rollback(global: &GlobalArgs, args: RollbackArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let (to, unsafe_crds) = (args.to.as_deref(), args.allow_unsafe_crd_changes);
    let (bundle, rollback) = roll_back(&client, &args.name, to, unsafe_crds).await?;
    print!("{}", rolled_back(&bundle, &rollback));
    if args.wait {
        let bundles = Api::all(client);
        wait_rolled_back(&bundles, &args.name, &rollback.entry.image, args.timeout).await?;
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
    let ready = status
        .and_then(|s| conditions::find(&s.conditions, types::READY))
        .is_some_and(|c| {
            c.observed_generation == bundle.metadata.generation && c.status == ConditionStatus::True
        });
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
    use crate::commands::history::tests::entry;
    use crate::commands::testing;

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
        let condition = |type_: &str, status: &str, reason: &str, generation: i64| {
            let message = "prometheuses.monitoring.coreos.com v1 ...: property removed";
            testing::condition(type_, status, reason, message, Some(generation))
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

    #[test]
    fn a_rollback_names_what_it_cannot_go_back_to() {
        let mut bundle = Bundle::new("app", Default::default());
        bundle.spec.image = "r.test/app@sha256:bb".into();
        bundle.status = Some(gantry_api::BundleStatus {
            history: vec![entry("bb"), entry("aa")],
            installed_image: Some("r.test/app@sha256:bb".into()),
            ..Default::default()
        });
        let back = plan(&bundle, None, false).unwrap();
        assert_eq!(
            (back.entry.digest.as_str(), back.pinned, back.acceptance),
            ("sha256:aa", false, None)
        );
        assert_eq!(
            plan(&bundle, Some("cc"), false).unwrap_err().to_string(),
            "cannot roll bundle app back to cc: it is not in the bundle's history. Installed digests, newest first: sha256:bb, sha256:aa (see `kubectl bundle history app`)"
        );
        // Pinned to bb already: refused, unless its CRD changes are to be accepted.
        assert!(matches!(
            plan(&bundle, Some("bb"), false),
            Err(RollbackError::AlreadyPinned { refused: None, .. })
        ));
        let accepted = plan(&bundle, Some("bb"), true).unwrap();
        assert_eq!(
            (accepted.pinned, accepted.acceptance.as_deref()),
            (true, Some("sha256:bb"))
        );
    }
}
