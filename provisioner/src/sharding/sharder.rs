//! The sharder, run by the elected replica: gives every slot (and with it the bundles of that
//! slot, [`gantry_api::slots`]) to a live shard with the consistent-hash ring
//! ([`super::ring`]), in one object, the slot table (the Lease
//! `gantry-shard-slots`), and writes each Bundle's slot label once.
//!
//! A slot moves from a live shard in two writes of the table, so that no bundle is ever
//! reconciled by two replicas at once: the first takes the slot from its owner (the owner stops
//! starting passes in it and, once those under way have ended, says so in its Lease's served
//! slots); the second, once every live shard's Lease says it serves the slot no more and has
//! acted on that first write, gives it to its next shard. A shard whose Lease expired is not
//! asked: its fence closed before the Lease expired, so it writes no more, and its slots are
//! given away at once. Every write of the table and of a label is conditional on the object's
//! resourceVersion: a write based on an old view fails and the next round looks again. So a
//! shard's loss or a new shard is a handful of writes, whatever the number of bundles.
//!
//! Bundles of classes that name another provisioner ID (another installation's) get no slot
//! label and are not counted: that installation's sharder labels them.
//!
//! The Leases are watched, and a watch can fall behind (broken while the API server restarts,
//! then waiting out its backoff): Leases it shows expired may have been renewed since, by
//! replicas whose fences are open. So a shard is counted gone only once a fresh read of the
//! Leases agrees.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::cluster::writes::own_patch;
use futures::{StreamExt, stream};
use gantry_api::slots::{SLOTS, SlotTable, slot_of};
use gantry_api::{
    Bundle, DRAIN_LABEL, ProvisionerClass, SERVED_SLOTS_ANNOTATION, SHARD_LABEL, SLOT_LABEL,
    SLOT_TABLE_ANNOTATION, SLOT_TABLE_LEASE, UNINSTALL_FINALIZER,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;

use crate::cluster::errors::is_not_found;
use crate::sharding::ShardMetrics;
use crate::sharding::lease::{expiry, is_live};
use crate::sharding::placements::{Placement, PlacementView, Placements};
use crate::sharding::ring::Ring;
use crate::sharding::slot_table::table_of;
use crate::sharding::slots::ServedSlots;
use gantry_rules::class_selection::{Selection, select_by_name};
use k8s_openapi::jiff::Timestamp;

/// Slot label writes in flight at once (each new bundle gets one).
const WRITES_AT_ONCE: usize = 64;

/// Bundles a page of the sharder's listing of every Bundle.
const PAGE_SIZE: u32 = 100;

/// How long changes are gathered before a round (a burst of new bundles is one round).
const DEBOUNCE: Duration = Duration::from_millis(200);
/// A round at least this often: Leases expire without an event.
const TICK: Duration = Duration::from_secs(1);

/// The next slot table: `table` with every slot of a gone shard given to its place on the ring
/// (`desired`), every slot of a live shard whose place changed taken from it (marked released
/// at the new epoch), and every slot without an owner given to its place once no live shard
/// may still be serving it (see [`let_go`]). Unchanged (same epoch) when there is nothing to do.
pub fn plan(
    table: &SlotTable,
    live: &BTreeSet<String>,
    desired: &BTreeMap<u16, String>,
    reports: &BTreeMap<String, ServedSlots>,
) -> SlotTable {
    let epoch = table.epoch + 1;
    let mut next = table.clone();
    for slot in 0..SLOTS {
        let Some(place) = desired.get(&slot) else {
            continue;
        };
        let index = usize::from(slot);
        match table.owner(slot) {
            // Its shard is gone (its Lease expired or was released): given at once.
            Some(owner) if !live.contains(owner) => {
                next.owners[index] = Some(place.clone());
                next.released.remove(&slot);
            }
            Some(owner) if owner == place => {}
            // Its place is another shard: taken from its owner first.
            Some(_) => {
                next.owners[index] = None;
                next.released.insert(slot, epoch);
            }
            None => {
                if let_go(slot, table.released.get(&slot).copied(), live, reports) {
                    next.owners[index] = Some(place.clone());
                    next.released.remove(&slot);
                }
            }
        }
    }
    if next != *table {
        next.epoch = epoch;
    }
    next
}

/// May a slot without an owner, taken from a shard at `released` (if it was), be given to a
/// shard? Only when no live shard's Lease says it serves it, and every live shard has acted on
/// the table that took it (a shard that has not reported yet counts as epoch 0).
fn let_go(
    slot: u16,
    released: Option<u64>,
    live: &BTreeSet<String>,
    reports: &BTreeMap<String, ServedSlots>,
) -> bool {
    live.iter().all(|shard| {
        let report = reports.get(shard);
        let serves = report.is_some_and(|report| report.slots.contains(&slot));
        let epoch = report.map_or(0, |report| report.epoch);
        !serves && released.is_none_or(|released| epoch >= released)
    })
}

/// Runs the sharder until `stop` completes.
pub async fn run(
    client: Client,
    namespace: String,
    provisioners: gantry_rules::class_selection::ServedProvisioners,
    plugins: Arc<crate::source::plugin::Plugins>,
    metrics: ShardMetrics,
    stop: impl Future<Output = ()>,
) {
    let leases_api: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let fresh_leases = || async {
        leases_api
            .list(&ListParams::default().labels(SHARD_LABEL))
            .await
            .map(|list| list.items)
    };
    let bundles_api: Api<Bundle> = Api::all(client.clone());
    let changed = Arc::new(Notify::new());

    let (leases, lease_writer) = reflector::store::<Lease>();
    let lease_events = {
        let changed = changed.clone();
        watcher::watcher(
            leases_api.clone(),
            watcher::Config::default().labels(SHARD_LABEL),
        )
        .default_backoff()
        .reflect(lease_writer)
        .for_each(move |_| {
            changed.notify_one();
            futures::future::ready(())
        })
    };
    // Changes of bundles and classes seen: a round that left everything in place is not
    // repeated until one comes, or the live shards change.
    let object_changes = Arc::new(AtomicU64::new(0));
    // The classes tell which bundles are this installation's.
    let (classes, class_writer) = reflector::store::<ProvisionerClass>();
    let class_events = {
        let changed = changed.clone();
        let object_changes = object_changes.clone();
        watcher::watcher(
            Api::<ProvisionerClass>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(class_writer)
        .for_each(move |_| {
            object_changes.fetch_add(1, Ordering::Relaxed);
            changed.notify_one();
            futures::future::ready(())
        })
    };
    // Names, labels and the class name are all the sharder reads: that is all it keeps.
    let placements = Placements::default();
    let bundle_events = {
        let changed = changed.clone();
        let object_changes = object_changes.clone();
        let placements = placements.clone();
        // Only Bundles without a slot label: a labelled one leaves the watch (and the sharder's
        // memory). Pages of 100: a page is held as text while it is parsed, about 7 KiB a Bundle.
        watcher::watcher(
            Api::<PlacementView>::all(client.clone()),
            watcher::Config::default()
                .labels(&format!("!{SLOT_LABEL}"))
                .page_size(PAGE_SIZE),
        )
        .default_backoff()
        .for_each(move |event| {
            if let Ok(event) = event {
                placements.apply(&event);
            }
            object_changes.fetch_add(1, Ordering::Relaxed);
            changed.notify_one();
            futures::future::ready(())
        })
    };
    let rounds = async {
        if leases.wait_until_ready().await.is_err() || classes.wait_until_ready().await.is_err() {
            return;
        }
        // Every bundle event notifies `changed`, the first listing's end included.
        while !placements.is_ready() {
            changed.notified().await;
        }
        tracing::info!("sharding bundles");
        let mut memory = Memory::default();
        // The changes seen and the live shards (as the watched Leases show them) when a round
        // last found nothing to do.
        let mut settled: Option<(u64, BTreeSet<String>)> = None;
        loop {
            let seen = object_changes.load(Ordering::Relaxed);
            let live = live_shards(
                leases.state().iter().map(AsRef::as_ref),
                k8s_openapi::jiff::Timestamp::now(),
            );
            if settled.as_ref() == Some(&(seen, live.clone())) {
                wait_for_change(&changed, &leases.state()).await;
                continue;
            }
            // Each with whether its class is known to be ours (then it gets Gantry's finalizer
            // with its slot label: one write of the Bundle less for its first pass).
            let ours: Vec<(Placement, bool)> = {
                let classes = classes.state();
                // The plugins registered now serve classes too.
                let provisioners = gantry_rules::class_selection::ServedProvisioners {
                    plugins: plugins.ids(),
                    ..provisioners.clone()
                };
                placements
                    .snapshot()
                    .into_iter()
                    .filter_map(|placement| {
                        match select_by_name(
                            placement.class_name.as_deref(),
                            &classes,
                            &provisioners,
                        ) {
                            Selection::NotOurs => None,
                            Selection::Serve(_) => Some((placement, true)),
                            Selection::Missing(_) => Some((placement, false)),
                        }
                    })
                    .collect()
            };
            let nothing_to_do = round(
                &bundles_api,
                &leases_api,
                &leases,
                fresh_leases,
                &ours,
                &metrics,
                &mut memory,
            )
            .await;
            settled = nothing_to_do.then_some((seen, live));
            wait_for_change(&changed, &leases.state()).await;
        }
    };
    tokio::select! {
        _ = stop => {}
        _ = lease_events => {}
        _ = class_events => {}
        _ = bundle_events => {}
        _ = rounds => {}
    }
}

/// Waits for a change of a watched object (and `DEBOUNCE` more, so that a burst of them makes
/// one round), for the next expiry of a live shard's Lease (a Lease expires without an event),
/// or for `TICK`, whichever comes first.
async fn wait_for_change(changed: &Notify, leases: &[Arc<Lease>]) {
    let wait = until_next_expiry(leases.iter().map(AsRef::as_ref), Timestamp::now())
        .map_or(TICK, |until| until.min(TICK));
    if tokio::time::timeout(wait, changed.notified()).await.is_ok() {
        tokio::time::sleep(DEBOUNCE).await;
    }
}

/// How long until the first of the live `leases` expires (and a moment more, so that it has).
fn until_next_expiry<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    now: Timestamp,
) -> Option<Duration> {
    leases
        .into_iter()
        .filter_map(expiry)
        .filter(|expiry| *expiry > now)
        .min()
        .and_then(|first| Duration::try_from(first.duration_since(now)).ok())
        .map(|until| until + Duration::from_millis(20))
}

/// The shards whose Leases are current at `now`.
fn live_shards<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    now: k8s_openapi::jiff::Timestamp,
) -> BTreeSet<String> {
    leases
        .into_iter()
        .filter(|lease| is_live(lease, now))
        .filter_map(|lease| lease.labels().get(SHARD_LABEL).cloned())
        .collect()
}

