//! Removing objects a bundle no longer has (prune) or that it had (uninstall), and the order
//! an uninstall removes them in.

use gantry_api::{BUNDLE_LABEL, DeletionPolicy, InventoryEntry, PRUNE_ANNOTATION, PRUNE_DISABLED};
use kube::api::{Api, DeleteParams, DynamicObject, PartialObjectMeta, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cluster::discovery::{KindCache, kind_api};
use crate::cluster::errors::api_message;
use crate::cluster::errors::is_not_found;
use gantry_rules::plan::describe;

/// One step of an uninstall: its objects are deleted together, and the next wave starts only
/// once they are all gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wave {
    /// Objects of the kinds the bundle's own CRDs define.
    CustomResources,
    /// The bundle's CRDs: gone once the API server deleted every custom resource of theirs,
    /// in any namespace, and their controllers (still running) removed their finalizers.
    Crds,
    /// Everything else but Namespaces: workloads, RBAC, webhooks, Services.
    Others,
    /// Namespaces last: deleting one deletes everything in it, the operator too.
    Namespaces,
}

impl Wave {
    /// What the wave's objects are, for a status message.
    pub fn describe(self) -> &'static str {
        match self {
            Wave::CustomResources => "custom resources",
            Wave::Crds => "CustomResourceDefinitions and their custom resources",
            Wave::Others => "workloads, RBAC and other objects",
            Wave::Namespaces => "Namespaces",
        }
    }
}

/// The waves of an uninstall, each holding its entries in reverse inventory order (the reverse
/// of the apply order). An operator's finalizers on its custom resources can only be removed
/// while its Deployment, its RBAC and the Namespace it runs in are there: so custom resources
/// and CRDs go first and are waited for, and the rest only then. Empty waves are left out.
pub fn uninstall_waves(inventory: &[InventoryEntry]) -> Vec<(Wave, Vec<InventoryEntry>)> {
    let is_crd = |e: &InventoryEntry| {
        e.group == "apiextensions.k8s.io" && e.kind == "CustomResourceDefinition"
    };
    // A CRD's name is `<plural>.<group>`.
    let crd_groups: Vec<&str> = inventory
        .iter()
        .filter(|e| is_crd(e))
        .filter_map(|e| e.name.split_once('.').map(|(_, group)| group))
        .collect();
    let wave_of = |e: &InventoryEntry| {
        if is_crd(e) {
            Wave::Crds
        } else if crd_groups.contains(&e.group.as_str()) {
            Wave::CustomResources
        } else if e.group.is_empty() && e.kind == "Namespace" {
            Wave::Namespaces
        } else {
            Wave::Others
        }
    };
    [
        Wave::CustomResources,
        Wave::Crds,
        Wave::Others,
        Wave::Namespaces,
    ]
    .into_iter()
    .map(|wave| {
        let entries: Vec<InventoryEntry> = inventory
            .iter()
            .rev()
            .filter(|e| wave_of(e) == wave)
            .cloned()
            .collect();
        (wave, entries)
    })
    .filter(|(_, entries)| !entries.is_empty())
    .collect()
}

/// What happened to one object being removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Deleted,
    /// Annotated `gantry.dev/prune: disabled`, or removed under `deletionPolicy: Orphan`: left
    /// in place, no longer labelled as managed.
    Orphaned,
    /// Already gone, or managed by someone else now.
    Skipped,
    /// Its deletion was requested before and waits for finalizers: not asked again.
    Deleting,
}

/// Removes `entry` if it is still managed by `bundle`: deletes it, or orphans it when `policy`
/// is `Orphan` or the object is annotated `gantry.dev/prune: disabled` (prunes pass `Delete`).
/// Errors carry the object's description.
pub async fn remove(
    client: &Client,
    kinds: &KindCache,
    entry: &InventoryEntry,
    bundle: &str,
    policy: DeletionPolicy,
) -> Result<Removal, (String, String)> {
    let object = describe(entry);
    let Some((api, live)) = live_object(client, kinds, entry).await? else {
        return Ok(Removal::Skipped);
    };
    if live.labels().get(BUNDLE_LABEL).map(String::as_str) != Some(bundle) {
        return Ok(Removal::Skipped);
    }
    if live.metadata.deletion_timestamp.is_some() {
        return Ok(Removal::Deleting);
    }
    let keep = policy == DeletionPolicy::Orphan
        || live.annotations().get(PRUNE_ANNOTATION).map(String::as_str) == Some(PRUNE_DISABLED);
    if keep {
        // Only the label marks an object as managed (apply conflicts, drift watches, claims
        // go by it); the field manager's entries stay, as any former writer's do.
        let patch = json!({ "metadata": { "labels": { BUNDLE_LABEL: null } } });
        return match api
            .patch_metadata(&entry.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(Removal::Orphaned),
            Err(e) if is_not_found(&e) => Ok(Removal::Skipped),
            Err(e) => Err((object, api_message(&e))),
        };
    }
    match api.delete(&entry.name, &DeleteParams::background()).await {
        Ok(_) => Ok(Removal::Deleted),
        Err(e) if is_not_found(&e) => Ok(Removal::Skipped),
        Err(e) => Err((object, api_message(&e))),
    }
}

