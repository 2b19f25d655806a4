//! `list`, `status`, `approve` and `deny`: reading bundles and deciding on their digests.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use futures::{StreamExt, TryStreamExt};
use gantry_api::conditions::{reasons, types};
use gantry_api::slots::SlotTable;
use gantry_api::{
    Approval, ApprovalDecision, ApprovalPolicy, Bundle, BundlePhase, BundleStatus, Condition,
    DEFAULT_CLASS_ANNOTATION, ProvisionerClass, RequestedPermissions,
};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::cluster::{GlobalArgs, get_bundle, get_bundles};
use super::inspect::{bundle_events, events_table};
use super::output::{
    OutputFormat, clean, custom_columns_text, list_of, parse_output, print_structured, print_table,
    table,
};

/// The field manager of approvals: the approval's owner in `managedFields`.
const FIELD_MANAGER: &str = "kubectl-bundle";

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle list\n  kubectl bundle list app-a app-b\n  kubectl bundle list -o wide\n  kubectl bundle list -l team=payments\n  kubectl bundle list -o jsonpath='{.items[*].metadata.name}'\n  kubectl bundle list --watch"
)]
pub struct ListArgs {
    /// Only these bundles (default: all), as `kubectl get bundles A B` lists them.
    #[arg(value_name = "NAME", conflicts_with = "selector")]
    names: Vec<String>,
    /// Output format: json, yaml, name, wide (adds the image, the resolved reference and the
    /// shard, the provisioner replica that reconciles the bundle), jsonpath=TEMPLATE or custom-columns=HEADER:EXPRESSION,...
    #[arg(short = 'o', long = "output", value_parser = parse_output)]
    output: Option<OutputFormat>,
    /// After listing, print bundles again as they change.
    #[arg(short = 'w', long)]
    watch: bool,
    /// Only bundles whose labels match this selector, as kubectl takes it (`team=a`,
    /// `tier in (web,api)`, `!legacy`).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    selector: Option<String>,
    /// The provisioner's namespace, where `-o wide` reads which shard owns each bundle's slot.
    #[arg(long, default_value = "gantry-system", value_name = "NAMESPACE")]
    provisioner_namespace: String,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle status my-app\n  kubectl bundle status app-a app-b\n  kubectl bundle status my-app -o jsonpath='{.status.phase}'\n  kubectl bundle status my-app --watch"
)]
pub struct StatusArgs {
    /// The bundles (one or more).
    #[arg(required = true, value_name = "NAME")]
    names: Vec<String>,
    /// Print the Bundle as json, yaml, name, jsonpath=TEMPLATE or custom-columns=SPEC instead of
    /// the summary (several: a `v1 List` of them).
    #[arg(short = 'o', long = "output", value_parser = parse_output)]
    output: Option<OutputFormat>,
    /// Print the status again each time the bundle changes (one bundle).
    #[arg(short = 'w', long)]
    watch: bool,
}

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

fn condition<'a>(status: &'a BundleStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

pub(crate) fn resolved_digest(status: &BundleStatus) -> Option<&str> {
    status
        .resolved_image
        .as_deref()?
        .rsplit_once('@')
        .map(|(_, digest)| digest)
}

pub(crate) fn short(digest: &str) -> String {
    digest
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect()
}

/// `Approved`, `Denied`, `Pending` (an approval is awaited) or `-`.
pub(crate) fn approval_state(status: &BundleStatus) -> &'static str {
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

/// A decision in one line: `Approved sha256:... by alice: reason`.
pub(crate) fn decision_text(approval: &Approval) -> String {
    format!(
        "{:?} {}{}{}",
        approval.decision,
        approval.digest,
        approval
            .approved_by
            .as_deref()
            .map(|who| format!(" by {who}"))
            .unwrap_or_default(),
        approval
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )
}

/// The class serving the bundle, as the controller recorded it; before it did, the class the
/// bundle names, else `<default>`.
pub(crate) fn class_name(bundle: &Bundle) -> String {
    bundle
        .status
        .as_ref()
        .and_then(|s| s.class_name.clone())
        .or_else(|| bundle.spec.provisioner_class_name.clone())
        .unwrap_or_else(|| "<default>".into())
}

fn list_header(wide: bool) -> Vec<String> {
    let mut header = vec![
        "NAME",
        "CLASS",
        "PHASE",
        "READY",
        "HEALTHY",
        "SUSPENDED",
        "DIGEST",
        "APPROVAL",
    ];
    if wide {
        header.extend(["IMAGE", "RESOLVED", "SHARD"]);
    }
    header.into_iter().map(String::from).collect()
}

