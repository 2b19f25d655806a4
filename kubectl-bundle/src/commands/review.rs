//! `list`, `status`, `approve` and `deny`: reading bundles and deciding on their digests.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalDecision, Bundle, BundleStatus, Condition, RequestedPermissions};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::json;

/// The field manager of approvals: the approval's owner in `managedFields`.
const FIELD_MANAGER: &str = "kubectl-bundle";

/// How to reach the cluster, as kubectl does.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    context: Option<String>,
}

impl ClusterArgs {
    async fn client(&self) -> anyhow::Result<Client> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("loading kubeconfig {}", path.display()))?
            }
            None if self.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .context("loading the kubeconfig")?,
            None => Config::infer().await.context("finding a kubeconfig")?,
        };
        Client::try_from(config).context("building the Kubernetes client")
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Output {
    Wide,
    Json,
    Yaml,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle list\n  kubectl bundle list -o wide\n  kubectl bundle list -o json"
)]
pub struct ListArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Output format: wide adds the image and the resolved reference.
    #[arg(short = 'o', long = "output", value_enum)]
    output: Option<Output>,
}

#[derive(Args, Debug)]
#[command(after_help = "Example:\n  kubectl bundle status my-app")]
pub struct StatusArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The bundle.
    name: String,
    /// Print the bundle's status as JSON or YAML instead of the summary.
    #[arg(short = 'o', long = "output", value_enum)]
    output: Option<StatusOutput>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StatusOutput {
    Json,
    Yaml,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle approve my-app\n  kubectl bundle approve my-app --yes --digest sha256:..."
)]
pub struct ApproveArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
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
}

#[derive(Args, Debug)]
#[command(after_help = "Example:\n  kubectl bundle deny my-app --reason \"grants cluster-admin\"")]
pub struct DenyArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The bundle.
    name: String,
    /// Why (shown in the bundle's conditions and Events).
    #[arg(long)]
    reason: String,
    /// Deny only if the bundle resolves to this digest.
    #[arg(long)]
    digest: Option<String>,
}

fn condition<'a>(status: &'a BundleStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

fn resolved_digest(status: &BundleStatus) -> Option<&str> {
    status
        .resolved_image
        .as_deref()?
        .rsplit_once('@')
        .map(|(_, digest)| digest)
}

fn short(digest: &str) -> String {
    digest
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect()
}

/// `Approved`, `Denied`, `Pending` (an approval is awaited) or `-`.
fn approval_state(status: &BundleStatus) -> &'static str {
    let digest = resolved_digest(status);
    match status
        .approval
        .as_ref()
        .filter(|a| Some(a.digest.as_str()) == digest)
    {
        Some(a) if a.decision == ApprovalDecision::Approved => "Approved",
        Some(_) => "Denied",
        None => match condition(status, types::APPROVED) {
            Some(c) if c.reason == reasons::AUTOMATIC_APPROVAL => "Automatic",
            Some(c) if c.reason == reasons::AWAITING_APPROVAL => "Pending",
            _ => "-",
        },
    }
}

pub async fn list(args: ListArgs) -> anyhow::Result<()> {
    let bundles: Api<Bundle> = Api::all(args.cluster.client().await?);
    let mut items = bundles
        .list(&ListParams::default())
        .await
        .context("listing bundles")?
        .items;
    items.sort_by_key(|b| b.name_any());
    match args.output {
        Some(Output::Json) => {
            println!("{}", serde_json::to_string_pretty(&items)?);
            return Ok(());
        }
        Some(Output::Yaml) => {
            print!("{}", serde_saphyr::to_string(&items)?);
            return Ok(());
        }
        _ => {}
    }
    let wide = matches!(args.output, Some(Output::Wide));
    let mut rows = vec![{
        let mut header = vec!["NAME", "CLASS", "PHASE", "READY", "DIGEST", "APPROVAL"];
        if wide {
            header.extend(["IMAGE", "RESOLVED"]);
        }
        header.into_iter().map(String::from).collect::<Vec<_>>()
    }];
    for bundle in &items {
        let status = bundle.status.clone().unwrap_or_default();
        let mut row = vec![
            bundle.name_any(),
            bundle
                .spec
                .provisioner_class_name
                .clone()
                .unwrap_or_else(|| "<default>".into()),
            status.phase.map(|p| p.to_string()).unwrap_or_default(),
            condition(&status, types::READY)
                .map(|c| c.status.clone())
                .unwrap_or_default(),
            resolved_digest(&status).map(short).unwrap_or_default(),
            approval_state(&status).to_string(),
        ];
        if wide {
            row.push(bundle.spec.image.clone());
            row.push(status.resolved_image.clone().unwrap_or_default());
        }
        rows.push(row);
    }
    print_table(&rows);
    Ok(())
}

fn print_table(rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = std::io::stdout().lock();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{cell:<width$}", width = widths[i]))
            .collect();
        let _ = writeln!(out, "{}", line.join("   ").trim_end());
    }
}

