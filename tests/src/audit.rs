//! Who wrote what, read from the API server's audit log (see the test control plane's audit
//! policy): every provisioner request names its replica in `User-Agent`
//! (`gantry-provisioner/VERSION (IDENTITY)`), so the log shows which replica wrote each
//! ConfigMap and, from each write of the slot table (the Lease `gantry-shard-slots`, logged with
//! the Lease it left), which shard owned each slot, and so each bundle, from then.
//!
//! Two checks that no bundle was written by two replicas at once:
//! - [`writer_returns`]: a bundle's writes, in the order the API server received them, come
//!   from one replica after another, never back to one that had handed the bundle over. Exact
//!   when a bundle never returns to a replica with new content to write.
//! - [`writes_off_shard`]: each write comes from the replica that owned the bundle's slot
//!   (`gantry_api::slots::slot_of` of its name) in the slot table when the API server received
//!   it. A slot taken from a live shard stays that shard's until the table names the next
//!   owner (it may finish its passes meanwhile). A bundle may go back to a replica (a paused
//!   replica takes its share back), but only through an assignment the log shows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gantry_api::slots::{SlotTable, slot_of};
use gantry_api::{SLOT_LABEL, SLOT_TABLE_ANNOTATION, SLOT_TABLE_LEASE};
use serde_json::Value;

use crate::error::{HarnessError, IoContext};

/// The audit log's events, one JSON object a line.
pub struct AuditLog {
    events: Vec<Value>,
    /// Lines (1-based) that are not JSON: a line cut short when the API server was killed
    /// while writing it.
    pub unreadable_lines: Vec<usize>,
}

/// A successful write of a ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConfigMapWrite {
    /// When the API server received it: RFC 3339 with microseconds, in UTC, so that sorting
    /// as text sorts in time.
    pub received: String,
    pub namespace: String,
    pub name: String,
    pub user_agent: String,
}

/// A bundle's shard changed: the write of the slot table that gave the bundle's slot to
/// another shard, and that shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardChange {
    pub received: String,
    pub bundle: String,
    /// The shard the table gave the bundle's slot to (always named). A slot taken from its
    /// shard (no owner in the table) is no change: that shard may finish its passes until it
    /// reports the slot let go, so the bundle is still its own until the next owner is named.
    pub shard: Option<String>,
    pub user_agent: String,
}

/// A successful write of a Bundle itself (not its status), as the Bundle it left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleWrite {
    pub bundle: String,
    pub user_agent: String,
    /// The `resourceVersion` it produced: the order the writes were committed in.
    pub version: u64,
    pub labels: BTreeMap<String, String>,
    pub finalizers: Vec<String>,
}

/// A list of Bundles by slots (label selector `gantry.dev/slot in (...)`): one page of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleList {
    /// When the API server received it (RFC 3339, UTC: sorts as text).
    pub received: String,
    pub user_agent: String,
    pub slots: BTreeSet<u16>,
    /// A page after the first (a `continue` token).
    pub continues: bool,
}