/// The live shards a round goes by: those of the watched Leases, unless they show an owner of
/// some bundle gone, in which case those of a `fresh` read (the watch may be behind, and a
/// bundle is taken from a gone owner without a drain). `None` when that read fails: no round.
async fn live_for_round<F, Fut, E>(
    cached: &[Arc<Lease>],
    owners: &BTreeSet<&str>,
    fresh: F,
) -> Option<BTreeSet<String>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Vec<Lease>, E>>,
    E: std::fmt::Display,
{
    // Taken before the read: a Lease that expires meanwhile still counts as live.
    let now = k8s_openapi::jiff::Timestamp::now();
    let live = live_shards(cached.iter().map(AsRef::as_ref), now);
    if owners.iter().all(|owner| live.contains(*owner)) {
        return Some(live);
    }
    match fresh().await {
        Ok(leases) => Some(live_shards(&leases, now)),
        Err(e) => {
            tracing::debug!("reading the shard Leases: {e}");
            None
        }
    }
}

/// What the sharder carries from one round to the next.
#[derive(Default)]
struct Memory {
    /// The slot table as last read or written, with the Lease's resourceVersion.
    table: Option<(SlotTable, Option<String>)>,
    /// Since when each slot has been without a live shard.
    unowned: HashMap<u16, Instant>,
    /// Bundles whose labels a round wrote, with the resourceVersion each write replaced: until
    /// the watch shows a newer one, a round would decide again on the old view and be refused.
    written: HashMap<String, Option<String>>,
}

