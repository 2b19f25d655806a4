//! Which bundles name each bundle in `spec.dependsOn`, kept from the Bundle watch: a change of a
//! bundle wakes the bundles depending on it by a lookup, not by a scan of every cached Bundle.
//! Every Bundle of the cluster changes several times while it installs, and a scan of the
//! cache per change made installing N bundles cost N² (at 10,000 bundles, 40,000 scans of
//! 10,000 entries).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use gantry_api::Bundle;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

/// The index: each dependency's dependents, and each dependent's dependencies.
pub struct Dependents {
    index: RwLock<Index>,
    /// What a bundle depends on, by key.
    keys: fn(&Bundle) -> Vec<Arc<str>>,
}

impl Default for Dependents {
    /// The bundles each bundle's `spec.dependsOn` names.
    fn default() -> Self {
        Dependents {
            index: RwLock::default(),
            keys: dependencies_of,
        }
    }
}

#[derive(Default)]
struct Index {
    by_dependency: HashMap<Arc<str>, HashSet<Arc<str>>>,
    by_dependent: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// The bundles of a relist under way: they replace the index once it is done.
    relist: Option<HashMap<Arc<str>, Vec<Arc<str>>>>,
}

/// The key of a ConfigMap or Secret a bundle's `spec.configFrom` reads.
pub fn config_source_key(kind: &str, namespace: &str, name: &str) -> Arc<str> {
    Arc::from(format!("{kind}/{namespace}/{name}"))
}

/// The ConfigMaps and Secrets a bundle's configuration is read from (in its install
/// namespace).
fn config_sources_of(bundle: &Bundle) -> Vec<Arc<str>> {
    let Some(namespace) = bundle.spec.install_namespace.as_deref() else {
        return Vec::new();
    };
    bundle
        .spec
        .config_from
        .iter()
        .map(|source| config_source_key(&format!("{:?}", source.kind), namespace, &source.name))
        .collect()
}

impl Dependents {
    /// The ConfigMaps and Secrets each bundle's `spec.configFrom` reads, keyed by
    /// [`config_source_key`]: a change of one wakes the bundles reading it.
    pub fn on_config_sources() -> Self {
        Dependents {
            index: RwLock::default(),
            keys: config_sources_of,
        }
    }
}

fn dependencies_of(bundle: &Bundle) -> Vec<Arc<str>> {
    bundle
        .spec
        .depends_on
        .iter()
        .map(|name| Arc::from(name.as_str()))
        .collect()
}

impl Dependents {
    /// Follows one event of the Bundle watch.
    pub fn observe(&self, event: &watcher::Event<Bundle>) {
        let Ok(mut index) = self.index.write() else {
            return;
        };
        match event {
            watcher::Event::Apply(bundle) => {
                index.set(bundle.name_any().into(), (self.keys)(bundle))
            }
            watcher::Event::Delete(bundle) => index.set(bundle.name_any().into(), Vec::new()),
            watcher::Event::Init => index.relist = Some(HashMap::new()),
            watcher::Event::InitApply(bundle) => {
                let dependencies = (self.keys)(bundle);
                if let Some(relist) = index.relist.as_mut()
                    && !dependencies.is_empty()
                {
                    relist.insert(bundle.name_any().into(), dependencies);
                }
            }
            watcher::Event::InitDone => {
                if let Some(relist) = index.relist.take() {
                    index.replace(relist);
                }
            }
        }
    }

    /// The bundles that depend on `changed` (for the default index, whose `spec.dependsOn`
    /// names it).
    pub fn of(&self, changed: &str) -> Vec<ObjectRef<Bundle>> {
        let Ok(index) = self.index.read() else {
            return Vec::new();
        };
        index
            .by_dependency
            .get(changed)
            .map(|dependents| dependents.iter().map(|name| ObjectRef::new(name)).collect())
            .unwrap_or_default()
    }
}

