//! The provisioner process once its flags are read: the Kubernetes and storage clients, the
//! operational endpoints, leader election, and the controllers.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gantry_api::STORAGE_URL_ANNOTATION;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch};
use kube::runtime::events::Reporter;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};

use kube::Client;

use crate::cluster::shard::{Fence, ReplicaLayer, Slots};
use crate::cluster::writes::own_patch;
use crate::reconcile::controllers::{self, Controllers, Shard};
use crate::server::{self, Readiness};
use crate::sharding::{membership, sharder, slot_table};
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
    };
    if options.sharding {
        readiness.set(true);
        let shards = Shards {
            client: &client,
            config: &config,
            options: &options,
            metrics: &metrics,
        };
        return shards.run(&controllers, shutdown).await;
    }
    let controllers = controllers(client.clone(), None);
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
    publish_storage_url(&controllers.client, &options, lease_name).await;
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

/// A replica of a sharded provisioner: announces its shard, reconciles the bundles labelled
/// with it (restarting its controllers after its Lease lapsed), and runs the sharder while it
/// holds the leader Lease.
struct Shards<'a> {
    client: &'a Client,
    config: &'a kube::Config,
    options: &'a Options,
    metrics: &'a Arc<Metrics>,
}

impl Shards<'_> {
    async fn run(
        &self,
        controllers: &impl Fn(Client, Option<Shard>) -> Controllers,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> Result<(), StartError> {
        let identity = self.options.identity.clone();
        let namespace = self.options.settings.namespace.clone();
        let fence = Fence::for_shard();
        let layer = ReplicaLayer::new(fence.clone(), &identity);
        let fenced = layer.client(self.config.clone())?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |rx: &tokio::sync::watch::Receiver<bool>| {
            let mut rx = rx.clone();
            async move {
                let _ = rx.wait_for(|stopping| *stopping).await;
            }
        };
        let slots = Slots::new(usize::from(self.options.reconcile_concurrency));
        let (announce_stop, announce_stopped) = tokio::sync::oneshot::channel::<()>();
        let announce = tokio::spawn(membership::announce(
            self.client.clone(),
            namespace.clone(),
            identity.clone(),
            fence.clone(),
            slots.report(),
            async move {
                let _ = announce_stopped.await;
            },
        ));
        tracing::info!(%identity, "shard announced; reconciling the bundles of its slots");
        let follow = slot_table::follow(
            self.client.clone(),
            namespace.clone(),
            identity.clone(),
            slots.clone(),
            self.metrics.clone(),
            stopped(&stop_rx),
        );

        let owner = async {
            loop {
                let shard = Shard {
                    identity: identity.clone(),
                    layer: layer.clone(),
                    fence: fence.clone(),
                    slots: slots.clone(),
                };
                let (ended, why) = tokio::sync::oneshot::channel::<bool>();
                let until = {
                    let stop = stopped(&stop_rx);
                    let fence = fence.clone();
                    async move {
                        let lapsed = tokio::select! {
                            _ = stop => false,
                            _ = fence.lapse() => true,
                        };
                        let _ = ended.send(lapsed);
                    }
                };
                controllers::run(controllers(fenced.clone(), Some(shard)), until).await;
                if !why.await.unwrap_or(false) {
                    break;
                }
                // Passes begun before the lapse are over; new ones start from fresh caches
                // and a new list of the bundles of the slots that are this shard's now (read
                // afresh: the table's watch may be behind), once the Lease is current again (a
                // start before that would lapse at once).
                tracing::warn!(
                    "the shard Lease lapsed: the controllers start again once it is renewed"
                );
                let mut stop = std::pin::pin!(stopped(&stop_rx));
                loop {
                    if fence.is_current() {
                        match slot_table::refresh(
                            self.client,
                            &namespace,
                            &identity,
                            &slots,
                            self.metrics,
                        )
                        .await
                        {
                            Ok(()) => break,
                            Err(e) => tracing::debug!("reading the slot table: {e}"),
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                        _ = &mut stop => return,
                    }
                }
                fence.restart();
            }
        };
        let sharder = self.lead(stopped(&stop_rx));
        let signal = async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        };
        let ((), (), (), led) = tokio::join!(signal, owner, follow, sharder);
        // Releasing the shard Lease hands the bundles over at once.
        let _ = announce_stop.send(());
        let _ = announce.await;
        led
    }

    /// Waits for the leader Lease, then runs the sharder while holding it.
    async fn lead(&self, stop: impl Future<Output = ()>) -> Result<(), StartError> {
        tokio::pin!(stop);
        let Some(lease_name) = &self.options.lease_name else {
            self.metrics.leader.set(1);
            sharder::run(
                self.client.clone(),
                self.options.settings.namespace.clone(),
                self.options.settings.provisioner_id.clone(),
                self.metrics.clone(),
                stop,
            )
            .await;
            return Ok(());
        };
        // Leader election that stops (the API server unreachable for long) starts again: this
        // replica goes on reconciling its own bundles meanwhile.
        loop {
            let built = LeaseManagerBuilder::new(self.client.clone(), lease_name)
                .with_namespace(&self.options.settings.namespace)
                .with_identity(&self.options.identity)
                .with_duration(15)
                .with_grace(5)
                .build()
                .await;
            let manager = match built {
                Ok(manager) => manager,
                Err(e) => {
                    tracing::warn!("leader election: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(2)) => continue,
                        _ = &mut stop => return Ok(()),
                    }
                }
            };
            let (mut leading, lease_task) = manager.watch().await;
            let stopping = self.while_leading(&mut leading, &mut stop).await;
            drop(leading);
            let manager = lease_task.await;
            if stopping {
                // Give the Lease up so that another replica runs the sharder at once.
                if let Ok(Ok(manager)) = manager {
                    let _ = manager.release().await;
                }
                return Ok(());
            }
            tracing::warn!("leader election stopped: starting it again");
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = &mut stop => return Ok(()),
            }
        }
    }

    /// Runs the sharder whenever `leading` says so; `true` once `stop` completed, `false` when
    /// leader election ended.
    async fn while_leading(
        &self,
        leading: &mut tokio::sync::watch::Receiver<bool>,
        stop: &mut (impl Future<Output = ()> + Unpin),
    ) -> bool {
        loop {
            while !*leading.borrow_and_update() {
                tokio::select! {
                    changed = leading.changed() => if changed.is_err() { return false; },
                    _ = &mut *stop => return true,
                }
            }
            tracing::info!(identity = %self.options.identity, "leading: running the sharder");
            self.metrics.leader.set(1);
            if let Some(lease_name) = &self.options.lease_name {
                publish_storage_url(self.client, self.options, lease_name).await;
            }
            let mut ended = false;
            let lost = async {
                loop {
                    if leading.changed().await.is_err() {
                        ended = true;
                        break;
                    }
                    if !*leading.borrow() {
                        break;
                    }
                }
            };
            let mut stopping = false;
            tokio::select! {
                _ = sharder::run(
                    self.client.clone(),
                    self.options.settings.namespace.clone(),
                    self.options.settings.provisioner_id.clone(),
                    self.metrics.clone(),
                    std::future::pending::<()>(),
                ) => {}
                _ = lost => {}
                _ = &mut *stop => { stopping = true; }
            }
            self.metrics.leader.set(0);
            if stopping {
                return true;
            }
            tracing::warn!("lost the leader Lease: the sharder stops");
            if ended {
                return false;
            }
        }
    }
}

/// Writes `--storage-url` on the leader Lease just taken, for `kubectl bundle check` to find
/// the storage server where no Deployment runs it. Leading does not depend on it: a failure is
/// logged.
async fn publish_storage_url(client: &Client, options: &Options, lease_name: &str) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &options.settings.namespace);
    let patch = serde_json::json!({
        "metadata": { "annotations": { STORAGE_URL_ANNOTATION: options.storage_url } }
    });
    if let Err(e) = leases
        .patch(lease_name, &own_patch(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(lease = %lease_name, "publishing the storage URL on the Lease: {e}");
    }
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
