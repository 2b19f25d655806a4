//! Watches on the kinds bundles manage: a managed object that changes or goes away makes its
//! bundle reconcile at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use gantry_api::{BUNDLE_LABEL, Bundle, ServiceAccountReference};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;

use super::identity::Applier;

/// What one watch covers: the identity it watches as, the kind, and the namespace (`None`:
/// cluster-scoped objects).
type WatchKey = (
    Option<ServiceAccountReference>,
    String,
    String,
    String,
    Option<String>,
);

/// One watch per identity, kind and namespace, started on first use, feeding bundle names to
/// the controller. Watches run as the identity bundles are applied as, so they see what it
/// may see; one it may not list retries with backoff, and the periodic resync still repairs.
pub struct DriftWatches {
    started: Mutex<HashSet<WatchKey>>,
    sender: mpsc::UnboundedSender<ObjectRef<Bundle>>,
    /// Bundles one of whose objects changed since their last full check.
    dirty: Arc<Mutex<HashSet<String>>>,
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
            },
            receiver,
        )
    }

    /// Makes sure objects of `resource` labelled as managed, in `namespace` (`None`: cluster
    /// scoped), are watched as `applier`.
    pub fn ensure(&self, applier: &Applier, resource: &ApiResource, namespace: Option<&str>) {
        let key = (
            applier.account.clone(),
            resource.group.clone(),
            resource.version.clone(),
            resource.kind.clone(),
            namespace.map(str::to_string),
        );
        let Ok(mut started) = self.started.lock() else {
            return;
        };
        if !started.insert(key) {
            return;
        }
        let client = applier.client.clone();
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => Api::namespaced_with(client, namespace, resource),
            None => Api::all_with(client, resource),
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
}

impl DriftWatches {
    /// Whether an object of `bundle` changed since the last call; clears the mark.
    pub fn take_dirty(&self, bundle: &str) -> bool {
        self.dirty
            .lock()
            .map(|mut dirty| dirty.remove(bundle))
            .unwrap_or(true)
    }
}