/// The slot table of a sharded provisioner, for the SHARD column; `None` without sharding, or
/// when it cannot be read (the column is left empty then).
async fn slot_table(client: &Client, namespace: &str) -> Option<SlotTable> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = leases.get_opt(gantry_api::SLOT_TABLE_LEASE).await.ok()??;
    SlotTable::parse(lease.annotations().get(gantry_api::SLOT_TABLE_ANNOTATION)?).ok()
}

/// The shard that owns `bundle`'s slot in `table`; empty with one replica.
fn shard_of(bundle: &Bundle, table: Option<&SlotTable>) -> String {
    bundle
        .labels()
        .get(gantry_api::SLOT_LABEL)
        .and_then(|slot| gantry_api::slots::parse_slot(slot))
        .and_then(|slot| table?.owner(slot))
        .unwrap_or_default()
        .to_string()
}

fn list_row(bundle: &Bundle, wide: Option<Option<&SlotTable>>) -> Vec<String> {
    let status = bundle.status.clone().unwrap_or_default();
    let mut row = vec![
        bundle.name_any(),
        class_name(bundle),
        status.phase.map(|p| p.to_string()).unwrap_or_default(),
        condition(&status, types::READY)
            .map(|c| c.status.clone())
            .unwrap_or_default(),
        // Ready can be True while the objects are not healthy (a class that does not wait).
        condition(&status, types::HEALTHY)
            .map(|c| c.status.clone())
            .unwrap_or_default(),
        // As `flux get` shows it: spec.suspend, True or False.
        if bundle.spec.suspend { "True" } else { "False" }.to_string(),
        resolved_digest(&status).map(short).unwrap_or_default(),
        approval_state(&status).to_string(),
    ];
    if let Some(table) = wide {
        row.push(bundle.spec.image.clone());
        row.push(status.resolved_image.clone().unwrap_or_default());
        row.push(shard_of(bundle, table));
    }
    row
}

/// Prints bundles in the format asked for: a table, or one document for all of them (the
/// object itself when one was asked for by name, as `kubectl get bundle NAME -o json` prints it).
fn print_bundles(
    items: &[Bundle],
    output: Option<&OutputFormat>,
    table: Option<&SlotTable>,
    by_name: bool,
) -> anyhow::Result<()> {
    let document = match items {
        [one] if by_name => clean(one)?,
        _ => list_of(items)?,
    };
    if print_structured(&document, output)? {
        return Ok(());
    }
    let wide = output == Some(&OutputFormat::Wide);
    let mut rows = vec![list_header(wide)];
    rows.extend(items.iter().map(|b| list_row(b, wide.then_some(table))));
    print_table(&rows);
    Ok(())
}

/// Prints one changed bundle while watching: a table row, or the object alone.
fn print_change(
    bundle: &Bundle,
    output: Option<&OutputFormat>,
    slots: Option<&SlotTable>,
) -> anyhow::Result<()> {
    if let Some(OutputFormat::CustomColumns(columns)) = output {
        // The header came with the list: a change is its row alone, as kubectl's watch prints it.
        print!("{}", custom_columns_text(columns, &clean(bundle)?, false)?);
    } else if !print_structured(&clean(bundle)?, output)? {
        let wide = output == Some(&OutputFormat::Wide);
        // Aligned with the header's widths as far as the row allows.
        let text = table(&[list_header(wide), list_row(bundle, wide.then_some(slots))]);
        print!(
            "{}",
            text.lines()
                .nth(1)
                .map(|l| format!("{l}\n"))
                .unwrap_or_default()
        );
    }
    std::io::stdout().flush()?;
    Ok(())
}

