//! `push`: a bundle directory as a plain+v0 image, its container images pinned to digests
//! with `--pin-images`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context, bail};
use clap::Args;
use gantry_image::{EffectiveLimits, ImageError, Platform, PushStats, PushedImage, RegistryClient};

use super::dir::{check_bundle_dir, load_dir};
use super::{OtherRegistryArgs, RegistryArgs, client_for_all, explain, with_progress};
use crate::commands::output::{count, table};
use crate::commands::pin::rewrite::rewrite_dir;
use crate::commands::pin::{ImagesLock, LOCK_ANNOTATION, LockedImage, image_uses};

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle push ./my-app registry.example.com/team/my-app:v1\n  kubectl bundle push ./my-app localhost:5000/my-app:v1 --plain-http --platform linux/amd64 --platform linux/arm64"
)]
pub struct PushArgs {
    /// Bundle directory: it holds `manifests/`.
    pub dir: PathBuf,
    /// Image to push to, `registry/repository[:tag]` (tag `latest` when absent).
    pub image: String,
    /// Platform (`os/arch[/variant]`) of the image; repeat it to push an image index.
    /// Default: the platform of this machine.
    #[arg(long = "platform", value_name = "PLATFORM")]
    pub platforms: Vec<String>,
    /// Resolve every container image the manifests name to its digest in its registry, push
    /// the manifests naming `repo@sha256:...`, and record what was pinned in the image (the
    /// `dev.gantry.images.lock` manifest annotation).
    #[arg(long)]
    pub pin_images: bool,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub other_registries: OtherRegistryArgs,
}

/// Pushes `dir` as `target` while a progress bar on a terminal shows the bytes sent.
pub(super) async fn push_with_progress(
    client: &RegistryClient,
    dir: &Path,
    target: &str,
    platforms: &[Platform],
    annotations: &BTreeMap<String, String>,
) -> Result<PushedImage, ImageError> {
    let stats = Arc::new(PushStats::default());
    let sent = stats.clone();
    let limits = EffectiveLimits::default();
    with_progress(
        format!("pushing {target}"),
        move || sent.layer_bytes_sent.load(Ordering::Relaxed),
        client.push_dir_annotated(dir, target, platforms, &limits, Some(stats), annotations),
    )
    .await
}

pub async fn push(args: PushArgs) -> anyhow::Result<()> {
    check_bundle_dir(&args.dir)?;
    let platforms = args
        .platforms
        .iter()
        .map(|p| p.parse::<Platform>())
        .collect::<Result<Vec<_>, _>>()?;
    let client = client_for_all(
        &[&args.image],
        &args.registry,
        &args.other_registries.insecure_registries,
    )?;
    // Pinning rewrites a copy of the directory; the lock goes into the manifests' annotations.
    let mut dir = args.dir.clone();
    let mut annotations = BTreeMap::new();
    let mut lock = None;
    let _scratch = if args.pin_images {
        let dir_ = args.dir.clone();
        tokio::task::spawn_blocking(move || load_dir(&dir_)).await??;
        let (scratch, pinned) = pin_images(&client, &args.dir).await?;
        dir = scratch.path().to_path_buf();
        annotations.insert(LOCK_ANNOTATION.to_string(), pinned.to_json()?);
        lock = Some(pinned);
        Some(scratch)
    } else {
        None
    };
    let pushed = push_with_progress(&client, &dir, &args.image, &platforms, &annotations)
        .await
        .map_err(|e| {
            explain(
                &format!("pushing {} to", args.dir.display()),
                &args.image,
                e,
            )
        })?;
    eprintln!(
        "pushed {} as {}",
        count(pushed.objects.len(), "object"),
        pushed
            .manifests
            .iter()
            .map(|(p, d)| format!("{p} ({d})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(lock) = &lock {
        print_lock(lock);
    }
    println!("{}", pushed.pinned);
    Ok(())
}

/// The lock as a table on stderr (stdout carries the pinned reference).
pub(super) fn print_lock(lock: &ImagesLock) {
    if lock.images.is_empty() {
        eprintln!("images lock: the manifests name no container images");
        return;
    }
    eprintln!("images lock ({}):", count(lock.images.len(), "container"));
    eprint!("{}", table(&lock.rows()));
}

/// Resolves every container image of bundle directory `dir` to its digest and writes the
/// manifests naming the digests into a scratch directory. Nothing is written when an image
/// cannot be resolved: the error names each such image and where it is used.
async fn pin_images(
    client: &RegistryClient,
    dir: &Path,
) -> anyhow::Result<(tempfile::TempDir, ImagesLock)> {
    let uses = image_uses(dir)?;
    let mut resolved: BTreeMap<String, Result<String, ImageError>> = BTreeMap::new();
    for image in uses.iter().map(|u| &u.image) {
        if resolved.contains_key(image) {
            continue;
        }
        let result = client.resolve(image).await.map(|r| r.pinned());
        resolved.insert(image.clone(), result);
    }
    let mut failures = Vec::new();
    for (image, result) in &resolved {
        if let Err(error) = result {
            let places: Vec<String> = uses
                .iter()
                .filter(|u| &u.image == image)
                .map(|u| format!("{}: {} container {}", u.file, u.object, u.container))
                .collect();
            failures.push(format!(
                "image {image} ({}) cannot be resolved: {error}",
                places.join("; ")
            ));
        }
    }
    if !failures.is_empty() {
        bail!(
            "{} of {} could not be pinned, nothing was pushed:\n  {}",
            count(failures.len(), "image"),
            dir.display(),
            failures.join("\n  ")
        );
    }
    let map: BTreeMap<String, String> = resolved
        .into_iter()
        .filter_map(|(image, result)| result.ok().map(|pinned| (image, pinned)))
        .collect();
    let lock = ImagesLock {
        images: uses
            .iter()
            .map(|u| LockedImage {
                file: u.file.clone(),
                object: u.object.clone(),
                container: u.container.clone(),
                original: u.image.clone(),
                pinned: map[&u.image].clone(),
                relocated_from: None,
            })
            .collect(),
    };
    let scratch = tempfile::Builder::new()
        .prefix("gantry-pin-")
        .tempdir()
        .context("creating a scratch directory")?;
    let done = rewrite_dir(dir, scratch.path(), &map)?;
    for file in &done.reserialised {
        eprintln!(
            "note: {file}: a document naming an image could not be rewritten in place and was written anew (comments and formatting of that document are not kept)"
        );
    }
    Ok((scratch, lock))
}
