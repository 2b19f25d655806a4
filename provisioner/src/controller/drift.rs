//! Watches on the kinds bundles manage: a managed object that changes or goes away makes its
//! bundle reconcile at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use gantry_api::{BUNDLE_LABEL, Bundle};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

/// One watch per kind, started on first use, feeding bundle names to the controller.
pub struct DriftWatches {
    started: Mutex<HashSet<(String, String, String)>>,
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

    /// Makes sure objects of `resource` labelled as managed are watched.
    pub fn ensure(&self, client: &Client, resource: &ApiResource) {
        let key = (
            resource.group.clone(),
            resource.version.clone(),
            resource.kind.clone(),
        );
        let Ok(mut started) = self.started.lock() else {
            return;
        };
        if !started.insert(key) {
            return;
        }
        let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
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
