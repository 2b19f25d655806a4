//! The sharder, run by the elected replica: assigns every Bundle to a live shard with the
//! consistent-hash ring ([`crate::policy::ring`]) and writes the assignment as the
//! `gantry.dev/shard` label; moves bundles when shards join or go.
//!
//! A bundle moves from a live shard in two steps, so that it is never reconciled by two
//! replicas at once: the sharder sets `gantry.dev/drain=<new shard>` and waits; the old shard
//! finishes its pass and, in one write, labels the bundle with the new shard and removes the
//! drain label. Two writes a move: Bundle writes are what limits how fast bundles move. A
//! new shard gone before the old one let go is a gone owner like any other. A shard whose Lease
//! expired is not asked: its fence closed before the Lease expired, so it writes no more, and
//! its bundles are assigned at once. Every label write is conditional on the bundle's
//! resourceVersion: a write based on an old view fails and the next round looks again.
//!
//! Bundles of classes that name another provisioner ID (another installation's) are neither
//! assigned nor counted: that installation's replicas or its sharder own them.
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

use futures::{StreamExt, stream};
use gantry_api::{Bundle, DRAIN_LABEL, ProvisionerClass, SHARD_LABEL};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;

use crate::policy::class_selection::{Selection, select_by_name};
use crate::policy::ring::Ring;
use crate::sharding::membership::{expiry, is_live};
use crate::sharding::placements::{Placement, PlacementView, Placements};
use crate::state::metrics::{Metrics, ShardLabels};
use k8s_openapi::jiff::Timestamp;

/// Label writes in flight at once. A dead shard's bundles wait for theirs while the new owners'
/// first passes load the API server: a killed replica's 210 bundles took 4.6 s at 16 at once.
const WRITES_AT_ONCE: usize = 64;

/// Bundles a page of the sharder's listing of every Bundle.
const PAGE_SIZE: u32 = 100;

/// How long changes are gathered before a round (a burst of new bundles is one round).
const DEBOUNCE: Duration = Duration::from_millis(200);
/// A round at least this often: Leases expire without an event.
const TICK: Duration = Duration::from_secs(1);

/// What the sharder does to one bundle in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Move {
    /// Write `gantry.dev/shard=<shard>` (and no drain label).
    Assign(String),
    /// Ask the owner to hand the bundle to a shard: `gantry.dev/drain=<new shard>`.
    Drain(String),
    /// The bundle stays where it is after all: remove the drain label.
    Keep,
}

/// The move for a bundle labelled `current`, asked to go to `draining` (the drain label's
/// value), whose place on the ring is `desired`, given the live shards. `None`: nothing to do.
pub fn decide(
    current: Option<&str>,
    draining: Option<&str>,
    desired: Option<&str>,
    live: &BTreeSet<String>,
) -> Option<Move> {
    let desired = desired?;
    match (current, draining) {
        // Unassigned, or its shard is gone (its Lease expired or was released): assign.
        (None, _) => Some(Move::Assign(desired.to_string())),
        (Some(owner), _) if !live.contains(owner) => Some(Move::Assign(desired.to_string())),
        (Some(owner), _) if owner == desired => draining.is_some().then_some(Move::Keep),
        (Some(_), None) => Some(Move::Drain(desired.to_string())),
        // Asked to go to a shard that is no longer its place (gone, or the ring changed):
        // asked again, for its place now. A drain naming the owner itself (as an earlier
        // sharder wrote it) ends with the bundle unassigned: nothing to change.
        (Some(owner), Some(to)) if to != desired && to != owner => {
            Some(Move::Drain(desired.to_string()))
        }
        // Drain asked; the owner has not let go yet.
        (Some(_), Some(_)) => None,
    }
}

