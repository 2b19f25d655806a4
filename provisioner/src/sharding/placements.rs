//! What the sharder keeps of each Bundle without a slot label: its name, resourceVersion, labels
//! (whether it carries the shard labels of earlier versions), finalizers and class name, kept
//! current from the watch's events.
//!
//! The sharder watches only Bundles without a slot label (the API server filters): a Bundle
//! leaves the watch once labelled, so what it keeps is the bundles waiting for their label, not
//! the installation. The watch decodes each Bundle as a [`PlacementView`], skipping its status
//! and managedFields while it parses: a page of the listing costs its text, not also that many
//! whole Bundles decoded.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use gantry_api::{Bundle, DRAIN_LABEL, SHARD_LABEL, SLOT_LABEL};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use serde::Deserialize;

/// A Bundle as the sharder's watch decodes it: its name, resourceVersion and labels, and its
/// class name. Everything else (the spec's other fields, the status, managedFields) is skipped
/// by the parser without being built.
#[derive(Clone, Debug, Default)]
pub struct PlacementView {
    metadata: ObjectMeta,
    class_name: Option<String>,
}

impl<'de> Deserialize<'de> for PlacementView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: RawMeta,
            #[serde(default)]
            spec: RawSpec,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct RawMeta {
            name: Option<String>,
            resource_version: Option<String>,
            labels: Option<BTreeMap<String, String>>,
            finalizers: Option<Vec<String>>,
            deletion_timestamp: Option<Time>,
        }
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct RawSpec {
            provisioner_class_name: Option<String>,
        }
        let raw = Raw::deserialize(deserializer)?;
        Ok(Self {
            metadata: ObjectMeta {
                name: raw.metadata.name,
                resource_version: raw.metadata.resource_version,
                labels: raw.metadata.labels,
                finalizers: raw.metadata.finalizers,
                deletion_timestamp: raw.metadata.deletion_timestamp,
                ..Default::default()
            },
            class_name: raw.spec.provisioner_class_name,
        })
    }
}

impl Resource for PlacementView {
    type DynamicType = ();
    type Scope = <Bundle as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Bundle::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Bundle::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Bundle::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Bundle::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// One bundle as the sharder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub name: String,
    pub resource_version: Option<String>,
    /// `gantry.dev/slot`, as written.
    pub slot: Option<String>,
    /// Whether it carries `gantry.dev/shard` or `gantry.dev/drain`, as earlier versions wrote
    /// them on Bundles.
    pub legacy_labels: bool,
    /// `spec.provisionerClassName`.
    pub class_name: Option<String>,
    /// Its finalizers (the slot label's write adds Gantry's, replacing the list).
    pub finalizers: Vec<String>,
    /// Whether it is being deleted (no finalizer may be added then).
    pub deleting: bool,
}

impl Placement {
    pub fn of(bundle: &PlacementView) -> Self {
        let labels = bundle.labels();
        Self {
            name: bundle.name_any(),
            resource_version: bundle.resource_version(),
            slot: labels.get(SLOT_LABEL).cloned(),
            legacy_labels: labels.contains_key(SHARD_LABEL) || labels.contains_key(DRAIN_LABEL),
            class_name: bundle.class_name.clone(),
            finalizers: bundle.finalizers().to_vec(),
            deleting: bundle.metadata.deletion_timestamp.is_some(),
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
    pub fn apply(&self, event: &Event<PlacementView>) {
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
    use gantry_api::{BundleSpec, BundleStatus, InventoryEntry};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    fn full_bundle(name: &str, version: &str, slot: Option<&str>) -> Bundle {
        let mut bundle = Bundle::new(
            name,
            BundleSpec {
                image: "127.0.0.1:5000/app:v1".into(),
                provisioner_class_name: Some("plain".into()),
                ..Default::default()
            },
        );
        bundle.metadata.resource_version = Some(version.into());
        if let Some(slot) = slot {
            bundle.labels_mut().insert(SLOT_LABEL.into(), slot.into());
        }
        bundle
    }

    /// The view of `full_bundle`, as the watch decodes it from the API server's JSON.
    fn bundle(name: &str, version: &str, slot: Option<&str>) -> PlacementView {
        view(&full_bundle(name, version, slot))
    }

    fn view(bundle: &Bundle) -> PlacementView {
        serde_json::from_value(serde_json::to_value(bundle).unwrap()).unwrap()
    }

    #[test]
    fn the_view_keeps_what_a_placement_reads_and_builds_nothing_else() {
        let mut b = full_bundle("a", "7", Some("12"));
        b.annotations_mut().insert("note".into(), "x".into());
        b.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("gantry-provisioner".into()),
            fields_v1: Some(FieldsV1(serde_json::json!({"f:status": {}}))),
            ..Default::default()
        }]);
        b.status = Some(BundleStatus {
            inventory: vec![InventoryEntry {
                kind: "ConfigMap".into(),
                version: "v1".into(),
                name: "c".into(),
                namespace: Some("ns".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        let view = view(&b);
        assert_eq!(view.name_any(), "a");
        assert_eq!(view.resource_version().as_deref(), Some("7"));
        assert_eq!(
            view.labels().get(SLOT_LABEL).map(String::as_str),
            Some("12")
        );
        assert_eq!(view.class_name.as_deref(), Some("plain"));
        assert!(view.metadata.managed_fields.is_none());
        assert!(view.metadata.annotations.is_none());
        // Same group, version and resource as the Bundle: the watch's URL is the Bundles'.
        assert_eq!(
            PlacementView::url_path(&(), None),
            Bundle::url_path(&(), None)
        );
        // A Bundle without a spec's class (or any spec) is read too.
        let bare: PlacementView =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "b"}})).unwrap();
        assert_eq!(bare.name_any(), "b");
        assert_eq!(bare.class_name, None);
    }

    fn names(placements: &Placements) -> Vec<(String, Option<String>)> {
        placements
            .snapshot()
            .into_iter()
            .map(|p| (p.name, p.slot))
            .collect()
    }

    #[test]
    fn a_placement_holds_the_labels_version_and_class() {
        let mut b = full_bundle("a", "7", Some("12"));
        assert_eq!(
            Placement::of(&view(&b)),
            Placement {
                name: "a".into(),
                resource_version: Some("7".into()),
                slot: Some("12".into()),
                legacy_labels: false,
                class_name: Some("plain".into()),
                finalizers: Vec::new(),
                deleting: false,
            }
        );
        b.labels_mut().insert(DRAIN_LABEL.into(), "r2".into());
        b.finalizers_mut().push("example.com/keep".into());
        let placement = Placement::of(&view(&b));
        assert!(placement.legacy_labels);
        assert_eq!(placement.finalizers, ["example.com/keep"]);
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
        placements.apply(&Event::Apply(bundle("a", "2", Some("1"))));
        placements.apply(&Event::Apply(bundle("b", "3", None)));
        assert_eq!(
            names(&placements),
            [("a".into(), Some("1".into())), ("b".into(), None)]
        );
        placements.apply(&Event::Delete(bundle("a", "4", Some("1"))));
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
