//! gantry-provisioner: installs Bundles (plain+v0 images) on the cluster it runs against.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use gantry_api::ServiceAccountReference;
use gantry_image::Platform;
use gantry_provisioner::run::Options;
use gantry_provisioner::{NodePullSettings, ServiceAccountDefaults, Settings, Token};
use gantry_rules::duration;

/// jemalloc, configured in `.cargo/config.toml` to hand freed memory back to the system: with
/// glibc's allocator the RSS stayed near its peak long after a large bundle was applied.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Installs Gantry Bundles: pulls plain+v0 images, stores them, applies them"
)]
struct Flags {
    /// Kubeconfig to use; in-cluster configuration or $KUBECONFIG when absent.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Namespace of the provisioner: pull secrets, the registry CA secret and the Lease live here.
    #[arg(long, env = "POD_NAMESPACE", default_value = "gantry-system")]
    namespace: String,
    /// The provisioner ID served: bundles whose ProvisionerClass names another
    /// `spec.provisioner` are left alone (a second installation in the same cluster takes an
    /// ID of its own, and classes naming it).
    #[arg(long, default_value = gantry_api::PLAIN_PROVISIONER)]
    provisioner_id: String,
    /// The provisioner ID of the built-in OLM registry+v1 provisioner; empty turns it off (a
    /// second installation takes an ID of its own here too).
    #[arg(long, default_value = gantry_api::REGISTRY_PROVISIONER)]
    registry_provisioner_id: String,
    /// File holding the provisioner's token for provisioner plugins: a projected
    /// ServiceAccount token with the audience gantry.dev/provisioner-plugin (read on every
    /// call). Without it, classes of plugins are not accepted.
    #[arg(long)]
    plugin_token_file: Option<PathBuf>,
    /// Base URL of the storage server.
    #[arg(long)]
    storage_url: String,
    /// File holding the bearer token for the storage server (read on every request).
    #[arg(long, conflicts_with = "storage_token")]
    storage_token_file: Option<PathBuf>,
    /// Bearer token for the storage server.
    #[arg(long, env = "GANTRY_STORAGE_TOKEN", hide_env_values = true)]
    storage_token: Option<String>,
    /// CA certificate (PEM) trusted for the storage server's TLS.
    #[arg(long)]
    storage_ca_file: Option<PathBuf>,
    /// Platform selected from image indexes when a class names none (default: this binary's).
    #[arg(long)]
    platform: Option<String>,
    /// Objects applied (and dry-run before their first write) at once within one bundle.
    #[arg(long, default_value_t = 32)]
    apply_concurrency: usize,
    /// Bundles reconciled at once (a pass mostly waits on the API server and the registry).
    /// With --sharding, across all shards: each runs its share, by the slots it serves.
    #[arg(long, default_value_t = 16)]
    reconcile_concurrency: u16,
    /// How often tags are resolved again (e.g. 30s, 1h30m; a bundle's spec.interval overrides it).
    #[arg(long, default_value = "5m", value_parser = duration::parse)]
    resolve_interval: Duration,
    /// How often installed bundles are checked for drift without a trigger.
    #[arg(long, default_value = "10m", value_parser = duration::parse)]
    resync_interval: Duration,
    /// How long to wait for a bundle's CRD to be established.
    #[arg(long, default_value = "60s", value_parser = duration::parse)]
    crd_timeout: Duration,
    /// How long applying one bundle's objects may take (a bundle's spec.timeout overrides it).
    #[arg(long, default_value = "10m", value_parser = duration::parse)]
    apply_timeout: Duration,
    /// First retry delay after a failure; it doubles per failure.
    #[arg(long, default_value = "2s", value_parser = duration::parse)]
    backoff_base: Duration,
    /// Longest retry delay (a bundle's spec.retryInterval overrides it).
    #[arg(long, default_value = "5m", value_parser = duration::parse)]
    backoff_cap: Duration,
    /// Where pulls unpack (default: the system's temporary directory).
    #[arg(long)]
    scratch_dir: Option<PathBuf>,
    /// Bytes of canonical tarballs kept in memory for 5 minutes after a pull, so that other
    /// bundles of the same image digest, platform and limits, pulled with the same
    /// credentials, store it without pulling it again (0 turns this off).
    #[arg(long, default_value_t = gantry_provisioner::PulledContents::DEFAULT_BYTES)]
    pull_cache_bytes: u64,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_address: SocketAddr,
    /// Elect a leader with a Lease so several replicas can run.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_election: bool,
    /// Shard bundles across replicas: each replica reconciles the bundles of the slots
    /// (label gantry.dev/slot) the slot table gives it, and the one holding the Lease writes
    /// that table (docs/scaling.md). Without it, one replica leads and the others wait.
    #[arg(long)]
    sharding: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "gantry-provisioner")]
    lease_name: String,
    /// Identity in the Lease (default: $POD_NAME, else the host name and process ID).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Image holding gantry-unpack, for unpack Pods (`pullMode: Node`); default: the image of
    /// the provisioner's own Pod ($POD_NAME).
    #[arg(long, env = "GANTRY_UNPACK_IMAGE")]
    unpack_image: Option<String>,
    /// Storage server URL as unpack Pods reach it (default: --storage-url).
    #[arg(long)]
    unpack_storage_url: Option<String>,
    /// ServiceAccount of unpack Pods.
    #[arg(long, default_value = NodePullSettings::DEFAULT_SERVICE_ACCOUNT)]
    unpack_service_account: String,
    /// Unpack Pods running at once.
    #[arg(long, default_value_t = NodePullSettings::DEFAULT_CONCURRENCY)]
    unpack_concurrency: usize,
    /// Deadline of an unpack Pod (activeDeadlineSeconds).
    #[arg(long, default_value = "5m", value_parser = duration::parse)]
    unpack_timeout: Duration,
    /// How long an unpack Pod may stay unschedulable before the bundle reports
    /// UnpackPodUnschedulable and the Pod is removed.
    #[arg(long, default_value = "1m", value_parser = duration::parse)]
    unpack_schedule_timeout: Duration,
    /// ServiceAccount (NAMESPACE/NAME) bundles are applied as when neither they nor their class
    /// name one; without it, such bundles are applied with the provisioner's own identity.
    #[arg(long)]
    default_service_account: Option<ServiceAccountReference>,
    /// Refuse bundles that neither name a ServiceAccount themselves nor through their class or
    /// --default-service-account (reason ServiceAccountRequired).
    #[arg(long)]
    require_service_account: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // kube uses ring; other TLS users in the process must agree on the provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let flags = Flags::parse();
    init_logging(flags.log_format);
    let options = options(flags)?;
    gantry_provisioner::run::run(options, shutdown_signal()).await?;
    Ok(())
}

