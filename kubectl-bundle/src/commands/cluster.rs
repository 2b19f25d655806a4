//! Reaching the cluster as kubectl does: kubeconfig files found and merged by kubectl's rules,
//! `--context`, `--cluster`, `--user`, `--request-timeout`, `-v`.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use gantry_api::Bundle;
use gantry_rules::duration::DurationError;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::output::Reported;

/// kubectl's global flags. They may come before or after the command.
#[derive(Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: the files listed in $KUBECONFIG, else
    /// ~/.kube/config, else the in-cluster configuration).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// How long to wait for one request to the API server before giving up (`0`: no limit;
    /// e.g. `10s`, `1m`).
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_timeout)]
    pub request_timeout: Option<Duration>,
    /// Accepted for kubectl's habits and ignored: bundles are cluster-scoped.
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Accepted for kubectl's habits and ignored: bundles are cluster-scoped, every command
    /// already sees all of them.
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// Log level: 4 and up log the requests made, 8 and up their details.
    #[arg(short = 'v', long = "v", global = true, value_name = "LEVEL")]
    pub verbosity: Option<u8>,
}

/// kubectl's request timeout: a Go duration (`30s`, `1m30s`, `250ms`), or a bare number of
/// seconds.
pub fn parse_timeout(text: &str) -> Result<Duration, DurationError> {
    gantry_rules::duration::parse_or_seconds(text.trim())
}

impl GlobalArgs {
    /// Logs to stderr at the level `-v` asks for (nothing below 4).
    pub fn init_logging(&self) {
        let filter = match self.verbosity.unwrap_or(0) {
            0..=3 => return,
            4..=7 => "kube_client=debug,kubectl_bundle=debug",
            _ => "kube_client=trace,kube_runtime=debug,kubectl_bundle=trace",
        };
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init();
    }

    /// The kubeconfig files kubectl would read: `--kubeconfig` alone, else the existing files
    /// of `$KUBECONFIG` (missing ones are skipped), else `~/.kube/config` if it exists.
    fn kubeconfig_files(&self) -> Vec<PathBuf> {
        if let Some(path) = &self.kubeconfig {
            return vec![path.clone()];
        }
        if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            return std::env::split_paths(&list)
                .filter(|p| !p.as_os_str().is_empty() && p.is_file())
                .collect();
        }
        std::env::var_os("HOME")
            .map(|home| PathBuf::from(home).join(".kube").join("config"))
            .filter(|p| p.is_file())
            .into_iter()
            .collect()
    }

    fn options(&self) -> KubeConfigOptions {
        KubeConfigOptions {
            context: self.context.clone(),
            cluster: self.cluster.clone(),
            user: self.user.clone(),
        }
    }

    /// The client configuration, with the request timeout applied.
    pub async fn config(&self) -> anyhow::Result<Config> {
        let files = self.kubeconfig_files();
        let mut config = if files.is_empty() {
            if self.context.is_some() || self.cluster.is_some() || self.user.is_some() {
                bail!(
                    "no kubeconfig file found ($KUBECONFIG and ~/.kube/config): --context, --cluster and --user need one"
                );
            }
            Config::incluster().context(
                "no kubeconfig file found ($KUBECONFIG, ~/.kube/config) and not running in a cluster: pass --kubeconfig FILE",
            )?
        } else {
            let read = files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let mut merged = Kubeconfig::default();
            for file in &files {
                // Opened here first: kube's own message names the path a second time, quoted
                // twice (`from '"FILE"'`).
                std::fs::File::open(file)
                    .with_context(|| format!("reading kubeconfig {}", file.display()))?;
                let next = Kubeconfig::read_from(file)
                    .with_context(|| format!("reading kubeconfig {}", file.display()))?;
                merged = merged
                    .merge(next)
                    .with_context(|| format!("merging kubeconfig {}", file.display()))?;
            }
            self.check_names(&merged, &read)?;
            Config::from_custom_kubeconfig(merged, &self.options())
                .await
                .with_context(|| format!("loading the kubeconfig (read: {read})"))?
        };
        let _ = SERVER.set(config.cluster_url.to_string());
        if let Some(timeout) = self.request_timeout.filter(|t| !t.is_zero()) {
            config.connect_timeout = Some(timeout);
            config.read_timeout = Some(timeout);
            config.write_timeout = Some(timeout);
        }
        Ok(config)
    }

    /// Names a missing context, cluster or user with the files read and what they offer.
    fn check_names(&self, merged: &Kubeconfig, read: &str) -> anyhow::Result<()> {
        let checks: [(&str, &Option<String>, Vec<&str>); 3] = [
            (
                "context",
                &self.context,
                merged.contexts.iter().map(|c| c.name.as_str()).collect(),
            ),
            (
                "cluster",
                &self.cluster,
                merged.clusters.iter().map(|c| c.name.as_str()).collect(),
            ),
            (
                "user",
                &self.user,
                merged.auth_infos.iter().map(|c| c.name.as_str()).collect(),
            ),
        ];
        for (what, wanted, known) in checks {
            if let Some(wanted) = wanted
                && !known.contains(&wanted.as_str())
            {
                bail!(
                    "{what} {wanted:?} not found in the kubeconfig (read: {read}); {what}s there: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                );
            }
        }
        Ok(())
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        Client::try_from(self.config().await?).context("building the Kubernetes client")
    }
}

