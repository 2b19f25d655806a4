//! From a bundle's objects to what will be applied: kinds resolved, namespaces defaulted,
//! the bundle label added. Nothing is written here.

use std::collections::{BTreeSet, HashMap};

use gantry_api::patches::{PatchError, Patches};
use gantry_api::{BUNDLE_LABEL, InventoryEntry};
use gantry_image::BundleObject;
use kube_core::{ApiResource, GroupVersionKind};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

const CRD_GROUP: &str = "apiextensions.k8s.io";

/// Why a bundle's objects cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// An object that cannot be planned as it is: the object (its file and document), why.
    #[error("applying {object}: {message}")]
    Object { object: String, message: String },

    #[error("namespaced objects carry no namespace and spec.installNamespace is not set: {}", .0.join(", "))]
    NamespaceRequired(Vec<String>),

    /// `spec.patches`: a patch cannot be applied to an object it selects.
    #[error(transparent)]
    Patch(#[from] PatchError),
}

type Result<T, E = PlanError> = std::result::Result<T, E>;

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
    /// The object as it is applied (namespace set, bundle label added), as compact JSON text:
    /// a plan is held for the whole apply, and a `Value` tree of large CRDs takes several times
    /// the text's size.
    pub object: Box<RawValue>,
    /// When the object is a CRD of the bundle: its name.
    pub defines_crd: Option<String>,
    /// The fields `spec.ignore` left out of the object (JSON pointer, the bundle's value): an
    /// apply carries their live values, or the bundle's when the object is not live.
    pub ignored: Vec<(String, Value)>,
    /// When the object's kind is defined by a CRD of the bundle: that CRD's name.
    pub needs_crd: Option<String>,
}

impl PlannedObject {
    /// Namespaces and CRDs: later objects may depend on them, so they go out first.
    pub fn is_barrier(&self) -> bool {
        self.defines_crd.is_some() || (self.gvk.group.is_empty() && self.gvk.kind == "Namespace")
    }

    /// The wave of an object of rendered content ([`rendered_wave`] of its file).
    pub fn rendered_wave(&self) -> Option<u32> {
        rendered_wave(&self.file)
    }

    /// Whether the object is a Job (`batch/v1`), which the next wave of rendered content waits
    /// for.
    pub fn is_job(&self) -> bool {
        self.gvk.group == "batch" && self.gvk.version == "v1" && self.gvk.kind == "Job"
    }

    /// The object as a JSON value tree, for the readers that look inside it.
    pub fn value(&self) -> Value {
        // The text was written from a `Value` by `plan_objects`: it always parses back.
        serde_json::from_str(self.object.get()).unwrap_or(Value::Null)
    }

