//! `pull`: a bundle image, verified and validated, written as a bundle directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context, bail};
use clap::Args;
use gantry_image::{PullRequest, PullStats};

use super::dir::parent;
use super::{RegistryArgs, client_for, explain, with_progress};
use crate::commands::output::count;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle pull registry.example.com/team/my-app:v1 --dir ./my-app\n  kubectl bundle pull localhost:5000/my-app@sha256:... -d ./check --plain-http"
)]
pub struct PullArgs {
    /// Image to pull: a tag or digest reference.
    pub image: String,
    /// Bundle directory to write `manifests/` into (created if needed; its `manifests/` must
    /// not hold files).
    #[arg(short = 'd', long = "dir", value_name = "DIR")]
    pub dir: PathBuf,
    /// Platform to select from an image index. Default: the platform of this machine.
    #[arg(long, value_name = "PLATFORM")]
    pub platform: Option<String>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

pub async fn pull(args: PullArgs) -> anyhow::Result<()> {
    if args.dir.file_name().is_some_and(|n| n == "manifests") {
        bail!(
            "{} is a manifests/ directory: pull writes DIR/manifests/, so give its parent, {}",
            args.dir.display(),
            parent(&args.dir)
        );
    }
    let client = client_for(&args.image, &args.registry)?;
    let mut request = PullRequest::new(&args.image);
    request.platform = args.platform.as_deref().map(str::parse).transpose()?;
    let target = args.dir.join("manifests");
    if std::fs::read_dir(&target).is_ok_and(|mut entries| entries.next().is_some()) {
        bail!(
            "{} is not empty: pull writes a bundle directory's manifests/",
            target.display()
        );
    }
    // Unpacking next to the destination makes writing it a rename.
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    request.scratch_parent = Some(args.dir.clone());
    let stats = Arc::new(PullStats::default());
    request.stats = Some(stats.clone());
    let bundle = with_progress(
        format!("pulling {}", args.image),
        move || stats.compressed_bytes.load(Ordering::Relaxed),
        client.pull(&request),
    )
    .await
    .map_err(|e| explain("pulling", &args.image, e))?;
    let image = bundle.image.clone();
    let (files, objects) = (bundle.files.files.len(), bundle.objects.len());
    bundle
        .persist_to(&args.dir)
        .with_context(|| format!("writing {} to {}", args.image, args.dir.display()))?;
    eprintln!(
        "pulled {} (platform {}, manifest {}): {} in {}",
        image.resolved_image,
        image.platform,
        image.manifest_digest,
        count(objects, "object"),
        count(files, "file")
    );
    println!("{}", image.resolved_image);
    Ok(())
}
