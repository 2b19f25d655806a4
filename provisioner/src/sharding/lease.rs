//! The Leases of sharding. A shard announces itself with a Lease of its own
//! (`gantry-shard-<identity>`, labelled `gantry.dev/shard=<identity>`) in the provisioner's
//! namespace, renewed every few seconds: the sharder counts a shard live while its Lease is
//! current; the replica's [`Fence`] opens with each renewal and closes before the Lease would
//! expire. The leader Lease (`--lease-name`, [`Leader`]) elects the replica that runs the
//! controllers or, with `--sharding`, the sharder.
//!
//! A shard's Lease is written here rather than with kube-lease-manager: the fence needs the
//! time each renewal was asked for, and a shard's Lease has one holder that never competes for
//! it.

use std::future::Future;
use std::time::{Duration, Instant};

use gantry_api::{SERVED_SLOTS_ANNOTATION, SHARD_LABEL, STORAGE_URL_ANNOTATION};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

use crate::cluster::errors::is_not_found;
use crate::cluster::writes::{own_apply, own_patch};
use crate::sharding::Until;
use crate::sharding::fence::Fence;
use crate::sharding::slots::ServedSlots;

/// How long a shard's Lease lasts without renewal: the longest a killed replica's bundles wait
/// for a new owner (plus the sharder's round).
pub const LEASE_DURATION: Duration = Duration::from_secs(12);
/// How often it is renewed: the fence closes `SAFETY_MARGIN` before the Lease would expire, 7 s
/// after the last renewal, so a replica keeps writing through three failed renewals in a row.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(2);

/// The Lease a shard announces itself with.
pub fn lease_name(identity: &str) -> String {
    let name: String = format!("gantry-shard-{identity}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    name.trim_end_matches(['-', '.']).to_string()
}

/// Renews this shard's Lease until `stop` completes, then deletes it so that the sharder hands
/// the shard's slots over at once rather than after the Lease expires. Each renewal carries the
/// slots the shard serves (`served`); a change of them is renewed at once, so that the sharder
/// learns without delay that a slot was let go.
pub async fn announce(
    client: Client,
    namespace: String,
    identity: String,
    fence: Fence,
    mut served: tokio::sync::watch::Receiver<ServedSlots>,
    stop: impl std::future::Future<Output = ()>,
) {
    let leases: Api<Lease> = Api::namespaced(client, &namespace);
    let name = lease_name(&identity);
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(RENEW_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
            changed = served.changed() => if changed.is_err() { break; },
        }
        let report = served.borrow_and_update().to_string();
        let asked_at = Instant::now();
        match renew(&leases, &name, &identity, &report).await {
            Ok(()) => fence.renewed(asked_at, LEASE_DURATION),
            Err(e) => tracing::warn!(lease = %name, "renewing the shard Lease: {e}"),
        }
    }
    match leases.delete(&name, &DeleteParams::default()).await {
        Ok(_) => tracing::info!(lease = %name, "shard Lease released"),
        Err(e) if is_not_found(&e) => {}
        Err(e) => tracing::warn!(lease = %name, "releasing the shard Lease: {e}"),
    }
}

async fn renew(
    leases: &Api<Lease>,
    name: &str,
    identity: &str,
    served: &str,
) -> Result<(), kube::Error> {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let lease = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "labels": { SHARD_LABEL: identity },
            "annotations": { SERVED_SLOTS_ANNOTATION: served },
        },
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": LEASE_DURATION.as_secs(),
            "renewTime": now,
        }
    });
    leases
        .patch(name, &own_apply("gantry-shard"), &Patch::Apply(&lease))
        .await
        .map(|_| ())
}

/// Why a replica stopped waiting to lead.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("leader election: {0}")]
    Election(#[from] LeaseManagerError),
    #[error("leader election stopped")]
    Stopped,
}

/// The leader Lease (`--lease-name`): whoever holds it leads, running the controllers or, with
/// `--sharding`, the sharder.
pub struct Leader {
    pub client: Client,
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// Written on the Lease once taken.
    pub storage_url: String,
    /// 1 while leading.
    pub leading: Gauge,
}

