//! Reading a bundle's stored content: from the storage server, or from the registry.

use std::path::PathBuf;

use anyhow::{Context, bail};
use gantry_api::{Bundle, ProvisionerClass};
use gantry_image::{BundleObject, EffectiveLimits, Platform, PullRequest, read_canonical};
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::commands::image::{RegistryArgs, client_for, explain};

/// Where a bundle's stored content is read from: the options of `diff` and of the review page
/// (`ui`), whose diff reads it the same way.
#[derive(clap::Args, Debug)]
pub struct ContentSource {
    /// Base URL of the storage server, replacing the one in status.contentURL (for example a
    /// port-forward from outside the cluster).
    #[arg(long, value_name = "URL")]
    storage_url: Option<String>,
    /// File holding a bearer token the storage server accepts (audience gantry-storage, with
    /// get on /bundles/*).
    #[arg(long, value_name = "FILE", conflicts_with = "storage_token")]
    storage_token_file: Option<PathBuf>,
    /// A bearer token the storage server accepts.
    #[arg(long, env = "GANTRY_STORAGE_TOKEN", hide_env_values = true)]
    storage_token: Option<String>,
    /// CA certificate (PEM) trusted for the storage server's TLS.
    #[arg(long, value_name = "FILE")]
    storage_ca_file: Option<PathBuf>,
    /// Read the content from the registry instead of the storage server: the image at the
    /// digest in status.resolvedImage, for status.platform, with the docker credentials of
    /// this machine. The content must be the one stored (status.contentDigest), or the diff
    /// stops.
    #[arg(long, conflicts_with_all = ["storage_url", "storage_token_file", "storage_token", "storage_ca_file"])]
    from_registry: bool,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// The bundle's stored content (awaiting approval, or current): from the storage server, or
/// with `--from-registry` from the image it resolved to.
pub(crate) async fn stored_content(
    args: &ContentSource,
    client: &Client,
    bundle: &Bundle,
) -> anyhow::Result<Vec<BundleObject>> {
    let name = bundle.name_any();
    let status = bundle.status.clone().unwrap_or_default();
    let (Some(url), Some(digest)) = (status.content_url, status.content_digest) else {
        bail!("bundle {name} has no stored content yet (status.contentURL is empty)");
    };
    let limits = class_limits(client, bundle).await;
    Ok(if args.from_registry {
        from_registry(args, bundle, &digest, limits).await?
    } else {
        let body = download(args, &url, limits.max_compressed_bytes).await?;
        tokio::task::spawn_blocking(move || read_canonical(&body[..], Some(&digest), &limits))
            .await
            .context("reading the stored content")?
            .with_context(|| format!("stored content of bundle {name}"))?
    })
}

/// The class's limits, so content the provisioner accepted is read back here too.
async fn class_limits(client: &Client, bundle: &Bundle) -> EffectiveLimits {
    let classes: Api<ProvisionerClass> = Api::all(client.clone());
    let class = match &bundle.spec.provisioner_class_name {
        Some(name) => classes.get_opt(name).await.ok().flatten(),
        None => None,
    };
    EffectiveLimits::from_api(class.as_ref().and_then(|c| c.spec.limits.as_ref()))
}

/// Pulls the image the bundle resolved to and checks that its canonical tarball is the stored
/// one (`content_digest`), so the diff shows what an approval would install.
async fn from_registry(
    args: &ContentSource,
    bundle: &Bundle,
    content_digest: &str,
    limits: EffectiveLimits,
) -> anyhow::Result<Vec<BundleObject>> {
    let name = bundle.name_any();
    let status = bundle.status.clone().unwrap_or_default();
    let Some(image) = status.resolved_image else {
        bail!("bundle {name} has no status.resolvedImage yet");
    };
    let client = client_for(&image, &args.registry)?;
    let mut request = PullRequest::new(&image);
    request.limits = limits;
    request.platform = status
        .platform
        .as_deref()
        .map(str::parse::<Platform>)
        .transpose()
        .with_context(|| format!("status.platform of bundle {name}"))?;
    let pulled = client
        .pull(&request)
        .await
        .map_err(|e| explain("pulling", &image, e))?;
    let tarball = pulled
        .write_canonical_tarball()
        .await
        .with_context(|| format!("content of {image}"))?;
    if tarball.digest.digest != content_digest {
        bail!(
            "the content of {image} in the registry ({}) is not what bundle {name} stored \
             (status.contentDigest {content_digest}): nothing to compare",
            tarball.digest.digest
        );
    }
    Ok(tarball.objects)
}

/// Downloads the stored tarball (`url`, rebased on `--storage-url`).
async fn download(args: &ContentSource, url: &str, max_bytes: u64) -> anyhow::Result<Vec<u8>> {
    let url = match &args.storage_url {
        Some(base) => rebase(url, base)?,
        None => url.to_string(),
    };
    let mut builder =
        reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(10));
    if let Some(path) = &args.storage_ca_file {
        let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let certificate = reqwest::Certificate::from_pem(&pem)
            .with_context(|| format!("{}: not a PEM certificate", path.display()))?;
        builder = builder.tls_certs_only([certificate]);
    } else if !url.starts_with("https://") {
        builder = builder.tls_certs_only([]);
    }
    let http = builder.build().context("building the HTTP client")?;
    let token = match (&args.storage_token_file, &args.storage_token) {
        (Some(path), _) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?
                .trim()
                .to_string(),
        ),
        (None, token) => token.clone(),
    };
    let mut request = http.get(&url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.with_context(|| {
        format!(
            "fetching the stored content from {url} (from outside the cluster, read it from the \
             registry with --from-registry, or port-forward the storage server and pass \
             --storage-url)"
        )
    })?;
    let status = response.status();
    if !status.is_success() {
        bail!("fetching {url}: the storage server answered {status}");
    }
    let body = response
        .bytes()
        .await
        .with_context(|| format!("reading {url}"))?;
    if body.len() as u64 > max_bytes {
        bail!(
            "{url}: {} bytes, over the class's limit of {max_bytes}",
            body.len()
        );
    }
    Ok(body.to_vec())
}

/// `url` with its scheme, host and port taken from `base`.
fn rebase(url: &str, base: &str) -> anyhow::Result<String> {
    let path_start = url
        .find("://")
        .and_then(|scheme| url[scheme + 3..].find('/').map(|p| scheme + 3 + p))
        .with_context(|| format!("status.contentURL {url:?} is not an http(s) URL"))?;
    Ok(format!(
        "{}{}",
        base.trim_end_matches('/'),
        &url[path_start..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_urls_move_to_another_base() {
        assert_eq!(
            rebase(
                "http://gantry-storage.gantry-system.svc:8080/bundles/b/ab.tar.gz",
                "http://127.0.0.1:18080/"
            )
            .unwrap(),
            "http://127.0.0.1:18080/bundles/b/ab.tar.gz"
        );
        assert!(rebase("not a url", "http://x").is_err());
    }
}