/// The requested permissions as a readable table, flagged objects last.
fn permissions_table(permissions: &RequestedPermissions) -> String {
    let kind = |group: &str, kind: &str| {
        if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        }
    };
    let mut rows = vec![vec![
        "SCOPE".to_string(),
        "KIND".to_string(),
        "COUNT".to_string(),
    ]];
    for k in &permissions.cluster_scoped {
        rows.push(vec![
            "cluster".into(),
            kind(&k.group, &k.kind),
            k.count.to_string(),
        ]);
    }
    for ns in &permissions.namespaced {
        for k in &ns.kinds {
            rows.push(vec![
                format!("namespace {}", ns.namespace),
                kind(&k.group, &k.kind),
                k.count.to_string(),
            ]);
        }
    }
    let widths: Vec<usize> = (0..3)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        out.push_str(&format!(
            "  {:<a$}   {:<b$}   {}\n",
            row[0],
            row[1],
            row[2],
            a = widths[0],
            b = widths[1]
        ));
    }
    if !permissions.highlights.is_empty() {
        out.push_str("\n  Needs attention:\n");
        for h in &permissions.highlights {
            let object = match &h.namespace {
                Some(ns) => format!("{} {ns}/{}", kind(&h.group, &h.kind), h.name),
                None => format!("{} {}", kind(&h.group, &h.kind), h.name),
            };
            out.push_str(&format!("  ! {object}: {}\n", h.reason));
        }
    }
    out
}

pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let client = args.cluster.client().await?;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let bundle = bundles
        .get_opt(&args.name)
        .await
        .with_context(|| format!("reading bundle {}", args.name))?
        .with_context(|| format!("bundle {} not found", args.name))?;
    let status = bundle.status.clone().unwrap_or_default();
    match args.output {
        Some(StatusOutput::Json) => {
            println!("{}", serde_json::to_string_pretty(&status)?);
            return Ok(());
        }
        Some(StatusOutput::Yaml) => {
            print!("{}", serde_saphyr::to_string(&status)?);
            return Ok(());
        }
        None => {}
    }
    println!("Name:       {}", bundle.name_any());
    println!("Image:      {}", bundle.spec.image);
    println!(
        "Class:      {}",
        bundle
            .spec
            .provisioner_class_name
            .as_deref()
            .unwrap_or("<default>")
    );
    println!(
        "Phase:      {}",
        status.phase.map(|p| p.to_string()).unwrap_or_default()
    );
    println!(
        "Resolved:   {}",
        status.resolved_image.as_deref().unwrap_or("-")
    );
    println!(
        "Manifest:   {}",
        status.manifest_digest.as_deref().unwrap_or("-")
    );
    println!("Platform:   {}", status.platform.as_deref().unwrap_or("-"));
    println!(
        "Content:    {}",
        status.content_digest.as_deref().unwrap_or("-")
    );
    println!("Approval:   {}", approval_state(&status));
    if let Some(approval) = &status.approval {
        println!(
            "            {:?} {}{}",
            approval.decision,
            approval.digest,
            approval
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
    }
    println!("\nConditions:");
    let mut rows = vec![vec![
        "  TYPE".to_string(),
        "STATUS".to_string(),
        "REASON".to_string(),
        "MESSAGE".to_string(),
    ]];
    for c in &status.conditions {
        rows.push(vec![
            format!("  {}", c.type_),
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
        ]);
    }
    print_table(&rows);
    if let Some(permissions) = &status.requested_permissions {
        println!("\nRequested permissions:");
        print!("{}", permissions_table(permissions));
    }
    let mut inventory: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &status.inventory {
        *inventory.entry(entry.kind.clone()).or_default() += 1;
    }
    println!("\nInventory: {} objects", status.inventory.len());
    for (kind, count) in inventory {
        println!("  {kind}: {count}");
    }
    // Events of cluster-scoped objects are recorded in the default namespace.
    let events: Api<Event> = Api::namespaced(client, "default");
    if let Ok(list) = events.list(&ListParams::default()).await {
        let mut mine: Vec<&Event> = list
            .items
            .iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Bundle")
                        && r.name.as_deref() == Some(args.name.as_str())
                })
            })
            .collect();
        mine.sort_by_key(|e| {
            e.event_time.as_ref().map(|t| t.0).or(e
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0))
        });
        println!("\nEvents:");
        if mine.is_empty() {
            println!("  <none>");
        }
        for e in mine.iter().rev().take(10).rev() {
            println!(
                "  {:<8} {:<20} {}",
                e.type_.as_deref().unwrap_or(""),
                e.reason.as_deref().unwrap_or(""),
                e.note.as_deref().unwrap_or("")
            );
        }
    }
    Ok(())
}

/// Why a decision cannot be made now, or the bundle and its digest.
async fn reviewable(
    bundles: &Api<Bundle>,
    name: &str,
    wanted: Option<&str>,
) -> anyhow::Result<(Bundle, String)> {
    let bundle = bundles
        .get_opt(name)
        .await
        .with_context(|| format!("reading bundle {name}"))?
        .with_context(|| format!("bundle {name} not found"))?;
    let status = bundle.status.clone().unwrap_or_default();
    let unpacked = condition(&status, types::UNPACKED).is_some_and(|c| c.status == "True");
    let Some(digest) = resolved_digest(&status).filter(|_| unpacked) else {
        bail!(
            "bundle {name} is not unpacked yet: there is nothing to review (see `kubectl bundle status {name}`)"
        );
    };
    if let Some(wanted) = wanted
        && wanted != digest
    {
        bail!(
            "bundle {name} resolves to {digest}, not {wanted}: review the new content before deciding"
        );
    }
    Ok((bundle.clone(), digest.to_string()))
}

