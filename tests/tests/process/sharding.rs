//! Three provisioner replicas with `--sharding` on one cluster: every bundle gets a slot (label
//! `gantry.dev/slot`) and every slot one live replica (the slot table), no replica holds much
//! more than its share of the slots, and slots move when a replica is killed (SIGKILL), paused
//! past its Lease (SIGSTOP), or cut off from the API server (a proxy between them), and again
//! when it comes back.
//!
//! That no bundle was applied by two replicas at once is checked against the API server's own
//! audit log, where each request names its replica (User-Agent): in the order the API server
//! received them, a bundle's writes come from one replica after another, never back to one
//! that had handed the bundle over. A replica that went on writing after its bundles were
//! handed over (paused mid-pass, say) would show up as such a return.
//!
//! A control plane of its own: these provisioners must be the only ones, and the audit log
//! must hold their writes alone.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gantry_api::slots::{SLOTS, SlotTable, parse_slot};
use gantry_api::{Bundle, SHARD_LABEL, SLOT_LABEL, SLOT_TABLE_ANNOTATION, SLOT_TABLE_LEASE};
use gantry_tests::audit::{AuditLog, replica_of, writes_off_shard};
use gantry_tests::e2e::*;
use gantry_tests::{
    CuttableProxy, Provisioner, ProvisionerOptions, StorageOptions, StorageServer, unique_name,
    wait_until,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

static CLUSTER: Isolated = Isolated::new();

/// ConfigMaps per bundle: enough that a pass takes a moment, so faults land in the middle of
/// some.
const OBJECTS: usize = 30;
/// How long a fault's handover and the settling after it may take (shard Leases last 12 s).
const SETTLE: Duration = Duration::from_secs(180);

fn start_replica(storage: &StorageServer, kubeconfig: &Path, identity: &str) -> Provisioner {
    Provisioner::start(ProvisionerOptions {
        kubeconfig: kubeconfig.to_path_buf(),
        storage_url: storage.url().to_string(),
        storage_token: None,
        namespace: NAMESPACE.into(),
        args: [
            "--sharding",
            "--identity",
            identity,
            "--apply-concurrency=2",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect(),
    })
}

/// A copy of `kubeconfig` that reaches the API server through `proxy`.
fn kubeconfig_through(kubeconfig: &Path, server: &str, proxy: SocketAddr) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let through = text.replace(server, &format!("https://{proxy}"));
    assert_ne!(text, through, "the kubeconfig names {server}");
    let path = kubeconfig.with_file_name("kubeconfig-through-proxy");
    std::fs::write(&path, through).unwrap();
    path
}

/// Creates `count` bundles of `image`, each installing into a namespace of its own name.
async fn create_bundles(client: &Client, image: &str, prefix: &str, count: usize) -> Vec<String> {
    let mut names = Vec::new();
    for _ in 0..count {
        let name = unique_namespace(client, prefix).await;
        create_bundle(client, &name, spec(image, Some(&name))).await;
        names.push(name);
    }
    names
}

/// The slot table (`None` before the sharder wrote one).
async fn slot_table(client: &Client) -> Option<SlotTable> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease = leases.get_opt(SLOT_TABLE_LEASE).await.ok()??;
    SlotTable::parse(lease.annotations().get(SLOT_TABLE_ANNOTATION)?).ok()
}

/// The shard that owns `bundle`'s slot in `table` (`None`: no slot label, or no owner).
fn owner_of(bundle: &Bundle, table: &SlotTable) -> Option<String> {
    let slot = parse_slot(bundle.labels().get(SLOT_LABEL)?)?;
    table.owner(slot).map(str::to_string)
}

/// Each bundle's shard (`None`: unassigned), for `names`.
async fn assignments(client: &Client, names: &[String]) -> BTreeMap<String, Option<String>> {
    let bundles: Api<Bundle> = Api::all(client.clone());
    let all = bundles.list(&ListParams::default()).await.unwrap();
    let table = slot_table(client).await.unwrap_or_default();
    let wanted: BTreeSet<&String> = names.iter().collect();
    all.items
        .iter()
        .filter(|b| wanted.contains(&b.name_any()))
        .map(|b| (b.name_any(), owner_of(b, &table)))
        .collect()
}

