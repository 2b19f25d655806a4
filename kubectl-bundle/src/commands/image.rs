//! `push` and `pull`: the authoring side, built on `gantry_image`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use gantry_image::{
    DockerConfig, EffectiveLimits, Platform, PullRequest, RegistryClient, RegistryOptions,
    parse_reference,
};

/// How to reach the registry of IMAGE.
#[derive(Args, Debug)]
pub struct RegistryArgs {
    /// Reach the registry of IMAGE over plain HTTP instead of TLS.
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
    after_help = "Examples:\n  kubectl bundle pull registry.example.com/team/my-app:v1 -o ./my-app\n  kubectl bundle pull localhost:5000/my-app@sha256:... -o ./check --plain-http"
)]
pub struct PullArgs {
    /// Image to pull: a tag or digest reference.
    pub image: String,
    /// Directory to write `manifests/` into (created if needed; `manifests/` must not hold files).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
    /// Platform to select from an image index. Default: the platform of this machine.
    #[arg(long, value_name = "PLATFORM")]
    pub platform: Option<String>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// A client with the user's docker credentials, plain HTTP for IMAGE's registry when asked.
fn client_for(image: &str, args: &RegistryArgs) -> anyhow::Result<RegistryClient> {
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

pub async fn push(args: PushArgs) -> anyhow::Result<()> {
    let platforms = args
        .platforms
        .iter()
        .map(|p| p.parse::<Platform>())
        .collect::<Result<Vec<_>, _>>()?;
    let client = client_for(&args.image, &args.registry)?;
    let pushed = client
        .push_dir(
            &args.dir,
            &args.image,
            &platforms,
            &EffectiveLimits::default(),
        )
        .await
        .with_context(|| format!("pushing {} to {}", args.dir.display(), args.image))?;
    eprintln!(
        "pushed {} objects as {}",
        pushed.objects.len(),
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
    let client = client_for(&args.image, &args.registry)?;
    let mut request = PullRequest::new(&args.image);
    request.platform = args.platform.as_deref().map(str::parse).transpose()?;
    let target = args.output.join("manifests");
    if std::fs::read_dir(&target).is_ok_and(|mut entries| entries.next().is_some()) {
        anyhow::bail!(
            "{} is not empty: pull writes a bundle directory's manifests/",
            target.display()
        );
    }
    // Unpacking next to the destination makes writing it a rename.
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    request.scratch_parent = Some(args.output.clone());
    let bundle = client
        .pull(&request)
        .await
        .with_context(|| format!("pulling {}", args.image))?;
    let image = bundle.image.clone();
    let (files, objects) = (bundle.files.files.len(), bundle.objects.len());
    bundle
        .persist_to(&args.output)
        .with_context(|| format!("writing {} to {}", args.image, args.output.display()))?;
    eprintln!(
        "pulled {} (platform {}, manifest {}): {objects} objects in {files} files",
        image.resolved_image, image.platform, image.manifest_digest
    );
    println!("{}", image.resolved_image);
    Ok(())
}