/// Whether a managed object still there counts as gone for an uninstall under `policy`. A
/// Namespace does once its deletion started, unless the policy is `WaitForTermination`: the
/// namespace controller empties it, which may take long, and only that policy waits for it.
fn counts_as_gone(entry: &InventoryEntry, terminating: bool, policy: DeletionPolicy) -> bool {
    entry.group.is_empty()
        && entry.kind == "Namespace"
        && terminating
        && policy != DeletionPolicy::WaitForTermination
}

/// What keeps a removed object from being gone: `None` when it is gone, counts as gone under
/// `policy`, or is no longer managed by `bundle`; else its description with its finalizers.
pub async fn still_present(
    client: &Client,
    kinds: &KindCache,
    entry: &InventoryEntry,
    bundle: &str,
    policy: DeletionPolicy,
) -> Result<Option<String>, (String, String)> {
    let object = describe(entry);
    let Some((_, live)) = live_object(client, kinds, entry).await? else {
        return Ok(None);
    };
    let managed = live.labels().get(BUNDLE_LABEL).map(String::as_str) == Some(bundle);
    let terminating = live.metadata.deletion_timestamp.is_some();
    if !managed || counts_as_gone(entry, terminating, policy) {
        return Ok(None);
    }
    let finalizers = live.finalizers();
    let mut described = match (finalizers.is_empty(), terminating) {
        (false, _) => format!("{object} (finalizers: {})", finalizers.join(", ")),
        // A terminating Namespace holds no metadata finalizer: its content holds it.
        (true, true) if entry.kind == "Namespace" => format!("{object} (terminating)"),
        (true, _) => object,
    };
    if entry.group == "apiextensions.k8s.io"
        && entry.kind == "CustomResourceDefinition"
        && let Some(left) = custom_resources_left(client, &entry.name).await
    {
        described.push_str(&format!(", waiting for its custom resources: {left}"));
    }
    Ok(Some(described))
}

/// How many custom resources of CRD `crd` (`<plural>.<group>`) are left, the first few named
/// with their finalizers: what a CRD being deleted waits for. `None` when none is found or
/// they cannot be listed (the message is only the poorer for it).
async fn custom_resources_left(client: &Client, crd: &str) -> Option<String> {
    const NAMED: u32 = 3;
    let (plural, group) = crd.split_once('.')?;
    let found = kube::discovery::oneshot::group(client, group).await.ok()?;
    let (resource, _) = found
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.plural == plural)?;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let list = api
        .list_metadata(&kube::api::ListParams::default().limit(NAMED))
        .await
        .ok()?;
    if list.items.is_empty() {
        return None;
    }
    let mut named: Vec<String> = list
        .items
        .iter()
        .map(|cr| {
            let at = match cr.namespace() {
                Some(ns) => format!("{ns}/{}", cr.name_any()),
                None => cr.name_any(),
            };
            match cr.finalizers() {
                [] => format!("{} {at}", resource.kind),
                finalizers => format!(
                    "{} {at} (finalizers: {})",
                    resource.kind,
                    finalizers.join(", ")
                ),
            }
        })
        .collect();
    if let Some(more) = list.metadata.remaining_item_count.filter(|n| *n > 0) {
        named.push(format!("{more} more"));
    } else if list
        .metadata
        .continue_
        .as_deref()
        .is_some_and(|c| !c.is_empty())
    {
        named.push("more".to_string());
    }
    Some(named.join(", "))
}

