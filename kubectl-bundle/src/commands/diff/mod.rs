//! `diff`: what applying a bundle's stored content (pending approval, or current) would change
//! on the cluster, as `kubectl diff` shows it: each object is applied server-side as a dry run,
//! with the provisioner's field manager, and compared with the live object; objects of the
//! inventory the content no longer has are shown as pruned. Secrets' values are masked.
//! The objects are the ones the provisioner would apply: `spec.patches` applied, then
//! `spec.images` rewritten.
//! With `--dir DIR`, the content compared is a bundle directory's instead (as `push` would read
//! it), and nothing is pushed.
//! Exit status: 0 no changes, 1 changes, 2 (and more) an error.

pub(crate) mod content;
pub(crate) mod object;
mod text;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::{Bundle, InventoryEntry};
use kube::ResourceExt;
use kube::api::Api;

use super::cluster::{GlobalArgs, read_bundle};
use content::{ContentSource, stored_content};
use object::{ObjectDiff, describe_entry, diff_object, plan, pruned};

/// The prefix of the CRD upgrade check's findings among the highlights.
pub(crate) const UNSAFE_CRD: &str = "unsafe CRD upgrade: ";

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  kubectl bundle diff my-app\n  \
    kubectl -n gantry-system port-forward svc/gantry-storage 8080 &\n  \
    kubectl bundle diff my-app --storage-url http://127.0.0.1:8080 --storage-token-file token\n  \
    kubectl bundle diff my-app --from-registry\n  \
    kubectl bundle diff my-app --dir ./my-app\n\n\
    Exit status: 0 when nothing would change, 1 when something would, 2 on an error.")]
pub struct DiffArgs {
    /// The bundle.
    name: String,
    /// Compare a bundle directory (it holds `manifests/`, as `push` takes it) with what the
    /// bundle installed, instead of the bundle's stored content: what pushing DIR and
    /// installing it in this bundle would change. Nothing is pushed or applied.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["storage_url", "storage_token_file", "storage_ca_file", "from_registry"])]
    dir: Option<PathBuf>,
    #[command(flatten)]
    source: ContentSource,
}

/// Runs the diff; the exit status says whether anything would change.
pub async fn diff(global: &GlobalArgs, args: DiffArgs) -> ExitCode {
    match run(global, args).await {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {}", super::output::causes(&error));
            ExitCode::from(2)
        }
    }
}

/// Identifies an object whatever version names it: group, kind, namespace, name.
pub(crate) type ObjectKey = (String, String, Option<String>, String);

/// The key of an inventory entry.
pub(crate) fn key_of(entry: &InventoryEntry) -> ObjectKey {
    let InventoryEntry {
        group,
        kind,
        namespace,
        name,
        ..
    } = entry.clone();
    (group, kind, namespace, name)
}

async fn run(global: &GlobalArgs, args: DiffArgs) -> anyhow::Result<bool> {
    let client = global.client().await?;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let bundle = read_bundle(&bundles, &args.name).await?;
    let name = bundle.name_any();
    let status = bundle.status.clone().unwrap_or_default();
    let objects = if let Some(dir) = args.dir.clone() {
        tokio::task::spawn_blocking(move || super::image::dir::load_dir(&dir))
            .await
            .context("reading the bundle directory")??
    } else {
        stored_content(&args.source, &client, &bundle).await?
    };

    let mut changed = false;
    let mut failures = Vec::new();
    let mut desired: Vec<ObjectKey> = Vec::new();
    let mut out = String::new();
    // Planned as the provisioner plans it: an object it would refuse fails the whole diff.
    let planned = plan(&client, &bundle, objects).await?;
    for object in &planned.plan.objects {
        match diff_object(&client, &bundle, &planned, object).await {
            Ok(ObjectDiff { key, text }) => {
                desired.push(key);
                if let Some(text) = text {
                    changed = true;
                    out.push_str(&text);
                }
            }
            Err(error) => failures.push(format!("{object}: {}", super::output::causes(&error))),
        }
    }
    for entry in &status.inventory {
        let key = key_of(entry);
        if desired.contains(&key) {
            continue;
        }
        match pruned(&client, entry, &name).await {
            Ok(Some(text)) => {
                changed = true;
                out.push_str(&text);
            }
            Ok(None) => {}
            Err(error) => failures.push(format!(
                "{}: {}",
                describe_entry(entry),
                super::output::causes(&error)
            )),
        }
    }
    // What the provisioner found unsafe in the stored content's CRDs, first: the diff of a CRD
    // shows its schema changing, not whether stored objects survive it.
    if args.dir.is_none() {
        let findings = unsafe_crd_changes(&status);
        if !findings.is_empty() {
            println!(
                "Unsafe CRD changes (refused on apply unless the CRD accepts them, see `kubectl bundle status {name}`):"
            );
            for finding in findings {
                println!("  - {finding}");
            }
            println!();
        }
    }
    print!("{out}");
    for unmatched in planned.unmatched {
        eprintln!("warning: {unmatched} selects no object of the content: it patches nothing");
    }
    if !failures.is_empty() {
        bail!(
            "{} object(s) could not be compared:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    Ok(changed)
}

/// The unsafe CRD changes among the highlights the provisioner wrote for the stored content.
fn unsafe_crd_changes(status: &gantry_api::BundleStatus) -> Vec<&str> {
    status
        .requested_permissions
        .iter()
        .flat_map(|p| &p.highlights)
        .filter_map(|h| h.reason.strip_prefix(UNSAFE_CRD))
        .collect()
}