/// Waits until every slot belongs to one of `shards`, each of them holds some and none more
/// than an even share of the slots (rounded up), as the sharder's ring places them, and every
/// bundle of `names` has its slot label and is Ready; returns how many bundles each shard holds.
async fn wait_settled(
    client: &Client,
    names: &[String],
    shards: &[&str],
    what: &str,
    logs: &[&Provisioner],
) -> BTreeMap<String, usize> {
    let bundles: Api<Bundle> = Api::all(client.clone());
    let wanted: BTreeSet<&String> = names.iter().collect();
    let deadline = std::time::Instant::now() + SETTLE;
    let mut last = String::new();
    let slot_bound = usize::from(SLOTS).div_ceil(shards.len());
    while std::time::Instant::now() < deadline {
        if let (Ok(all), Some(table)) = (
            bundles.list(&ListParams::default()).await,
            slot_table(client).await,
        ) {
            let mut slots: BTreeMap<&str, usize> = BTreeMap::new();
            let mut unplaced = 0;
            for owner in &table.owners {
                match owner.as_deref().filter(|o| shards.contains(o)) {
                    Some(owner) => *slots.entry(owner).or_insert(0) += 1,
                    None => unplaced += 1,
                }
            }
            let mut load = BTreeMap::new();
            let mut seen = 0;
            let mut pending = Vec::new();
            for bundle in all.items.iter().filter(|b| wanted.contains(&b.name_any())) {
                seen += 1;
                let shard = owner_of(bundle, &table);
                let on_live = shard.as_deref().is_some_and(|s| shards.contains(&s));
                if !on_live || !is_ready(bundle) {
                    pending.push(format!(
                        "{} slot={:?} shard={shard:?} ready={}",
                        bundle.name_any(),
                        bundle.labels().get(SLOT_LABEL),
                        is_ready(bundle)
                    ));
                    continue;
                }
                *load.entry(shard.unwrap()).or_insert(0) += 1;
            }
            if seen == names.len()
                && pending.is_empty()
                && unplaced == 0
                && table.released.is_empty()
                && slots.len() == shards.len()
                && slots.values().all(|&n| n <= slot_bound)
            {
                return load;
            }
            last = format!(
                "{} of {seen} pending: {pending:?}; slots {slots:?}, {unplaced} without a live \
                 shard, released {:?}; load {load:?}",
                pending.len(),
                table.released,
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut logs_text = String::new();
    for provisioner in logs {
        let text = std::fs::read_to_string(provisioner.log()).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| {
                ["shard", "lead", "drain", "releas", "lapse", "WARN", "ERROR"]
                    .iter()
                    .any(|w| l.contains(w))
            })
            .collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        logs_text.push_str(&format!("\n--- {}:\n{tail}", provisioner.log().display()));
    }
    // The whole logs, for a closer look: the harness removes its state at exit.
    let kept = gantry_tests::workspace_root().join("target/sharding-logs");
    let _ = std::fs::create_dir_all(&kept);
    for (i, provisioner) in logs.iter().enumerate() {
        let _ = std::fs::copy(provisioner.log(), kept.join(format!("replica-{i}.log")));
    }
    panic!(
        "timed out after {SETTLE:?} waiting for {what}: {last}{logs_text}\n(logs in {})",
        kept.display()
    );
}

/// The live shards' Leases, by shard.
async fn shard_leases(client: &Client) -> BTreeSet<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    leases
        .list(&ListParams::default().labels(SHARD_LABEL))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|l| l.labels().get(SHARD_LABEL).cloned())
        .collect()
}

fn signal(provisioner: &Provisioner, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &provisioner.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {}", provisioner.pid());
}