impl Leader {
    /// The election for the Lease, as this replica.
    pub async fn elect(&self) -> Result<LeaseManager, LeaseManagerError> {
        LeaseManagerBuilder::new(self.client.clone(), &self.name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(15)
            .with_grace(5)
            .build()
            .await
    }

    /// Waits for the Lease (`waiting` is called once the election runs: a standby is ready),
    /// then runs `lead` until the Lease is lost or `shutdown` completes (what `lead` is given
    /// completes then), and gives the Lease up so that a standby takes over at once.
    pub async fn run<Fut: Future<Output = ()>>(
        self,
        waiting: impl FnOnce(),
        lead: impl FnOnce(Until) -> Fut,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), LeaderError> {
        let (mut leading, lease_task) = self.elect().await?.watch().await;
        waiting();
        let identity = &self.identity;
        tracing::info!(%identity, lease = %self.name, "waiting to lead");
        tokio::pin!(shutdown);
        tokio::select! {
            led = until_leading(&mut leading) => if !led { return Err(LeaderError::Stopped) },
            _ = &mut shutdown => return Ok(()),
        }
        tracing::info!(%identity, "leading");
        self.leading.set(1);
        self.publish_storage_url().await;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let watch_lease = async move {
            tokio::select! {
                _ = &mut shutdown => {}
                _ = until_lost(&mut leading) => {}
            }
            let _ = stop_tx.send(());
            drop(leading);
        };
        let stopped = Box::pin(async move {
            let _ = stop_rx.await;
        });
        tokio::join!(watch_lease, lead(stopped));
        self.leading.set(0);
        // Give the Lease up so a standby takes over at once.
        if let Ok(Ok(manager)) = lease_task.await {
            let _ = manager.release().await;
        }
        Ok(())
    }

    /// Writes `--storage-url` on the Lease just taken, for `kubectl bundle check` to find the
    /// storage server where no Deployment runs it. Leading does not depend on it: a failure is
    /// logged.
    pub async fn publish_storage_url(&self) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let patch = serde_json::json!({
            "metadata": { "annotations": { STORAGE_URL_ANNOTATION: self.storage_url } }
        });
        let name = &self.name;
        if let Err(e) = leases
            .patch(name, &own_patch(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(lease = %name, "publishing the storage URL on the Lease: {e}");
        }
    }
}

/// Completes once `leading` says this replica leads (`true`), or the election ended (`false`).
pub async fn until_leading(leading: &mut watch::Receiver<bool>) -> bool {
    loop {
        if *leading.borrow_and_update() {
            return true;
        }
        if leading.changed().await.is_err() {
            return false;
        }
    }
}

/// Completes once this replica leads no more: `true` when the election ended.
pub async fn until_lost(leading: &mut watch::Receiver<bool>) -> bool {
    loop {
        if leading.changed().await.is_err() {
            return true;
        }
        if !*leading.borrow() {
            return false;
        }
    }
}

/// When a shard's Lease expires, unless renewed before.
pub fn expiry(lease: &Lease) -> Option<k8s_openapi::jiff::Timestamp> {
    let spec = lease.spec.as_ref()?;
    let (renewed, seconds) = (spec.renew_time.as_ref()?, spec.lease_duration_seconds?);
    let duration = k8s_openapi::jiff::SignedDuration::try_from(Duration::from_secs(
        u64::try_from(seconds).unwrap_or(0),
    ))
    .ok()?;
    renewed.0.checked_add(duration).ok()
}

/// Is a shard's Lease current at `now`?
pub fn is_live(lease: &Lease, now: k8s_openapi::jiff::Timestamp) -> bool {
    expiry(lease).is_some_and(|expiry| expiry > now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    #[test]
    fn lease_names_are_valid_object_names() {
        assert_eq!(
            lease_name("gantry-provisioner-7d9f"),
            "gantry-shard-gantry-provisioner-7d9f"
        );
        assert_eq!(lease_name("Host_1:22"), "gantry-shard-host-1-22");
    }

    #[test]
    fn a_lease_is_live_until_its_duration_has_passed() {
        let renewed = Timestamp::now();
        let lease = Lease {
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(15),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(is_live(&lease, renewed + SignedDuration::from_secs(14)));
        assert!(!is_live(&lease, renewed + SignedDuration::from_secs(16)));
        assert!(!is_live(&Lease::default(), renewed));
    }
}
