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
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::routing::{get, post};
use clap::Args;
use kube::Client;

use super::cluster::GlobalArgs;
use super::diff::content::ContentSource;

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
    /// Where the review's diff reads the stored content from, as `diff` does.
    #[command(flatten, next_help_heading = "The review's diff (options of diff)")]
    content: ContentSource,
}

/// What every handler shares.
pub struct Ui {
    client: Client,
    /// The API server, as the page names it.
    server: String,
    /// Where the review's diff reads the stored content from.
    content: ContentSource,
    auth: auth::Auth,
    live: live::Live,
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
        content: args.content,
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
}
