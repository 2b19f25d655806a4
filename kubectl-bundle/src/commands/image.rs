//! `push` and `pull`: the authoring side, built on `gantry_image`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use gantry_image::{
    BundleObject, DockerConfig, EffectiveLimits, ImageError, Platform, PullRequest, PullStats,
    PushStats, RegistryClient, RegistryOptions, RegistryProtocol, parse_reference, prepare_dir,
    write_canonical_objects,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::cluster::GlobalArgs;
use super::output::{count, print_table};
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
    #[command(flatten)]
    pub registry: RegistryArgs,
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
    let reference = parse_reference(image)?;
    let credentials =
        DockerConfig::from_default_location().context("reading the docker config file")?;
    let mut options = RegistryOptions {
        credentials,
        ..Default::default()
    };
    if args.plain_http {
        options
            .insecure_registries
            .push(reference.resolve_registry().to_string());
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
    let client = client_for(&args.image, &args.registry)?;
    let bar = progress(format!("pushing {}", args.image));
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
        .push_dir_with_stats(
            &args.dir,
            &args.image,
            &platforms,
            &EffectiveLimits::default(),
            Some(stats.clone()),
        )
        .await
        .map_err(|e| {
            explain(
                &format!("pushing {} to", args.dir.display()),
                &args.image,
                e,
            )
        });
    ticker.abort();
    bar.finish_and_clear();
    let pushed = pushed?;
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