/// What each live shard's Lease says it serves.
fn reports<'a>(leases: impl IntoIterator<Item = &'a Lease>) -> BTreeMap<String, ServedSlots> {
    leases
        .into_iter()
        .filter_map(|lease| {
            let shard = lease.labels().get(SHARD_LABEL)?.clone();
            let served = lease
                .annotations()
                .get(SERVED_SLOTS_ANNOTATION)
                .and_then(|text| text.parse::<ServedSlots>().ok())
                .unwrap_or_default();
            Some((shard, served))
        })
        .collect()
}

/// Reads the slot table, creating it (no slot owned) when there is none. A new table starts
/// above every epoch a shard reports, so that no shard takes it for an old one.
async fn load_table(
    api: &Api<Lease>,
    reports: &BTreeMap<String, ServedSlots>,
) -> Result<(SlotTable, Option<String>), kube::Error> {
    let fresh = || SlotTable {
        epoch: reports.values().map(|r| r.epoch).max().unwrap_or(0) + 1,
        ..SlotTable::new()
    };
    match api.get(SLOT_TABLE_LEASE).await {
        Ok(lease) => {
            let version = lease.resource_version();
            Ok((table_of(&lease).unwrap_or_else(fresh), version))
        }
        Err(e) if is_not_found(&e) => {
            let table = fresh();
            let lease: Lease = serde_json::from_value(serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": SLOT_TABLE_LEASE,
                    "annotations": { SLOT_TABLE_ANNOTATION: table.to_text() },
                },
            }))
            .map_err(kube::Error::SerdeError)?;
            let created = api.create(&PostParams::default(), &lease).await?;
            tracing::info!(lease = SLOT_TABLE_LEASE, "slot table created");
            Ok((table, created.resource_version()))
        }
        Err(e) => Err(e),
    }
}