/// Runs the sharder until `stop` completes.
pub async fn run(
    client: Client,
    namespace: String,
    provisioner_id: String,
    metrics: Arc<Metrics>,
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
        // Pages of 100: a page is held as text while it is parsed, about 7 KiB a Bundle.
        watcher::watcher(
            Api::<PlacementView>::all(client.clone()),
            watcher::Config::default().page_size(PAGE_SIZE),
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
        // last found nothing to move.
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
            let ours: Vec<Placement> = {
                let classes = classes.state();
                placements
                    .snapshot()
                    .into_iter()
                    .filter(|placement| {
                        !matches!(
                            select_by_name(
                                placement.class_name.as_deref(),
                                &classes,
                                &provisioner_id
                            ),
                            Selection::NotOurs
                        )
                    })
                    .collect()
            };
            let nothing_moved = round(
                &bundles_api,
                &leases,
                fresh_leases,
                &ours,
                &metrics,
                &mut memory,
            )
            .await;
            settled = nothing_moved.then_some((seen, live));
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
    /// Since when each bundle has been without a live shard.
    unowned: HashMap<String, Instant>,
    /// The live shards of the last round (their bundle counts are exported).
    shards_seen: BTreeSet<String>,
    /// Bundles written by a round, with the resourceVersion each write replaced: until the
    /// watch shows a newer one, a round would decide again on the old view and be refused.
    written: HashMap<String, Option<String>>,
}

/// One look at the shards and the bundles, and the label writes that follow; `true` when it
/// found nothing to move.
async fn round<F, Fut>(
    api: &Api<Bundle>,
    leases: &Store<Lease>,
    fresh_leases: F,
    bundles: &[Placement],
    metrics: &Metrics,
    memory: &mut Memory,
) -> bool
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Vec<Lease>, kube::Error>>,
{
    let Memory {
        unowned,
        shards_seen,
        written,
    } = memory;
    let owners: BTreeSet<&str> = bundles
        .iter()
        .filter_map(|bundle| bundle.shard.as_deref())
        .collect();
    let Some(live) = live_for_round(&leases.state(), &owners, fresh_leases).await else {
        return false;
    };
    let refs: Vec<&str> = bundles.iter().map(|b| b.name.as_str()).collect();
    let ring = Ring::new(live.iter().cloned());
    let desired: BTreeMap<&str, &str> = ring.assign(&refs);

    let mut owned: BTreeMap<&str, i64> = live.iter().map(|s| (s.as_str(), 0)).collect();
    let mut moves = Vec::new();
    let present: BTreeSet<&str> = refs.iter().copied().collect();
    unowned.retain(|name, _| present.contains(name.as_str()));
    let versions: HashMap<&str, &Option<String>> = bundles
        .iter()
        .map(|bundle| (bundle.name.as_str(), &bundle.resource_version))
        .collect();
    written.retain(|name, version| {
        versions
            .get(name.as_str())
            .is_some_and(|seen| *seen == version)
    });
    for bundle in bundles {
        let name = bundle.name.clone();
        let current = bundle.shard.as_deref();
        let draining = bundle.drain.as_deref();
        match current {
            Some(owner) if live.contains(owner) => {
                if let Some(count) = owned.get_mut(owner) {
                    *count += 1;
                }
            }
            _ => {
                unowned.entry(name.clone()).or_insert_with(Instant::now);
            }
        }
        if written.contains_key(&name) {
            // This round's view of it predates the last write: the next one decides.
            continue;
        }
        if let Some(next) = decide(
            current,
            draining,
            desired.get(name.as_str()).copied(),
            &live,
        ) {
            // A move off a shard: taken from a gone one, or asked of a live one (a drain asked
            // again for another shard is the same move).
            let handover = match &next {
                Move::Assign(_) => current.is_some(),
                Move::Drain(_) => draining.is_none(),
                Move::Keep => false,
            };
            moves.push((name, bundle.resource_version.clone(), next, handover));
        }
    }
    for (shard, count) in &owned {
        metrics
            .shard_bundles
            .get_or_create(&ShardLabels {
                shard: shard.to_string(),
            })
            .set(*count);
    }
    for gone in shards_seen.difference(&live) {
        metrics.shard_bundles.remove(&ShardLabels {
            shard: gone.clone(),
        });
    }
    *shards_seen = live.clone();
    if live.is_empty() && !bundles.is_empty() {
        tracing::warn!("no live shard: bundles wait for a replica to announce itself");
    }

    let nothing_moved = moves.is_empty();
    let results: Vec<_> = stream::iter(moves)
        .map(|(name, version, next, handover)| async move {
            let result = write(api, &name, version.clone(), &next).await;
            (name, version, next, handover, result)
        })
        .buffer_unordered(WRITES_AT_ONCE)
        .collect()
        .await;
    for (name, version, next, handover, result) in results {
        match result {
            Ok(()) => {
                written.insert(name.clone(), version);
                if handover {
                    metrics.shard_handovers.inc();
                }
                if let Move::Assign(shard) = &next {
                    if let Some(since) = unowned.remove(&name) {
                        metrics
                            .shard_unowned_seconds
                            .observe(since.elapsed().as_secs_f64());
                    }
                    tracing::debug!(bundle = %name, %shard, "assigned");
                }
            }
            // Changed since this round's view (a conflict), or gone: the next round sees it.
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {}
            Err(e) => tracing::warn!(bundle = %name, ?next, "writing the shard label: {e}"),
        }
    }
    nothing_moved
}

/// Writes one move, if the bundle is still at `version`.
async fn write(
    api: &Api<Bundle>,
    name: &str,
    version: Option<String>,
    next: &Move,
) -> Result<(), kube::Error> {
    let labels = match next {
        Move::Assign(shard) => serde_json::json!({ SHARD_LABEL: shard, DRAIN_LABEL: null }),
        Move::Drain(to) => serde_json::json!({ DRAIN_LABEL: to }),
        Move::Keep => serde_json::json!({ DRAIN_LABEL: null }),
    };
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": version, "labels": labels }
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(shards: &[&str]) -> BTreeSet<String> {
        shards.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn unassigned_bundles_and_those_of_gone_shards_are_assigned_at_once() {
        let shards = live(&["a", "b"]);
        assert_eq!(
            decide(None, None, Some("a"), &shards),
            Some(Move::Assign("a".into()))
        );
        // The owner's Lease expired: no drain, its fence already holds its writes.
        assert_eq!(
            decide(Some("c"), None, Some("b"), &shards),
            Some(Move::Assign("b".into()))
        );
        assert_eq!(
            decide(Some("c"), Some("a"), Some("b"), &shards),
            Some(Move::Assign("b".into()))
        );
    }

    #[test]
    fn a_bundle_moves_from_a_live_shard_only_through_a_drain() {
        let shards = live(&["a", "b", "c"]);
        assert_eq!(
            decide(Some("a"), None, Some("b"), &shards),
            Some(Move::Drain("b".into()))
        );
        // Asked already: wait for the owner to hand it over.
        assert_eq!(decide(Some("a"), Some("b"), Some("b"), &shards), None);
        // Handed over: on its new shard, nothing more to do.
        assert_eq!(decide(Some("b"), None, Some("b"), &shards), None);
        // Asked to go to "c", but its place is "b" now (the ring changed): asked again.
        assert_eq!(
            decide(Some("a"), Some("c"), Some("b"), &shards),
            Some(Move::Drain("b".into()))
        );
        // A drain as an earlier sharder wrote it (naming the owner): the owner lets it go
        // unassigned, and it is assigned then.
        assert_eq!(decide(Some("a"), Some("a"), Some("b"), &shards), None);
        assert_eq!(
            decide(None, None, Some("b"), &shards),
            Some(Move::Assign("b".into()))
        );
    }

    #[test]
    fn a_bundle_in_place_stays_and_a_drain_no_longer_needed_is_taken_back() {
        let shards = live(&["a", "b"]);
        assert_eq!(decide(Some("a"), None, Some("a"), &shards), None);
        assert_eq!(
            decide(Some("a"), Some("b"), Some("a"), &shards),
            Some(Move::Keep)
        );
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
        assert_eq!(decide(None, None, None, &live(&[])), None);
        assert_eq!(decide(Some("a"), None, None, &live(&[])), None);
    }
}