/// The API server the client was configured for, once it is.
static SERVER: OnceLock<String> = OnceLock::new();

/// A request that did not reach the API server, or got no answer from it, names the server
/// (as kubectl's "The connection to the server ... was refused" does): the kubeconfig chose
/// it, and the user needs to know which one it chose.
pub fn name_the_server(error: anyhow::Error) -> anyhow::Error {
    let unreachable = error.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<kube::Error>(),
            Some(kube::Error::Service(_) | kube::Error::HyperError(_))
        )
    });
    match SERVER.get() {
        Some(server) if unreachable => error.context(format!(
            "the API server {server} could not be reached or did not answer"
        )),
        _ => error,
    }
}

/// Why a bundle could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BundleNotRead {
    #[error("bundle {0} not found")]
    NotFound(String),
    #[error("reading bundle {name}")]
    Read {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The Bundle `name`; an error that names it when it is not there.
pub(super) async fn read_bundle(
    bundles: &Api<Bundle>,
    name: &str,
) -> Result<Bundle, BundleNotRead> {
    bundles
        .get_opt(name)
        .await
        .map_err(|source| BundleNotRead::Read {
            name: name.to_string(),
            source,
        })?
        .ok_or_else(|| BundleNotRead::NotFound(name.to_string()))
}

/// The Bundles `names` names, each once, in the order given, as `kubectl get bundle A B`
/// reads them: one the API server refuses (not found, forbidden) is said on stderr as kubectl
/// says it, `Error from server (NotFound): bundles.gantry.dev "x" not found`, and the others
/// are still read; then the end of the command is [`Reported`], once it printed the others.
pub(super) async fn get_bundles(
    bundles: &Api<Bundle>,
    names: &[String],
) -> anyhow::Result<(Vec<Bundle>, Option<Reported>)> {
    let mut found = Vec::new();
    let mut refused = None;
    let mut seen = std::collections::BTreeSet::new();
    for name in names.iter().filter(|n| seen.insert(n.as_str())) {
        match bundles.get(name).await {
            Ok(bundle) => found.push(bundle),
            Err(kube::Error::Api(status)) => {
                eprintln!("Error from server ({}): {}", status.reason, status.message);
                refused = Some(Reported);
            }
            Err(e) => return Err(e).with_context(|| format!("reading bundle {name}")),
        }
    }
    Ok((found, refused))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_as_kubectl_reads_them() {
        assert_eq!(parse_timeout("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_timeout("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_timeout("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_timeout("0").unwrap(), Duration::ZERO);
        assert!(parse_timeout("soon").is_err());
        assert!(parse_timeout("5x").is_err());
    }
}