/// The slots a label selector `gantry.dev/slot in (a,b,...)` names (empty for another selector).
fn selected_slots(selector: &str) -> BTreeSet<u16> {
    selector
        .strip_prefix(&format!("{SLOT_LABEL} in ("))
        .and_then(|rest| rest.strip_suffix(')'))
        .map(|values| {
            values
                .split(',')
                .filter_map(|v| v.trim().parse::<u16>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The replica a `User-Agent` names (`gantry-provisioner/VERSION (IDENTITY)`), or the whole
/// agent when it names none.
pub fn replica_of(user_agent: &str) -> &str {
    user_agent
        .rsplit_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or(user_agent)
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// The query parameter `name` of a request URI, decoded (empty without one).
fn query_parameter(uri: &str, name: &str) -> String {
    let query = uri.split_once('?').map(|(_, q)| q).unwrap_or_default();
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default()
}

/// The `labelSelector` of a request URI, decoded (empty without one).
fn label_selector(uri: &str) -> String {
    query_parameter(uri, "labelSelector")
}

/// The `resourceVersion` of an object's `metadata`, as the number it is.
fn resource_version(metadata: &Value) -> Option<u64> {
    metadata["resourceVersion"].as_str()?.parse().ok()
}

/// A write that took effect: create, update or patch, answered 2xx, not a dry run.
fn successful_write(event: &Value) -> bool {
    let verb = event["verb"].as_str().unwrap_or_default();
    let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
    let uri = event["requestURI"].as_str().unwrap_or_default();
    ["create", "update", "patch"].contains(&verb)
        && (200..300).contains(&code)
        && !uri.contains("dryRun")
}

impl AuditLog {
    pub fn read(path: &Path) -> Result<Self, HarnessError> {
        let text =
            std::fs::read_to_string(path).context(|| format!("reading {}", path.display()))?;
        Ok(Self::parse(&text))
    }

    pub fn parse(text: &str) -> Self {
        let mut events = Vec::new();
        let mut unreadable_lines = Vec::new();
        for (index, line) in text.lines().enumerate() {
            match serde_json::from_str::<Value>(line) {
                Ok(event) => events.push(event),
                Err(_) => unreadable_lines.push(index + 1),
            }
        }
        Self {
            events,
            unreadable_lines,
        }
    }

    /// The successful writes of ConfigMaps in `namespaces`, in the order the API server
    /// received them.
    pub fn config_map_writes(&self, namespaces: &BTreeSet<&str>) -> Vec<ConfigMapWrite> {
        let mut writes: Vec<ConfigMapWrite> = self
            .events
            .iter()
            .filter(|event| {
                let object = &event["objectRef"];
                object["resource"] == "configmaps"
                    && namespaces.contains(object["namespace"].as_str().unwrap_or_default())
                    && successful_write(event)
            })
            .map(|event| ConfigMapWrite {
                received: text(&event["requestReceivedTimestamp"]),
                namespace: text(&event["objectRef"]["namespace"]),
                name: text(&event["objectRef"]["name"]),
                user_agent: text(&event["userAgent"]),
            })
            .collect();
        writes.sort();
        writes
    }

    /// The reads of ConfigMaps in `namespace` (`get` with the name read, `list` with the
    /// label selector asked), in the order the API server received them: (verb, name or
    /// selector, User-Agent).
    pub fn config_map_reads(&self, namespace: &str) -> Vec<(String, String, String)> {
        let mut reads: Vec<(String, String, String, String)> = self
            .events
            .iter()
            .filter(|event| {
                let object = &event["objectRef"];
                let verb = event["verb"].as_str().unwrap_or_default();
                object["resource"] == "configmaps"
                    && object["namespace"] == namespace
                    && (verb == "get" || verb == "list")
            })
            .map(|event| {
                let verb = text(&event["verb"]);
                let what = match verb.as_str() {
                    "get" => text(&event["objectRef"]["name"]),
                    _ => label_selector(event["requestURI"].as_str().unwrap_or_default()),
                };
                (
                    text(&event["requestReceivedTimestamp"]),
                    verb,
                    what,
                    text(&event["userAgent"]),
                )
            })
            .collect();
        reads.sort();
        reads
            .into_iter()
            .map(|(_, verb, what, agent)| (verb, what, agent))
            .collect()
    }

    /// The reads by name (`get`) of objects of `resource` (`services`, `deployments`) in
    /// `namespace`, in the order the API server received them: (when, name, User-Agent).
    pub fn gets(&self, resource: &str, namespace: &str) -> Vec<(String, String, String)> {
        let mut reads: Vec<(String, String, String)> = self
            .events
            .iter()
            .filter(|event| {
                let object = &event["objectRef"];
                object["resource"] == resource
                    && object["namespace"] == namespace
                    && object["subresource"]
                        .as_str()
                        .unwrap_or_default()
                        .is_empty()
                    && event["verb"] == "get"
            })
            .map(|event| {
                (
                    text(&event["requestReceivedTimestamp"]),
                    text(&event["objectRef"]["name"]),
                    text(&event["userAgent"]),
                )
            })
            .collect();
        reads.sort();
        reads
    }

    /// The successful writes of each of `bundles` itself (creates included; not its status),
    /// each bundle's in the order they were committed.
    pub fn bundle_writes(&self, bundles: &BTreeSet<&str>) -> BTreeMap<String, Vec<BundleWrite>> {
        let mut writes: BTreeMap<String, Vec<BundleWrite>> = BTreeMap::new();
        for event in &self.events {
            let object = &event["objectRef"];
            let name = object["name"].as_str().unwrap_or_default();
            if object["resource"] != "bundles"
                || object["subresource"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty())
                || !successful_write(event)
            {
                continue;
            }
            let metadata = &event["responseObject"]["metadata"];
            // A create's objectRef has no name: the object it left does.
            let name = metadata["name"].as_str().unwrap_or(name);
            if !bundles.contains(name) {
                continue;
            }
            let Some(version) = resource_version(metadata) else {
                continue;
            };
            writes
                .entry(name.to_string())
                .or_default()
                .push(BundleWrite {
                    bundle: name.to_string(),
                    user_agent: text(&event["userAgent"]),
                    version,
                    labels: serde_json::from_value(metadata["labels"].clone()).unwrap_or_default(),
                    finalizers: serde_json::from_value(metadata["finalizers"].clone())
                        .unwrap_or_default(),
                });
        }
        for list in writes.values_mut() {
            list.sort_by_key(|write| write.version);
        }
        writes
    }

    /// The successful lists of Bundles by slots, in the order the API server received them
    /// (watches are not lists: a watch's start lists, then watches).
    pub fn bundle_lists(&self) -> Vec<BundleList> {
        let mut lists: Vec<BundleList> = self
            .events
            .iter()
            .filter(|event| {
                event["objectRef"]["resource"] == "bundles"
                    && event["verb"] == "list"
                    && event["responseStatus"]["code"].as_u64() == Some(200)
            })
            .filter_map(|event| {
                let uri = event["requestURI"].as_str().unwrap_or_default();
                let slots = selected_slots(&label_selector(uri));
                let continues = !query_parameter(uri, "continue").is_empty();
                (!slots.is_empty()).then(|| BundleList {
                    received: text(&event["requestReceivedTimestamp"]),
                    user_agent: text(&event["userAgent"]),
                    slots,
                    continues,
                })
            })
            .collect();
        lists.sort_by(|a, b| a.received.cmp(&b.received));
        lists
    }

    /// How the shard of each of `bundles` changed, each bundle's changes in the order they
    /// took effect: read from the slot table as each of its writes left it (the policy logs
    /// Lease writes with their response), in the order they were committed (the
    /// `resourceVersion` they produced). The first table logged tells where each slot starts;
    /// after that, a change is the slot given to another shard (see [`ShardChange::shard`]).
    /// Every one of `bundles` has an entry, empty while its slot was never given.
    pub fn shard_changes(&self, bundles: &BTreeSet<&str>) -> BTreeMap<String, Vec<ShardChange>> {
        let mut tables: Vec<(u64, String, String, SlotTable)> = Vec::new();
        for event in &self.events {
            let object = &event["objectRef"];
            if object["resource"] != "leases"
                || object["name"] != SLOT_TABLE_LEASE
                || !successful_write(event)
            {
                continue;
            }
            let metadata = &event["responseObject"]["metadata"];
            let (Some(version), Some(table)) = (
                resource_version(metadata),
                metadata["annotations"][SLOT_TABLE_ANNOTATION]
                    .as_str()
                    .and_then(|text| SlotTable::parse(text).ok()),
            ) else {
                continue;
            };
            tables.push((
                version,
                text(&event["requestReceivedTimestamp"]),
                text(&event["userAgent"]),
                table,
            ));
        }
        tables.sort_by_key(|(version, ..)| *version);
        bundles
            .iter()
            .map(|bundle| {
                let slot = slot_of(bundle);
                let mut changes: Vec<ShardChange> = Vec::new();
                for (_, received, user_agent, table) in &tables {
                    // No owner: being let go, still the last owner's.
                    let Some(owner) = table.owner(slot) else {
                        continue;
                    };
                    if changes.last().and_then(|c| c.shard.as_deref()) != Some(owner) {
                        changes.push(ShardChange {
                            received: received.clone(),
                            bundle: bundle.to_string(),
                            shard: Some(owner.to_string()),
                            user_agent: user_agent.clone(),
                        });
                    }
                }
                (bundle.to_string(), changes)
            })
            .collect()
    }
}

/// Each namespace's writers in turn: one entry per run of consecutive writes by one agent.
fn turns(writes: &[ConfigMapWrite]) -> BTreeMap<&str, Vec<&str>> {
    let mut by_namespace: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for write in writes {
        let runs = by_namespace.entry(&write.namespace).or_default();
        if runs.last() != Some(&write.user_agent.as_str()) {
            runs.push(&write.user_agent);
        }
    }
    by_namespace
}

/// The namespaces whose writes (given in the order received) went back to a writer after
/// another one had written, each as `namespace: [writer, writer, ...]` in turn.
pub fn writer_returns(writes: &[ConfigMapWrite]) -> Vec<String> {
    turns(writes)
        .into_iter()
        .filter(|(_, runs)| runs.iter().collect::<BTreeSet<_>>().len() != runs.len())
        .map(|(namespace, runs)| format!("{namespace}: {runs:?}"))
        .collect()
}

/// The writes (given in the order received) of a bundle's objects by a replica other than the
/// one the bundle was assigned to when the API server received them, described. `bundle_of`
/// names the bundle that owns a namespace's objects.
pub fn writes_off_shard(
    writes: &[ConfigMapWrite],
    changes: &BTreeMap<String, Vec<ShardChange>>,
    bundle_of: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut off = Vec::new();
    for write in writes {
        let Some(bundle) = bundle_of(&write.namespace) else {
            continue;
        };
        let replica = replica_of(&write.user_agent);
        let bundle_changes = changes.get(&bundle).map(Vec::as_slice).unwrap_or_default();
        // The last change received before the write (timestamps as text: same format, UTC).
        let current = bundle_changes
            .iter()
            .rev()
            .find(|change| change.received <= write.received);
        let shard = current.and_then(|change| change.shard.as_deref());
        if shard != Some(replica) {
            let since = current.map_or_else(
                || "no assignment logged before".to_string(),
                |change| {
                    format!(
                        "since {}, written by {}",
                        change.received,
                        replica_of(&change.user_agent)
                    )
                },
            );
            off.push(format!(
                "{bundle}: {}/{} written by {replica} at {} while the bundle's shard was {} ({since})",
                write.namespace,
                write.name,
                write.received,
                shard.unwrap_or("none"),
            ));
        }
    }
    off
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_lists_by_slots_are_read_with_their_slots_and_pages() {
        let line = |received: &str, query: &str, agent: &str| {
            serde_json::json!({
                "kind": "Event", "stage": "ResponseComplete", "verb": "list",
                "requestURI": format!("/apis/gantry.dev/v1alpha1/bundles?{query}"),
                "userAgent": agent,
                "objectRef": { "resource": "bundles", "apiGroup": "gantry.dev", "apiVersion": "v1alpha1" },
                "responseStatus": { "code": 200 },
                "requestReceivedTimestamp": received,
            })
            .to_string()
        };
        let text = [
            line(
                "2026-01-01T00:00:02.000000Z",
                "labelSelector=gantry.dev%2Fslot+in+%283%2C4%29&limit=500&continue=abc",
                R1,
            ),
            line(
                "2026-01-01T00:00:01.000000Z",
                "labelSelector=gantry.dev%2Fslot+in+%283%2C4%29&limit=500",
                R1,
            ),
            // The sharder's list of unlabelled Bundles, and a metadata list of all: not by slots.
            line(
                "2026-01-01T00:00:03.000000Z",
                "labelSelector=%21gantry.dev%2Fslot&limit=100",
                R2,
            ),
            line("2026-01-01T00:00:04.000000Z", "limit=500", R2),
        ]
        .join("\n");
        let lists = AuditLog::parse(&text).bundle_lists();
        assert_eq!(
            lists,
            [
                BundleList {
                    received: "2026-01-01T00:00:01.000000Z".into(),
                    user_agent: R1.into(),
                    slots: [3, 4].into(),
                    continues: false,
                },
                BundleList {
                    received: "2026-01-01T00:00:02.000000Z".into(),
                    user_agent: R1.into(),
                    slots: [3, 4].into(),
                    continues: true,
                },
            ]
        );
    }

    const R1: &str = "gantry-provisioner/0.1.0 (r1)";
    const R2: &str = "gantry-provisioner/0.1.0 (r2)";

    fn config_map_line(received: &str, namespace: &str, name: &str, agent: &str) -> String {
        serde_json::json!({
            "kind": "Event", "stage": "ResponseComplete", "verb": "patch",
            "requestURI": format!("/api/v1/namespaces/{namespace}/configmaps/{name}?fieldManager=gantry"),
            "userAgent": agent,
            "objectRef": { "resource": "configmaps", "namespace": namespace, "name": name, "apiVersion": "v1" },
            "responseStatus": { "code": 200 },
            "requestReceivedTimestamp": received,
        })
        .to_string()
    }

    /// A write of the slot table giving the slot of the bundle "app" to `owner` (`None`: taking
    /// it from its shard).
    fn table_line(received: &str, version: u64, owner: Option<&str>, agent: &str) -> String {
        let mut table = SlotTable::new();
        table.epoch = version;
        table.owners[usize::from(slot_of("app"))] = owner.map(str::to_string);
        // Another slot's owner changes in the same writes: no change of "app".
        let other = (slot_of("app") + 1) % gantry_api::slots::SLOTS;
        table.owners[usize::from(other)] = Some(format!("x{version}"));
        serde_json::json!({
            "kind": "Event", "stage": "ResponseComplete", "verb": "patch",
            "requestURI": format!("/apis/coordination.k8s.io/v1/namespaces/gantry-system/leases/{SLOT_TABLE_LEASE}"),
            "userAgent": agent,
            "objectRef": { "resource": "leases", "namespace": "gantry-system", "name": SLOT_TABLE_LEASE, "apiGroup": "coordination.k8s.io" },
            "responseStatus": { "code": 200 },
            "responseObject": { "metadata": {
                "name": SLOT_TABLE_LEASE,
                "resourceVersion": version.to_string(),
                "annotations": { SLOT_TABLE_ANNOTATION: table.to_text() },
            } },
            "requestReceivedTimestamp": received,
        })
        .to_string()
    }

    fn writes(lines: &[String]) -> Vec<ConfigMapWrite> {
        AuditLog::parse(&lines.join("\n")).config_map_writes(&["app"].into())
    }

    #[test]
    fn a_handover_from_one_replica_to_the_next_is_no_return() {
        let writes = writes(&[
            config_map_line("2026-01-01T00:00:01.000000Z", "app", "a", R1),
            config_map_line("2026-01-01T00:00:02.000000Z", "app", "b", R1),
            config_map_line("2026-01-01T00:00:03.000000Z", "app", "a", R2),
            config_map_line("2026-01-01T00:00:04.000000Z", "app", "b", R2),
        ]);
        assert_eq!(writes.len(), 4);
        assert_eq!(writer_returns(&writes), Vec::<String>::new());
    }

    #[test]
    fn a_write_by_a_replica_that_had_handed_the_bundle_over_is_a_return() {
        // Logged out of order: the check goes by the time received.
        let writes = writes(&[
            config_map_line("2026-01-01T00:00:01.000000Z", "app", "a", R1),
            config_map_line("2026-01-01T00:00:05.000000Z", "app", "b", R1),
            config_map_line("2026-01-01T00:00:03.000000Z", "app", "a", R2),
        ]);
        assert_eq!(
            writer_returns(&writes),
            vec![format!("app: [{R1:?}, {R2:?}, {R1:?}]")]
        );
    }

    #[test]
    fn failed_dry_run_and_foreign_writes_are_not_counted() {
        let mut failed = config_map_line("2026-01-01T00:00:02.000000Z", "app", "a", R2);
        failed = failed.replace("\"code\":200", "\"code\":409");
        let dry_run = config_map_line("2026-01-01T00:00:03.000000Z", "app", "a", R2)
            .replace("fieldManager=gantry", "dryRun=All");
        let log = AuditLog::parse(
            &[
                config_map_line("2026-01-01T00:00:01.000000Z", "app", "a", R1),
                failed,
                dry_run,
                config_map_line("2026-01-01T00:00:04.000000Z", "other", "a", R2),
                "{\"kind\":\"Event\",\"verb\":\"pat".to_string(),
                config_map_line("2026-01-01T00:00:05.000000Z", "app", "a", R1),
            ]
            .join("\n"),
        );
        assert_eq!(log.unreadable_lines, vec![5]);
        let writes = log.config_map_writes(&["app"].into());
        assert_eq!(writes.len(), 2);
        assert!(writes.iter().all(|w| w.user_agent == R1));
        assert_eq!(writer_returns(&writes), Vec::<String>::new());
    }

    fn log_of(lines: &[String]) -> (Vec<ConfigMapWrite>, BTreeMap<String, Vec<ShardChange>>) {
        let log = AuditLog::parse(&lines.join("\n"));
        (
            log.config_map_writes(&["app"].into()),
            log.shard_changes(&["app"].into()),
        )
    }

    /// [`writes_off_shard`] of bundles that own the namespace of their name.
    fn off_shard(
        writes: &[ConfigMapWrite],
        changes: &BTreeMap<String, Vec<ShardChange>>,
    ) -> Vec<String> {
        writes_off_shard(writes, changes, |namespace| Some(namespace.to_string()))
    }

    const SHARDER: &str = "gantry-provisioner/0.1.0 (r2)";

    #[test]
    fn a_bundle_assigned_back_to_a_replica_may_be_written_by_it_again() {
        let (writes, changes) = log_of(&[
            table_line("2026-01-01T00:00:00.000000Z", 10, None, SHARDER),
            table_line("2026-01-01T00:00:00.500000Z", 11, Some("r1"), SHARDER),
            config_map_line("2026-01-01T00:00:01.000000Z", "app", "a", R1),
            // r1 paused past its Lease: the sharder gives the slot to r2 at once.
            table_line("2026-01-01T00:00:20.000000Z", 20, Some("r2"), SHARDER),
            config_map_line("2026-01-01T00:00:21.000000Z", "app", "a", R2),
            // r1 back: the slot taken from r2, then given to r1 again.
            table_line("2026-01-01T00:00:30.000000Z", 30, None, SHARDER),
            table_line("2026-01-01T00:00:31.000000Z", 31, Some("r1"), SHARDER),
            config_map_line("2026-01-01T00:00:32.000000Z", "app", "a", R1),
        ]);
        assert_eq!(writer_returns(&writes).len(), 1, "a return, as such");
        assert_eq!(
            changes["app"]
                .iter()
                .map(|c| c.shard.as_deref().unwrap())
                .collect::<Vec<_>>(),
            ["r1", "r2", "r1"]
        );
        assert_eq!(off_shard(&writes, &changes), Vec::<String>::new());
    }

    #[test]
    fn the_owner_may_finish_its_passes_while_the_slot_is_let_go_but_not_after() {
        let (writes, changes) = log_of(&[
            table_line("2026-01-01T00:00:00.000000Z", 10, Some("r1"), SHARDER),
            // Taken from r1: r1 finishes the pass under way.
            table_line("2026-01-01T00:00:10.000000Z", 15, None, SHARDER),
            config_map_line("2026-01-01T00:00:11.000000Z", "app", "a", R1),
            // Given to r2 once r1 let it go.
            table_line("2026-01-01T00:00:20.000000Z", 20, Some("r2"), SHARDER),
            config_map_line("2026-01-01T00:00:22.000000Z", "app", "a", R2),
            config_map_line("2026-01-01T00:00:25.000000Z", "app", "b", R1),
        ]);
        assert_eq!(
            off_shard(&writes, &changes),
            [
                "app: app/b written by r1 at 2026-01-01T00:00:25.000000Z while the bundle's \
                 shard was r2 (since 2026-01-01T00:00:20.000000Z, written by r2)"
            ]
        );
    }

    #[test]
    fn a_write_after_the_slot_went_from_a_dead_shard_to_another_is_off_its_shard() {
        // A table write that failed (a conflict) and a shard's renewal of its own Lease tell
        // nothing of the table.
        let failed = table_line("2026-01-01T00:00:21.000000Z", 21, Some("r1"), SHARDER)
            .replace("\"code\":200", "\"code\":409");
        let renewal = table_line("2026-01-01T00:00:21.500000Z", 22, Some("r1"), R1)
            .replace(SLOT_TABLE_LEASE, "gantry-shard-r1");
        let (writes, changes) = log_of(&[
            table_line("2026-01-01T00:00:00.000000Z", 10, Some("r1"), SHARDER),
            config_map_line("2026-01-01T00:00:01.000000Z", "app", "a", R1),
            // r1's Lease expired: its slot goes to r2 at once, without being let go.
            table_line("2026-01-01T00:00:20.000000Z", 20, Some("r2"), SHARDER),
            failed,
            renewal,
            config_map_line("2026-01-01T00:00:22.000000Z", "app", "a", R2),
            config_map_line("2026-01-01T00:00:23.000000Z", "app", "b", R1),
        ]);
        assert_eq!(changes["app"].len(), 2, "{changes:?}");
        assert_eq!(
            off_shard(&writes, &changes),
            [
                "app: app/b written by r1 at 2026-01-01T00:00:23.000000Z while the bundle's \
                 shard was r2 (since 2026-01-01T00:00:20.000000Z, written by r2)"
            ]
        );
    }

    #[test]
    fn table_writes_count_in_the_order_they_were_committed() {
        let (writes, changes) = log_of(&[
            table_line("2026-01-01T00:00:00.000000Z", 10, Some("r1"), SHARDER),
            // Logged out of order: committed after the one below.
            table_line("2026-01-01T00:00:30.000000Z", 31, Some("r1"), SHARDER),
            table_line("2026-01-01T00:00:20.000000Z", 20, Some("r2"), SHARDER),
            config_map_line("2026-01-01T00:00:22.000000Z", "app", "a", R2),
            config_map_line("2026-01-01T00:00:32.000000Z", "app", "b", R1),
        ]);
        assert_eq!(changes["app"].len(), 3, "{changes:?}");
        assert_eq!(off_shard(&writes, &changes), Vec::<String>::new());
    }

    #[test]
    fn a_write_before_any_assignment_is_off_its_shard() {
        let (writes, changes) = log_of(&[
            table_line("2026-01-01T00:00:00.000000Z", 10, None, SHARDER),
            config_map_line("2026-01-01T00:00:01.000000Z", "app", "a", R1),
        ]);
        assert!(changes["app"].is_empty());
        assert_eq!(off_shard(&writes, &changes).len(), 1);
    }

    #[test]
    fn the_replica_is_read_from_the_user_agent() {
        assert_eq!(replica_of(R1), "r1");
        assert_eq!(
            replica_of("gantry-provisioner/0.1.0 (gantry-provisioner-7d9f)"),
            "gantry-provisioner-7d9f"
        );
        assert_eq!(replica_of("kubectl/v1.34"), "kubectl/v1.34");
    }
}
