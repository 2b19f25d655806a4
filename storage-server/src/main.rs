#![forbid(unsafe_code)]
//! `gantry-storage`: the storage server binary.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use gantry_rules::duration::{self, DurationError, GoDuration};
use gantry_storage::server::HEADER_READ_TIMEOUT;
use gantry_storage::{AuthConfig, Config, Server, TlsFiles, TransferLimits};
use tracing_subscriber::EnvFilter;

fn nonzero(text: &str) -> Result<GoDuration, DurationError> {
    duration::parse_nonzero(text).map(GoDuration)
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Stores bundle tarballs, content-addressed, on a local volume.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Directory holding the tarballs (created if missing).
    #[arg(long, env = "GANTRY_STORAGE_ROOT")]
    root: PathBuf,
    /// Address and port to listen on; port 0 picks a free port (logged as "listening on ADDR").
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Serve without authentication; refused unless --listen is a loopback address.
    #[arg(long)]
    insecure_no_auth: bool,
    /// PEM certificate chain for TLS.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for TLS.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Kubeconfig for the TokenReview/SubjectAccessReview calls (default: in-cluster or $KUBECONFIG).
    #[arg(long, conflicts_with = "insecure_no_auth")]
    kubeconfig: Option<PathBuf>,
    /// Audiences a token must be issued for (default: the API server's).
    #[arg(long = "token-audience")]
    token_audiences: Vec<String>,
    /// How long to cache authentication and authorisation decisions (0 disables the cache).
    #[arg(long, default_value_t = GoDuration(Duration::from_secs(10)))]
    auth_cache_ttl: GoDuration,
    /// Largest accepted upload, in bytes (larger ones get 413).
    #[arg(long, default_value_t = 1 << 30)]
    max_body_bytes: u64,
    /// Memory for caching tarballs of up to 64 KiB, in bytes (0 disables the cache).
    #[arg(long, default_value_t = 8 << 20)]
    cache_bytes: u64,
    /// How long a client may take to send a request head (and to finish a TLS handshake).
    #[arg(long, default_value_t = GoDuration(HEADER_READ_TIMEOUT), value_parser = nonzero)]
    header_read_timeout: GoDuration,
    /// How long an upload may send nothing, or a download be left unread, before it is cut off.
    #[arg(long, default_value_t = GoDuration(TransferLimits::DEFAULT.idle_timeout), value_parser = nonzero)]
    idle_timeout: GoDuration,
    /// Bytes per second an upload or download must average (after --idle-timeout's grace)
    /// before it is cut off; 0 disables the check.
    #[arg(long, default_value_t = TransferLimits::DEFAULT.min_rate)]
    min_transfer_rate: u64,
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// File reads and writes run on tokio's blocking pool; its default of 512 threads
/// would let a burst of downloads inflate memory for little gain on a local volume.
const MAX_BLOCKING_THREADS: usize = 32;

fn main() -> anyhow::Result<()> {
    // kube and tokio-rustls both use rustls; pin the provider before either runs.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(run(args));
    // A start-up check of a large volume may still be hashing: do not wait for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn run(args: Args) -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => subscriber.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => subscriber.json().init(),
    }

    let auth = if args.insecure_no_auth {
        AuthConfig::Disabled
    } else {
        AuthConfig::Kubernetes {
            client: gantry_storage::auth::kube_client(args.kubeconfig.as_deref()).await?,
            cache_ttl: args.auth_cache_ttl.0,
            audiences: args.token_audiences,
        }
    };
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    let tls_on = tls.is_some();
    let server = Server::bind(Config {
        root: args.root,
        listen: args.listen,
        auth,
        tls,
        max_body_bytes: args.max_body_bytes,
        cache_bytes: args.cache_bytes,
        header_read_timeout: args.header_read_timeout.0,
        transfer: TransferLimits {
            idle_timeout: args.idle_timeout.0,
            min_rate: args.min_transfer_rate,
        },
    })
    .await?;
    let addr = server.local_addr().context("reading the listen address")?;
    tracing::info!(
        tls = tls_on,
        auth = !args.insecure_no_auth,
        "listening on {addr}"
    );
    server.run(shutdown_signal()).await?;
    Ok(())
}