/// Waits until one of `names` whose slot is `shard`'s shows `Installing`: a pass of that shard
/// is under way.
async fn wait_installing_on(client: &Client, names: &[String], shard: &str) {
    let bundles: Api<Bundle> = Api::all(client.clone());
    wait_until(
        &format!("a pass of {shard} to be under way"),
        WAIT,
        || async {
            let all = bundles.list(&ListParams::default()).await.ok()?;
            let table = slot_table(client).await?;
            all.items
                .iter()
                .any(|b| {
                    names.contains(&b.name_any())
                        && owner_of(b, &table).as_deref() == Some(shard)
                        && b.status.as_ref().and_then(|s| s.phase)
                            == Some(gantry_api::BundlePhase::Installing)
                })
                .then_some(())
        },
    )
    .await;
}

/// Waits until each replica runs its share of the reconcile concurrency (16 by default): 16
/// times the part of the slots the current table gives it, rounded up. Three shards run about
/// 16 passes at once between them, not 48.
async fn wait_shares(client: &Client, replicas: &[(&str, &Provisioner)]) {
    let names: Vec<&str> = replicas.iter().map(|(name, _)| *name).collect();
    wait_until(
        &format!("{names:?} to run their shares of the reconcile concurrency"),
        WAIT,
        || async {
            let table = slot_table(client).await?;
            let mut total = 0.0;
            for (name, replica) in replicas {
                let served = (0..SLOTS)
                    .filter(|s| table.owner(*s) == Some(*name))
                    .count();
                let expected = (16 * served).div_ceil(usize::from(SLOTS)).max(1) as f64;
                let share = replica
                    .metric("gantry_provisioner_shard_reconcile_share")
                    .await?;
                if share != expected {
                    return None;
                }
                total += share;
            }
            assert!(
                (16.0..16.0 + replicas.len() as f64).contains(&total),
                "the shares add up to the whole concurrency, rounded up: {total}"
            );
            Some(())
        },
    )
    .await;
}

