//! `approve` and `deny`: a decision on the digest a bundle resolves to. Each is fetched (the
//! bundle and the class serving it), decided from that alone ([`decide`]: the digest, or why
//! no decision can be made), written ([`write`]) and printed; the review page calls the same
//! parts through [`record`].

mod wait;

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use gantry_api::conditions::types;
use gantry_api::{Approval, ApprovalDecision, ApprovalPolicy, Bundle, ProvisionerClass};
use gantry_rules::class_selection::default_class;
use gantry_rules::conditions::is_true;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::cluster::{BundleNotRead, GlobalArgs, read_bundle};
use super::review::{
    ignore_lines, images_lines, patches_lines, permissions_table, resolved_digest,
};
use wait::wait_decided;

/// The field manager of approvals: the approval's owner in `managedFields`.
const FIELD_MANAGER: &str = "kubectl-bundle";

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle approve my-app\n  kubectl bundle approve my-app --yes --digest sha256:... --wait --timeout 5m"
)]
pub struct ApproveArgs {
    /// The bundle.
    name: String,
    /// Approve without asking.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Approve only if the bundle resolves to this digest.
    #[arg(long)]
    digest: Option<String>,
    /// Why (recorded in the approval).
    #[arg(long)]
    reason: Option<String>,
    /// After approving, wait for the outcome of this approval: the bundle Ready (exit 0) or
    /// failing (exit 1), once the provisioner has read the approval.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (e.g. 90s, 5m).
    #[arg(long, default_value = "5m", value_parser = super::cluster::parse_timeout, requires = "wait")]
    timeout: Duration,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle deny my-app --reason \"grants cluster-admin\"\n  kubectl bundle deny my-app --reason \"grants cluster-admin\" --digest sha256:... --wait --timeout 1m"
)]
pub struct DenyArgs {
    /// The bundle.
    name: String,
    /// Why (shown in the bundle's conditions and Events).
    #[arg(long)]
    reason: String,
    /// Deny only if the bundle resolves to this digest.
    #[arg(long)]
    digest: Option<String>,
    /// After denying, wait until the provisioner has handled the denial: the bundle's phase
    /// `Denied` and its `Approved` condition False (reason `Denied`) for this digest.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (e.g. 90s, 5m).
    #[arg(long, default_value = "5m", value_parser = super::cluster::parse_timeout, requires = "wait")]
    timeout: Duration,
}

/// Why a decision was not made.
#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error(
        "bundle {bundle} is served by {class}, whose approval is Automatic: every digest is installed without a decision, so there is nothing to {verb}. Decisions apply to classes with `approval: Manual`"
    )]
    AutomaticClass {
        bundle: String,
        /// `class NAME`, or `the default class NAME`.
        class: String,
        verb: &'static str,
    },
    #[error(
        "bundle {0} is not unpacked yet: there is nothing to review (see `kubectl bundle status {0}`)"
    )]
    NotUnpacked(String),
    #[error(
        "bundle {bundle} resolves to {digest}, not {reviewed}: review the new content before deciding"
    )]
    DigestMoved {
        bundle: String,
        digest: String,
        reviewed: String,
    },
    #[error("bundle {bundle} is already approved for {digest}")]
    AlreadyApproved { bundle: String, digest: String },
    #[error("a denial needs a reason: it is shown on the bundle and in its Events")]
    NoReason,
    #[error(
        "bundle {0} changed while it was shown; run the command again to review what it is now"
    )]
    Changed(String),
    #[error(
        "not allowed to decide on bundle {bundle}: approving needs `patch` on bundles/status (ClusterRole gantry-bundle-approver): {message}"
    )]
    Forbidden { bundle: String, message: String },
    #[error("bundle {0}: the decision written is not in its status")]
    NotRecorded(String),
    #[error(transparent)]
    Bundle(#[from] BundleNotRead),
    /// A request failed: `doing` says which.
    #[error("{doing}")]
    Cluster {
        doing: String,
        #[source]
        source: kube::Error,
    },
}

/// What a decision is made on: the bundle as it is now, and the class serving it (none when the
/// class it names does not exist, or no class is the default).
pub struct Shown {
    pub bundle: Bundle,
    pub class: Option<ProvisionerClass>,
}

/// Reads bundle `name` and the class serving it: the one it names, else the default class, as
/// the provisioner chooses it.
pub async fn fetch(client: &Client, name: &str) -> Result<Shown, DecisionError> {
    let bundle = read_bundle(&Api::all(client.clone()), name).await?;
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    let class = if let Some(class) = &bundle.spec.provisioner_class_name {
        classes
            .get_opt(class)
            .await
            .map_err(|source| DecisionError::Cluster {
                doing: format!("reading ProvisionerClass {class}"),
                source,
            })?
    } else {
        let listed = classes.list(&ListParams::default()).await;
        let listed = listed.map_err(|source| DecisionError::Cluster {
            doing: "listing ProvisionerClasses".into(),
            source,
        })?;
        let classes: Vec<Arc<ProvisionerClass>> = listed.items.into_iter().map(Arc::new).collect();
        default_class(&classes).map(Arc::unwrap_or_clone)
    };
    Ok(Shown { bundle, class })
}