/// The live object of `entry` with the API that reaches it; `None` when it is gone (its kind
/// too: a removed CRD takes its objects along).
async fn live_object(
    client: &Client,
    kinds: &KindCache,
    entry: &InventoryEntry,
) -> Result<Option<(Api<DynamicObject>, PartialObjectMeta<DynamicObject>)>, (String, String)> {
    let failed = |e: kube::Error| (describe(entry), api_message(&e));
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    let Some(kind) = kinds.resolve(client, &gvk).await.map_err(failed)? else {
        return Ok(None);
    };
    let api = kind_api(client, &kind, entry.namespace.as_deref());
    // Only metadata counts here; a CRD's whole body would weigh megabytes.
    match api.get_metadata_opt(&entry.name).await {
        Ok(live) => Ok(live.map(|live| (api, live))),
        // A plain 404: the kind is not served any more (its CRD is being deleted), so its
        // objects are going too.
        Err(e) if is_not_found(&e) => {
            kinds.forget(&gvk);
            Ok(None)
        }
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> InventoryEntry {
        InventoryEntry {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    fn names(waves: &[(Wave, Vec<InventoryEntry>)]) -> Vec<(Wave, Vec<String>)> {
        waves
            .iter()
            .map(|(wave, entries)| (*wave, entries.iter().map(|e| e.name.clone()).collect()))
            .collect()
    }

    #[test]
    fn an_operator_outlives_its_custom_resources_and_crds() {
        // As an operator's bundle applies them: Namespace, CRDs, RBAC, Deployment, and a custom
        // resource of its own CRD.
        let inventory = [
            entry("", "Namespace", None, "monitoring"),
            entry(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                None,
                "prometheuses.monitoring.coreos.com",
            ),
            entry(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                None,
                "servicemonitors.monitoring.coreos.com",
            ),
            entry("", "ServiceAccount", Some("monitoring"), "operator-sa"),
            entry(
                "rbac.authorization.k8s.io",
                "ClusterRole",
                None,
                "operator-role",
            ),
            entry("apps", "Deployment", Some("monitoring"), "operator"),
            entry(
                "monitoring.coreos.com",
                "ServiceMonitor",
                Some("monitoring"),
                "operator-monitor",
            ),
            // A custom resource of a CRD the bundle does not ship: removed with the rest.
            entry("cert-manager.io", "Certificate", Some("monitoring"), "cert"),
        ];
        assert_eq!(
            names(&uninstall_waves(&inventory)),
            [
                (Wave::CustomResources, vec!["operator-monitor".to_string()]),
                (
                    Wave::Crds,
                    vec![
                        "servicemonitors.monitoring.coreos.com".to_string(),
                        "prometheuses.monitoring.coreos.com".to_string()
                    ]
                ),
                (
                    Wave::Others,
                    vec![
                        "cert".to_string(),
                        "operator".to_string(),
                        "operator-role".to_string(),
                        "operator-sa".to_string()
                    ]
                ),
                (Wave::Namespaces, vec!["monitoring".to_string()]),
            ]
        );
    }

    #[test]
    fn only_wait_for_termination_waits_for_a_terminating_namespace() {
        let namespace = entry("", "Namespace", None, "app");
        let config_map = entry("", "ConfigMap", Some("app"), "settings");
        // A custom kind named Namespace is not one.
        let custom = entry("example.com", "Namespace", None, "app");
        for policy in [DeletionPolicy::Delete, DeletionPolicy::Orphan] {
            assert!(counts_as_gone(&namespace, true, policy));
            assert!(!counts_as_gone(&namespace, false, policy));
            assert!(!counts_as_gone(&config_map, true, policy));
            assert!(!counts_as_gone(&custom, true, policy));
        }
        let wait = DeletionPolicy::WaitForTermination;
        assert!(!counts_as_gone(&namespace, true, wait));
        assert!(!counts_as_gone(&config_map, true, wait));
    }

    #[test]
    fn a_bundle_without_crds_removes_its_namespace_last() {
        let inventory = [
            entry("", "ConfigMap", Some("app"), "settings"),
            entry("", "Namespace", None, "app"),
            entry("apps", "Deployment", Some("app"), "web"),
        ];
        assert_eq!(
            names(&uninstall_waves(&inventory)),
            [
                (
                    Wave::Others,
                    vec!["web".to_string(), "settings".to_string()]
                ),
                (Wave::Namespaces, vec!["app".to_string()]),
            ]
        );
        assert!(uninstall_waves(&[]).is_empty());
    }
}