    /// Makes `value` the object, after `doing` (what changed it, for the error).
    fn set_value(&mut self, value: &Value, doing: &str) -> Result<()> {
        self.object = serde_json::value::to_raw_value(value).map_err(|e| PlanError::Object {
            object: self.to_string(),
            message: format!("{doing}: {e}"),
        })?;
        Ok(())
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

/// The wave a file of rendered content holds: `N` for `wave-NNN.yaml` (at least three digits),
/// the name Gantry gives the files of a provisioner plugin's answer (docs/plugins.md); `None`
/// for any other name.
pub fn rendered_wave(file: &str) -> Option<u32> {
    let digits = file.strip_prefix("wave-")?.strip_suffix(".yaml")?;
    if digits.len() < 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A served kind: how to reach it and whether it is namespaced.
#[derive(Clone, Debug)]
pub struct Kind {
    pub resource: ApiResource,
    pub namespaced: bool,
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

    /// Leaves the fields `rules` (`Bundle.spec.ignore`) name out of the objects they select,
    /// and records them on each object; returns how many fields were left out.
    pub fn ignore_fields(&mut self, rules: &[gantry_api::IgnoreRule]) -> Result<usize> {
        if rules.is_empty() {
            return Ok(0);
        }
        let mut ignored = 0;
        for object in &mut self.objects {
            let mut value = object.value();
            let paths = gantry_api::ignore::ignored_paths(rules, &value);
            if paths.is_empty() {
                continue;
            }
            let removed = gantry_api::ignore::remove_fields(&mut value, &paths);
            if removed.is_empty() {
                continue;
            }
            ignored += removed.len();
            object.ignored = removed;
            object.set_value(&value, "leaving out its ignored fields")?;
        }
        Ok(ignored)
    }

    /// Rewrites the container images `overrides` name (`Bundle.spec.images`) in every object:
    /// what is applied, reviewed and compared is the rewritten object.
    pub fn rewrite_images(&mut self, overrides: &[gantry_api::ImageOverride]) -> Result<usize> {
        let mut rewritten = 0;
        if overrides.is_empty() {
            return Ok(0);
        }
        for object in &mut self.objects {
            // Most objects name no image at all: not parsed.
            if !object.object.get().contains("\"image\"") {
                continue;
            }
            let mut value = object.value();
            let changed = gantry_api::images::rewrite_images(&mut value, overrides);
            if changed.is_empty() {
                continue;
            }
            rewritten += changed.len();
            object.set_value(&value, "rewriting its images")?;
        }
        Ok(rewritten)
    }
}

/// A CRD of the bundle: the kinds it serves.
struct BundleCrd {
    name: String,
    kinds: Vec<(GroupVersionKind, Kind)>,
}

/// The fields of a CRD that planning reads; the rest (the schema, most of a CRD's size) is
/// skipped while parsing, not built.
#[derive(Deserialize)]
struct CrdFields {
    spec: CrdSpec,
}

#[derive(Deserialize)]
struct CrdSpec {
    group: String,
    names: CrdNames,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    versions: Vec<CrdVersion>,
}

#[derive(Deserialize)]
struct CrdNames {
    kind: String,
    plural: String,
}

#[derive(Deserialize)]
struct CrdVersion {
    name: String,
}

fn bundle_crd(object: &BundleObject) -> Option<BundleCrd> {
    let CrdFields { spec } = serde_json::from_str(object.object.get()).ok()?;
    let namespaced = spec.scope.as_deref() == Some("Namespaced");
    let kinds = spec
        .versions
        .iter()
        .map(|version| {
            let gvk = GroupVersionKind::gvk(&spec.group, &version.name, &spec.names.kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, &spec.names.plural);
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
        name: object.summary.name.clone(),
        kinds,
    })
}

pub fn gvk_of(object: &BundleObject) -> GroupVersionKind {
    let summary = &object.summary;
    GroupVersionKind::gvk(summary.group(), summary.version(), &summary.kind)
}

/// The kinds the bundle's own CRDs define, with the name of the CRD defining each.
pub fn bundle_crd_kinds(objects: &[BundleObject]) -> HashMap<GroupVersionKind, (Kind, String)> {
    let mut crd_kinds = HashMap::new();
    for object in objects {
        let gvk = gvk_of(object);
        let is_crd = gvk.group == CRD_GROUP && gvk.kind == "CustomResourceDefinition";
        if is_crd && let Some(crd) = bundle_crd(object) {
            for (gvk, kind) in crd.kinds {
                crd_kinds.insert(gvk, (kind, crd.name.clone()));
            }
        }
    }
    crd_kinds
}

/// Plans `objects` for bundle `bundle` without asking anything: kinds come from the bundle's
/// own CRDs first, then from `served` (what the API server serves; `None` when it does not);
/// namespaced objects without a namespace get `install_namespace`; every object gets the
/// bundle label. Namespaces and CRDs are planned first, everything else after them.
///
/// The objects are moved into the plan, not copied: a bundle of large CRDs would otherwise be
/// held twice while it is planned.
#[cfg(any(test, feature = "testing"))]
pub fn plan_objects(
    objects: Vec<BundleObject>,
    bundle: &str,
    install_namespace: Option<&str>,
    served: impl Fn(&GroupVersionKind) -> Option<Kind>,
) -> Result<Plan> {
    plan_patched(
        objects,
        bundle,
        install_namespace,
        &Patches::default(),
        served,
    )
    .map(|(plan, _)| plan)
}

/// [`plan_objects`], with `spec.patches` applied to each object once its namespace is
/// defaulted (the namespace a target names is the one the object is applied in), before the
/// bundle label is added. What a patch leaves is planned: its name, its namespace (defaulted
/// again when a patch removed it). A patch that cannot be applied fails the whole plan.
///
/// The kinds the bundle's CRDs define are read from the CRDs as shipped, before any patch.
///
/// Also returns the patches that selected no object, with their targets
/// (`spec.patches[1] (kind=Job name=setup)`): not an error, as in Flux, but worth saying.
pub fn plan_patched(
    objects: Vec<BundleObject>,
    bundle: &str,
    install_namespace: Option<&str>,
    patches: &Patches,
    served: impl Fn(&GroupVersionKind) -> Option<Kind>,
) -> Result<(Plan, Vec<String>)> {
    let crd_kinds = bundle_crd_kinds(&objects);

    let mut planned = Vec::with_capacity(objects.len());
    let mut without_namespace = Vec::new();
    let mut patched = BTreeSet::new();
    for source in objects {
        let gvk = gvk_of(&source);
        // One object's tree at a time: parsed here, changed, and written back as text.
        let parsed = source.value();
        let gantry_image::ObjectSummary {
            file,
            document,
            mut name,
            ..
        } = source.summary;
        let where_ = || format!("{file} document {document}");
        let mut object = parsed.map_err(|e| PlanError::Object {
            object: where_(),
            message: e.to_string(),
        })?;
        let (kind, needs_crd) = match crd_kinds.get(&gvk) {
            Some((kind, crd)) => (kind.clone(), Some(crd.clone())),
            None => match served(&gvk) {
                Some(kind) => (kind, None),
                None => {
                    return Err(PlanError::Object {
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
        fn metadata_of<'v>(
            object: &'v mut Value,
            where_: &dyn Fn() -> String,
        ) -> Result<&'v mut serde_json::Map<String, Value>> {
            object
                .as_object_mut()
                .and_then(|o| o.get_mut("metadata"))
                .and_then(Value::as_object_mut)
                .ok_or_else(|| PlanError::Object {
                    object: where_(),
                    message: "metadata must be a map".into(),
                })
        }
        let mut namespace =
            default_namespace(metadata_of(&mut object, &where_)?, &kind, install_namespace);
        if !patches.is_empty() {
            patched.extend(patches.apply(&mut object)?);
            // A patch keeps the kind and a name (`Patches::apply`); it may change the name and
            // the namespace, or remove the namespace (given the default again).
            if let Some(new) = object.pointer("/metadata/name").and_then(Value::as_str) {
                name = new.to_string();
            }
            namespace =
                default_namespace(metadata_of(&mut object, &where_)?, &kind, install_namespace);
        }
        if kind.namespaced && namespace.is_none() {
            without_namespace.push(format!("{} {name} ({})", gvk.kind, where_()));
        }
        let defines_crd = (gvk.group == CRD_GROUP && gvk.kind == "CustomResourceDefinition")
            .then(|| name.clone());
        let metadata = metadata_of(&mut object, &where_)?;
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if !labels.is_object() {
            *labels = Value::Object(Default::default());
        }
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(BUNDLE_LABEL.into(), Value::String(bundle.to_string()));
        }
        let object = serde_json::value::to_raw_value(&object).map_err(|e| PlanError::Object {
            object: where_(),
            message: e.to_string(),
        })?;
        planned.push(PlannedObject {
            file,
            document,
            gvk,
            resource: kind.resource,
            namespaced: kind.namespaced,
            namespace,
            name,
            object,
            defines_crd,
            needs_crd,
            ignored: Vec::new(),
        });
    }
    if !without_namespace.is_empty() {
        return Err(PlanError::NamespaceRequired(without_namespace));
    }
    // Namespaces and CRDs go first (as Flux and kapp do), each group keeping filename and
    // document order: a custom resource before the CRD that defines it, or an object before
    // its Namespace, then installs as well. Uninstall removes in reverse, so they go last.
    planned.sort_by_key(|object| !object.is_barrier());
    Ok((Plan { objects: planned }, patches.unmatched(&patched)))
}

/// Gives a namespaced object without a namespace `install_namespace` and returns its namespace
/// (`None`: it has none to be given); removes the namespace of a cluster-scoped object, as
/// kubectl does: there it means nothing.
fn default_namespace(
    metadata: &mut serde_json::Map<String, Value>,
    kind: &Kind,
    install_namespace: Option<&str>,
) -> Option<String> {
    if !kind.namespaced {
        metadata.remove("namespace");
        return None;
    }
    let explicit = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .map(str::to_string);
    let namespace = explicit.or_else(|| install_namespace.map(str::to_string))?;
    metadata.insert("namespace".into(), Value::String(namespace.clone()));
    Some(namespace)
}

/// Objects and kinds for tests of what is done with a plan.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;
    use serde_json::json;

    /// An object of file `file`, document 0.
    pub fn object(file: &str, value: Value) -> BundleObject {
        // JSON is YAML: parsed as a bundle file is.
        let mut parsed = gantry_image::parse_file(
            file,
            value.to_string().as_bytes(),
            &gantry_image::EffectiveLimits::default(),
        )
        .expect("a valid object");
        parsed.remove(0)
    }

    pub fn config_map(name: &str) -> BundleObject {
        object(
            &format!("{name}.yaml"),
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name } }),
        )
    }

    pub fn namespace(name: &str) -> BundleObject {
        object(
            &format!("{name}.yaml"),
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name, "namespace": "ignored" } }),
        )
    }

    pub fn crd(group: &str, kind: &str, plural: &str) -> BundleObject {
        object(
            "crd.yaml",
            json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": { "name": format!("{plural}.{group}") },
                "spec": { "group": group, "scope": "Namespaced",
                          "names": { "kind": kind, "plural": plural },
                          "versions": [{ "name": "v1" }, { "name": "v2" }] }
            }),
        )
    }

    /// What a small API server serves: ConfigMaps (namespaced), Namespaces and CRDs.
    pub fn served(gvk: &GroupVersionKind) -> Option<Kind> {
        let (plural, namespaced) = match (gvk.group.as_str(), gvk.kind.as_str()) {
            ("", "ConfigMap") => ("configmaps", true),
            ("", "Namespace") => ("namespaces", false),
            (CRD_GROUP, "CustomResourceDefinition") => ("customresourcedefinitions", false),
            _ => return None,
        };
        Some(Kind {
            resource: ApiResource::from_gvk_with_plural(gvk, plural),
            namespaced,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn only_wave_files_of_rendered_content_have_a_wave() {
        for (file, wave) in [
            ("wave-000.yaml", Some(0)),
            ("wave-002.yaml", Some(2)),
            ("wave-999.yaml", Some(999)),
            ("wave-1000.yaml", Some(1000)),
            ("wave-01.yaml", None),
            ("wave-001.yml", None),
            ("wave-00a.yaml", None),
            ("wave-+01.yaml", None),
            ("a-wave-001.yaml", None),
            ("rendered.yaml", None),
            ("wave-99999999999.yaml", None),
        ] {
            assert_eq!(rendered_wave(file), wave, "{file}");
        }
        let job = object(
            "wave-001.yaml",
            json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": "j" } }),
        );
        let plan = plan_objects(vec![job], "b", Some("n"), |gvk| {
            Some(Kind {
                resource: ApiResource::from_gvk_with_plural(gvk, "jobs"),
                namespaced: true,
            })
        })
        .unwrap();
        assert_eq!(plan.objects[0].rendered_wave(), Some(1));
        assert!(plan.objects[0].is_job());
        let plan = plan_objects(vec![config_map("c")], "b", Some("n"), served).unwrap();
        assert!(!plan.objects[0].is_job());
    }

    #[test]
    fn namespaces_are_defaulted_or_dropped_and_the_label_added() {
        let plan = plan_objects(
            vec![namespace("app"), config_map("settings")],
            "b",
            Some("app"),
            served,
        )
        .unwrap();
        let [ns, cm] = &plan.objects[..] else {
            panic!("two objects")
        };
        assert_eq!(ns.namespace, None);
        assert_eq!(ns.value()["metadata"].get("namespace"), None);
        assert_eq!(cm.namespace.as_deref(), Some("app"));
        assert_eq!(cm.value()["metadata"]["namespace"], "app");
        assert_eq!(cm.value()["metadata"]["labels"][BUNDLE_LABEL], "b");
        assert_eq!(plan.created_namespaces().collect::<Vec<_>>(), ["app"]);
    }

    #[test]
    fn objects_without_a_namespace_are_all_named() {
        let error =
            plan_objects(vec![config_map("a"), config_map("b")], "b", None, served).unwrap_err();
        match error {
            PlanError::NamespaceRequired(objects) => assert_eq!(objects.len(), 2, "{objects:?}"),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn kinds_of_the_bundles_crds_need_them_and_unknown_kinds_fail() {
        let widget = object(
            "w.yaml",
            json!({ "apiVersion": "example.com/v2", "kind": "Widget", "metadata": { "name": "w" } }),
        );
        let plan = plan_objects(
            vec![crd("example.com", "Widget", "widgets"), widget.clone()],
            "b",
            Some("app"),
            served,
        )
        .unwrap();
        assert_eq!(
            plan.objects[0].defines_crd.as_deref(),
            Some("widgets.example.com")
        );
        assert_eq!(
            plan.objects[1].needs_crd.as_deref(),
            Some("widgets.example.com")
        );
        assert_eq!(plan.objects[1].resource.plural, "widgets");

        let reversed = plan_objects(
            vec![
                widget.clone(),
                config_map("c"),
                crd("example.com", "Widget", "widgets"),
            ],
            "b",
            Some("app"),
            served,
        )
        .unwrap();
        let order: Vec<&str> = reversed.objects.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            order,
            ["widgets.example.com", "w", "c"],
            "the CRD goes first, the rest keeps its order"
        );

        let error = plan_objects(vec![widget], "b", Some("app"), served).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("serves no kind Widget in example.com/v2"),
            "{error}"
        );
    }

    fn with_deployments(gvk: &GroupVersionKind) -> Option<Kind> {
        served(gvk).or_else(|| {
            (gvk.kind == "Deployment").then(|| Kind {
                resource: ApiResource::from_gvk_with_plural(gvk, "deployments"),
                namespaced: true,
            })
        })
    }

    fn patch(text: &str, target: gantry_api::ObjectSelector) -> gantry_api::BundlePatch {
        gantry_api::BundlePatch {
            patch: text.into(),
            target,
        }
    }

    fn kind(kind: &str) -> gantry_api::ObjectSelector {
        gantry_api::ObjectSelector {
            kind: Some(kind.into()),
            ..Default::default()
        }
    }

    #[test]
    fn patches_apply_to_the_objects_they_select_in_their_install_namespace() {
        let deployment = object(
            "webhook.yaml",
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "webhook" },
                "spec": { "replicas": 2, "template": { "spec": { "containers": [
                    { "name": "webhook", "image": "quay.io/team/webhook:v1" },
                ]}}},
            }),
        );
        let in_app = gantry_api::ObjectSelector {
            namespace: Some("app".into()),
            ..kind("Deployment")
        };
        let patches = Patches::parse(&[
            patch("[{op: remove, path: /spec/replicas}]", in_app),
            patch(
                "[{op: replace, path: /metadata/namespace, value: elsewhere}, {op: add, path: /metadata/labels, value: {moved: 'yes'}}]",
                kind("ConfigMap"),
            ),
            patch("[{op: remove, path: /spec/suspend}]", kind("CronJob")),
        ])
        .unwrap();
        let (plan, unmatched) = plan_patched(
            vec![namespace("app"), deployment, config_map("settings")],
            "b",
            Some("app"),
            &patches,
            with_deployments,
        )
        .unwrap();
        let find = |name: &str| plan.objects.iter().find(|o| o.name == name).unwrap();
        let webhook = find("webhook").value();
        assert_eq!(webhook.pointer("/spec/replicas"), None);
        assert_eq!(
            webhook["spec"]["template"]["spec"]["containers"][0]["name"],
            "webhook"
        );
        let settings = find("settings");
        assert_eq!(settings.namespace.as_deref(), Some("elsewhere"));
        assert_eq!(settings.value()["metadata"]["namespace"], "elsewhere");
        assert_eq!(settings.value()["metadata"]["labels"]["moved"], "yes");
        assert_eq!(
            settings.value()["metadata"]["labels"][BUNDLE_LABEL],
            "b",
            "the bundle label is added after the patches"
        );
        assert_eq!(
            unmatched,
            ["spec.patches[2] (kind=CronJob)"],
            "a patch that selects nothing is reported, not an error"
        );
    }

    #[test]
    fn a_patch_that_removes_the_namespace_gets_the_install_namespace_and_may_rename() {
        let patches = Patches::parse(&[patch(
            "[{op: remove, path: /metadata/namespace}, {op: replace, path: /metadata/name, value: renamed}]",
            kind("ConfigMap"),
        )])
        .unwrap();
        let explicit = object(
            "cm.yaml",
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cm", "namespace": "other" } }),
        );
        let (plan, _) = plan_patched(vec![explicit], "b", Some("app"), &patches, served).unwrap();
        assert_eq!(
            (
                plan.objects[0].name.as_str(),
                plan.objects[0].namespace.as_deref()
            ),
            ("renamed", Some("app"))
        );
    }

    #[test]
    fn a_patch_that_cannot_apply_fails_the_plan_naming_patch_operation_and_object() {
        let patches = Patches::parse(&[
            patch(
                "[{op: add, path: /data/extra, value: x}]",
                kind("ConfigMap"),
            ),
            patch("[{op: remove, path: /spec/replicas}]", kind("ConfigMap")),
        ])
        .unwrap();
        let error = plan_patched(
            vec![config_map("settings")],
            "b",
            Some("app"),
            &patches,
            served,
        )
        .unwrap_err();
        assert!(matches!(error, PlanError::Patch(_)), "{error:?}");
        let message = error.to_string();
        assert!(
            message.starts_with(
                "spec.patches[0]: operation 0 (add /data/extra) failed on v1 ConfigMap app/settings"
            ),
            "{message}"
        );
    }

    #[test]
    fn images_are_rewritten_in_the_planned_objects_only_where_named() {
        let deployment = object(
            "op.yaml",
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "op" },
                "spec": { "template": { "spec": { "containers": [
                    { "name": "op", "image": "quay.io/team/op:v1" },
                ]}}},
            }),
        );
        let with_deployments = |gvk: &GroupVersionKind| {
            served(gvk).or_else(|| {
                (gvk.kind == "Deployment").then(|| Kind {
                    resource: ApiResource::from_gvk_with_plural(gvk, "deployments"),
                    namespaced: true,
                })
            })
        };
        let mut plan = plan_objects(
            vec![deployment, config_map("settings")],
            "b",
            Some("app"),
            with_deployments,
        )
        .unwrap();
        let before = plan.objects[1].object.get().to_string();
        let overrides = [gantry_api::ImageOverride {
            name: "quay.io/team/op".into(),
            new_name: Some("127.0.0.1:5000/mirror/op".into()),
            ..Default::default()
        }];
        assert_eq!(plan.rewrite_images(&overrides).unwrap(), 1);
        let deployment = plan.objects.iter().find(|o| o.name == "op").unwrap();
        assert_eq!(
            deployment
                .value()
                .pointer("/spec/template/spec/containers/0/image"),
            Some(&json!("127.0.0.1:5000/mirror/op:v1"))
        );
        // The bundle label is kept; other objects are untouched.
        assert!(deployment.object.get().contains(BUNDLE_LABEL));
        assert_eq!(plan.objects[1].object.get(), before);
    }
}