/// Writes `table`, if the Lease is still at `version`; returns the new version.
async fn write_table(
    api: &Api<Lease>,
    table: &SlotTable,
    version: Option<String>,
) -> Result<Option<String>, kube::Error> {
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": version,
            "annotations": { SLOT_TABLE_ANNOTATION: table.to_text() },
        }
    });
    api.patch(SLOT_TABLE_LEASE, &own_patch(), &Patch::Merge(&patch))
        .await
        .map(|lease| lease.resource_version())
}

/// One look at the shards, the slots and the bundles, and the writes that follow; `true` when
/// it found nothing to do.
async fn round<F, Fut>(
    bundles_api: &Api<Bundle>,
    leases_api: &Api<Lease>,
    leases: &Store<Lease>,
    fresh_leases: F,
    bundles: &[(Placement, bool)],
    metrics: &ShardMetrics,
    memory: &mut Memory,
) -> bool
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Vec<Lease>, kube::Error>>,
{
    let labelled = label_slots(bundles_api, bundles, &mut memory.written).await;

    let cached = leases.state();
    let reports = reports(cached.iter().map(AsRef::as_ref));
    let (table, version) = match memory.table.take() {
        Some(known) => known,
        None => match load_table(leases_api, &reports).await {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::warn!(lease = SLOT_TABLE_LEASE, "reading the slot table: {e}");
                return false;
            }
        },
    };
    let owners: BTreeSet<&str> = table.owners.iter().flatten().map(String::as_str).collect();
    let Some(live) = live_for_round(&cached, &owners, fresh_leases).await else {
        memory.table = Some((table, version));
        return false;
    };
    let slot_names: Vec<String> = (0..SLOTS).map(|slot| slot.to_string()).collect();
    let keys: Vec<&str> = slot_names.iter().map(String::as_str).collect();
    let ring = Ring::new(live.iter().cloned());
    let desired: BTreeMap<u16, String> = ring
        .assign(&keys)
        .into_iter()
        .filter_map(|(slot, shard)| Some((slot.parse().ok()?, shard.to_string())))
        .collect();
    let next = plan(&table, &live, &desired, &reports);

    let now = Instant::now();
    for slot in 0..SLOTS {
        match table.owner(slot) {
            Some(owner) if live.contains(owner) => {
                memory.unowned.remove(&slot);
            }
            _ => {
                memory.unowned.entry(slot).or_insert(now);
            }
        }
    }

    let mut table_changed = false;
    let (table, version) = if next == table {
        (table, version)
    } else {
        match write_table(leases_api, &next, version.clone()).await {
            Ok(written) => {
                table_changed = true;
                record_moves(&table, &next, &live, metrics, &mut memory.unowned);
                tracing::info!(
                    epoch = next.epoch,
                    released = next.released.len(),
                    "slot table written"
                );
                (next, written)
            }
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                // Written by another sharder meanwhile, or removed: read it again next round.
                memory.table = None;
                return false;
            }
            Err(e) => {
                tracing::warn!(lease = SLOT_TABLE_LEASE, "writing the slot table: {e}");
                memory.table = Some((table, version));
                return false;
            }
        }
    };

    if live.is_empty() && !bundles.is_empty() {
        tracing::warn!("no live shard: bundles wait for a replica to announce itself");
    }
    // A slot waiting to be let go is work left: the next round looks again.
    let waiting = !live.is_empty() && table.owners.iter().any(Option::is_none);
    memory.table = Some((table, version));
    labelled == 0 && !table_changed && !waiting
}