#[tokio::test]
async fn replicas_share_bundles_and_hand_them_over_through_faults_without_two_writers() {
    let cluster = CLUSTER.get();
    let client = setup(&cluster).await;
    let storage = StorageServer::start(StorageOptions::default());

    let server = cluster.server_url().to_string();
    let target: SocketAddr = server
        .trim_start_matches("https://")
        .parse()
        .expect("the API server's address");
    let proxy = CuttableProxy::start(target).await.unwrap();
    let proxied = kubeconfig_through(cluster.kubeconfig(), &server, proxy.address());
    let mut r1 = start_replica(&storage, cluster.kubeconfig(), "r1");
    let r2 = start_replica(&storage, cluster.kubeconfig(), "r2");
    let r3 = start_replica(&storage, &proxied, "r3");
    wait_until("three shard Leases", WAIT, || async {
        (shard_leases(&client).await.len() == 3).then_some(())
    })
    .await;

    let ns = unique_name("sharded");
    let files: Vec<(String, String)> = (0..OBJECTS)
        .map(|i| {
            (
                format!("{i:02}.yaml"),
                config_map(&format!("cm-{i}"), None, "v"),
            )
        })
        .collect();
    let files: Vec<(&str, String)> = files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    push(&format!("{ns}/app:v1"), &files).await;
    let image = in_registry(&format!("{ns}/app:v1"));

    // Spread: every replica gets slots, none more than its share rounded up (checked by
    // `wait_settled`); the bundles follow their slots.
    let mut all = create_bundles(&client, &image, "shard-a", 24).await;
    let load = wait_settled(
        &client,
        &all,
        &["r1", "r2", "r3"],
        "24 bundles on 3 shards",
        &[&r1, &r2, &r3],
    )
    .await;
    assert_eq!(load.values().sum::<usize>(), 24, "{load:?}");
    wait_shares(&client, &[("r1", &r1), ("r2", &r2), ("r3", &r3)]).await;

    // A replica is killed while bundles install: its bundles go to the others.
    let batch = create_bundles(&client, &image, "shard-b", 12).await;
    all.extend(batch.iter().cloned());
    wait_installing_on(&client, &batch, "r1").await;
    let served_before = slot_table(&client).await.expect("the slot table");
    let killed_at = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    r1.kill();
    wait_settled(
        &client,
        &all,
        &["r2", "r3"],
        "r1's bundles on r2 and r3",
        &[&r2, &r3],
    )
    .await;
    // The two left run the whole concurrency between them.
    wait_shares(&client, &[("r2", &r2), ("r3", &r3)]).await;
    // Each new owner listed only the slots it received (a watch of their own), not its own
    // again: the audit log's lists of Bundles by slots since the kill.
    wait_until("r2 and r3 to list the slots they received", WAIT, || async {
        let log = AuditLog::read(&cluster.audit_log()).ok()?;
        let lists: Vec<_> = log
            .bundle_lists()
            .into_iter()
            .filter(|list| list.received > killed_at && !list.continues)
            .collect();
        for shard in ["r2", "r3"] {
            let own: BTreeSet<u16> = (0..SLOTS)
                .filter(|slot| served_before.owner(*slot) == Some(shard))
                .collect();
            let mine: Vec<_> = lists
                .iter()
                .filter(|list| replica_of(&list.user_agent) == shard)
                .collect();
            for list in &mine {
                let again: Vec<&u16> = list.slots.intersection(&own).collect();
                assert!(
                    again.is_empty(),
                    "{shard} listed slots it already served ({again:?}) after the kill: {list:?}"
                );
            }
            if mine.is_empty() {
                return None;
            }
        }
        Some(())
    })
    .await;

    // A replica is paused past its Lease in the middle of a pass: its slots move, and once
    // it runs again it writes nothing of their bundles; it restarts its controllers and takes
    // a share back, which the other replica lets go of first.
    let batch = create_bundles(&client, &image, "shard-c", 12).await;
    all.extend(batch.iter().cloned());
    wait_installing_on(&client, &batch, "r2").await;
    signal(&r2, "STOP");
    wait_settled(
        &client,
        &all,
        &["r3"],
        "r2's bundles on r3 while r2 is paused",
        &[&r3],
    )
    .await;
    let drained_before = r3
        .metric("gantry_provisioner_shard_releases_total")
        .await
        .unwrap_or(0.0);
    signal(&r2, "CONT");
    wait_settled(&client, &all, &["r2", "r3"], "r2 back", &[&r2, &r3]).await;
    let log = std::fs::read_to_string(r2.log()).unwrap();
    assert!(
        log.contains("the shard Lease lapsed"),
        "r2 restarted its controllers after its Lease lapsed:\n{log}"
    );
    let drained = r3
        .metric("gantry_provisioner_shard_releases_total")
        .await
        .unwrap_or(0.0);
    assert!(
        drained > drained_before,
        "r3 let slots go before r2 got them ({drained_before} -> {drained})"
    );

    // A replica is cut off from the API server: its bundles move; reconnected, it takes a
    // share back.
    let batch = create_bundles(&client, &image, "shard-d", 12).await;
    all.extend(batch.iter().cloned());
    wait_installing_on(&client, &batch, "r3").await;
    proxy.cut();
    wait_settled(
        &client,
        &all,
        &["r2"],
        "r3's bundles on r2 while r3 is cut off",
        &[&r2, &r3],
    )
    .await;
    proxy.restore();
    wait_settled(&client, &all, &["r2", "r3"], "r3 back", &[&r2, &r3]).await;

    // The killed replica starts again under its name: the ring spreads the bundles over three.
    let r1 = start_replica(&storage, cluster.kubeconfig(), "r1");
    let load = wait_settled(
        &client,
        &all,
        &["r1", "r2", "r3"],
        "r1 back",
        &[&r1, &r2, &r3],
    )
    .await;
    assert_eq!(load.values().sum::<usize>(), all.len(), "{load:?}");
    // kubectl bundle list -o wide names each bundle's shard (read between two reads of the
    // slot table that agree: the ring may still be moving a slot).
    wait_until(
        "kubectl bundle list -o wide to show each bundle's shard",
        WAIT,
        || async {
            let before = assignments(&client, &all).await;
            let listed = gantry_tests::e2e::kubectl::ok_on(&cluster, &["list", "-o", "wide"]);
            let after = assignments(&client, &all).await;
            let header: Vec<&str> = listed.lines().next()?.split_whitespace().collect();
            assert_eq!(header.last(), Some(&"SHARD"), "{listed}");
            let shown: BTreeMap<String, Option<String>> = listed
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let cells: Vec<&str> = line.split_whitespace().collect();
                    let name = cells.first()?.to_string();
                    before
                        .contains_key(&name)
                        .then(|| (name, cells.last().map(|s| s.to_string())))
                })
                .collect();
            (before == after && shown == before).then_some(())
        },
    )
    .await;

    // The audit log: every ConfigMap of every bundle was written, and each write came from the
    // replica the bundle's slot was given to when the API server received it (the log also
    // holds every write of the slot table). A bundle may come back to a replica it left (a paused
    // replica takes a share back, and a pass cut short is taken up by the new owner, which may
    // send again what the old one had sent), but only through an assignment the log shows.
    let namespaces: BTreeSet<&str> = all.iter().map(String::as_str).collect();
    let log = AuditLog::read(&cluster.audit_log()).unwrap();
    assert_eq!(log.unreadable_lines, Vec::<usize>::new(), "audit log lines");
    let writes = log.config_map_writes(&namespaces);
    let objects: BTreeSet<(&str, &str)> = writes
        .iter()
        .map(|w| (w.namespace.as_str(), w.name.as_str()))
        .collect();
    assert_eq!(
        objects.len(),
        all.len() * OBJECTS,
        "every ConfigMap of every bundle was written"
    );
    let writers: BTreeSet<&str> = writes.iter().map(|w| w.user_agent.as_str()).collect();
    // Each bundle installs into the namespace of its own name.
    let changes = log.shard_changes(&namespaces);
    let off_shard = writes_off_shard(&writes, &changes, |ns| {
        namespaces.contains(ns).then(|| ns.to_string())
    });
    // Each Bundle itself was written once by a provisioner: the sharder's write of its slot
    // label, which also added Gantry's finalizer (its first pass then had none to add).
    let bundle_writes = log.bundle_writes(&namespaces);
    for name in &all {
        let by_provisioners: Vec<_> = bundle_writes
            .get(name)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|w| w.user_agent.starts_with("gantry-provisioner/"))
            .collect();
        assert_eq!(
            by_provisioners.len(),
            1,
            "{name}: one write of the Bundle by a provisioner: {by_provisioners:?}"
        );
        let write = by_provisioners[0];
        assert!(
            write.labels.contains_key(SLOT_LABEL)
                && write
                    .finalizers
                    .iter()
                    .any(|f| f == gantry_api::UNINSTALL_FINALIZER),
            "{name}: the slot label and the finalizer in one write: {write:?}"
        );
    }
    // Bundles moved between shards, as the table's writes show them.
    let moves = changes
        .values()
        .flat_map(|changes| changes.windows(2))
        .filter(|pair| pair[0].shard != pair[1].shard)
        .count();
    assert!(moves > 0, "no bundle changed shard: {changes:?}");
    assert!(
        off_shard.is_empty(),
        "a replica wrote a bundle's objects while the bundle was another's (two writers):\n{}",
        off_shard.join("\n")
    );
    assert!(
        writers.iter().all(|w| w.starts_with("gantry-provisioner/")),
        "{writers:?}"
    );
    assert!(
        writers.len() >= 3,
        "the replicas shared the work: {writers:?}"
    );
    drop((r1, r2, r3));
}
