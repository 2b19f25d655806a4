//! The provisioner process once its flags are read: the Kubernetes and storage clients, the
//! operational endpoints, leader election, and the controllers.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use kube::runtime::events::Reporter;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};

use crate::reconcile::controllers::{self, Controllers};
use crate::server::{self, Readiness};
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
    /// Bundles reconciled at once.
    pub reconcile_concurrency: u16,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    pub metrics_address: SocketAddr,
    /// The Lease to hold while leading (in `settings.namespace`); `None` runs at once.
    pub lease_name: Option<String>,
    /// Identity in the Lease and in Events.
    pub identity: String,
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
    #[error("leader election: {0}")]
    LeaderElection(#[from] LeaseManagerError),
    #[error("leader election stopped")]
    LeaderElectionStopped,
}

/// Runs the provisioner until `shutdown` completes (or, when leading, the Lease is lost).
pub async fn run(
    options: Options,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), StartError> {
    let (client, config) = kube_client(options.kubeconfig.as_deref()).await?;
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

    let controllers = Controllers {
        client: client.clone(),
        config: Some(config),
        settings: options.settings.clone(),
        storage,
        metrics: metrics.clone(),
        reporter: Reporter {
            controller: "gantry-provisioner".into(),
            instance: Some(options.identity.clone()),
        },
        concurrency: options.reconcile_concurrency,
    };
    let Some(lease_name) = &options.lease_name else {
        readiness.set(true);
        metrics.leader.set(1);
        remove_left_behind(&controllers.client, &options.settings.namespace).await;
        controllers::run(controllers, shutdown).await;
        return Ok(());
    };

    let identity = &options.identity;
    let manager = LeaseManagerBuilder::new(client, lease_name)
        .with_namespace(&options.settings.namespace)
        .with_identity(identity)
        .with_duration(15)
        .with_grace(5)
        .build()
        .await?;
    let (mut leading, lease_task) = manager.watch().await;
    // A standby replica is ready: it serves its endpoints and waits for the Lease.
    readiness.set(true);
    tracing::info!(%identity, lease = %lease_name, "waiting to lead");
    tokio::pin!(shutdown);
    loop {
        if *leading.borrow_and_update() {
            break;
        }
        tokio::select! {
            changed = leading.changed() => {
                if changed.is_err() { return Err(StartError::LeaderElectionStopped); }
            }
            _ = &mut shutdown => { return Ok(()); }
        }
    }
    tracing::info!(%identity, "leading");
    metrics.leader.set(1);
    // Unpack Pods of a previous leader are nobody's now.
    remove_left_behind(&controllers.client, &options.settings.namespace).await;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<&'static str>();
    let watch_lease = async move {
        tokio::select! {
            _ = &mut shutdown => { let _ = stop_tx.send("shutdown"); }
            _ = async {
                while leading.changed().await.is_ok() {
                    if !*leading.borrow() { break; }
                }
            } => { let _ = stop_tx.send("lost the lease"); }
        }
        drop(leading);
    };
    let stopped = async move {
        let _ = stop_rx.await;
    };
    tokio::join!(watch_lease, controllers::run(controllers, stopped));
    metrics.leader.set(0);
    // Give the Lease up so a standby takes over at once.
    if let Ok(Ok(manager)) = lease_task.await {
        let _ = manager.release().await;
    }
    Ok(())
}

async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
) -> Result<(kube::Client, kube::Config), StartError> {
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
    Ok((kube::Client::try_from(config.clone())?, config))
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
