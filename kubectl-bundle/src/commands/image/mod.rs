//! `push`, `pull`, `validate` and `relocate`: the authoring side, built on `gantry_image`;
//! here what they share: how to reach registries, their errors, the progress bar.

pub(super) mod dir;
pub(super) mod pull;
pub(super) mod push;
pub(super) mod relocate;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use gantry_image::{
    DockerConfig, ImageError, RegistryClient, RegistryOptions, RegistryProtocol, parse_reference,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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

/// Registries other than the ones named on the command line.
#[derive(Args, Debug)]
pub struct OtherRegistryArgs {
    /// Also reach this registry (`host[:port]`) over plain HTTP: a registry of the container
    /// images pinned or copied. Repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure_registries: Vec<String>,
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

/// Runs `work` while a progress bar on stderr (hidden when stderr is not a terminal) shows
/// `message` and the bytes `sent` counts.
async fn with_progress<T>(
    message: String,
    sent: impl Fn() -> u64 + Send + 'static,
    work: impl Future<Output = T>,
) -> T {
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {msg}: {binary_bytes} ({binary_bytes_per_sec}, {elapsed})",
        ) {
            bar.set_style(style);
        }
        bar.set_message(message);
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    } else {
        ProgressBar::hidden()
    };
    let ticker = {
        let bar = bar.clone();
        tokio::spawn(async move {
            loop {
                bar.set_position(sent());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let done = work.await;
    ticker.abort();
    bar.finish_and_clear();
    done
}
