//! Watches on the kinds bundles manage: a managed object that changes or goes away makes its
//! bundle reconcile at once.
//!
//! The watches ask for metadata only (the label naming the bundle is all they read): a bundle's
//! CRD of a megabyte changes its status several times while it is established, and a full
//! watch would decode every one of those objects. A kind is watched across all namespaces
//! with one watch when the identity may list and watch it there, so the number of watches
//! grows with kinds, not with bundles; otherwise one watch per namespace.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use gantry_api::{BUNDLE_LABEL, Bundle, FIELD_MANAGER, ServiceAccountReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;

use crate::cluster::access::{AccessReviews, Question};
use crate::cluster::identity::Applier;

/// The identity a watch runs as, and the kind (group, version, kind).
type KindKey = (Option<ServiceAccountReference>, String, String, String);

/// Where a watch looks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Scope {
    /// Cluster-scoped objects, or namespaced ones in every namespace.
    All,
    Namespace(String),
}

/// One watch per identity and kind (across namespaces), or per identity, kind and namespace
/// where the identity may not watch the kind across namespaces; started on first use, feeding
/// bundle names to the controller. Watches run as the identity bundles are applied as, so they
/// see what it may see; one it may not list retries with backoff, and the periodic resync
/// still repairs.
pub struct DriftWatches {
    started: Mutex<HashSet<(KindKey, Scope)>>,
    sender: mpsc::UnboundedSender<ObjectRef<Bundle>>,
    /// Bundles one of whose objects changed since their last full check.
    dirty: Arc<Mutex<HashSet<String>>>,
    /// Bundles a source of whose configuration changed since their last pass: let through
    /// a failure's backoff (the change may be the fix).
    reconfigured: Arc<Mutex<HashSet<String>>>,
}