/// The digest a decision on `shown` is about, or why it cannot be made: its class decides
/// nothing (Automatic), it is not unpacked, it resolves to another digest than `reviewed`, or
/// (approving) that digest is approved already, with the same patches, images and ignores.
pub fn decide(
    shown: &Shown,
    decision: ApprovalDecision,
    reviewed: Option<&str>,
) -> Result<String, DecisionError> {
    let bundle = &shown.bundle;
    let name = bundle.name_any();
    if let Some(class) = shown
        .class
        .as_ref()
        .filter(|c| c.spec.approval == ApprovalPolicy::Automatic)
    {
        return Err(DecisionError::AutomaticClass {
            class: match &bundle.spec.provisioner_class_name {
                Some(_) => format!("class {}", class.name_any()),
                None => format!("the default class {}", class.name_any()),
            },
            bundle: name,
            verb: match decision {
                ApprovalDecision::Approved => "approve",
                ApprovalDecision::Denied => "deny",
            },
        });
    }
    let status = bundle.status.clone().unwrap_or_default();
    let unpacked = is_true(&status.conditions, types::UNPACKED);
    let Some(digest) = resolved_digest(&status).filter(|_| unpacked) else {
        return Err(DecisionError::NotUnpacked(name));
    };
    if let Some(reviewed) = reviewed.filter(|reviewed| *reviewed != digest) {
        return Err(DecisionError::DigestMoved {
            bundle: name,
            digest: digest.into(),
            reviewed: reviewed.into(),
        });
    }
    let approved = status.approval.as_ref().is_some_and(|a| {
        gantry_rules::approval::approves(
            a,
            digest,
            &bundle.spec,
            gantry_rules::approval::Rendering::of(&status),
        )
    });
    if approved && decision == ApprovalDecision::Approved {
        return Err(DecisionError::AlreadyApproved {
            bundle: name,
            digest: digest.into(),
        });
    }
    Ok(digest.to_string())
}

/// Who the API server takes these credentials for: the username a SelfSubjectReview made with
/// them reports.
async fn who_am_i(client: &Client) -> anyhow::Result<String> {
    use anyhow::Context;
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .context("SelfSubjectReview")?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .context("the SelfSubjectReview names no user")
}

/// The approver to record with a decision; when the API server will not say (a server before
/// Kubernetes 1.28, RBAC refusing SelfSubjectReviews), none, and a line on stderr saying so.
async fn approver(client: &Client) -> Option<String> {
    match who_am_i(client).await {
        Ok(user) => Some(user),
        Err(e) => {
            eprintln!(
                "warning: the API server did not say who you are ({}): the decision is recorded without approvedBy",
                super::output::causes(&e).replace('\n', " ")
            );
            None
        }
    }
}

/// Writes `decision` of `digest` on `shown` (the bundle as it was reviewed), with the approver
/// the API server names; the decision as the API server stored it.
async fn write(
    client: &Client,
    shown: &Bundle,
    digest: &str,
    decision: ApprovalDecision,
    reason: Option<&str>,
) -> Result<Recorded, DecisionError> {
    let name = shown.name_any();
    let approved_by = approver(client).await;
    let mut approval = json!({
        "decision": decision,
        "digest": digest,
        "time": Time(Timestamp::now()),
    });
    if let Some(reason) = reason {
        approval["reason"] = json!(reason);
    }
    if let Some(who) = &approved_by {
        approval["approvedBy"] = json!(who);
    }
    // The decision covers the patches, image rewrites and ignore rules shown with it: a change
    // of them needs a new one.
    if !shown.spec.images.is_empty() {
        approval["images"] = json!(shown.spec.images);
    }
    if !shown.spec.patches.is_empty() {
        approval["patches"] = json!(shown.spec.patches);
    }
    if !shown.spec.ignore.is_empty() {
        approval["ignore"] = json!(shown.spec.ignore);
    }
    // And the configuration the content was rendered with, and the rendered objects.
    if let Some(status) = &shown.status {
        let rendering = gantry_rules::approval::Rendering::of(status);
        if let Some(config_digest) = rendering.config_digest {
            approval["configDigest"] = json!(config_digest);
        }
        if let Some(content_digest) = rendering.content_digest {
            approval["contentDigest"] = json!(content_digest);
        }
    }
    // The resourceVersion makes the write fail if the bundle changed since it was shown.
    let patch = json!({
        "apiVersion": "gantry.dev/v1alpha1",
        "kind": "Bundle",
        "metadata": { "name": name, "resourceVersion": shown.resource_version() },
        "status": { "approval": approval },
    });
    let written = Api::<Bundle>::all(client.clone())
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await;
    match written {
        // The decision as the API server stored it, to recognise it later.
        Ok(written) => written
            .status
            .and_then(|s| s.approval)
            .map(|approval| Recorded {
                approval,
                approved_by,
            })
            .ok_or(DecisionError::NotRecorded(name)),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(DecisionError::Changed(name)),
        Err(kube::Error::Api(status)) if status.code == 403 => Err(DecisionError::Forbidden {
            bundle: name,
            message: status.message,
        }),
        Err(source) => Err(DecisionError::Cluster {
            doing: format!("writing the decision on bundle {name}"),
            source,
        }),
    }
}

