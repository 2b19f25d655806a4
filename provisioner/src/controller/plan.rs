//! From a bundle's objects to what will be applied: kinds resolved, namespaces defaulted,
//! the bundle label added. Nothing is written here.

use std::collections::HashMap;

use gantry_api::{BUNDLE_LABEL, InventoryEntry};
use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use super::discovery::{Kind, KindCache};
use super::error::{Error, Result};
use gantry_image::BundleObject;

const CRD_GROUP: &str = "apiextensions.k8s.io";

/// One object, ready to apply.
#[derive(Clone, Debug)]
pub struct PlannedObject {
    pub file: String,
    pub document: usize,
    pub gvk: GroupVersionKind,
    pub resource: ApiResource,
    pub namespaced: bool,
    pub namespace: Option<String>,
    pub name: String,
    /// The object as it is applied (namespace set, bundle label added).
    pub object: Value,
    /// When the object is a CRD of the bundle: its name.
    pub defines_crd: Option<String>,
    /// When the object's kind is defined by a CRD of the bundle: that CRD's name.
    pub needs_crd: Option<String>,
}

impl PlannedObject {
    /// Namespaces and CRDs: later objects may depend on them, so they go out first.
    pub fn is_barrier(&self) -> bool {
        self.defines_crd.is_some() || (self.gvk.group.is_empty() && self.gvk.kind == "Namespace")
    }

    pub fn inventory_entry(&self) -> InventoryEntry {
        InventoryEntry {
            group: self.gvk.group.clone(),
            version: self.gvk.version.clone(),
            kind: self.gvk.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl std::fmt::Display for PlannedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} document {})",
            describe(&self.inventory_entry()),
            self.file,
            self.document
        )
    }
}

/// `Kind namespace/name` or `Kind name`, with the group for non-core kinds.
pub fn describe(entry: &InventoryEntry) -> String {
    let kind = if entry.group.is_empty() {
        entry.kind.clone()
    } else {
        format!("{}.{}", entry.kind, entry.group)
    };
    match &entry.namespace {
        Some(ns) => format!("{kind} {ns}/{}", entry.name),
        None => format!("{kind} {}", entry.name),
    }
}

/// The plan for one bundle's content.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub objects: Vec<PlannedObject>,
}

impl Plan {
    /// Namespaces the bundle itself creates.
    pub fn created_namespaces(&self) -> impl Iterator<Item = &str> {
        self.objects
            .iter()
            .filter(|o| o.gvk.group.is_empty() && o.gvk.kind == "Namespace")
            .map(|o| o.name.as_str())
    }
}

/// A CRD of the bundle: the kinds it serves.
struct BundleCrd {
    name: String,
    kinds: Vec<(GroupVersionKind, Kind)>,
}

fn bundle_crd(object: &Value) -> Option<BundleCrd> {
    let spec = object.get("spec")?;
    let group = spec.get("group")?.as_str()?;
    let names = spec.get("names")?;
    let kind = names.get("kind")?.as_str()?;
    let plural = names.get("plural")?.as_str()?;
    let namespaced = spec.get("scope").and_then(Value::as_str) == Some("Namespaced");
    let kinds = spec
        .get("versions")?
        .as_array()?
        .iter()
        .filter_map(|v| v.get("name")?.as_str())
        .map(|version| {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
            (
                gvk,
                Kind {
                    resource,
                    namespaced,
                },
            )
        })
        .collect();
    Some(BundleCrd {
        name: object.pointer("/metadata/name")?.as_str()?.to_string(),
        kinds,
    })
}

fn gvk_of(object: &Value) -> Option<GroupVersionKind> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Some(GroupVersionKind::gvk(group, version, kind))
}

/// Plans `objects` for bundle `bundle`: resolves every kind (from the bundle's own CRDs first,
/// then the API server), gives namespaced objects without a namespace `install_namespace`, and
/// adds the bundle label.
pub async fn plan(
    client: &Client,
    kinds: &KindCache,
    objects: &[BundleObject],
    bundle: &str,
    install_namespace: Option<&str>,
) -> Result<Plan> {
    let mut crd_kinds: HashMap<GroupVersionKind, (Kind, String)> = HashMap::new();
    for object in objects {
        let is_crd = gvk_of(&object.object)
            .is_some_and(|g| g.group == CRD_GROUP && g.kind == "CustomResourceDefinition");
        if is_crd && let Some(crd) = bundle_crd(&object.object) {
            for (gvk, kind) in crd.kinds {
                crd_kinds.insert(gvk, (kind, crd.name.clone()));
            }
        }
    }

    let mut planned = Vec::with_capacity(objects.len());
    let mut without_namespace = Vec::new();
    for source in objects {
        let mut object = source.object.clone();
        let where_ = || format!("{} document {}", source.file, source.document);
        let gvk = gvk_of(&object).ok_or_else(|| Error::Apply {
            object: where_(),
            message: "apiVersion and kind are required".into(),
        })?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let (kind, needs_crd) = match crd_kinds.get(&gvk) {
            Some((kind, crd)) => (kind.clone(), Some(crd.clone())),
            None => match kinds.resolve(client, &gvk).await? {
                Some(kind) => (kind, None),
                None => {
                    return Err(Error::Apply {
                        object: format!("{} {name} ({})", gvk.kind, where_()),
                        message: format!(
                            "the API server serves no kind {} in {}",
                            gvk.kind,
                            if gvk.group.is_empty() {
                                gvk.version.clone()
                            } else {
                                format!("{}/{}", gvk.group, gvk.version)
                            }
                        ),
                    });
                }
            },
        };
        let defines_crd = (gvk.group == CRD_GROUP && gvk.kind == "CustomResourceDefinition")
            .then(|| name.clone());

        let metadata = object
            .as_object_mut()
            .and_then(|o| o.get_mut("metadata"))
            .and_then(Value::as_object_mut);
        let Some(metadata) = metadata else {
            return Err(Error::Apply {
                object: where_(),
                message: "metadata must be a map".into(),
            });
        };
        let namespace = if kind.namespaced {
            let explicit = metadata
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|ns| !ns.is_empty())
                .map(str::to_string);
            match explicit.or_else(|| install_namespace.map(str::to_string)) {
                Some(ns) => {
                    metadata.insert("namespace".into(), Value::String(ns.clone()));
                    Some(ns)
                }
                None => {
                    without_namespace.push(format!("{} {name} ({})", gvk.kind, where_()));
                    None
                }
            }
        } else {
            // As kubectl does: a namespace on a cluster-scoped object means nothing.
            metadata.remove("namespace");
            None
        };
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if !labels.is_object() {
            *labels = Value::Object(Default::default());
        }
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(BUNDLE_LABEL.into(), Value::String(bundle.to_string()));
        }
        planned.push(PlannedObject {
            file: source.file.clone(),
            document: source.document,
            gvk,
            resource: kind.resource,
            namespaced: kind.namespaced,
            namespace,
            name,
            object,
            defines_crd,
            needs_crd,
        });
    }
    if !without_namespace.is_empty() {
        return Err(Error::NamespaceRequired(without_namespace));
    }
    Ok(Plan { objects: planned })
}
