//! A replica of a sharded provisioner: announces its shard, reconciles the bundles of its slots
//! (restarting its controllers after its Lease lapsed), and runs the sharder while it holds the
//! leader Lease.

use std::future::Future;
use std::time::Duration;

use kube::Client;

use crate::sharding::fence::{Fence, ReplicaLayer};
use crate::sharding::lease::{Leader, announce, until_leading, until_lost};
use crate::sharding::slots::Slots;
use crate::sharding::{Shard, ShardMetrics, Until, sharder, slot_table};

/// A replica of a sharded provisioner.
pub struct Replica {
    /// Not fenced: the Leases are renewed and the sharder writes while the fence is closed.
    pub client: Client,
    /// What the fenced clients of the controllers are built from.
    pub config: kube::Config,
    pub namespace: String,
    /// The shard's name.
    pub identity: String,
    pub provisioners: gantry_rules::class_selection::ServedProvisioners,
    /// The provisioner plugins registered in the namespace.
    pub plugins: std::sync::Arc<crate::source::plugin::Plugins>,
    /// Bundles reconciled at once across all shards.
    pub reconcile_concurrency: u16,
    /// `None` runs the sharder at once.
    pub leader: Option<Leader>,
    pub metrics: ShardMetrics,
}

impl Replica {
    /// Runs until `shutdown` completes; `controllers` runs the controllers with a fenced
    /// client until its third argument completes.
    pub async fn run<F, Fut>(
        &self,
        controllers: F,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> Result<(), kube::Error>
    where
        F: Fn(Client, Shard, Until) -> Fut,
        Fut: Future<Output = ()>,
    {
        let (identity, namespace) = (self.identity.clone(), self.namespace.clone());
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
        let slots = Slots::new(usize::from(self.reconcile_concurrency));
        let (announce_stop, announce_stopped) = tokio::sync::oneshot::channel::<()>();
        let announce = tokio::spawn(announce(
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
                controllers(fenced.clone(), shard, Box::pin(until)).await;
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
                            &self.client,
                            &namespace,
                            &identity,
                            &slots,
                            &self.metrics,
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
        tokio::join!(signal, owner, follow, sharder);
        // Releasing the shard Lease hands the bundles over at once.
        let _ = announce_stop.send(());
        let _ = announce.await;
        Ok(())
    }

    /// Waits for the leader Lease, then runs the sharder while holding it.
    async fn lead(&self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let Some(leader) = &self.leader else {
            self.sharder(stop).await;
            return;
        };
        // Leader election that stops (the API server unreachable for long) starts again: this
        // replica goes on reconciling its own bundles meanwhile.
        loop {
            let manager = match leader.elect().await {
                Ok(manager) => manager,
                Err(e) => {
                    tracing::warn!("leader election: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(2)) => continue,
                        _ = &mut stop => return,
                    }
                }
            };
            let (mut leading, lease_task) = manager.watch().await;
            let stopping = self.while_leading(leader, &mut leading, &mut stop).await;
            drop(leading);
            let manager = lease_task.await;
            if stopping {
                // Give the Lease up so that another replica runs the sharder at once.
                if let Ok(Ok(manager)) = manager {
                    let _ = manager.release().await;
                }
                return;
            }
            tracing::warn!("leader election stopped: starting it again");
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = &mut stop => return,
            }
        }
    }

    /// Runs the sharder whenever `leading` says so; `true` once `stop` completed, `false` when
    /// leader election ended.
    async fn while_leading(
        &self,
        leader: &Leader,
        leading: &mut tokio::sync::watch::Receiver<bool>,
        stop: &mut (impl Future<Output = ()> + Unpin),
    ) -> bool {
        loop {
            tokio::select! {
                led = until_leading(leading) => if !led { return false; },
                _ = &mut *stop => return true,
            }
            tracing::info!(identity = %self.identity, "leading: running the sharder");
            leader.leading.set(1);
            leader.publish_storage_url().await;
            let (mut stopping, mut ended) = (false, false);
            tokio::select! {
                _ = self.sharder(std::future::pending::<()>()) => {}
                lost = until_lost(leading) => ended = lost,
                _ = &mut *stop => stopping = true,
            }
            leader.leading.set(0);
            if stopping {
                return true;
            }
            tracing::warn!("lost the leader Lease: the sharder stops");
            if ended {
                return false;
            }
        }
    }

    async fn sharder(&self, stop: impl Future<Output = ()>) {
        sharder::run(
            self.client.clone(),
            self.namespace.clone(),
            self.provisioners.clone(),
            self.plugins.clone(),
            self.metrics.clone(),
            stop,
        )
        .await;
    }
}
