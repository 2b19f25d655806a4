//! A bundle directory: what `push` reads, checked by `validate` (and read by `diff --dir`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use gantry_image::{
    BundleObject, EffectiveLimits, PreparedBundle, prepare_dir, write_canonical_objects,
};

use crate::commands::cluster::GlobalArgs;
use crate::commands::output::{count, header, print_table};
use crate::commands::scope::check_namespaces;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle validate ./my-app\n  kubectl bundle validate ./my-app --against-cluster --context prod"
)]
pub struct ValidateArgs {
    /// Bundle directory: it holds `manifests/`.
    pub dir: PathBuf,
    /// Also check every kind against the cluster's discovery (read with the kubeconfig): a kind
    /// the cluster does not serve, and no CRD of the bundle defines, is an error; whether a kind
    /// is namespaced comes from the cluster.
    #[arg(long)]
    pub against_cluster: bool,
}

/// Refuses what is not a bundle directory, saying what to give instead.
pub(super) fn check_bundle_dir(dir: &Path) -> anyhow::Result<()> {
    let shown = dir.display();
    if !dir.exists() {
        bail!("{shown} does not exist: give the bundle directory, the one that holds manifests/");
    }
    if !dir.is_dir() {
        bail!(
            "{shown} is not a directory: give the bundle directory, the one that holds manifests/"
        );
    }
    if dir.join("manifests").is_dir() {
        return Ok(());
    }
    if dir.file_name().is_some_and(|n| n == "manifests") {
        bail!(
            "{shown} is the manifests/ directory itself: give its parent, {}",
            parent(dir)
        );
    }
    bail!(
        "{shown} has no manifests/ directory: a bundle directory holds manifests/ with the objects' YAML files"
    )
}

/// The objects of bundle directory `dir`, checked as `push` checks them (the default limits),
/// read as the provisioner reads them from the image `push` would make.
pub(crate) fn load_dir(dir: &Path) -> anyhow::Result<Vec<BundleObject>> {
    Ok(prepare(dir)?.1)
}

/// Bundle directory `dir` as `push` prepares it, and its objects as [`load_dir`] reads them.
fn prepare(dir: &Path) -> anyhow::Result<(PreparedBundle, Vec<BundleObject>)> {
    check_bundle_dir(dir)?;
    let limits = EffectiveLimits::default();
    let prepared = prepare_dir(dir, &limits)
        .with_context(|| format!("{} is not a valid bundle", dir.display()))?;
    let (_, objects) = write_canonical_objects(&prepared.files, std::io::sink(), &limits)
        .with_context(|| format!("reading {}", dir.display()))?;
    Ok((prepared, objects))
}

pub(super) fn parent(dir: &Path) -> String {
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
        _ => ".".into(),
    }
}

/// The checks `push` makes, without a registry; and the namespaces of namespaced objects
/// (warnings), against the cluster's kinds with `--against-cluster`.
pub async fn validate(global: &GlobalArgs, args: ValidateArgs) -> anyhow::Result<()> {
    let (prepared, objects) = prepare(&args.dir)?;
    let client = if args.against_cluster {
        Some(global.client().await?)
    } else {
        None
    };
    let findings = check_namespaces(&objects, client.as_ref()).await?;
    let mut rows = vec![header(&["FILE", "KIND", "NAMESPACE", "NAME"])];
    for o in &prepared.objects {
        rows.push(vec![
            o.file.clone(),
            o.kind.clone(),
            o.namespace.clone().unwrap_or_default(),
            o.name.clone(),
        ]);
    }
    print_table(&rows);
    for warning in &findings.warnings {
        eprintln!("warning: {warning}");
    }
    if !findings.errors.is_empty() {
        bail!(
            "{} of {} not served by the cluster:\n  {}",
            count(findings.errors.len(), "object"),
            args.dir.display(),
            findings.errors.join("\n  ")
        );
    }
    eprintln!(
        "{}: a valid plain+v0 bundle, {} in {}",
        args.dir.display(),
        count(prepared.objects.len(), "object"),
        count(prepared.files.files.len(), "file")
    );
    Ok(())
}
