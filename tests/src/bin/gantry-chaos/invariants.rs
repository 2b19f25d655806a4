//! What must hold once the environment has settled after the faults.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gantry_api::Bundle;
use gantry_rules::conditions::find;
use gantry_tests::audit::{AuditLog, replica_of, writer_returns, writes_off_shard};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

use crate::workload::{Workload, expected_objects, ready_at};

#[derive(Default)]
pub struct Report {
    /// (invariant, how many times it was checked, violations)
    checks: Vec<(&'static str, usize, Vec<String>)>,
    /// What the checks saw besides, for the record.
    notes: Vec<String>,
}

impl Report {
    fn record(&mut self, invariant: &'static str, checked: usize, violations: Vec<String>) {
        self.checks.push((invariant, checked, violations));
    }

    pub fn lines(&self) -> Vec<String> {
        self.checks
            .iter()
            .map(|(invariant, checked, violations)| {
                format!(
                    "{:<58} {} checked, {}",
                    invariant,
                    checked,
                    if violations.is_empty() {
                        "held".to_string()
                    } else {
                        format!("{} VIOLATED", violations.len())
                    }
                )
            })
            .collect()
    }

    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    pub fn violations(&self) -> usize {
        self.checks.iter().map(|(_, _, v)| v.len()).sum()
    }