async fn decide(
    bundles: &Api<Bundle>,
    shown: &Bundle,
    digest: &str,
    decision: ApprovalDecision,
    reason: Option<&str>,
) -> anyhow::Result<()> {
    let name = shown.name_any();
    let mut approval = json!({
        "decision": decision,
        "digest": digest,
        "time": Time(Timestamp::now()),
    });
    if let Some(reason) = reason {
        approval["reason"] = json!(reason);
    }
    // The resourceVersion makes the write fail if the bundle changed since it was shown.
    let patch = json!({
        "apiVersion": "gantry.dev/v1alpha1",
        "kind": "Bundle",
        "metadata": { "name": name, "resourceVersion": shown.resource_version() },
        "status": { "approval": approval },
    });
    match bundles
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            bail!(
                "bundle {name} changed while it was shown; run the command again to review what it is now"
            )
        }
        Err(kube::Error::Api(status)) if status.code == 403 => bail!(
            "not allowed to decide on bundle {name}: approving needs `patch` on bundles/status (ClusterRole gantry-bundle-approver): {}",
            status.message
        ),
        Err(e) => Err(e).with_context(|| format!("writing the decision on bundle {name}")),
    }
}

pub async fn approve(args: ApproveArgs) -> anyhow::Result<()> {
    let bundles: Api<Bundle> = Api::all(args.cluster.client().await?);
    let (bundle, digest) = reviewable(&bundles, &args.name, args.digest.as_deref()).await?;
    let status = bundle.status.clone().unwrap_or_default();
    if status
        .approval
        .as_ref()
        .is_some_and(|a| a.digest == digest && a.decision == ApprovalDecision::Approved)
    {
        bail!("bundle {} is already approved for {digest}", args.name);
    }
    println!(
        "Bundle {} resolves to {}",
        args.name,
        status.resolved_image.as_deref().unwrap_or(&digest)
    );
    if let Some(permissions) = &status.requested_permissions {
        println!("It will create:");
        print!("{}", permissions_table(permissions));
    }
    if !args.yes {
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
    }
    decide(
        &bundles,
        &bundle,
        &digest,
        ApprovalDecision::Approved,
        args.reason.as_deref(),
    )
    .await?;
    println!("bundle {} approved for {digest}", args.name);
    Ok(())
}

pub async fn deny(args: DenyArgs) -> anyhow::Result<()> {
    let bundles: Api<Bundle> = Api::all(args.cluster.client().await?);
    let (bundle, digest) = reviewable(&bundles, &args.name, args.digest.as_deref()).await?;
    decide(
        &bundles,
        &bundle,
        &digest,
        ApprovalDecision::Denied,
        Some(&args.reason),
    )
    .await?;
    println!("bundle {} denied for {digest}", args.name);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::{Approval, KindCount, NamespacePermissions, PermissionHighlight};

    fn status(resolved: &str, approval: Option<(ApprovalDecision, &str)>) -> BundleStatus {
        BundleStatus {
            resolved_image: Some(format!("127.0.0.1:5000/app@{resolved}")),
            approval: approval.map(|(decision, digest)| Approval {
                decision,
                digest: digest.into(),
                reason: None,
                time: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_approval_counts_only_for_the_resolved_digest() {
        assert_eq!(
            approval_state(&status(
                "sha256:aa",
                Some((ApprovalDecision::Approved, "sha256:aa"))
            )),
            "Approved"
        );
        assert_eq!(
            approval_state(&status(
                "sha256:aa",
                Some((ApprovalDecision::Denied, "sha256:aa"))
            )),
            "Denied"
        );
        assert_eq!(
            approval_state(&status(
                "sha256:bb",
                Some((ApprovalDecision::Approved, "sha256:aa"))
            )),
            "-"
        );
    }

    #[test]
    fn the_permissions_table_lists_scopes_and_highlights() {
        let table = permissions_table(&RequestedPermissions {
            cluster_scoped: vec![KindCount {
                group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                count: 1,
            }],
            namespaced: vec![NamespacePermissions {
                namespace: "app".into(),
                kinds: vec![KindCount {
                    group: "".into(),
                    kind: "ConfigMap".into(),
                    count: 3,
                }],
            }],
            highlights: vec![PermissionHighlight {
                group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                namespace: None,
                name: "all".into(),
                reason: "grants verbs [*]".into(),
            }],
        });
        assert!(
            table.contains("cluster") && table.contains("ClusterRole.rbac.authorization.k8s.io")
        );
        assert!(
            table.contains("namespace app") && table.contains("ConfigMap") && table.contains('3')
        );
        assert!(table.contains("! ClusterRole.rbac.authorization.k8s.io all: grants verbs [*]"));
    }
}
