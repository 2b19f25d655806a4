//! What the sharder keeps of every Bundle: its name, resourceVersion, shard and drain labels
//! and class name, kept current from the Bundle watch's events.
//!
//! The sharder's replica watches every bundle of the installation, not only its own. A
//! reflector's store would keep each as a whole `Bundle` (about 2 KiB each even with the spec
//! and status dropped); a [`Placement`] is a tenth of that, so the sharder's replica does not
//! grow with the installation much more than the other replicas do.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use gantry_api::{Bundle, DRAIN_LABEL, SHARD_LABEL};
use kube::ResourceExt;
use kube::runtime::watcher::Event;

/// One bundle as the sharder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub name: String,
    pub resource_version: Option<String>,
    /// `gantry.dev/shard`: the shard that owns the bundle.
    pub shard: Option<String>,
    /// `gantry.dev/drain`: the shard its owner is asked to hand it to.
    pub drain: Option<String>,
    /// `spec.provisionerClassName`.
    pub class_name: Option<String>,
}

impl Placement {
    pub fn of(bundle: &Bundle) -> Self {
        let labels = bundle.labels();
        Self {
            name: bundle.name_any(),
            resource_version: bundle.resource_version(),
            shard: labels.get(SHARD_LABEL).cloned(),
            drain: labels.get(DRAIN_LABEL).cloned(),
            class_name: bundle.spec.provisioner_class_name.clone(),
        }
    }
}

#[derive(Default)]
struct State {
    current: BTreeMap<String, Placement>,
    /// A listing under way (after `Init`): it replaces `current` when done.
    listing: Option<BTreeMap<String, Placement>>,
    ready: bool,
}

/// The placements of every bundle the watch has shown, shared between the watch and the
/// rounds.
#[derive(Clone, Default)]
pub struct Placements {
    state: Arc<Mutex<State>>,
}

impl Placements {
    /// Applies one event of the Bundle watch.
    pub fn apply(&self, event: &Event<Bundle>) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        match event {
            Event::Init => state.listing = Some(BTreeMap::new()),
            Event::InitApply(bundle) => {
                let placement = Placement::of(bundle);
                state
                    .listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert(placement.name.clone(), placement);
            }
            Event::InitDone => {
                if let Some(listed) = state.listing.take() {
                    state.current = listed;
                }
                state.ready = true;
            }
            Event::Apply(bundle) => {
                let placement = Placement::of(bundle);
                state.current.insert(placement.name.clone(), placement);
            }
            Event::Delete(bundle) => {
                state.current.remove(&bundle.name_any());
            }
        }
    }

    /// Whether a first listing has completed.
    pub fn is_ready(&self) -> bool {
        self.state.lock().is_ok_and(|state| state.ready)
    }

    /// Every placement, by name.
    pub fn snapshot(&self) -> Vec<Placement> {
        self.state
            .lock()
            .map(|state| state.current.values().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_api::BundleSpec;

    fn bundle(name: &str, version: &str, shard: Option<&str>) -> Bundle {
        let mut bundle = Bundle::new(
            name,
            BundleSpec {
                provisioner_class_name: Some("plain".into()),
                ..Default::default()
            },
        );
        bundle.metadata.resource_version = Some(version.into());
        if let Some(shard) = shard {
            bundle.labels_mut().insert(SHARD_LABEL.into(), shard.into());
        }
        bundle
    }

    fn names(placements: &Placements) -> Vec<(String, Option<String>)> {
        placements
            .snapshot()
            .into_iter()
            .map(|p| (p.name, p.shard))
            .collect()
    }

    #[test]
    fn a_placement_holds_the_labels_version_and_class() {
        let mut b = bundle("a", "7", Some("r1"));
        b.labels_mut().insert(DRAIN_LABEL.into(), "r2".into());
        assert_eq!(
            Placement::of(&b),
            Placement {
                name: "a".into(),
                resource_version: Some("7".into()),
                shard: Some("r1".into()),
                drain: Some("r2".into()),
                class_name: Some("plain".into()),
            }
        );
    }

    #[test]
    fn ready_after_the_first_listing_and_kept_current_by_events() {
        let placements = Placements::default();
        placements.apply(&Event::Init);
        placements.apply(&Event::InitApply(bundle("a", "1", None)));
        assert!(!placements.is_ready());
        assert!(names(&placements).is_empty(), "a listing shows when done");
        placements.apply(&Event::InitDone);
        assert!(placements.is_ready());
        placements.apply(&Event::Apply(bundle("a", "2", Some("r1"))));
        placements.apply(&Event::Apply(bundle("b", "3", None)));
        assert_eq!(
            names(&placements),
            [("a".into(), Some("r1".into())), ("b".into(), None)]
        );
        placements.apply(&Event::Delete(bundle("a", "4", Some("r1"))));
        assert_eq!(names(&placements), [("b".into(), None)]);
    }

    #[test]
    fn a_relisting_replaces_what_was_kept_and_stays_ready_meanwhile() {
        let placements = Placements::default();
        placements.apply(&Event::Init);
        placements.apply(&Event::InitApply(bundle("gone", "1", None)));
        placements.apply(&Event::InitDone);
        // The watch broke and lists again: "gone" was deleted meanwhile.
        placements.apply(&Event::Init);
        placements.apply(&Event::InitApply(bundle("new", "5", None)));
        assert!(placements.is_ready());
        assert_eq!(names(&placements), [("gone".into(), None)]);
        placements.apply(&Event::InitDone);
        assert_eq!(names(&placements), [("new".into(), None)]);
    }
}