    pub fn violation_details(&self) -> Vec<String> {
        self.checks
            .iter()
            .flat_map(|(_, _, v)| v.iter().cloned())
            .collect()
    }
}

/// Checks every invariant; `audit_log` (the API server's, with several replicas) adds that no
/// bundle had two writers.
pub async fn check(workload: &Workload, storage_root: &Path, audit_log: Option<&Path>) -> Report {
    let mut report = Report::default();
    let bundles: Api<Bundle> = Api::all(workload.client.clone());

    let mut ready = (0, Vec::new());
    let mut live_objects = (0, Vec::new());
    let mut deleted_objects = (0, Vec::new());
    let mut expected_storage = BTreeSet::new();
    for model in &workload.bundles {
        let model = model.lock().await;
        let config_maps: Api<ConfigMap> =
            Api::namespaced(workload.client.clone(), &model.namespace);
        let present: Result<BTreeSet<(String, Option<String>)>, _> =
            config_maps.list(&ListParams::default()).await.map(|list| {
                list.items
                    .into_iter()
                    .filter(|cm| cm.metadata.name.as_deref() != Some("kube-root-ca.crt"))
                    .map(|cm| {
                        let version = cm.data.as_ref().and_then(|d| d.get("version")).cloned();
                        (cm.metadata.name.unwrap_or_default(), version)
                    })
                    .collect()
            });
        if model.deleted {
            deleted_objects.0 += 1;
            match (bundles.get_opt(&model.name).await, present) {
                (Ok(None), Ok(present)) if present.is_empty() => {}
                (Ok(Some(_)), _) => deleted_objects
                    .1
                    .push(format!("deleted bundle {} still exists", model.name)),
                (_, Ok(present)) => deleted_objects.1.push(format!(
                    "deleted bundle {} left {:?} in {}",
                    model.name,
                    present.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                    model.namespace
                )),
                (Err(e), _) | (_, Err(e)) => deleted_objects
                    .1
                    .push(format!("checking deleted bundle {}: {e}", model.name)),
            }
            continue;
        }

        let (version, pinned) = model.latest().clone();
        ready.0 += 1;
        match bundles.get_opt(&model.name).await {
            Ok(Some(live)) => {
                if !ready_at(&live, &pinned) {
                    let status = live.status.as_ref();
                    let message = status
                        .and_then(|s| find(&s.conditions, gantry_api::conditions::types::READY))
                        .map(|c| format!("{} {}: {}", c.status, c.reason, c.message))
                        .unwrap_or_default();
                    ready.1.push(format!(
                        "{} is not Ready at {pinned} (resolved {:?}; Ready {message})",
                        model.name,
                        status.and_then(|s| s.resolved_image.as_deref())
                    ));
                }
                if let Some(content) = live
                    .status
                    .as_ref()
                    .and_then(|s| s.content_digest.as_deref())
                {
                    expected_storage.insert((
                        model.name.clone(),
                        content.trim_start_matches("sha256:").to_string(),
                    ));
                }
            }
            Ok(None) => ready
                .1
                .push(format!("live bundle {} does not exist", model.name)),
            Err(e) => ready.1.push(format!("reading bundle {}: {e}", model.name)),
        }

        live_objects.0 += 1;
        let expected: BTreeSet<(String, Option<String>)> = expected_objects(version)
            .into_iter()
            .map(|name| (name, Some(version.to_string())))
            .collect();
        match present {
            Ok(present) if present == expected => {}
            Ok(present) => live_objects.1.push(format!(
                "{} at version {version}: missing {:?}, unexpected {:?}",
                model.name,
                expected.difference(&present).collect::<Vec<_>>(),
                present.difference(&expected).collect::<Vec<_>>()
            )),
            Err(e) => live_objects
                .1
                .push(format!("listing objects of {}: {e}", model.name)),
        }
    }
    report.record(
        "every live bundle Ready at its latest digest",
        ready.0,
        ready.1,
    );
    report.record(
        "every object of a live bundle present, at its latest content",
        live_objects.0,
        live_objects.1,
    );
    report.record(
        "no object of a deleted bundle left",
        deleted_objects.0,
        deleted_objects.1,
    );

    let (checked, violations) = check_storage(storage_root, &expected_storage);
    report.record(
        "storage holds exactly the current tarballs, none partial",
        checked,
        violations,
    );

    let running = workload
        .running_violations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let manual = {
        let mut n = 0;
        for model in &workload.bundles {
            if model.lock().await.manual {
                n += 1;
            }
        }
        n
    };
    report.record(
        "content runs only once approved; no approval lost (sampled)",
        manual,
        running,
    );
    if let Some(audit_log) = audit_log {
        one_writer_at_a_time(workload, audit_log, &mut report).await;
    }
    report
}

/// From the API server's audit log: every ConfigMap write in a bundle's namespace came from the
/// replica the bundle was assigned to when the API server received it. A bundle goes from one
/// replica to the next and may come back to one (a paused replica takes its share back), but
/// only through an assignment the log shows: a replica writing a bundle it had handed over, or
/// one not yet assigned to it, is a second writer.
async fn one_writer_at_a_time(workload: &Workload, audit_log: &Path, report: &mut Report) {
    const INVARIANT: &str = "each bundle written only by its shard (audit log)";
    let log = match AuditLog::read(audit_log) {
        Ok(log) => log,
        Err(e) => {
            report.record(INVARIANT, 0, vec![format!("reading the audit log: {e}")]);
            return;
        }
    };
    let mut names = Vec::new();
    for model in &workload.bundles {
        let model = model.lock().await;
        names.push((model.namespace.clone(), model.name.clone()));
    }
    let bundle_of: BTreeMap<String, String> = names.iter().cloned().collect();
    let namespaces: BTreeSet<&str> = names.iter().map(|(ns, _)| ns.as_str()).collect();
    let bundles: BTreeSet<&str> = names.iter().map(|(_, name)| name.as_str()).collect();
    let writes = log.config_map_writes(&namespaces);
    let changes = log.shard_changes(&bundles);
    let off_shard = writes_off_shard(&writes, &changes, |ns| bundle_of.get(ns).cloned());
    let written: BTreeSet<&str> = writes.iter().map(|w| w.namespace.as_str()).collect();
    report.record(INVARIANT, written.len(), off_shard);

    let writers: BTreeSet<&str> = writes.iter().map(|w| replica_of(&w.user_agent)).collect();
    // Changes to another shard, not counting a bundle's first assignment.
    let moves: usize = changes
        .values()
        .map(|changes| {
            changes
                .iter()
                .filter_map(|c| c.shard.as_deref())
                .collect::<Vec<_>>()
                .windows(2)
                .filter(|pair| pair[0] != pair[1])
                .count()
        })
        .sum();
    let returns = writer_returns(&writes).len();
    report.notes.push(format!(
        "audit log: {} ConfigMap writes by {} replica(s) {writers:?}; {moves} bundle moves \
         between shards; {returns} bundle(s) written again by a replica after another had \
         written them (allowed only once assigned back to it, as checked above)",
        writes.len(),
        writers.len(),
    ));
    if !log.unreadable_lines.is_empty() {
        report.notes.push(format!(
            "{} audit log line(s) unreadable (cut short by a kube-apiserver kill): {:?}",
            log.unreadable_lines.len(),
            log.unreadable_lines
        ));
    }
}

/// The store's directory holds one directory per live bundle with exactly its current tarball:
/// nothing of deleted bundles, no older content, no temporary or quarantined file.
fn check_storage(root: &Path, expected: &BTreeSet<(String, String)>) -> (usize, Vec<String>) {
    let mut found = BTreeSet::new();
    let mut violations = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) => return (0, vec![format!("reading {}: {e}", root.display())]),
    };
    for entry in entries.flatten() {
        let bundle = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if !path.is_dir() {
            violations.push(format!("unexpected file {}", path.display()));
            continue;
        }
        let files = match std::fs::read_dir(&path) {
            Ok(files) => files,
            Err(e) => {
                violations.push(format!("reading {}: {e}", path.display()));
                continue;
            }
        };
        for file in files.flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            match name.strip_suffix(".tar.gz") {
                Some(hex) if hex.len() == 64 && !hex.starts_with('.') => {
                    found.insert((bundle.clone(), hex.to_string()));
                }
                _ => violations.push(format!("unexpected entry {}", file.path().display())),
            }
        }
    }
    for (bundle, hex) in found.difference(expected) {
        violations.push(format!("stored but not current: {bundle}/{hex}"));
    }
    for (bundle, hex) in expected.difference(&found) {
        violations.push(format!("current but not stored: {bundle}/{hex}"));
    }
    (expected.len(), violations)
}