/// From flags to the process's options.
fn options(flags: Flags) -> anyhow::Result<Options> {
    let platform = match &flags.platform {
        Some(p) => p
            .parse::<Platform>()
            .with_context(|| format!("--platform {p}"))?,
        None => Platform::current(),
    };
    let settings = Settings {
        namespace: flags.namespace,
        provisioners: gantry_rules::class_selection::ServedProvisioners {
            plain: flags.provisioner_id,
            registry: Some(flags.registry_provisioner_id).filter(|id| !id.is_empty()),
            plugins: Default::default(),
        },
        plugin_token_file: flags.plugin_token_file,
        platform,
        apply_concurrency: flags.apply_concurrency.max(1),
        crd_timeout: flags.crd_timeout,
        apply_timeout: flags.apply_timeout,
        resolve_interval: flags.resolve_interval,
        resync_interval: flags.resync_interval,
        backoff_base: flags.backoff_base,
        backoff_cap: flags.backoff_cap,
        scratch_dir: flags.scratch_dir,
        pull_cache_bytes: flags.pull_cache_bytes,
        node_pull: NodePullSettings {
            unpack_image: flags.unpack_image,
            own_pod: flags.identity.clone(),
            service_account: flags.unpack_service_account,
            unschedulable_timeout: flags.unpack_schedule_timeout,
            ..NodePullSettings::new(
                flags
                    .unpack_storage_url
                    .unwrap_or_else(|| flags.storage_url.clone()),
                flags.unpack_concurrency,
                flags.unpack_timeout,
            )
        },
        service_accounts: ServiceAccountDefaults {
            default: flags.default_service_account,
            required: flags.require_service_account,
        },
    };
    let storage_token = match (flags.storage_token_file, flags.storage_token) {
        (Some(path), _) => Token::File(path),
        (None, Some(token)) => Token::Static(token),
        (None, None) => Token::None,
    };
    let identity = flags.identity.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    Ok(Options {
        kubeconfig: flags.kubeconfig,
        settings,
        storage_url: flags.storage_url,
        storage_token,
        storage_ca_file: flags.storage_ca_file,
        reconcile_concurrency: flags.reconcile_concurrency,
        metrics_address: flags.metrics_address,
        lease_name: flags.leader_election.then_some(flags.lease_name),
        identity,
        sharding: flags.sharding,
    })
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = terminate.recv() => {},
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colour only on a terminal: log files and collectors get plain text.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().init(),
    }
}
