//! A shard follows the slot table: every version of it the watch shows (and, when its
//! controllers restart after a lapse, a fresh read) sets the slots it serves
//! ([`Slots`]). The table is the annotation of one Lease ([`table_of`]).

use std::future::Future;

use futures::StreamExt;
use gantry_api::slots::SlotTable;
use gantry_api::{SLOT_TABLE_ANNOTATION, SLOT_TABLE_LEASE};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::cluster::errors::is_not_found;
use crate::sharding::ShardMetrics;
use crate::sharding::slots::Slots;

/// Serves what the table gives `identity` until `stop` completes. A table the watch shows
/// late (older than one served) is ignored by [`Slots::serve`].
pub async fn follow(
    client: Client,
    namespace: String,
    identity: String,
    slots: Slots,
    metrics: ShardMetrics,
    stop: impl Future<Output = ()>,
) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let tables = watcher::watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={SLOT_TABLE_LEASE}")),
    )
    .default_backoff()
    .applied_objects()
    .for_each(|lease| {
        let slots = slots.clone();
        let identity = identity.clone();
        let metrics = metrics.clone();
        async move {
            match lease {
                Ok(lease) => {
                    if let Some(table) = table_of(&lease) {
                        serve(&slots, &identity, &table, &metrics).await;
                    }
                }
                Err(e) => tracing::debug!(lease = SLOT_TABLE_LEASE, "watching the slot table: {e}"),
            }
        }
    });
    tokio::select! {
        _ = stop => {}
        _ = tables => {}
    }
}

/// Reads the slot table afresh and serves what it gives `identity`: before the controllers
/// start again after a lapse, when the watch may be behind.
pub async fn refresh(
    client: &Client,
    namespace: &str,
    identity: &str,
    slots: &Slots,
    metrics: &ShardMetrics,
) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match api.get(SLOT_TABLE_LEASE).await {
        Ok(lease) => {
            if let Some(table) = table_of(&lease) {
                serve(slots, identity, &table, metrics).await;
            }
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

async fn serve(slots: &Slots, identity: &str, table: &SlotTable, metrics: &ShardMetrics) {
    let mine = table.slots_of(identity);
    let count = mine.len();
    let released = slots.serve(mine, table.epoch).await;
    metrics
        .reconcile_share
        .set(i64::try_from(slots.share()).unwrap_or(i64::MAX));
    if released > 0 {
        metrics
            .releases
            .inc_by(u64::try_from(released).unwrap_or(0));
    }
    tracing::debug!(
        epoch = table.epoch,
        slots = count,
        released,
        share = slots.share(),
        "serving the slot table"
    );
}

/// The slot table as the Lease holds it (`None`: no such Lease, or it holds no table).
pub fn table_of(lease: &Lease) -> Option<SlotTable> {
    let text = lease.annotations().get(SLOT_TABLE_ANNOTATION)?;
    match SlotTable::parse(text) {
        Ok(table) => Some(table),
        Err(e) => {
            tracing::warn!(
                lease = SLOT_TABLE_LEASE,
                "the slot table is unreadable: {e}"
            );
            None
        }
    }
}
