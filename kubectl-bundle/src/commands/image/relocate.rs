//! `relocate`: a pinned bundle image and every image its lock names, copied to another
//! registry, and the bundle pushed naming the copies.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context, bail};
use clap::Args;
use gantry_image::{CopyStats, PullRequest, RegistryClient, parse_reference};

use super::push::{print_lock, push_with_progress};
use super::{OtherRegistryArgs, RegistryArgs, client_for_all, explain, with_progress};
use crate::commands::output::count;
use crate::commands::pin::rewrite::rewrite_dir;
use crate::commands::pin::{ImagesLock, LOCK_ANNOTATION, LockedImage};

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle relocate registry.example.com/team/my-app:v1 mirror.internal:5000/mirror\n  kubectl bundle relocate localhost:5000/my-app:v1 127.0.0.1:5001/mirror --plain-http"
)]
pub struct RelocateArgs {
    /// The bundle image to relocate, pushed with `--pin-images`: a tag or digest reference.
    pub image: String,
    /// Where to copy to, `registry[:port][/path]`: each image goes to
    /// `TARGET_REPO/<its repository without the registry>`.
    pub target_repo: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub other_registries: OtherRegistryArgs,
}

/// `TARGET_REPO/<repository of reference, without its registry>`.
fn relocated_repository(target_repo: &str, reference: &gantry_image::Reference) -> String {
    format!(
        "{}/{}",
        target_repo.trim_end_matches('/'),
        reference.repository()
    )
}

/// The copy of one image, with a progress bar.
async fn copy_with_progress(
    client: &RegistryClient,
    source: &str,
    target: &str,
) -> anyhow::Result<gantry_image::CopiedImage> {
    let stats = Arc::new(CopyStats::default());
    let sent = stats.clone();
    let copied = with_progress(
        format!("copying {source}"),
        move || sent.bytes_sent.load(Ordering::Relaxed),
        client.copy_image(source, target, Some(stats)),
    )
    .await
    .map_err(|e| explain(&format!("copying {source} to {target}:"), source, e))?;
    eprintln!(
        "copied {source} to {target}@{} ({}, {} sent, {} already there)",
        copied.digest,
        count(copied.manifests, "manifest"),
        count(copied.blobs_sent, "blob"),
        copied.blobs_present
    );
    Ok(copied)
}

pub async fn relocate(args: RelocateArgs) -> anyhow::Result<()> {
    let target_repo = args.target_repo.trim_end_matches('/').to_string();
    // The target is checked as a repository: `TARGET_REPO/x` must be a valid reference.
    let probe = format!("{target_repo}/x");
    parse_reference(&probe)
        .with_context(|| format!("{} is not a registry[:port][/path]", args.target_repo))?;
    let source = parse_reference(&args.image)?;
    let client = client_for_all(
        &[&args.image, &probe],
        &args.registry,
        &args.other_registries.insecure_registries,
    )?;
    let top = client
        .raw_manifest(&args.image)
        .await
        .map_err(|e| explain("reading", &args.image, e))?;
    let Some(lock) = top.annotations.get(LOCK_ANNOTATION) else {
        bail!(
            "{} has no images lock (the {LOCK_ANNOTATION} annotation): push the bundle with --pin-images first",
            args.image
        );
    };
    let lock = ImagesLock::from_json(lock)
        .with_context(|| format!("reading the images lock of {}", args.image))?;
    let source_pinned = gantry_image::pinned(&source, &top.digest);
    let bundle_repo = relocated_repository(&target_repo, &source);

    // The bundle image as it is, by digest, then every image of the lock.
    copy_with_progress(&client, &source_pinned, &bundle_repo).await?;
    let mut map = BTreeMap::new();
    for locked in &lock.images {
        if map.contains_key(&locked.pinned) {
            continue;
        }
        let pinned = parse_reference(&locked.pinned)?;
        let repository = relocated_repository(&target_repo, &pinned);
        // Tagged as the original was, for people browsing the registry; manifests name digests.
        let target = match parse_reference(&locked.original)
            .ok()
            .and_then(|o| o.tag().map(str::to_string))
        {
            Some(tag) => format!("{repository}:{tag}"),
            None => repository.clone(),
        };
        let copied = copy_with_progress(&client, &locked.pinned, &target).await?;
        map.insert(
            locked.pinned.clone(),
            format!("{repository}@{}", copied.digest),
        );
    }

    // The bundle's manifests naming the copies, pushed under the bundle's tag.
    let scratch = tempfile::Builder::new()
        .prefix("gantry-relocate-")
        .tempdir()
        .context("creating a scratch directory")?;
    let pulled_dir = scratch.path().join("pulled");
    let mut request = PullRequest::new(&source_pinned);
    request.platform = top.platforms.first().cloned();
    let bundle = client
        .pull(&request)
        .await
        .map_err(|e| explain("pulling", &args.image, e))?;
    let platforms = if top.index {
        top.platforms.clone()
    } else {
        vec![bundle.image.platform.clone()]
    };
    bundle
        .persist_to(&pulled_dir)
        .with_context(|| format!("writing {} to {}", args.image, pulled_dir.display()))?;
    let rewritten_dir = scratch.path().join("relocated");
    let done = rewrite_dir(&pulled_dir, &rewritten_dir, &map)?;
    for file in &done.reserialised {
        eprintln!(
            "note: {file}: a document naming an image could not be rewritten in place and was written anew"
        );
    }
    let relocated = ImagesLock {
        images: lock
            .images
            .iter()
            .map(|l| LockedImage {
                pinned: map[&l.pinned].clone(),
                relocated_from: Some(l.pinned.clone()),
                ..l.clone()
            })
            .collect(),
    };
    let mut annotations = BTreeMap::new();
    annotations.insert(LOCK_ANNOTATION.to_string(), relocated.to_json()?);
    let target = format!("{bundle_repo}:{}", source.tag().unwrap_or("latest"));
    let pushed = push_with_progress(&client, &rewritten_dir, &target, &platforms, &annotations)
        .await
        .map_err(|e| explain("pushing the relocated bundle to", &target, e))?;
    eprintln!(
        "relocated {} to {}: {} copied, the bundle's manifests name them",
        args.image,
        target,
        count(map.len(), "image")
    );
    print_lock(&relocated);
    println!("{}", pushed.pinned);
    Ok(())
}