/// A decision recorded: as the API server stored it, and who made it, when known.
pub struct Recorded {
    pub approval: Approval,
    pub approved_by: Option<String>,
}

/// Decides on bundle `name` without asking: reads it, refuses as [`decide`] does (`reviewed`:
/// the digest the approver saw), and writes the decision.
pub async fn record(
    client: &Client,
    name: &str,
    decision: ApprovalDecision,
    reviewed: Option<&str>,
    reason: Option<&str>,
) -> Result<Recorded, DecisionError> {
    let shown = fetch(client, name).await?;
    let digest = decide(&shown, decision, reviewed)?;
    write(client, &shown.bundle, &digest, decision, reason).await
}

/// What approving `bundle`'s `digest` installs: its image, the objects it creates, and the
/// patches, rewrites and ignored fields the approval covers.
fn preview(bundle: &Bundle, digest: &str) -> String {
    let status = bundle.status.clone().unwrap_or_default();
    let mut out = format!(
        "Bundle {} resolves to {}\n",
        bundle.name_any(),
        status.resolved_image.as_deref().unwrap_or(digest)
    );
    if let Some(permissions) = &status.requested_permissions {
        out.push_str("It will create:\n");
        out.push_str(&permissions_table(permissions));
    }
    let spec = &bundle.spec;
    for (title, lines) in [
        (
            "With its patches (spec.patches), in order:",
            patches_lines(&spec.patches),
        ),
        (
            "With its images rewritten (spec.images):",
            images_lines(&spec.images),
        ),
        (
            "With fields left to other controllers (spec.ignore):",
            ignore_lines(&spec.ignore),
        ),
    ] {
        // Each is shown only when the spec has some.
        if !lines.is_empty() {
            out.push_str(&format!("{title}\n{lines}"));
        }
    }
    out
}

/// `bundle NAME approved for DIGEST by USER`, the line a decision ends with.
fn recorded_line(name: &str, recorded: &Recorded) -> String {
    let verb = match recorded.approval.decision {
        ApprovalDecision::Approved => "approved",
        ApprovalDecision::Denied => "denied",
    };
    format!(
        "bundle {name} {verb} for {}{}",
        recorded.approval.digest,
        recorded
            .approved_by
            .as_deref()
            .map(|who| format!(" by {who}"))
            .unwrap_or_default()
    )
}

/// Asks on the terminal whether to approve `digest`.
fn confirm(digest: &str) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!(
            "no terminal to ask for confirmation: pass --yes (with --digest {digest} to pin what you reviewed)"
        );
    }
    print!("Approve {digest}? [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if !matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") {
        bail!("not approved");
    }
    Ok(())
}

pub async fn approve(global: &GlobalArgs, args: ApproveArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let shown = fetch(&client, &args.name).await?;
    let approving = ApprovalDecision::Approved;
    let digest = decide(&shown, approving, args.digest.as_deref())?;
    print!("{}", preview(&shown.bundle, &digest));
    if !args.yes {
        confirm(&digest)?;
    }
    let reason = args.reason.as_deref();
    let recorded = write(&client, &shown.bundle, &digest, approving, reason).await?;
    println!("{}", recorded_line(&args.name, &recorded));
    if args.wait {
        wait_decided(&client, &args.name, &recorded.approval, args.timeout).await?;
    }
    Ok(())
}

pub async fn deny(global: &GlobalArgs, args: DenyArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let (denying, reviewed) = (ApprovalDecision::Denied, args.digest.as_deref());
    let recorded = record(&client, &args.name, denying, reviewed, Some(&args.reason)).await?;
    println!("{}", recorded_line(&args.name, &recorded));
    if args.wait {
        wait_decided(&client, &args.name, &recorded.approval, args.timeout).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