impl Index {
    /// Records the bundles `dependent` depends on now (none: it is gone, or depends on none).
    fn set(&mut self, dependent: Arc<str>, dependencies: Vec<Arc<str>>) {
        if let Some(before) = self.by_dependent.remove(&dependent) {
            for dependency in before {
                if let Some(dependents) = self.by_dependency.get_mut(&dependency) {
                    dependents.remove(&dependent);
                    if dependents.is_empty() {
                        self.by_dependency.remove(&dependency);
                    }
                }
            }
        }
        if dependencies.is_empty() {
            return;
        }
        for dependency in &dependencies {
            self.by_dependency
                .entry(dependency.clone())
                .or_default()
                .insert(dependent.clone());
        }
        self.by_dependent.insert(dependent, dependencies);
    }

    fn replace(&mut self, bundles: HashMap<Arc<str>, Vec<Arc<str>>>) {
        self.by_dependency.clear();
        self.by_dependent.clear();
        for (dependent, dependencies) in bundles {
            self.set(dependent, dependencies);
        }
    }
}

#[cfg(test)]
mod tests {
    use gantry_api::BundleSpec;

    use super::*;

    fn bundle(name: &str, depends_on: &[&str]) -> Bundle {
        Bundle::new(
            name,
            BundleSpec {
                image: "r/x:1".into(),
                depends_on: depends_on.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
        )
    }

    fn names(dependents: &Dependents, changed: &str) -> Vec<String> {
        let mut names: Vec<String> = dependents.of(changed).into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn a_change_wakes_the_bundles_that_depend_on_it() {
        let dependents = Dependents::default();
        dependents.observe(&watcher::Event::Apply(bundle("b", &["a"])));
        dependents.observe(&watcher::Event::Apply(bundle("c", &["b"])));
        dependents.observe(&watcher::Event::Apply(bundle("d", &["a", "b"])));
        dependents.observe(&watcher::Event::Apply(bundle("a", &[])));
        assert_eq!(names(&dependents, "a"), ["b", "d"]);
        assert_eq!(names(&dependents, "b"), ["c", "d"]);
        assert!(names(&dependents, "c").is_empty());
    }

    #[test]
    fn a_changed_spec_or_a_deletion_updates_the_index() {
        let dependents = Dependents::default();
        dependents.observe(&watcher::Event::Apply(bundle("b", &["a"])));
        dependents.observe(&watcher::Event::Apply(bundle("b", &["z"])));
        assert!(names(&dependents, "a").is_empty());
        assert_eq!(names(&dependents, "z"), ["b"]);
        dependents.observe(&watcher::Event::Delete(bundle("b", &["z"])));
        assert!(names(&dependents, "z").is_empty());
    }

    #[test]
    fn a_relist_replaces_the_index_when_it_is_done() {
        let dependents = Dependents::default();
        dependents.observe(&watcher::Event::Apply(bundle("gone", &["a"])));
        dependents.observe(&watcher::Event::Init);
        dependents.observe(&watcher::Event::InitApply(bundle("b", &["a"])));
        // Until the relist is done, the index is the one before it.
        assert_eq!(names(&dependents, "a"), ["gone"]);
        dependents.observe(&watcher::Event::InitDone);
        assert_eq!(names(&dependents, "a"), ["b"]);
    }

    #[test]
    fn a_changed_config_source_wakes_the_bundles_reading_it() {
        let sources = Dependents::on_config_sources();
        let mut reads = bundle("reads", &[]);
        reads.spec.install_namespace = Some("apps".into());
        reads.spec.config_from = vec![gantry_api::ConfigSource {
            kind: gantry_api::ConfigSourceKind::Secret,
            name: "values".into(),
            key: None,
            optional: false,
        }];
        sources.observe(&watcher::Event::Apply(reads));
        sources.observe(&watcher::Event::Apply(bundle("other", &["values"])));
        let woken = |kind: &str, namespace: &str| {
            names(&sources, &config_source_key(kind, namespace, "values"))
        };
        assert_eq!(woken("Secret", "apps"), ["reads"]);
        assert!(woken("ConfigMap", "apps").is_empty());
        assert!(woken("Secret", "elsewhere").is_empty());
        assert!(
            names(&sources, "values").is_empty(),
            "dependsOn is another index"
        );
    }
}
