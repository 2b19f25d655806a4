//! The provisioner process once its flags are read: the Kubernetes and storage clients, the
//! operational endpoints, leader election, and the controllers.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use kube::Client;
use kube::runtime::events::Reporter;

use crate::reconcile::controllers::{self, Controllers};
use crate::server::{self, Readiness};
use crate::sharding::fence::{Fence, ReplicaLayer};
use crate::sharding::lease::{Leader, LeaderError};
use crate::sharding::replica::Replica;
use crate::sharding::{Shard, ShardMetrics};
use crate::source::node_pull::driver::remove_left_behind;
use crate::source::storage::{StorageClient, Token};
use crate::state::Settings;
use crate::state::metrics::Metrics;

/// Everything the process runs with.
pub struct Options {
    /// Kubeconfig to use; in-cluster configuration or `$KUBECONFIG` when absent.
    pub kubeconfig: Option<PathBuf>,
    pub settings: Settings,
    /// Base URL of the storage server, the token presented to it, and a CA file it is trusted
    /// with.
    pub storage_url: String,
    pub storage_token: Token,
    pub storage_ca_file: Option<PathBuf>,
    /// Bundles reconciled at once; with `sharding`, across all shards (each runs its share).
    pub reconcile_concurrency: u16,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    pub metrics_address: SocketAddr,
    /// The Lease to hold while leading (in `settings.namespace`); `None` runs at once.
    pub lease_name: Option<String>,
    /// Identity in the Lease and in Events; with `sharding`, also the shard's name.
    pub identity: String,
    /// Shard bundles across the replicas: each reconciles the bundles labelled with its
    /// identity, and the elected one assigns them (docs/scaling.md).
    pub sharding: bool,
}

/// Why the process could not start or keep leading.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("finding the cluster configuration: {0}")]
    InferConfig(#[from] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("reading {path}: {source}")]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("storage client: {0}")]
    Storage(#[from] crate::source::storage::ClientError),
    #[error("binding {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Leader(#[from] LeaderError),
}

/// Runs the provisioner until `shutdown` completes (or, when leading, the Lease is lost).
pub async fn run(
    options: Options,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), StartError> {
    let (config, identity) = (
        kube_config(options.kubeconfig.as_deref()).await?,
        options.identity.clone(),
    );
    // Every request names the replica (User-Agent): the API server's audit log tells them apart.
    let client = ReplicaLayer::new(Fence::open(), &identity).client(config.clone())?;
    let ca = match &options.storage_ca_file {
        Some(path) => Some(std::fs::read(path).map_err(|source| StartError::ReadFile {
            path: path.clone(),
            source,
        })?),
        None => None,
    };
    let storage = StorageClient::new(
        &options.storage_url,
        options.storage_token.clone(),
        ca.as_deref(),
    )?;

    let metrics = Arc::new(Metrics::default());
    let readiness = Arc::new(Readiness::default());
    let address = options.metrics_address;
    let listener = server::bind(address)
        .await
        .map_err(|source| StartError::Bind { address, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| StartError::Bind { address, source })?;
    tracing::info!(address = %local, "serving /metrics, /healthz and /readyz");
    eprintln!("listening on {local}");
    tokio::spawn(server::serve(listener, metrics.clone(), readiness.clone()));
    tokio::spawn(count_runtime_tasks(metrics.clone()));

    // The provisioner plugins registered in the namespace, for the sharder and the controllers.
    let plugins = Arc::new(crate::source::plugin::Plugins::new(
        options.settings.namespace.clone(),
        options.settings.plugin_token_file.clone(),
    ));
    controllers::keep_plugins(&client, &options.settings.namespace, plugins.clone());
    let controllers = |client: Client, shard: Option<Shard>| Controllers {
        client,
        config: Some(config.clone()),
        settings: options.settings.clone(),
        storage: storage.clone(),
        metrics: metrics.clone(),
        reporter: Reporter {
            controller: "gantry-provisioner".into(),
            instance: Some(options.identity.clone()),
        },
        concurrency: options.reconcile_concurrency,
        shard,
        plugins: Some(plugins.clone()),
    };
    let leader = options.lease_name.as_ref().map(|name| Leader {
        client: client.clone(),
        namespace: options.settings.namespace.clone(),
        name: name.clone(),
        identity: options.identity.clone(),
        storage_url: options.storage_url.clone(),
        leading: metrics.leader.clone(),
    });
    if leader.is_none() {
        metrics.leader.set(1);
    }
    if options.sharding {
        readiness.set(true);
        let replica = Replica {
            client: client.clone(),
            config: config.clone(),
            namespace: options.settings.namespace.clone(),
            identity: options.identity.clone(),
            provisioners: options.settings.provisioners.clone(),
            plugins: plugins.clone(),
            reconcile_concurrency: options.reconcile_concurrency,
            leader,
            metrics: ShardMetrics {
                handovers: metrics.shard_handovers.clone(),
                unowned_seconds: metrics.shard_unowned_seconds.clone(),
                releases: metrics.shard_releases.clone(),
                reconcile_share: metrics.shard_reconcile_share.clone(),
            },
        };
        let run_controllers =
            |client, shard, until| controllers::run(controllers(client, Some(shard)), until);
        return Ok(replica.run(run_controllers, shutdown).await?);
    }
    let controllers = controllers(client.clone(), None);
    let Some(leader) = leader else {
        readiness.set(true);
        remove_left_behind(&controllers.client, &options.settings.namespace).await;
        controllers::run(controllers, shutdown).await;
        return Ok(());
    };
    let lead = |stopped| async move {
        // Unpack Pods of a previous leader are nobody's now.
        remove_left_behind(&controllers.client, &options.settings.namespace).await;
        controllers::run(controllers, stopped).await;
    };
    // A standby replica is ready: it serves its endpoints and waits for the Lease.
    Ok(leader.run(|| readiness.set(true), lead, shutdown).await?)
}

async fn kube_config(kubeconfig: Option<&std::path::Path>) -> Result<kube::Config, StartError> {
    let config = match kubeconfig {
        Some(path) => {
            let error = |source| StartError::Kubeconfig {
                path: path.to_path_buf(),
                source,
            };
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(error)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(error)?
        }
        None => kube::Config::infer().await?,
    };
    Ok(config)
}

/// Keeps `runtime_tasks` current, for soak runs that watch for leaked tasks.
async fn count_runtime_tasks(metrics: Arc<Metrics>) {
    let runtime = tokio::runtime::Handle::current().metrics();
    loop {
        metrics
            .runtime_tasks
            .set(i64::try_from(runtime.num_alive_tasks()).unwrap_or(i64::MAX));
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    }
}
