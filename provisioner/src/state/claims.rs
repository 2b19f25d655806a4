//! Which bundles' inventories list each object, kept from the Bundle watch. An object listed in
//! a bundle's inventory is that bundle's whether or not it exists live and whatever that
//! bundle's state (suspended, failing, its first install cut short): another bundle that would
//! create it is in `Conflict`, not its new owner.
//!
//! Objects are indexed by a 64-bit hash of (group, kind, namespace, name) rather than by the
//! strings themselves: 10,000 bundles of 20 objects stay a few megabytes. Two objects sharing
//! a hash among a million is a chance of about one in 10^7, and its effect a `Conflict` that
//! names the other bundle.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, RwLock};

use gantry_api::{Bundle, InventoryEntry};
use kube::ResourceExt;
use kube::runtime::watcher;

/// The index: objects to the bundles listing them, and each bundle's objects.
#[derive(Default)]
pub struct Claims {
    index: RwLock<Index>,
}

#[derive(Default)]
struct Index {
    by_object: HashMap<u64, Vec<Arc<str>>>,
    by_bundle: HashMap<Arc<str>, Vec<u64>>,
    /// The bundles of a relist under way: they replace the index once it is done.
    relist: Option<HashMap<Arc<str>, Vec<u64>>>,
}

/// The key of one object, as an inventory entry names it (the version does not matter).
pub fn object_hash(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    (group, kind, namespace, name).hash(&mut hasher);
    hasher.finish()
}

fn entry_hash(entry: &InventoryEntry) -> u64 {
    object_hash(
        &entry.group,
        &entry.kind,
        entry.namespace.as_deref(),
        &entry.name,
    )
}

fn objects_of(bundle: &Bundle) -> Vec<u64> {
    bundle
        .status
        .as_ref()
        .map(|s| s.inventory.iter().map(entry_hash).collect())
        .unwrap_or_default()
}

impl Claims {
    /// Follows one event of the Bundle watch.
    pub fn observe(&self, event: &watcher::Event<Bundle>) {
        let Ok(mut index) = self.index.write() else {
            return;
        };
        match event {
            watcher::Event::Apply(bundle) => {
                index.set(bundle.name_any().into(), objects_of(bundle))
            }
            watcher::Event::Delete(bundle) => index.set(bundle.name_any().into(), Vec::new()),
            watcher::Event::Init => index.relist = Some(HashMap::new()),
            watcher::Event::InitApply(bundle) => {
                let objects = objects_of(bundle);
                if let Some(relist) = index.relist.as_mut() {
                    relist.insert(bundle.name_any().into(), objects);
                }
            }
            watcher::Event::InitDone => {
                if let Some(relist) = index.relist.take() {
                    index.replace(relist);
                }
            }
        }
    }

    /// A bundle other than `bundle` whose inventory lists the object, if any.
    pub fn claimant(&self, entry: &InventoryEntry, bundle: &str) -> Option<String> {
        let index = self.index.read().ok()?;
        index
            .by_object
            .get(&entry_hash(entry))?
            .iter()
            .find(|claimant| &***claimant != bundle)
            .map(|claimant| claimant.to_string())
    }
}

impl Index {
    /// Records the objects `bundle` lists now (none: it is gone).
    fn set(&mut self, bundle: Arc<str>, objects: Vec<u64>) {
        if let Some(before) = self.by_bundle.remove(&bundle) {
            self.release(&bundle, &before);
        }
        if objects.is_empty() {
            return;
        }
        for object in &objects {
            self.by_object
                .entry(*object)
                .or_default()
                .push(bundle.clone());
        }
        self.by_bundle.insert(bundle, objects);
    }

    fn release(&mut self, bundle: &Arc<str>, objects: &[u64]) {
        for object in objects {
            if let Some(claimants) = self.by_object.get_mut(object) {
                claimants.retain(|c| c != bundle);
                if claimants.is_empty() {
                    self.by_object.remove(object);
                }
            }
        }
    }

    fn replace(&mut self, bundles: HashMap<Arc<str>, Vec<u64>>) {
        self.by_object.clear();
        self.by_bundle.clear();
        for (bundle, objects) in bundles {
            self.set(bundle, objects);
        }
    }
}

#[cfg(test)]
mod tests {
    use gantry_api::{BundleSpec, BundleStatus};

    use super::*;

    fn config_map(name: &str) -> InventoryEntry {
        InventoryEntry {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    fn bundle(name: &str, objects: &[&str]) -> Bundle {
        let mut bundle = Bundle::new(name, BundleSpec::default());
        bundle.status = Some(BundleStatus {
            inventory: objects.iter().map(|o| config_map(o)).collect(),
            ..Default::default()
        });
        bundle
    }

    #[test]
    fn an_object_belongs_to_the_bundle_listing_it_until_it_no_longer_does() {
        let claims = Claims::default();
        claims.observe(&watcher::Event::Apply(bundle("app-a", &["shared", "own"])));
        assert_eq!(
            claims.claimant(&config_map("shared"), "dup").as_deref(),
            Some("app-a")
        );
        assert_eq!(claims.claimant(&config_map("shared"), "app-a"), None);
        assert_eq!(claims.claimant(&config_map("other"), "dup"), None);
        // Another version of the kind is the same object.
        let mut v2 = config_map("shared");
        v2.version = "v2".into();
        assert_eq!(claims.claimant(&v2, "dup").as_deref(), Some("app-a"));

        // Pruned from the inventory: released.
        claims.observe(&watcher::Event::Apply(bundle("app-a", &["own"])));
        assert_eq!(claims.claimant(&config_map("shared"), "dup"), None);
        // The bundle is gone: all released.
        claims.observe(&watcher::Event::Delete(bundle("app-a", &["own"])));
        assert_eq!(claims.claimant(&config_map("own"), "dup"), None);
    }

    #[test]
    fn a_relist_replaces_what_was_known_once_it_is_done() {
        let claims = Claims::default();
        claims.observe(&watcher::Event::Apply(bundle("gone", &["a"])));
        claims.observe(&watcher::Event::Init);
        claims.observe(&watcher::Event::InitApply(bundle("kept", &["b"])));
        // Until the relist is done, the old view answers.
        assert_eq!(
            claims.claimant(&config_map("a"), "x").as_deref(),
            Some("gone")
        );
        claims.observe(&watcher::Event::InitDone);
        assert_eq!(claims.claimant(&config_map("a"), "x"), None);
        assert_eq!(
            claims.claimant(&config_map("b"), "x").as_deref(),
            Some("kept")
        );
    }

    #[test]
    fn two_claimants_are_both_known() {
        let claims = Claims::default();
        claims.observe(&watcher::Event::Apply(bundle("one", &["a"])));
        claims.observe(&watcher::Event::Apply(bundle("two", &["a"])));
        assert_eq!(
            claims.claimant(&config_map("a"), "one").as_deref(),
            Some("two")
        );
        assert_eq!(
            claims.claimant(&config_map("a"), "two").as_deref(),
            Some("one")
        );
    }
}