/// Counts what a table write moved: the slots taken from a shard (live or gone) as handovers,
/// and the wait of slots given to a shard after having none.
fn record_moves(
    before: &SlotTable,
    after: &SlotTable,
    live: &BTreeSet<String>,
    metrics: &ShardMetrics,
    unowned: &mut HashMap<u16, Instant>,
) {
    for slot in 0..SLOTS {
        let (was, is) = (before.owner(slot), after.owner(slot));
        if was.is_some() && was != is {
            metrics.handovers.inc();
        }
        if let Some(shard) = is
            && was != is
            && live.contains(shard)
            && let Some(since) = unowned.remove(&slot)
        {
            metrics
                .unowned_seconds
                .observe(since.elapsed().as_secs_f64());
        }
    }
}

/// Writes the slot label of every bundle that lacks it, removing the shard labels of earlier
/// versions and, for a bundle of a class of this installation, adding Gantry's finalizer (which
/// its first pass would add otherwise) in the same write; returns how many it wrote.
async fn label_slots(
    api: &Api<Bundle>,
    bundles: &[(Placement, bool)],
    written: &mut HashMap<String, Option<String>>,
) -> usize {
    let versions: HashMap<&str, &Option<String>> = bundles
        .iter()
        .map(|(bundle, _)| (bundle.name.as_str(), &bundle.resource_version))
        .collect();
    written.retain(|name, version| {
        versions
            .get(name.as_str())
            .is_some_and(|seen| *seen == version)
    });
    let to_label: Vec<(String, Option<String>, serde_json::Value)> = bundles
        .iter()
        .filter(|(bundle, _)| !written.contains_key(&bundle.name))
        .filter_map(|(bundle, serve)| {
            let slot = slot_of(&bundle.name).to_string();
            if bundle.slot.as_deref() == Some(slot.as_str()) && !bundle.legacy_labels {
                return None;
            }
            let mut metadata = serde_json::json!({
                "resourceVersion": bundle.resource_version,
                "labels": { SLOT_LABEL: slot, SHARD_LABEL: null, DRAIN_LABEL: null },
            });
            // A merge patch replaces the list: the bundle's others are kept, and the write is
            // conditional on the version they were read from.
            if *serve
                && !bundle.deleting
                && !bundle.finalizers.iter().any(|f| f == UNINSTALL_FINALIZER)
            {
                let mut finalizers = bundle.finalizers.clone();
                finalizers.push(UNINSTALL_FINALIZER.to_string());
                metadata["finalizers"] = serde_json::json!(finalizers);
            }
            Some((
                bundle.name.clone(),
                bundle.resource_version.clone(),
                serde_json::json!({ "metadata": metadata }),
            ))
        })
        .collect();
    let results: Vec<_> = stream::iter(to_label)
        .map(|(name, version, patch)| async move {
            let result = api.patch(&name, &own_patch(), &Patch::Merge(&patch)).await;
            (name, version, result)
        })
        .buffer_unordered(WRITES_AT_ONCE)
        .collect()
        .await;
    let mut count = 0;
    for (name, version, result) in results {
        match result {
            Ok(_) => {
                count += 1;
                written.insert(name, version);
            }
            // Changed since this round's view (a conflict), or gone: the next round sees it.
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {}
            Err(e) => tracing::warn!(bundle = %name, "writing the slot label: {e}"),
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(shards: &[&str]) -> BTreeSet<String> {
        shards.iter().map(|s| s.to_string()).collect()
    }

    fn table(owners: &[(u16, &str)]) -> SlotTable {
        let mut table = SlotTable::new();
        table.epoch = 5;
        for (slot, owner) in owners {
            table.owners[usize::from(*slot)] = Some(owner.to_string());
        }
        table
    }

    fn places(places: &[(u16, &str)]) -> BTreeMap<u16, String> {
        places.iter().map(|(s, o)| (*s, o.to_string())).collect()
    }

    fn served(reports: &[(&str, u64, &[u16])]) -> BTreeMap<String, ServedSlots> {
        reports
            .iter()
            .map(|(shard, epoch, slots)| {
                (
                    shard.to_string(),
                    ServedSlots {
                        epoch: *epoch,
                        slots: slots.iter().copied().collect(),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn free_slots_and_those_of_gone_shards_are_given_at_once() {
        let before = table(&[(1, "c")]);
        let next = plan(
            &before,
            &live(&["a", "b"]),
            &places(&[(0, "a"), (1, "b")]),
            &served(&[("a", 5, &[]), ("b", 5, &[])]),
        );
        assert_eq!(next.epoch, 6);
        assert_eq!(next.owner(0), Some("a"));
        // "c" is gone: its fence already holds its writes, no need to wait for it.
        assert_eq!(next.owner(1), Some("b"));
        assert!(next.released.is_empty());
    }

    #[test]
    fn a_slot_leaves_a_live_shard_in_two_writes() {
        let shards = live(&["a", "b"]);
        let desired = places(&[(1, "b")]);
        // Taken from "a" first.
        let taken = plan(
            &table(&[(1, "a")]),
            &shards,
            &desired,
            &served(&[("a", 5, &[1]), ("b", 5, &[])]),
        );
        assert_eq!(taken.epoch, 6);
        assert_eq!(taken.owner(1), None);
        assert_eq!(taken.released.get(&1), Some(&6));
        // "a" still serves it (a pass under way), or has not acted on the new table yet, or
        // "b" has not: the slot waits.
        for reports in [
            served(&[("a", 6, &[1]), ("b", 6, &[])]),
            served(&[("a", 5, &[]), ("b", 6, &[])]),
            served(&[("a", 6, &[]), ("b", 5, &[])]),
            served(&[("a", 6, &[])]),
        ] {
            assert_eq!(
                plan(&taken, &shards, &desired, &reports),
                taken,
                "{reports:?}"
            );
        }
        // Let go by "a", seen by "b": given to "b".
        let given = plan(
            &taken,
            &shards,
            &desired,
            &served(&[("a", 6, &[]), ("b", 6, &[])]),
        );
        assert_eq!(given.epoch, 7);
        assert_eq!(given.owner(1), Some("b"));
        assert!(given.released.is_empty());
        // In place: nothing to write.
        assert_eq!(
            plan(&given, &shards, &desired, &served(&[("b", 7, &[1])])),
            given
        );
    }

    #[test]
    fn a_slot_being_let_go_by_a_shard_that_dies_goes_at_once() {
        let mut taken = table(&[]);
        taken.released.insert(1, 5);
        let next = plan(
            &taken,
            &live(&["b"]),
            &places(&[(1, "b")]),
            &served(&[("a", 4, &[1]), ("b", 5, &[])]),
        );
        assert_eq!(next.owner(1), Some("b"));
    }

    fn lease(shard: &str, renewed_seconds_ago: i64) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": format!("gantry-shard-{shard}"), "labels": { SHARD_LABEL: shard } },
            "spec": {
                "holderIdentity": shard,
                "leaseDurationSeconds": 15,
                "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    k8s_openapi::jiff::Timestamp::now()
                        - k8s_openapi::jiff::SignedDuration::from_secs(renewed_seconds_ago)
                ),
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_sharder_wakes_when_the_first_live_lease_expires() {
        // Lasting 15 s: "a" renewed 10 s ago expires in 5 s, "b" in 14 s; "c" has expired.
        let leases = [lease("a", 10), lease("b", 1), lease("c", 30)];
        let until = until_next_expiry(&leases, Timestamp::now()).unwrap();
        assert!(
            until > Duration::from_millis(4_500) && until <= Duration::from_millis(5_100),
            "{until:?}"
        );
        assert_eq!(until_next_expiry(&[lease("c", 30)], Timestamp::now()), None);
    }

    #[tokio::test]
    async fn an_owner_the_watched_leases_show_gone_is_gone_only_if_a_fresh_read_agrees() {
        // The watch last saw "a" renew 20 s ago; it has renewed since.
        let cached = vec![Arc::new(lease("a", 20)), Arc::new(lease("b", 1))];
        let owners: BTreeSet<&str> = ["a", "b"].into();
        let live = live_for_round(&cached, &owners, || async {
            Ok::<_, String>(vec![lease("a", 1), lease("b", 1)])
        })
        .await;
        assert_eq!(live, Some(super::BTreeSet::from(["a".into(), "b".into()])));
        // Truly gone: the fresh read agrees.
        let live = live_for_round(&cached, &owners, || async {
            Ok::<_, String>(vec![lease("a", 20), lease("b", 1)])
        })
        .await;
        assert_eq!(live, Some(super::BTreeSet::from(["b".into()])));
        // No fresh read, no round: nothing is taken from "a" on the watch's word.
        let live = live_for_round(&cached, &owners, || async {
            Err::<Vec<Lease>, _>("connection refused")
        })
        .await;
        assert_eq!(live, None);
    }

    #[tokio::test]
    async fn with_every_owner_live_in_the_watched_leases_nothing_is_read() {
        let cached = vec![Arc::new(lease("a", 1)), Arc::new(lease("b", 20))];
        // "b" expired, but owns nothing: the ring is drawn without it, no read needed.
        let owners: BTreeSet<&str> = ["a"].into();
        let live = live_for_round(&cached, &owners, || async {
            panic!("no fresh read when no owner looks gone");
            #[allow(unreachable_code)]
            Ok::<Vec<Lease>, String>(Vec::new())
        })
        .await;
        assert_eq!(live, Some(super::BTreeSet::from(["a".into()])));
    }

    #[test]
    fn without_live_shards_nothing_moves() {
        let before = table(&[(1, "a")]);
        assert_eq!(
            plan(&before, &live(&[]), &places(&[]), &served(&[])),
            before
        );
    }
}