pub async fn list(global: &GlobalArgs, args: ListArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let wide = args.output == Some(OutputFormat::Wide);
    let bundles: Api<Bundle> = Api::all(client.clone());
    let mut params = ListParams::default();
    let mut watch_config = watcher::Config::default();
    if let Some(selector) = &args.selector {
        params = params.labels(selector);
        watch_config = watch_config.labels(selector);
    }
    let (items, refused) = if args.names.is_empty() {
        let mut items = bundles
            .list(&params)
            .await
            .map_err(|e| match e {
                kube::Error::Api(status) if status.code == 400 && args.selector.is_some() => {
                    anyhow::anyhow!("invalid label selector: {}", status.message)
                }
                e => anyhow::Error::new(e),
            })
            .context("listing bundles")?
            .items;
        items.sort_by_key(|b| b.name_any());
        (items, None)
    } else {
        // In the order given, as `kubectl get bundles A B` prints them.
        get_bundles(&bundles, &args.names).await?
    };
    if let [name] = args.names.as_slice() {
        watch_config = watch_config.fields(&format!("metadata.name={name}"));
    }
    let mut slots = if wide {
        slot_table(&client, &args.provisioner_namespace).await
    } else {
        None
    };
    if !items.is_empty() || refused.is_none() {
        let by_name = args.names.len() == 1;
        print_bundles(&items, args.output.as_ref(), slots.as_ref(), by_name)?;
    }
    if !args.watch {
        return refused.map_or(Ok(()), |r| Err(r.into()));
    }
    std::io::stdout().flush()?;
    // What was printed last of each bundle: a change is printed once, relists print nothing new.
    let mut printed: HashMap<String, Option<String>> = items
        .iter()
        .map(|b| (b.name_any(), b.resource_version()))
        .collect();
    let mut changes = watcher(bundles, watch_config)
        .default_backoff()
        .touched_objects()
        .boxed();
    while let Some(bundle) = changes.try_next().await.context("watching bundles")? {
        if !args.names.is_empty() && !args.names.contains(&bundle.name_any()) {
            continue;
        }
        let version = bundle.resource_version();
        if printed.insert(bundle.name_any(), version.clone()) != Some(version) {
            if wide {
                // Slots move between shards without a change of their bundles.
                slots = slot_table(&client, &args.provisioner_namespace).await;
            }
            print_change(&bundle, args.output.as_ref(), slots.as_ref())?;
        }
    }
    Ok(())
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
    match &permissions.service_account {
        Some(account) => out.push_str(&format!(
            "\n  Applied as ServiceAccount {account} ({})\n",
            account.username()
        )),
        None => out.push_str("\n  Applied as the provisioner's own identity\n"),
    }
    out
}

pub async fn status(global: &GlobalArgs, args: StatusArgs) -> anyhow::Result<()> {
    if args.watch && args.names.len() > 1 {
        bail!("--watch follows one bundle; `kubectl bundle list NAME... --watch` follows several");
    }
    let client = global.client().await?;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let (found, refused) = get_bundles(&bundles, &args.names).await?;
    // Several bundles are one document, as `kubectl get bundle A B -o json` prints them.
    if args.names.len() > 1 && print_structured(&list_of(&found)?, args.output.as_ref())? {
        return refused.map_or(Ok(()), |r| Err(r.into()));
    }
    for (i, bundle) in found.iter().enumerate() {
        if i > 0 {
            println!();
        }
        print_status(&client, bundle, args.output.as_ref()).await?;
    }
    let Some(bundle) = found.first().filter(|_| args.watch) else {
        return refused.map_or(Ok(()), |r| Err(r.into()));
    };
    let name = bundle.name_any();
    let mut last = bundle.resource_version();
    let mut changes = watcher::watch_object(bundles, &name).boxed();
    while let Some(bundle) = changes
        .try_next()
        .await
        .with_context(|| format!("watching bundle {name}"))?
    {
        let Some(bundle) = bundle else {
            bail!("bundle {name} was deleted");
        };
        if bundle.resource_version() != last {
            last = bundle.resource_version();
            println!();
            print_status(&client, &bundle, args.output.as_ref()).await?;
        }
    }
    Ok(())
}