impl DriftWatches {
    /// A set of watches and the stream of bundles they trigger.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<ObjectRef<Bundle>>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (
            Self {
                started: Mutex::new(HashSet::new()),
                sender,
                dirty: Arc::new(Mutex::new(HashSet::new())),
                reconfigured: Arc::new(Mutex::new(HashSet::new())),
            },
            receiver,
        )
    }

    /// Makes sure objects of `resource` labelled as managed, in `namespace` (`None`: cluster
    /// scoped), are watched as `applier`.
    pub async fn ensure(
        &self,
        access: &AccessReviews,
        applier: &Applier,
        resource: &ApiResource,
        namespace: Option<&str>,
    ) {
        let kind: KindKey = (
            applier.account.clone(),
            resource.group.clone(),
            resource.version.clone(),
            resource.kind.clone(),
        );
        if self.is_started(&kind, &Scope::All) {
            return;
        }
        let scope = match namespace {
            None => Scope::All,
            Some(namespace) => {
                if self.is_started(&kind, &Scope::Namespace(namespace.to_string())) {
                    return;
                }
                if Self::may_watch_everywhere(access, applier, resource).await {
                    Scope::All
                } else {
                    Scope::Namespace(namespace.to_string())
                }
            }
        };
        let Ok(mut started) = self.started.lock() else {
            return;
        };
        if !started.insert((kind, scope.clone())) {
            return;
        }
        let client = applier.client.clone();
        let api: Api<PartialObjectMeta<DynamicObject>> = match &scope {
            Scope::Namespace(namespace) => Api::namespaced_with(client, namespace, resource),
            Scope::All => Api::all_with(client, resource),
        };
        let sender = self.sender.clone();
        let dirty = self.dirty.clone();
        let kind = resource.kind.clone();
        tokio::spawn(async move {
            let config = watcher::Config::default().labels(BUNDLE_LABEL);
            let mut events = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                let object = match event {
                    // The initial listing is no change: the bundles reconcile on start anyway.
                    // Nor is an object whose last write was the provisioner's own apply,
                    // unless it is being deleted (a deletion held by a finalizer changes no
                    // managed field, yet its health changed).
                    Ok(Event::Apply(object))
                        if object.metadata.deletion_timestamp.is_none()
                            && last_written_by_apply(&object.metadata) =>
                    {
                        continue;
                    }
                    Ok(Event::Apply(object) | Event::Delete(object)) => object,
                    Ok(_) => continue,
                    Err(error) => {
                        tracing::debug!(%kind, %error, "drift watch error; the watcher retries");
                        continue;
                    }
                };
                if let Some(bundle) = object.labels().get(BUNDLE_LABEL) {
                    if let Ok(mut dirty) = dirty.lock() {
                        dirty.insert(bundle.clone());
                    }
                    if sender.send(ObjectRef::new(bundle)).is_err() {
                        return;
                    }
                }
            }
        });
    }

    /// Makes sure the ConfigMaps and Secrets of `namespace` are watched as `applier`, the
    /// identity that reads a bundle's `spec.configFrom` there: a change of one wakes the
    /// bundles reading it (`sources`), at once rather than at the next interval. Metadata
    /// only, and only where some bundle reads its configuration: the provisioner itself may
    /// not read Secrets.
    pub fn ensure_config_sources(
        &self,
        applier: &Applier,
        namespace: &str,
        sources: &Arc<crate::state::dependents::Dependents>,
    ) {
        for kind in ["ConfigMap", "Secret"] {
            let key: KindKey = (
                applier.account.clone(),
                String::new(),
                "v1".into(),
                format!("{kind} (configuration)"),
            );
            let scope = Scope::Namespace(namespace.to_string());
            let Ok(mut started) = self.started.lock() else {
                return;
            };
            if !started.insert((key, scope)) {
                continue;
            }
            let resource = ApiResource {
                group: String::new(),
                version: "v1".into(),
                api_version: "v1".into(),
                kind: kind.into(),
                plural: format!("{}s", kind.to_lowercase()),
            };
            let api: Api<PartialObjectMeta<DynamicObject>> =
                Api::namespaced_with(applier.client.clone(), namespace, &resource);
            let (sender, sources, namespace) =
                (self.sender.clone(), sources.clone(), namespace.to_string());
            let (dirty, reconfigured) = (self.dirty.clone(), self.reconfigured.clone());
            tokio::spawn(async move {
                let mut events = watcher::watcher(api, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                while let Some(event) = events.next().await {
                    let object = match event {
                        Ok(Event::Apply(object) | Event::Delete(object)) => object,
                        Ok(_) => continue,
                        Err(error) => {
                            tracing::debug!(kind, %namespace, %error, "configuration watch error; the watcher retries");
                            continue;
                        }
                    };
                    let key = crate::state::dependents::config_source_key(
                        kind,
                        &namespace,
                        &object.name_any(),
                    );
                    for bundle in sources.of(&key) {
                        // A full pass, not the shortcut for a bundle unchanged since its last
                        // check: the configuration is read again.
                        for marks in [&dirty, &reconfigured] {
                            if let Ok(mut marks) = marks.lock() {
                                marks.insert(bundle.name.clone());
                            }
                        }
                        if sender.send(bundle).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    }

    fn is_started(&self, kind: &KindKey, scope: &Scope) -> bool {
        self.started
            .lock()
            .is_ok_and(|started| started.contains(&(kind.clone(), scope.clone())))
    }

    /// Whether the identity may list and watch `resource` in all namespaces, asked with
    /// access reviews (answers reused for a while). A failed review counts as no (watches per
    /// namespace then).
    async fn may_watch_everywhere(
        access: &AccessReviews,
        applier: &Applier,
        resource: &ApiResource,
    ) -> bool {
        let identity = applier.describe();
        for verb in ["list", "watch"] {
            let question = Question {
                group: &resource.group,
                version: &resource.version,
                resource: &resource.plural,
                verb,
                namespace: None,
                name: None,
            };
            match access.review(&applier.client, &identity, &question).await {
                Ok(status) if status.allowed => {}
                Ok(_) => return false,
                Err(error) => {
                    tracing::debug!(kind = %resource.kind, %error, "access review for a drift watch failed");
                    return false;
                }
            }
        }
        true
    }
}

/// Whether the latest write to an object was the provisioner's own server-side apply: the
/// newest entries of its managed fields are all ours (an `Apply` by [`FIELD_MANAGER`]). A write
/// by anyone else in the same second (timestamps have seconds) counts as a change.
fn last_written_by_apply(metadata: &ObjectMeta) -> bool {
    let Some(entries) = metadata.managed_fields.as_deref() else {
        return false;
    };
    let Some(latest) = entries.iter().filter_map(|e| e.time.as_ref()).max() else {
        return false;
    };
    let newest = entries.iter().filter(|e| e.time.as_ref() == Some(latest));
    let mut any = false;
    for entry in newest {
        if entry.manager.as_deref() != Some(FIELD_MANAGER)
            || entry.operation.as_deref() != Some("Apply")
            || entry.subresource.as_deref().is_some_and(|s| !s.is_empty())
        {
            return false;
        }
        any = true;
    }
    any
}

impl DriftWatches {
    /// Whether a source of `bundle`'s configuration changed since the last call; clears the
    /// mark.
    pub fn take_reconfigured(&self, bundle: &str) -> bool {
        self.reconfigured
            .lock()
            .map(|mut marks| marks.remove(bundle))
            .unwrap_or(false)
    }

    /// Whether an object of `bundle` changed since the last call; clears the mark.
    pub fn take_dirty(&self, bundle: &str) -> bool {
        self.dirty
            .lock()
            .map(|mut dirty| dirty.remove(bundle))
            .unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    fn entry(manager: &str, operation: &str, second: i64) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            time: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + second).unwrap(),
            )),
            ..Default::default()
        }
    }

    fn meta(entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: Some(entries),
            ..Default::default()
        }
    }

    #[test]
    fn the_provisioners_own_apply_is_no_drift() {
        assert!(last_written_by_apply(&meta(vec![
            entry("kubectl", "Update", 1),
            entry(FIELD_MANAGER, "Apply", 2),
        ])));
    }

    #[test]
    fn a_later_or_simultaneous_write_by_another_is_drift() {
        assert!(!last_written_by_apply(&meta(vec![
            entry(FIELD_MANAGER, "Apply", 1),
            entry("kubectl-edit", "Update", 2),
        ])));
        assert!(!last_written_by_apply(&meta(vec![
            entry(FIELD_MANAGER, "Apply", 2),
            entry("kube-controller-manager", "Update", 2),
        ])));
        assert!(!last_written_by_apply(&meta(vec![])));
        assert!(!last_written_by_apply(&ObjectMeta::default()));
    }
}
