//! `push` and `pull`: the authoring side, built on `gantry_image`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use gantry_image::{
    BundleObject, CopyStats, DockerConfig, EffectiveLimits, ImageError, Platform, PullRequest,
    PullStats, PushStats, PushedImage, RegistryClient, RegistryOptions, RegistryProtocol,
    parse_reference, prepare_dir, write_canonical_objects,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::cluster::GlobalArgs;
use super::output::{count, print_table};
use super::pin::{ImagesLock, LOCK_ANNOTATION, LockedImage, image_uses, rewrite_dir};
use super::scope::check_namespaces;

/// How to reach the registry.
#[derive(Args, Debug)]
pub struct RegistryArgs {
    /// Reach the registry over plain HTTP instead of TLS.
    #[arg(long)]
    pub plain_http: bool,
    /// Also trust the CA certificates (PEM) in this file for registry TLS.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

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

/// Registries other than the ones named on the command line.
#[derive(Args, Debug)]
pub struct OtherRegistryArgs {
    /// Also reach this registry (`host[:port]`) over plain HTTP: a registry of the container
    /// images pinned or copied. Repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure_registries: Vec<String>,
}

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

/// A client with the user's docker credentials, plain HTTP for IMAGE's registry when asked.
pub(crate) fn client_for(image: &str, args: &RegistryArgs) -> anyhow::Result<RegistryClient> {
    client_for_all(&[image], args, &[])
}

/// A client with the user's docker credentials, plain HTTP for the registries of `images`
/// when asked, and for the registries `insecure` lists.
fn client_for_all(
    images: &[&str],
    args: &RegistryArgs,
    insecure: &[String],
) -> anyhow::Result<RegistryClient> {
    let credentials =
        DockerConfig::from_default_location().context("reading the docker config file")?;
    let mut options = RegistryOptions {
        credentials,
        insecure_registries: insecure.to_vec(),
        ..Default::default()
    };
    if args.plain_http {
        for image in images {
            let reference = parse_reference(image)?;
            options
                .insecure_registries
                .push(reference.resolve_registry().to_string());
        }
    }
    if let Some(path) = &args.ca_file {
        let pem = std::fs::read(path)
            .with_context(|| format!("reading the CA file {}", path.display()))?;
        options.ca_pem.push(pem);
    }
    Ok(RegistryClient::new(options)?)
}

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
fn check_bundle_dir(dir: &Path) -> anyhow::Result<()> {
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
    check_bundle_dir(dir)?;
    let limits = EffectiveLimits::default();
    let prepared = prepare_dir(dir, &limits)
        .with_context(|| format!("{} is not a valid bundle", dir.display()))?;
    let (_, objects) = write_canonical_objects(&prepared.files, std::io::sink(), &limits)
        .with_context(|| format!("reading {}", dir.display()))?;
    Ok(objects)
}

fn parent(dir: &Path) -> String {
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
        _ => ".".into(),
    }
}

/// A registry error as one message, "ACTION REFERENCE: what failed": the reference said once
/// (the one the error names, else IMAGE), and the fix when the registry speaks the other
/// protocol than the one used.
pub(crate) fn explain(action: &str, image: &str, error: ImageError) -> anyhow::Error {
    let fix = match &error {
        ImageError::ProtocolMismatch {
            registry,
            speaks: RegistryProtocol::PlainHttp,
            ..
        } => format!(
            ": use --plain-http (a Bundle of this image needs {registry} in its class's insecureRegistries)"
        ),
        ImageError::ProtocolMismatch {
            speaks: RegistryProtocol::Tls,
            ..
        } => {
            ": drop --plain-http (and give --ca-file if a private CA signed its certificate)".into()
        }
        _ => String::new(),
    };
    anyhow::anyhow!(match &error {
        ImageError::InvalidReference { .. } => error.to_string(),
        _ if error.reference().is_some() => format!("{action} {error}{fix}"),
        _ => format!("{action} {image}: {error}"),
    })
}

/// A progress bar on stderr, hidden when stderr is not a terminal.
/// Pushes `dir` as `target` while a progress bar on a terminal shows the bytes sent.
async fn push_with_progress(
    client: &RegistryClient,
    dir: &Path,
    target: &str,
    platforms: &[Platform],
    annotations: &BTreeMap<String, String>,
) -> Result<PushedImage, ImageError> {
    let bar = progress(format!("pushing {target}"));
    let stats = Arc::new(PushStats::default());
    let ticker = {
        let (bar, stats) = (bar.clone(), stats.clone());
        tokio::spawn(async move {
            loop {
                bar.set_position(stats.layer_bytes_sent.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let pushed = client
        .push_dir_annotated(
            dir,
            target,
            platforms,
            &EffectiveLimits::default(),
            Some(stats),
            annotations,
        )
        .await;
    ticker.abort();
    bar.finish_and_clear();
    pushed
}

fn progress(message: String) -> ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {msg}: {binary_bytes} ({binary_bytes_per_sec}, {elapsed})",
    ) {
        bar.set_style(style);
    }
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
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
fn print_lock(lock: &ImagesLock) {
    if lock.images.is_empty() {
        eprintln!("images lock: the manifests name no container images");
        return;
    }
    eprintln!("images lock ({}):", count(lock.images.len(), "container"));
    eprint!("{}", super::output::table(&lock.rows()));
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
    let bar = progress(format!("copying {source}"));
    let stats = Arc::new(CopyStats::default());
    let ticker = {
        let (bar, stats) = (bar.clone(), stats.clone());
        tokio::spawn(async move {
            loop {
                bar.set_position(stats.bytes_sent.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let copied = client
        .copy_image(source, target, Some(stats))
        .await
        .map_err(|e| explain(&format!("copying {source} to {target}:"), source, e));
    ticker.abort();
    bar.finish_and_clear();
    let copied = copied?;
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
    let bar = progress(format!("pulling {}", args.image));
    let ticker = {
        let (bar, stats) = (bar.clone(), stats.clone());
        tokio::spawn(async move {
            loop {
                bar.set_position(stats.compressed_bytes.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let pulled = client
        .pull(&request)
        .await
        .map_err(|e| explain("pulling", &args.image, e));
    ticker.abort();
    bar.finish_and_clear();
    let bundle = pulled?;
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

/// The checks `push` makes, without a registry; and the namespaces of namespaced objects
/// (warnings), against the cluster's kinds with `--against-cluster`.
pub async fn validate(global: &GlobalArgs, args: ValidateArgs) -> anyhow::Result<()> {
    check_bundle_dir(&args.dir)?;
    let limits = EffectiveLimits::default();
    let prepared = prepare_dir(&args.dir, &limits)
        .with_context(|| format!("{} is not a valid bundle", args.dir.display()))?;
    let (_, objects) = write_canonical_objects(&prepared.files, std::io::sink(), &limits)
        .with_context(|| format!("reading {}", args.dir.display()))?;
    let client = if args.against_cluster {
        Some(global.client().await?)
    } else {
        None
    };
    let findings = check_namespaces(&objects, client.as_ref()).await?;
    let mut rows = vec![
        ["FILE", "KIND", "NAMESPACE", "NAME"]
            .map(String::from)
            .to_vec(),
    ];
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