async fn print_status(
    client: &Client,
    bundle: &Bundle,
    output: Option<&OutputFormat>,
) -> anyhow::Result<()> {
    if print_structured(&clean(bundle)?, output)? {
        std::io::stdout().flush()?;
        return Ok(());
    }
    let status = bundle.status.clone().unwrap_or_default();
    let mut out = String::new();
    let mut field = |label: &str, value: &str| out.push_str(&format!("{label:<12}{value}\n"));
    field("Name:", &bundle.name_any());
    field("Image:", &bundle.spec.image);
    if !bundle.spec.patches.is_empty() {
        field("Patches:", "applied before applying (spec.patches):");
        for line in patches_lines(&bundle.spec.patches).lines() {
            field("", line.trim_start());
        }
    }
    if !bundle.spec.images.is_empty() {
        field("Images:", "rewritten before applying (spec.images):");
        for line in images_lines(&bundle.spec.images).lines() {
            field("", line.trim_start());
        }
    }
    if !bundle.spec.ignore.is_empty() {
        field(
            "Ignored:",
            "fields left to other controllers (spec.ignore):",
        );
        for line in ignore_lines(&bundle.spec.ignore).lines() {
            field("", line.trim_start());
        }
    }
    let class = class_name(bundle);
    field(
        "Class:",
        &if bundle.spec.provisioner_class_name.is_none() && status.class_name.is_some() {
            format!("{class} (the default class)")
        } else {
            class
        },
    );
    field(
        "Phase:",
        &status.phase.map(|p| p.to_string()).unwrap_or_default(),
    );
    // A stalled bundle is not retried: say so before anything else, with what must change.
    if let Some(stalled) = condition(&status, types::STALLED).filter(|c| c.status == "True") {
        field(
            "Stalled:",
            &format!(
                "{}: {} (`kubectl bundle reconcile {}` tries again at once)",
                stalled.reason,
                stalled.message,
                bundle.name_any()
            ),
        );
    }
    field("Resolved:", status.resolved_image.as_deref().unwrap_or("-"));
    field(
        "Installed:",
        status.installed_image.as_deref().unwrap_or("-"),
    );
    field(
        "Manifest:",
        status.manifest_digest.as_deref().unwrap_or("-"),
    );
    field("Platform:", status.platform.as_deref().unwrap_or("-"));
    field("Content:", status.content_digest.as_deref().unwrap_or("-"));
    field("Approval:", approval_state(&status));
    if let Some(approval) = &status.approval {
        field("", &decision_text(approval));
    }
    out.push_str("\nConditions:\n");
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
            super::health::table_message(c).to_string(),
        ]);
    }
    out.push_str(&table(&rows));
    let unhealthy = super::health::unhealthy_objects(&status);
    if !unhealthy.is_empty() {
        out.push_str("\nNot healthy:\n");
        for object in unhealthy {
            out.push_str(&format!("  {object}\n"));
        }
    }
    if let Some(permissions) = &status.requested_permissions {
        out.push_str("\nRequested permissions:\n");
        out.push_str(&permissions_table(permissions));
    }
    let mut inventory: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &status.inventory {
        *inventory.entry(entry.kind.clone()).or_default() += 1;
    }
    out.push_str(&format!(
        "\nInventory: {}\n",
        super::output::count(status.inventory.len(), "object")
    ));
    for (kind, count) in inventory {
        out.push_str(&format!("  {kind}: {count}\n"));
    }
    if let Some(latest) = status.history.first() {
        out.push_str(&format!(
            "\nHistory: {} installed, the latest {} ago (`kubectl bundle history {}`)\n",
            match status.history.len() {
                1 => "1 digest".to_string(),
                n => format!("{n} digests"),
            },
            super::output::age(latest.installed_at.0),
            bundle.name_any()
        ));
    }
    out.push_str("\nEvents:\n");
    match bundle_events(client, bundle, false).await {
        Ok(events) if events.is_empty() => out.push_str("  <none>\n"),
        // The latest ten, oldest first.
        Ok(events) => {
            let shown = &events[events.len().saturating_sub(10)..];
            for line in events_table(shown).lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        Err(e) => out.push_str(&format!(
            "  cannot list them: {}\n",
            super::output::causes(&e)
        )),
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// The class serving a bundle: the one it names, else the default class (annotated
/// `gantry.dev/is-default-class: "true"`; the newest when several are).
async fn serving_class(
    client: &Client,
    bundle: &Bundle,
) -> anyhow::Result<Option<ProvisionerClass>> {
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    if let Some(name) = &bundle.spec.provisioner_class_name {
        return classes
            .get_opt(name)
            .await
            .with_context(|| format!("reading ProvisionerClass {name}"));
    }
    let mut defaults: Vec<ProvisionerClass> = classes
        .list(&ListParams::default())
        .await
        .context("listing ProvisionerClasses")?
        .items
        .into_iter()
        .filter(|c| {
            c.annotations()
                .get(DEFAULT_CLASS_ANNOTATION)
                .map(String::as_str)
                == Some("true")
        })
        .collect();
    defaults.sort_by_key(|c| {
        (
            c.creation_timestamp().map(|t| t.0),
            std::cmp::Reverse(c.name_any()),
        )
    });
    Ok(defaults.pop())
}

/// Refuses a decision on a bundle whose class installs every digest without one.
async fn require_manual_class(client: &Client, bundle: &Bundle, verb: &str) -> anyhow::Result<()> {
    let Some(class) = serving_class(client, bundle).await? else {
        return Ok(());
    };
    if class.spec.approval == ApprovalPolicy::Automatic {
        let which = match &bundle.spec.provisioner_class_name {
            Some(_) => format!("class {}", class.name_any()),
            None => format!("the default class {}", class.name_any()),
        };
        bail!(
            "bundle {} is served by {which}, whose approval is Automatic: every digest is installed without a decision, so there is nothing to {verb}. Decisions apply to classes with `approval: Manual`",
            bundle.name_any()
        );
    }
    Ok(())
}

/// Why a decision cannot be made now, or the bundle and its digest.
async fn reviewable(
    client: &Client,
    name: &str,
    wanted: Option<&str>,
    verb: &str,
) -> anyhow::Result<(Bundle, String)> {
    let bundle = get_bundle(&Api::all(client.clone()), name).await?;
    require_manual_class(client, &bundle, verb).await?;
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

/// Who the API server takes these credentials for: the username a SelfSubjectReview made with
/// them reports.
async fn who_am_i(client: &Client) -> anyhow::Result<String> {
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
/// Kubernetes 1.28, RBAC refusing SelfSubjectReviews), none, and a line saying so.
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

async fn decide(
    bundles: &Api<Bundle>,
    shown: &Bundle,
    digest: &str,
    decision: ApprovalDecision,
    reason: Option<&str>,
    approved_by: Option<&str>,
) -> anyhow::Result<Approval> {
    let name = shown.name_any();
    let mut approval = json!({
        "decision": decision,
        "digest": digest,
        "time": Time(Timestamp::now()),
    });
    if let Some(reason) = reason {
        approval["reason"] = json!(reason);
    }
    if let Some(who) = approved_by {
        approval["approvedBy"] = json!(who);
    }
    // The decision covers the patches and image rewrites shown with it: a change of them
    // needs a new one.
    if !shown.spec.images.is_empty() {
        approval["images"] = json!(shown.spec.images);
    }
    if !shown.spec.patches.is_empty() {
        approval["patches"] = json!(shown.spec.patches);
    }
    if !shown.spec.ignore.is_empty() {
        approval["ignore"] = json!(shown.spec.ignore);
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
        // The decision as the API server stored it, to recognise it later.
        Ok(written) => written
            .status
            .and_then(|s| s.approval)
            .with_context(|| format!("bundle {name}: the decision written is not in its status")),
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

pub async fn approve(global: &GlobalArgs, args: ApproveArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let (bundle, digest) =
        reviewable(&client, &args.name, args.digest.as_deref(), "approve").await?;
    let status = bundle.status.clone().unwrap_or_default();
    if status.approval.as_ref().is_some_and(|a| {
        a.digest == digest
            && a.decision == ApprovalDecision::Approved
            && a.images == bundle.spec.images
            && a.patches == bundle.spec.patches
            && a.ignore == bundle.spec.ignore
    }) {
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
    if !bundle.spec.patches.is_empty() {
        println!("With its patches (spec.patches), in order:");
        print!("{}", patches_lines(&bundle.spec.patches));
    }
    if !bundle.spec.images.is_empty() {
        println!("With its images rewritten (spec.images):");
        print!("{}", images_lines(&bundle.spec.images));
    }
    if !bundle.spec.ignore.is_empty() {
        println!("With fields left to other controllers (spec.ignore):");
        print!("{}", ignore_lines(&bundle.spec.ignore));
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
    let approved_by = approver(&client).await;
    let approval = decide(
        &bundles,
        &bundle,
        &digest,
        ApprovalDecision::Approved,
        args.reason.as_deref(),
        approved_by.as_deref(),
    )
    .await?;
    println!(
        "bundle {} approved for {digest}{}",
        args.name,
        by(approved_by.as_deref())
    );
    if args.wait {
        wait_decided(&bundles, &args.name, &approval, args.timeout).await?;
    }
    Ok(())
}

/// Where a bundle stands, as far as one approval is concerned.
#[derive(Debug, PartialEq, Eq)]
enum AfterApproval {
    /// The provisioner has not acted on the approval yet, or is applying the content.
    Waiting,
    /// Ready with the approved digest.
    Ready,
    /// The provisioner handled this denial: phase `Denied`, and `Approved` False with reason
    /// `Denied` for this digest and this decision's reason.
    Denied,
    /// The approved content failed: the phase and the `Ready` condition.
    Failed(String),
    /// Another decision replaced this one before the outcome.
    Replaced(String),
    /// The bundle resolves to another digest now.
    Moved(String),
    Deleted,
}

/// What the status says about `approval`, the decision this command wrote.
///
/// The phase and `Ready` alone cannot tell: right after the approval was written they are still
/// what the previous decision left (`Denied` after a `deny` of the same digest), and a pass of
/// the provisioner that started before the approval may still write them afterwards, so neither
/// a newer `resourceVersion` nor a status written after the approval's time (second-grained,
/// and the plugin's clock) proves the provisioner saw it. Approvals are written through the
/// status subresource, so no `observedGeneration` moves either. What does prove it is the
/// `Approved` condition: the provisioner derives it from `status.approval` in the same pass,
/// and writes it with the phase and `Ready` of that pass. It says "approved" for this digest
/// only once a pass has read an approval of it, and this command refuses to run when one was on
/// record already. So the outcome counts once `Approved` is `True` with reason `Approved` for
/// this digest, as long as `status.approval` is still this decision and the digest still the
/// resolved one.
///
/// A denial is handled once `Approved` is False with reason `Denied` and the message the
/// provisioner derives from this denial (its digest and reason), and the phase is `Denied`.
fn after_approval(bundle: Option<&Bundle>, approval: &Approval) -> AfterApproval {
    let Some(bundle) = bundle else {
        return AfterApproval::Deleted;
    };
    let status = bundle.status.clone().unwrap_or_default();
    match &status.approval {
        Some(now) if now == approval => {}
        Some(now) => {
            return AfterApproval::Replaced(decision_text(now));
        }
        None => return AfterApproval::Replaced("the approval was removed".into()),
    }
    let digest = approval.digest.as_str();
    if resolved_digest(&status) != Some(digest) {
        return AfterApproval::Moved(
            status
                .resolved_image
                .clone()
                .unwrap_or_else(|| "another digest".into()),
        );
    }
    if approval.decision == ApprovalDecision::Denied {
        let expected = match approval.reason.as_deref().filter(|r| !r.is_empty()) {
            Some(reason) => format!("{digest} denied: {reason}"),
            None => format!("{digest} denied"),
        };
        let handled = condition(&status, types::APPROVED).is_some_and(|c| {
            c.status == "False" && c.reason == reasons::DENIED && c.message == expected
        });
        return if handled && status.phase == Some(BundlePhase::Denied) {
            AfterApproval::Denied
        } else {
            AfterApproval::Waiting
        };
    }
    let seen = condition(&status, types::APPROVED).is_some_and(|c| {
        c.status == "True"
            && c.reason == reasons::APPROVED
            && c.message.starts_with(&format!("{digest} approved"))
    });
    if !seen {
        return AfterApproval::Waiting;
    }
    let ready = condition(&status, types::READY);
    if ready
        .is_some_and(|c| c.status == "True" && c.observed_generation == bundle.metadata.generation)
    {
        return AfterApproval::Ready;
    }
    match status.phase {
        Some(phase @ (BundlePhase::Failing | BundlePhase::UpdateFailing | BundlePhase::Denied)) => {
            AfterApproval::Failed(format!(
                "phase {phase}{}",
                ready
                    .map(|c| format!(", {}: {}", c.reason, c.message))
                    .unwrap_or_default()
            ))
        }
        _ => AfterApproval::Waiting,
    }
}

/// Waits for the outcome of `approval`: for an approval, the bundle Ready with its digest, or
/// failing; for a denial, the provisioner having handled it.
async fn wait_decided(
    bundles: &Api<Bundle>,
    name: &str,
    approval: &Approval,
    timeout: Duration,
) -> anyhow::Result<()> {
    let settled =
        |bundle: Option<&Bundle>| after_approval(bundle, approval) != AfterApproval::Waiting;
    let denial = approval.decision == ApprovalDecision::Denied;
    if denial {
        eprintln!(
            "waiting up to {timeout:?} for the provisioner to handle the denial of bundle {name}"
        );
    } else {
        eprintln!("waiting up to {timeout:?} for bundle {name} to be Ready");
    }
    let outcome = tokio::time::timeout(
        timeout,
        kube::runtime::wait::await_condition(bundles.clone(), name, settled),
    )
    .await;
    let bundle = match outcome {
        Err(_) if denial => {
            let now = bundles.get_opt(name).await.ok().flatten();
            let status = now.as_ref().and_then(|b| b.status.as_ref());
            bail!(
                "the provisioner has not handled the denial of bundle {name} after {timeout:?}{}{}: is it running? See `kubectl bundle check` and `kubectl bundle status {name}`",
                status
                    .and_then(|s| s.phase)
                    .map(|p| format!(" (phase {p}"))
                    .unwrap_or_else(|| " (".into()),
                status
                    .and_then(|s| condition(s, types::APPROVED))
                    .map(|c| format!(", Approved {}: {}: {})", c.status, c.reason, c.message))
                    .unwrap_or_else(|| ")".into())
            )
        }
        Err(_) => {
            let now = bundles.get_opt(name).await.ok().flatten();
            bail!(
                "bundle {name} is not Ready after {timeout:?}{}: see `kubectl bundle status {name}` and `kubectl bundle events {name}`",
                now.as_ref()
                    .and_then(|b| b.status.as_ref())
                    .and_then(|s| condition(s, types::READY))
                    .map(|c| format!(" (Ready {}: {}: {})", c.status, c.reason, c.message))
                    .unwrap_or_default()
            )
        }
        Ok(result) => result.with_context(|| format!("watching bundle {name}"))?,
    };
    match after_approval(bundle.as_ref(), approval) {
        AfterApproval::Ready => {
            println!("bundle {name} is Ready");
            Ok(())
        }
        AfterApproval::Denied => {
            println!(
                "bundle {name} is Denied: the provisioner handled the denial of {}, which will not be installed",
                approval.digest
            );
            Ok(())
        }
        AfterApproval::Failed(why) => bail!("bundle {name} failed: {why}"),
        AfterApproval::Replaced(by) => {
            bail!(
                "a later decision replaced this {} of bundle {name}: {by}",
                if denial { "denial" } else { "approval" }
            )
        }
        AfterApproval::Moved(to) => {
            bail!("bundle {name} moved to {to} while waiting: that digest needs its own decision")
        }
        AfterApproval::Deleted => bail!("bundle {name} was deleted while waiting"),
        AfterApproval::Waiting => bail!("bundle {name}: no outcome"),
    }
}

pub async fn deny(global: &GlobalArgs, args: DenyArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let (bundle, digest) = reviewable(&client, &args.name, args.digest.as_deref(), "deny").await?;
    let approved_by = approver(&client).await;
    let denial = decide(
        &bundles,
        &bundle,
        &digest,
        ApprovalDecision::Denied,
        Some(&args.reason),
        approved_by.as_deref(),
    )
    .await?;
    println!(
        "bundle {} denied for {digest}{}",
        args.name,
        by(approved_by.as_deref())
    );
    if args.wait {
        wait_decided(&bundles, &args.name, &denial, args.timeout).await?;
    }
    Ok(())
}

/// ` by USER` when the approver is known.
/// `spec.ignore`: one rule per line, `PATHS of TARGET`.
fn ignore_lines(rules: &[gantry_api::IgnoreRule]) -> String {
    rules
        .iter()
        .map(|rule| {
            let target = rule
                .target
                .as_ref()
                .map(|t| serde_json::to_string(t).unwrap_or_default())
                .unwrap_or_else(|| "every object".into());
            format!("  {} of {target}\n", rule.paths.join(", "))
        })
        .collect()
}

/// `spec.patches`: each patch's target, then its operations with their values, indented.
fn patches_lines(patches: &[gantry_api::BundlePatch]) -> String {
    let mut out = String::new();
    for (index, patch) in patches.iter().enumerate() {
        out.push_str(&format!("  [{index}] {}:\n", patch.target));
        match patch.operation_lines() {
            Ok(lines) => {
                for line in lines {
                    out.push_str(&format!("      {line}\n"));
                }
            }
            Err(e) => out.push_str(&format!("      (does not parse: {e})\n")),
        }
    }
    out
}

/// `spec.images`, one rewrite per line: `NAME -> NEW`.
fn images_lines(images: &[gantry_api::ImageOverride]) -> String {
    images
        .iter()
        .map(|image| {
            let name = image.new_name.as_deref().unwrap_or(&image.name);
            let target = match (&image.digest, &image.new_tag) {
                (Some(digest), _) => format!("{name}@{digest}"),
                (None, Some(tag)) => format!("{name}:{tag}"),
                (None, None) => format!("{name} (tag or digest kept)"),
            };
            format!("  {} -> {target}\n", image.name)
        })
        .collect()
}

fn by(approved_by: Option<&str>) -> String {
    approved_by
        .map(|who| format!(" by {who}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::{KindCount, NamespacePermissions, PermissionHighlight};

    fn status(resolved: &str, approval: Option<(ApprovalDecision, &str)>) -> BundleStatus {
        BundleStatus {
            resolved_image: Some(format!("127.0.0.1:5000/app@{resolved}")),
            approval: approval.map(|(decision, digest)| Approval {
                decision,
                digest: digest.into(),
                reason: None,
                time: None,
                approved_by: None,
                images: Vec::new(),
                patches: Vec::new(),
                ignore: Vec::new(),
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

    fn condition_(type_: &str, ok: bool, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    /// A bundle resolving to sha256:aa with `approval` on record and these conditions.
    fn decided(approval: &Approval, phase: BundlePhase, conditions: Vec<Condition>) -> Bundle {
        let mut bundle = Bundle::new("b", Default::default());
        bundle.metadata.generation = Some(1);
        let mut status = status("sha256:aa", None);
        status.approval = Some(approval.clone());
        status.phase = Some(phase);
        status.conditions = conditions;
        bundle.status = Some(status);
        bundle
    }

    #[test]
    fn an_approval_waits_for_the_status_written_after_it() {
        let approval = Approval {
            decision: ApprovalDecision::Approved,
            digest: "sha256:aa".into(),
            reason: Some("ok".into()),
            time: Some(Time(Timestamp::UNIX_EPOCH)),
            approved_by: Some("alice".into()),
            images: Vec::new(),
            patches: Vec::new(),
            ignore: Vec::new(),
        };
        // Right after a deny, the status is the deny's: not this approval's outcome.
        let denied_before = decided(
            &approval,
            BundlePhase::Denied,
            vec![
                condition_(
                    types::APPROVED,
                    false,
                    reasons::DENIED,
                    "sha256:aa denied: no",
                ),
                condition_(types::READY, false, reasons::DENIED, "sha256:aa denied: no"),
            ],
        );
        assert_eq!(
            after_approval(Some(&denied_before), &approval),
            AfterApproval::Waiting
        );
        // Once the provisioner read it: installing, then Ready or failing.
        let seen = |phase, ready: Condition| {
            decided(
                &approval,
                phase,
                vec![
                    condition_(
                        types::APPROVED,
                        true,
                        reasons::APPROVED,
                        "sha256:aa approved: ok",
                    ),
                    ready,
                ],
            )
        };
        let installing = seen(
            BundlePhase::Installing,
            condition_(types::READY, false, reasons::INSTALLING, "applying"),
        );
        assert_eq!(
            after_approval(Some(&installing), &approval),
            AfterApproval::Waiting
        );
        let ready = seen(
            BundlePhase::Installed,
            condition_(types::READY, true, reasons::INSTALL_SUCCEEDED, "done"),
        );
        assert_eq!(
            after_approval(Some(&ready), &approval),
            AfterApproval::Ready
        );
        let failing = seen(
            BundlePhase::Failing,
            condition_(types::READY, false, reasons::APPLY_FAILED, "cm: forbidden"),
        );
        assert_eq!(
            after_approval(Some(&failing), &approval),
            AfterApproval::Failed("phase Failing, ApplyFailed: cm: forbidden".into())
        );
        // Another decision, or another digest, ends the wait; so does a deletion.
        let mut replaced = ready.clone();
        replaced.status.as_mut().unwrap().approval = Some(Approval {
            decision: ApprovalDecision::Denied,
            ..approval.clone()
        });
        assert!(matches!(
            after_approval(Some(&replaced), &approval),
            AfterApproval::Replaced(_)
        ));
        let mut moved = ready.clone();
        moved.status.as_mut().unwrap().resolved_image = Some("r/app@sha256:bb".into());
        assert_eq!(
            after_approval(Some(&moved), &approval),
            AfterApproval::Moved("r/app@sha256:bb".into())
        );
        assert_eq!(after_approval(None, &approval), AfterApproval::Deleted);
    }

    #[test]
    fn a_denial_waits_until_the_provisioner_handled_it() {
        let denial = Approval {
            decision: ApprovalDecision::Denied,
            digest: "sha256:aa".into(),
            reason: Some("not now".into()),
            time: Some(Time(Timestamp::UNIX_EPOCH)),
            approved_by: Some("alice".into()),
            images: Vec::new(),
            patches: Vec::new(),
            ignore: Vec::new(),
        };
        assert_eq!(decision_text(&denial), "Denied sha256:aa by alice: not now");
        // Still awaiting approval: the provisioner has not read the denial.
        let awaiting = decided(
            &denial,
            BundlePhase::AwaitingApproval,
            vec![condition_(
                types::APPROVED,
                false,
                reasons::AWAITING_APPROVAL,
                "waiting for an approver to approve sha256:aa",
            )],
        );
        assert_eq!(
            after_approval(Some(&awaiting), &denial),
            AfterApproval::Waiting
        );
        // An earlier denial of the same digest, for another reason, is not this one's outcome.
        let denied = |message: &str| {
            decided(
                &denial,
                BundlePhase::Denied,
                vec![condition_(types::APPROVED, false, reasons::DENIED, message)],
            )
        };
        assert_eq!(
            after_approval(Some(&denied("sha256:aa denied: too big")), &denial),
            AfterApproval::Waiting
        );
        assert_eq!(
            after_approval(Some(&denied("sha256:aa denied: not now")), &denial),
            AfterApproval::Denied
        );
        // The condition written, the phase not yet.
        let mut half = denied("sha256:aa denied: not now");
        half.status.as_mut().unwrap().phase = Some(BundlePhase::AwaitingApproval);
        assert_eq!(after_approval(Some(&half), &denial), AfterApproval::Waiting);
        // A later approval replaces it.
        let mut replaced = denied("sha256:aa denied: not now");
        replaced.status.as_mut().unwrap().approval = Some(Approval {
            decision: ApprovalDecision::Approved,
            ..denial.clone()
        });
        assert!(matches!(
            after_approval(Some(&replaced), &denial),
            AfterApproval::Replaced(_)
        ));
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
            service_account: Some(gantry_api::ServiceAccountReference {
                namespace: "team".into(),
                name: "deployer".into(),
            }),
        });
        assert!(
            table.contains("cluster") && table.contains("ClusterRole.rbac.authorization.k8s.io")
        );
        assert!(
            table.contains("namespace app") && table.contains("ConfigMap") && table.contains('3')
        );
        assert!(table.contains("! ClusterRole.rbac.authorization.k8s.io all: grants verbs [*]"));
        assert!(
            table.contains(
                "Applied as ServiceAccount team/deployer (system:serviceaccount:team:deployer)"
            ),
            "{table}"
        );
    }
}
