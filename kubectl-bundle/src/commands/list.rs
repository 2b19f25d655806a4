//! `list`: the bundles with their class, phase, readiness, health, digest and approval, as a
//! table or a document, and again as they change. Fetching reads the bundles (and the slot
//! table for `-o wide`), the rows are made from them alone, and printing writes them.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Context;
use clap::Args;
use futures::{StreamExt, TryStreamExt};
use gantry_api::Bundle;
use gantry_api::conditions::types;
use gantry_api::slots::SlotTable;
use gantry_rules::conditions::find;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::cluster::{GlobalArgs, get_bundles};
use super::output::Reported;
use super::output::{
    OutputFormat, clean, custom_columns_text, list_of, parse_output, print_structured, print_table,
    table,
};
use super::review::{approval_state, class_name, resolved_digest, short};

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
        find(&status.conditions, types::READY)
            .map(|c| c.status.clone())
            .unwrap_or_default(),
        // Ready can be True while the objects are not healthy (a class that does not wait).
        find(&status.conditions, types::HEALTHY)
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

/// The bundles asked for: those named, in the order given, as `kubectl get bundles A B` reads
/// them (the ones refused said on stderr, and [`Reported`]); else all, or those the selector
/// matches, by name.
async fn fetch(
    bundles: &Api<Bundle>,
    args: &ListArgs,
) -> anyhow::Result<(Vec<Bundle>, Option<Reported>)> {
    if !args.names.is_empty() {
        return get_bundles(bundles, &args.names).await;
    }
    let mut params = ListParams::default();
    if let Some(selector) = &args.selector {
        params = params.labels(selector);
    }
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
    Ok((items, None))
}

/// The watch of the bundles `args` asks for: the selector's, or the one bundle named.
fn watch_config(args: &ListArgs) -> watcher::Config {
    let mut config = watcher::Config::default();
    if let Some(selector) = &args.selector {
        config = config.labels(selector);
    }
    if let [name] = args.names.as_slice() {
        config = config.fields(&format!("metadata.name={name}"));
    }
    config
}

pub async fn list(global: &GlobalArgs, args: ListArgs) -> anyhow::Result<()> {
    let client = global.client().await?;
    let wide = args.output == Some(OutputFormat::Wide);
    let bundles: Api<Bundle> = Api::all(client.clone());
    let (items, refused) = fetch(&bundles, &args).await?;
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
    let mut changes = watcher(bundles, watch_config(&args))
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
