//! `ui`: a local web page to review and decide on bundles: the list, one bundle, and the review
//! of a pending digest with Approve and Deny. It is served on loopback and acts with the
//! user's own kubeconfig credentials, so RBAC decides what it shows and what it may do,
//! exactly as for the plugin's commands.

mod actions;
mod assets;
mod auth;
mod changes;
mod live;
mod pages;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use axum::Router;
use axum::routing::{get, post};
use clap::Args;
use kube::Client;

use super::cluster::GlobalArgs;
use super::image::RegistryArgs;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  kubectl bundle ui\n  kubectl bundle ui --open\n  \
    kubectl bundle ui --address 127.0.0.1:8765\n  \
    kubectl bundle ui --from-registry     # diffs read the content from the registry\n\n\
    The page uses your kubeconfig credentials for every read and write. The URL printed \
    carries a one-time token that signs in one browser."
)]
pub struct UiArgs {
    /// Address to serve the page on (port 0: a free port). Keep it on loopback: anyone who
    /// reaches it with the session acts with your credentials.
    #[arg(long, default_value = "127.0.0.1:0")]
    address: SocketAddr,
    /// Open the page in the default browser.
    #[arg(long)]
    open: bool,
    /// For the review's diff (as `diff`): base URL of the storage server, replacing the one in
    /// status.contentURL.
    #[arg(long, value_name = "URL")]
    storage_url: Option<String>,
    /// For the review's diff (as `diff`): a file holding a bearer token the storage server
    /// accepts.
    #[arg(long, value_name = "FILE", conflicts_with = "storage_token")]
    storage_token_file: Option<PathBuf>,
    /// For the review's diff (as `diff`): a bearer token the storage server accepts.
    #[arg(long, env = "GANTRY_STORAGE_TOKEN", hide_env_values = true)]
    storage_token: Option<String>,
    /// For the review's diff (as `diff`): CA certificate (PEM) trusted for the storage
    /// server's TLS.
    #[arg(long, value_name = "FILE")]
    storage_ca_file: Option<PathBuf>,
    /// For the review's diff (as `diff`): read the content from the registry instead of the
    /// storage server.
    #[arg(long, conflicts_with_all = ["storage_url", "storage_token_file", "storage_token", "storage_ca_file"])]
    from_registry: bool,
    #[command(flatten)]
    registry: RegistryArgs,
}

impl UiArgs {
    /// The options of `diff` that this command was given, as `diff` takes them.
    fn diff_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if let Some(url) = &self.storage_url {
            flags.push(format!("--storage-url={url}"));
        }
        if let Some(file) = &self.storage_token_file {
            flags.push(format!("--storage-token-file={}", file.display()));
        }
        if let Some(token) = &self.storage_token {
            flags.push(format!("--storage-token={token}"));
        }
        if let Some(file) = &self.storage_ca_file {
            flags.push(format!("--storage-ca-file={}", file.display()));
        }
        if self.from_registry {
            flags.push("--from-registry".into());
        }
        if self.registry.plain_http {
            flags.push("--plain-http".into());
        }
        if let Some(file) = &self.registry.ca_file {
            flags.push(format!("--ca-file={}", file.display()));
        }
        flags
    }
}

/// What every handler shares.
pub struct Ui {
    client: Client,
    /// The API server, as the page names it.
    server: String,
    diff_flags: Vec<String>,
    auth: auth::Auth,
    live: live::Live,
}

/// Parses a plugin command's arguments (`argv[0]` is the command's name): the page's diff runs
/// the command itself, with exactly its options and checks.
fn parse_args<A: clap::Args + clap::FromArgMatches>(argv: &[String]) -> anyhow::Result<A> {
    let command = A::augment_args(clap::Command::new("kubectl-bundle"));
    let matches = command
        .try_get_matches_from(argv)
        .map_err(|e| anyhow!("{}", e.to_string().trim()))?;
    A::from_arg_matches(&matches).map_err(|e| anyhow!("{}", e.to_string().trim()))
}

/// A Kubernetes object name (DNS subdomain): anything else is no bundle, and never reaches the
/// API server.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

fn router(ui: Arc<Ui>) -> Router {
    Router::new()
        .route("/", get(pages::list::list))
        .route("/bundles/{name}", get(pages::bundle::bundle))
        .route("/bundles/{name}/review", get(pages::review::review))
        .route("/bundles/{name}/approve", post(actions::approve))
        .route("/bundles/{name}/deny", post(actions::deny))
        .route("/bundles/{name}/rollback", post(actions::rollback))
        .route("/events", get(live::events))
        .route("/assets/{file}", get(assets::serve))
        .layer(axum::middleware::from_fn_with_state(
            ui.clone(),
            auth::guard,
        ))
        .with_state(ui)
}

pub async fn ui(global: &GlobalArgs, args: UiArgs) -> anyhow::Result<()> {
    let config = global.config().await?;
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).context("building the Kubernetes client")?;
    let listener = tokio::net::TcpListener::bind(args.address)
        .await
        .with_context(|| format!("listening on {}", args.address))?;
    let served = listener
        .local_addr()
        .context("reading the address served")?;
    if !served.ip().is_loopback() {
        eprintln!(
            "warning: serving on {served}, which is not loopback: whoever reaches it and signs in acts with your credentials"
        );
    }
    let (auth, token) = auth::Auth::new(served);
    let url = format!("{}/?token={token}", auth.base());
    let ui = Arc::new(Ui {
        live: live::Live::start(client.clone()),
        client,
        server: server.trim_end_matches('/').to_string(),
        diff_flags: args.diff_flags(),
        auth,
    });
    let app = router(ui);
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(
            stdout,
            "Serving the review page of {server} with your credentials at\n\n    {url}\n\n\
             The token signs in one browser, once. Press Ctrl-C to stop."
        )?;
        stdout.flush()?;
    }
    if args.open
        && let Err(e) = open::that_detached(&url)
    {
        eprintln!("warning: could not open a browser ({e}): open the URL above");
    }
    // Open event streams never end: Ctrl-C stops the server without waiting for them.
    tokio::select! {
        served = axum::serve(listener, app) => served.context("serving the page")?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_object_names_are_bundle_names() {
        assert!(valid_name("my-app.v2"));
        assert!(!valid_name(""));
        assert!(!valid_name("--yes"));
        assert!(!valid_name("My-App"));
        assert!(!valid_name("a/b"));
    }

    #[test]
    fn commands_parse_their_own_options() {
        let args: crate::commands::decision::DenyArgs = parse_args(&[
            "deny".into(),
            "app".into(),
            "--digest=sha256:aa".into(),
            "--reason=--not a flag".into(),
        ])
        .unwrap();
        let text = format!("{args:?}");
        assert!(
            text.contains("--not a flag") && text.contains("sha256:aa"),
            "{text}"
        );
        assert!(
            parse_args::<crate::commands::decision::DenyArgs>(&["deny".into(), "app".into()])
                .is_err()
        );
    }
}
