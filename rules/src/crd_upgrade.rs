//! Whether a CRD's new content may replace the one in the cluster: changes that orphan stored
//! objects (a stored version removed, the scope changed) or break clients (a served version no
//! longer served, a schema that accepts less than before) are found here, from data alone.
//! Additions (new optional properties, new versions, enum values added, limits relaxed) pass.

use std::fmt;

use serde_json::{Map, Value};

/// Annotation on a CRD of a bundle: [`UNSAFE_ALLOWED`] accepts its unsafe changes knowingly.
pub use gantry_api::{CRD_UPGRADE_ANNOTATION, CRD_UPGRADE_UNSAFE_ALLOWED as UNSAFE_ALLOWED};

/// One unsafe change of a CRD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The CRD's name.
    pub crd: String,
    /// The version concerned; `None` for a change of every version (the scope).
    pub version: Option<String>,
    /// Where, in the CRD: `spec.versions[v1].schema.openAPIV3Schema.properties.spec`.
    pub path: String,
    /// Where, in an object of the version: the steps from its root to the values concerned.
    pub at: Vec<Step>,
    pub change: Change,
}

/// One step from a schema to the values it describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The property of that name.
    Property(String),
    /// Every item of an array (`items`).
    Item,
    /// Every value of a map (`additionalProperties`).
    Value,
}

/// What changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The version is in `status.storedVersions` and the new content drops it.
    StoredVersionRemoved,
    /// `spec.scope` changed.
    ScopeChanged { from: String, to: String },
    /// The version was served and no longer is (removed, or `served: false`). Whether objects
    /// are read through it is for the caller to find out.
    NoLongerServed,
    /// A field that was optional (or absent) is required.
    RequiredAdded(String),
    /// A property is gone.
    PropertyRemoved,
    /// An allowed value is gone from `enum` (or an `enum` was added).
    EnumValueRemoved(String),
    /// `type` changed.
    TypeChanged { from: String, to: String },
    /// A limit accepts less: a maximum lowered or added, a minimum raised or added.
    LimitTightened {
        keyword: &'static str,
        from: Option<String>,
        to: String,
    },
    /// `x-kubernetes-preserve-unknown-fields: true` was removed: unknown fields get pruned.
    PreserveUnknownFieldsRemoved,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::StoredVersionRemoved => {
                write!(f, "version removed while in status.storedVersions")
            }
            Change::ScopeChanged { from, to } => write!(f, "scope changed from {from} to {to}"),
            Change::NoLongerServed => write!(f, "version no longer served"),
            Change::RequiredAdded(name) => write!(f, "field {name} became required"),
            Change::PropertyRemoved => write!(f, "property removed"),
            Change::EnumValueRemoved(value) => write!(f, "enum value {value} removed"),
            Change::TypeChanged { from, to } => write!(f, "type changed from {from} to {to}"),
            Change::LimitTightened { keyword, from, to } => match from {
                Some(from) => write!(f, "{keyword} tightened from {from} to {to}"),
                None => write!(f, "{keyword} {to} added"),
            },
            Change::PreserveUnknownFieldsRemoved => {
                write!(f, "x-kubernetes-preserve-unknown-fields: true removed")
            }
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.version {
            Some(version) => write!(f, "{} {version} {}: {}", self.crd, self.path, self.change),
            None => write!(f, "{} {}: {}", self.crd, self.path, self.change),
        }
    }
}

/// Whether the CRD of the bundle accepts its unsafe changes (the annotation
/// `gantry.dev/crd-upgrade: unsafe-allowed`).
pub fn unsafe_allowed(new: &Value) -> bool {
    new.pointer("/metadata/annotations")
        .and_then(|a| a.get(CRD_UPGRADE_ANNOTATION))
        .and_then(Value::as_str)
        == Some(UNSAFE_ALLOWED)
}

/// The unsafe changes from `live` (the CRD as read from the API server, with its status) to
/// `new` (the bundle's).
pub fn compare(live: &Value, new: &Value) -> Vec<Finding> {
    let crd = new
        .pointer("/metadata/name")
        .or_else(|| live.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut findings = Vec::new();
    let mut found = |version: Option<&str>, path: String, at: Vec<Step>, change: Change| {
        findings.push(Finding {
            crd: crd.clone(),
            version: version.map(str::to_string),
            path,
            at,
            change,
        })
    };

    let scope = |crd: &Value| {
        crd.pointer("/spec/scope")
            .and_then(Value::as_str)
            .unwrap_or("Namespaced")
            .to_string()
    };
    let (from, to) = (scope(live), scope(new));
    if from != to {
        found(
            None,
            "spec.scope".to_string(),
            Vec::new(),
            Change::ScopeChanged { from, to },
        );
    }

    let old_versions = versions(live);
    let new_versions = versions(new);
    let stored: Vec<&str> = live
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for name in &stored {
        if !new_versions.iter().any(|(n, _)| n == name) {
            found(
                Some(name),
                format!("spec.versions[{name}]"),
                Vec::new(),
                Change::StoredVersionRemoved,
            );
        }
    }
    for (name, old) in &old_versions {
        if !served(old) {
            continue;
        }
        let Some((_, new)) = new_versions.iter().find(|(n, _)| n == name) else {
            // A stored version removed is reported above; one only served loses its clients.
            if !stored.contains(name) {
                found(
                    Some(name),
                    format!("spec.versions[{name}]"),
                    Vec::new(),
                    Change::NoLongerServed,
                );
            }
            continue;
        };
        if !served(new) {
            found(
                Some(name),
                format!("spec.versions[{name}].served"),
                Vec::new(),
                Change::NoLongerServed,
            );
            continue;
        }
        let (Some(old_schema), Some(new_schema)) = (
            old.pointer("/schema/openAPIV3Schema"),
            new.pointer("/schema/openAPIV3Schema"),
        ) else {
            continue;
        };
        let mut changes = Vec::new();
        schema(
            old_schema,
            new_schema,
            &format!("spec.versions[{name}].schema.openAPIV3Schema"),
            &[],
            &mut changes,
        );
        for (path, at, change) in changes {
            found(Some(name), path, at, change);
        }
    }
    findings
}

/// `spec.versions` by name.
fn versions(crd: &Value) -> Vec<(&str, &Value)> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| Some((v.get("name")?.as_str()?, v)))
        .collect()
}

fn served(version: &Value) -> bool {
    version
        .get("served")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The limits a schema may set: (keyword, whether a larger value accepts more).
const LIMITS: &[(&str, bool)] = &[
    ("maximum", true),
    ("maxLength", true),
    ("maxItems", true),
    ("maxProperties", true),
    ("minimum", false),
    ("minLength", false),
    ("minItems", false),
    ("minProperties", false),
];

/// Compares one schema node and, recursively, its properties, items and additional properties.
fn schema(
    old: &Value,
    new: &Value,
    path: &str,
    at: &[Step],
    changes: &mut Vec<(String, Vec<Step>, Change)>,
) {
    let below = |step: Step| -> Vec<Step> { at.iter().cloned().chain([step]).collect() };
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return;
    };
    let text = |node: &Map<String, Value>, key: &str| {
        node.get(key).and_then(Value::as_str).map(str::to_string)
    };
    if let (Some(from), Some(to)) = (text(old, "type"), text(new, "type"))
        && from != to
    {
        changes.push((
            path.to_string(),
            at.to_vec(),
            Change::TypeChanged { from, to },
        ));
    }

    let preserves = |node: &Map<String, Value>| {
        node.get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true)
    };
    if preserves(old) && !preserves(new) {
        changes.push((
            path.to_string(),
            at.to_vec(),
            Change::PreserveUnknownFieldsRemoved,
        ));
    }

    let names = |node: &Map<String, Value>, key: &str| -> Vec<String> {
        node.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let old_required = names(old, "required");
    for name in names(new, "required") {
        if !old_required.contains(&name) {
            changes.push((
                format!("{path}.properties.{name}"),
                below(Step::Property(name.clone())),
                Change::RequiredAdded(name),
            ));
        }
    }

    match (
        old.get("enum").and_then(Value::as_array),
        new.get("enum").and_then(Value::as_array),
    ) {
        (Some(old_values), Some(new_values)) => {
            for value in old_values.iter().filter(|v| !new_values.contains(v)) {
                changes.push((
                    path.to_string(),
                    at.to_vec(),
                    Change::EnumValueRemoved(value.to_string()),
                ));
            }
        }
        (None, Some(new_values)) => {
            let values: Vec<String> = new_values.iter().map(Value::to_string).collect();
            changes.push((
                path.to_string(),
                at.to_vec(),
                Change::LimitTightened {
                    keyword: "enum",
                    from: None,
                    to: format!("[{}]", values.join(", ")),
                },
            ));
        }
        _ => {}
    }

    for (keyword, larger_accepts_more) in LIMITS {
        let Some(to) = new.get(*keyword).and_then(Value::as_f64) else {
            continue;
        };
        let from = old.get(*keyword).and_then(Value::as_f64);
        let tighter = match from {
            None => true,
            Some(from) if *larger_accepts_more => to < from,
            Some(from) => to > from,
        };
        if tighter {
            changes.push((
                path.to_string(),
                at.to_vec(),
                Change::LimitTightened {
                    keyword,
                    from: from.map(number),
                    to: number(to),
                },
            ));
        }
    }

    if let Some(old_properties) = old.get("properties").and_then(Value::as_object) {
        let new_properties = new.get("properties").and_then(Value::as_object);
        for (name, old_property) in old_properties {
            let here = format!("{path}.properties.{name}");
            match new_properties.and_then(|p| p.get(name)) {
                Some(new_property) => schema(
                    old_property,
                    new_property,
                    &here,
                    &below(Step::Property(name.clone())),
                    changes,
                ),
                // Kept as unknown fields: stored values stay.
                None if preserves(new) => {}
                None => changes.push((
                    here,
                    below(Step::Property(name.clone())),
                    Change::PropertyRemoved,
                )),
            }
        }
    }
    if let (Some(old_items), Some(new_items)) = (old.get("items"), new.get("items")) {
        schema(
            old_items,
            new_items,
            &format!("{path}.items"),
            &below(Step::Item),
            changes,
        );
    }
    if let (Some(old_more), Some(new_more)) = (
        old.get("additionalProperties"),
        new.get("additionalProperties"),
    ) {
        schema(
            old_more,
            new_more,
            &format!("{path}.additionalProperties"),
            &below(Step::Value),
            changes,
        );
    }
}

impl Finding {
    /// Whether the change refuses values rather than changing the shape of objects: a limit
    /// tightened or an enum value removed. Such a change loses nothing stored (the API server
    /// keeps the values, and ratcheting validation lets objects be updated while they keep
    /// them), and new writes of refused values fail loudly: it is unsafe only when objects in
    /// the cluster hold values it refuses ([`Finding::refuses`]). A property removed, by
    /// contrast, silently prunes what clients write later, and stays a finding.
    pub fn concerns_values(&self) -> bool {
        matches!(
            self.change,
            Change::LimitTightened { .. } | Change::EnumValueRemoved(_)
        )
    }

    /// Whether `object` (of the finding's version) holds a value the change refuses.
    pub fn refuses(&self, object: &Value) -> bool {
        let mut values = vec![object];
        for step in &self.at {
            values = values
                .into_iter()
                .flat_map(|value| -> Vec<&Value> {
                    match step {
                        Step::Property(name) => value.get(name).into_iter().collect(),
                        Step::Item => value.as_array().into_iter().flatten().collect(),
                        Step::Value => value
                            .as_object()
                            .into_iter()
                            .flat_map(|map| map.values())
                            .collect(),
                    }
                })
                .collect();
        }
        values.into_iter().any(|value| refused(&self.change, value))
    }
}

/// Whether `change` refuses `value`. A value of another type than the limit concerns is left
/// to the type check.
fn refused(change: &Change, value: &Value) -> bool {
    let size = |keyword: &str| -> Option<f64> {
        match keyword {
            "maximum" | "minimum" => value.as_f64(),
            "maxLength" | "minLength" => value.as_str().map(|s| s.chars().count() as f64),
            "maxItems" | "minItems" => value.as_array().map(|a| a.len() as f64),
            "maxProperties" | "minProperties" => value.as_object().map(|o| o.len() as f64),
            _ => None,
        }
    };
    match change {
        Change::EnumValueRemoved(removed) => {
            serde_json::from_str::<Value>(removed).is_ok_and(|removed| *value == removed)
        }
        Change::LimitTightened {
            keyword: "enum",
            to,
            ..
        } => serde_json::from_str::<Vec<Value>>(to).is_ok_and(|allowed| !allowed.contains(value)),
        Change::LimitTightened { keyword, to, .. } => {
            let (Some(size), Ok(limit)) = (size(keyword), to.parse::<f64>()) else {
                return false;
            };
            if keyword.starts_with("max") {
                size > limit
            } else {
                size < limit
            }
        }
        _ => false,
    }
}

/// A limit as written: `10`, not `10.0`.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A small CRD of `widgets.example.com` in the shape the API server returns.
    fn widgets() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": "widgets.example.com" },
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": { "kind": "Widget", "plural": "widgets" },
                "versions": [
                    {
                        "name": "v1", "served": true, "storage": true,
                        "schema": { "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {
                                        "size": { "type": "integer", "minimum": 1, "maximum": 10 },
                                        "mode": { "type": "string", "enum": ["fast", "slow"] },
                                        "name": { "type": "string", "maxLength": 63 },
                                        "tags": {
                                            "type": "array",
                                            "maxItems": 5,
                                            "items": {
                                                "type": "object",
                                                "properties": { "key": { "type": "string" } },
                                            },
                                        },
                                        "labels": {
                                            "type": "object",
                                            "additionalProperties": { "type": "string" },
                                        },
                                        "extra": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": true,
                                        },
                                    },
                                },
                            },
                        }},
                    },
                    {
                        "name": "v1beta1", "served": true, "storage": false,
                        "schema": { "openAPIV3Schema": { "type": "object" } },
                    },
                ],
            },
            "status": { "storedVersions": ["v1"] },
        })
    }

    const SPEC: &str = "spec.versions[v1].schema.openAPIV3Schema.properties.spec";

    fn v1_spec(crd: &mut Value) -> &mut Value {
        crd.pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
            .expect("the spec schema")
    }

    /// The one finding of `edit` applied to the new CRD: its path and change.
    fn one_finding(edit: impl FnOnce(&mut Value)) -> (String, Change) {
        let live = widgets();
        let mut new = widgets();
        edit(&mut new);
        let findings = compare(&live, &new);
        assert_eq!(findings.len(), 1, "{findings:?}");
        let finding = findings
            .into_iter()
            .next()
            .unwrap_or_else(|| unreachable!());
        assert_eq!(finding.crd, "widgets.example.com");
        assert_eq!(finding.version.as_deref(), Some("v1"));
        (finding.path, finding.change)
    }

    #[test]
    fn the_same_crd_is_safe() {
        assert_eq!(compare(&widgets(), &widgets()), vec![]);
    }

    #[test]
    fn additions_and_relaxed_limits_are_safe() {
        let live = widgets();
        let mut new = widgets();
        let spec = v1_spec(&mut new);
        spec["properties"]["color"] = json!({ "type": "string" });
        spec["properties"]["mode"]["enum"] = json!(["fast", "slow", "auto"]);
        spec["properties"]["size"]["maximum"] = json!(100);
        spec["properties"]["size"]["minimum"] = json!(0);
        spec["properties"]["name"]
            .as_object_mut()
            .map(|n| n.remove("maxLength"));
        spec["properties"]["tags"]["maxItems"] = json!(50);
        spec["required"] = json!([]);
        if let Some(versions) = new["spec"]["versions"].as_array_mut() {
            versions.push(json!({ "name": "v2", "served": true, "storage": false }));
        }
        assert_eq!(compare(&live, &new), vec![]);
    }

    #[test]
    fn a_removed_property_is_found_with_its_path() {
        let (path, change) = one_finding(|crd| {
            v1_spec(crd)["properties"]
                .as_object_mut()
                .map(|p| p.remove("mode"));
        });
        assert_eq!(path, format!("{SPEC}.properties.mode"));
        assert_eq!(change, Change::PropertyRemoved);
    }

    #[test]
    fn a_new_required_field_is_found() {
        let (path, change) = one_finding(|crd| {
            v1_spec(crd)["required"] = json!(["size", "name"]);
        });
        assert_eq!(path, format!("{SPEC}.properties.name"));
        assert_eq!(change, Change::RequiredAdded("name".into()));
    }

    #[test]
    fn a_removed_enum_value_is_found() {
        let (path, change) = one_finding(|crd| {
            v1_spec(crd)["properties"]["mode"]["enum"] = json!(["fast"]);
        });
        assert_eq!(path, format!("{SPEC}.properties.mode"));
        assert_eq!(change, Change::EnumValueRemoved("\"slow\"".into()));
    }

    #[test]
    fn a_changed_type_is_found() {
        let (path, change) = one_finding(|crd| {
            v1_spec(crd)["properties"]["size"] = json!({ "type": "string" });
        });
        assert_eq!(path, format!("{SPEC}.properties.size"));
        assert_eq!(
            change,
            Change::TypeChanged {
                from: "integer".into(),
                to: "string".into()
            }
        );
    }

    #[test]
    fn tightened_limits_are_found() {
        let cases: [(&str, &str, Value, &str); 4] = [
            (
                "size",
                "maximum",
                json!(5),
                "maximum tightened from 10 to 5",
            ),
            ("size", "minimum", json!(2), "minimum tightened from 1 to 2"),
            (
                "name",
                "maxLength",
                json!(10),
                "maxLength tightened from 63 to 10",
            ),
            ("name", "minLength", json!(3), "minLength 3 added"),
        ];
        for (property, keyword, value, said) in cases {
            let (path, change) = one_finding(|crd| {
                v1_spec(crd)["properties"][property][keyword] = value;
            });
            assert_eq!(path, format!("{SPEC}.properties.{property}"));
            assert_eq!(change.to_string(), said);
        }
        let (path, change) = one_finding(|crd| {
            v1_spec(crd)["properties"]["tags"]["maxItems"] = json!(1);
        });
        assert_eq!(path, format!("{SPEC}.properties.tags"));
        assert_eq!(change.to_string(), "maxItems tightened from 5 to 1");
    }

    #[test]
    fn items_and_additional_properties_are_compared() {
        let (path, change) = one_finding(|crd| {
            v1_spec(crd)["properties"]["tags"]["items"]["properties"]["key"]["type"] =
                json!("integer");
        });
        assert_eq!(path, format!("{SPEC}.properties.tags.items.properties.key"));
        assert!(matches!(change, Change::TypeChanged { .. }));
        let (path, _) = one_finding(|crd| {
            v1_spec(crd)["properties"]["labels"]["additionalProperties"]["type"] = json!("integer");
        });
        assert_eq!(
            path,
            format!("{SPEC}.properties.labels.additionalProperties")
        );
    }

    #[test]
    fn preserving_unknown_fields_cannot_be_removed() {
        let (path, change) = one_finding(|crd| {
            v1_spec(crd)["properties"]["extra"]
                .as_object_mut()
                .map(|e| e.remove("x-kubernetes-preserve-unknown-fields"));
        });
        assert_eq!(path, format!("{SPEC}.properties.extra"));
        assert_eq!(change, Change::PreserveUnknownFieldsRemoved);
    }

    #[test]
    fn versions_and_scope() {
        let live = widgets();
        let mut new = widgets();
        new["spec"]["scope"] = json!("Cluster");
        new["spec"]["versions"][1]["served"] = json!(false);
        let findings = compare(&live, &new);
        assert_eq!(findings.len(), 2, "{findings:?}");
        assert_eq!(findings[0].path, "spec.scope");
        assert_eq!(findings[0].version, None);
        assert_eq!(
            findings[1].to_string(),
            "widgets.example.com v1beta1 spec.versions[v1beta1].served: version no longer served"
        );

        // v1 stored, replaced by v2; v1beta1 dropped.
        let mut new = widgets();
        new["spec"]["versions"] = json!([{ "name": "v2", "served": true, "storage": true }]);
        let findings: Vec<(Option<String>, Change)> = compare(&live, &new)
            .into_iter()
            .map(|f| (f.version, f.change))
            .collect();
        assert_eq!(
            findings,
            vec![
                (Some("v1".into()), Change::StoredVersionRemoved),
                (Some("v1beta1".into()), Change::NoLongerServed),
            ]
        );
    }

    #[test]
    fn the_annotation_accepts_unsafe_changes() {
        let mut crd = widgets();
        assert!(!unsafe_allowed(&crd));
        crd["metadata"]["annotations"] = json!({ CRD_UPGRADE_ANNOTATION: UNSAFE_ALLOWED });
        assert!(unsafe_allowed(&crd));
    }

    #[test]
    fn input_of_any_shape_is_no_panic() {
        for (a, b) in [
            (json!(null), json!(null)),
            (json!({ "spec": { "versions": "x" } }), json!([])),
            (
                json!({ "spec": { "versions": [{ "name": "v1", "served": true,
                    "schema": { "openAPIV3Schema": { "properties": 3, "enum": 1 } } }] } }),
                json!({ "spec": { "versions": [{ "name": "v1", "served": true,
                    "schema": { "openAPIV3Schema": { "properties": [], "maximum": "x" } } }] } }),
            ),
        ] {
            compare(&a, &b);
        }
    }

    #[test]
    fn a_tightened_limit_refuses_only_the_values_beyond_it() {
        let live = widgets();
        let mut new = widgets();
        {
            let spec = v1_spec(&mut new);
            spec["properties"]["size"]["maximum"] = json!(5);
            spec["properties"]["name"]["minLength"] = json!(1);
            spec["properties"]["tags"]["items"]["properties"]["key"]["enum"] = json!(["a", "b"]);
            spec["properties"]["labels"]["additionalProperties"]["maxLength"] = json!(3);
            spec["properties"]["mode"]["enum"] = json!(["fast"]);
        }
        let findings = compare(&live, &new);
        assert_eq!(findings.len(), 5, "{findings:?}");
        assert!(
            findings.iter().all(Finding::concerns_values),
            "{findings:?}"
        );
        let refused_by = |object: Value| -> Vec<String> {
            let refused = findings
                .iter()
                .filter(|f| f.refuses(&object))
                .map(|f| f.path.trim_start_matches(SPEC).to_string())
                .collect::<Vec<String>>();
            // Findings come in the order of the schema's keys, which depends on serde_json's
            // `preserve_order` (another crate of the workspace turns it on): compared sorted.
            let mut refused = refused;
            refused.sort();
            refused
        };
        // Values within every new limit, or absent: nothing stored is refused.
        assert!(
            refused_by(
                json!({ "spec": { "size": 5, "name": "n", "tags": [{ "key": "a" }],
            "labels": { "x": "abc" }, "mode": "fast" } })
            )
            .is_empty()
        );
        assert!(refused_by(json!({ "metadata": { "name": "bare" } })).is_empty());
        assert_eq!(
            refused_by(
                json!({ "spec": { "size": 6, "name": "", "tags": [{ "key": "a" }, { "key": "c" }],
                "labels": { "x": "abcd" }, "mode": "slow" } })
            ),
            [
                ".properties.labels.additionalProperties",
                ".properties.mode",
                ".properties.name",
                ".properties.size",
                ".properties.tags.items.properties.key",
            ]
        );
        // A value of another type is the type check's business.
        assert!(refused_by(json!({ "spec": { "size": "6" } })).is_empty());
    }

    #[test]
    fn shape_changes_do_not_depend_on_values() {
        let (_, change) = one_finding(|crd| {
            v1_spec(crd)["properties"]
                .as_object_mut()
                .unwrap()
                .remove("name");
        });
        let finding = Finding {
            crd: "widgets.example.com".into(),
            version: Some("v1".into()),
            path: String::new(),
            at: vec![Step::Property("spec".into()), Step::Property("name".into())],
            change,
        };
        assert!(!finding.concerns_values());
        assert!(!finding.refuses(&json!({ "spec": { "name": "x" } })));
    }

    /// prometheus-operator v0.84.0 to v0.85.0 and back, when `GANTRY_PROMETHEUS_OPERATOR_DIR`
    /// names their CRDs: the upgrade only adds limits no value an object of the releases' own
    /// examples holds breaks (`minimum: 0` on `minReadySeconds`, a port range), while going
    /// back removes properties v0.85.0 added.
    #[test]
    fn prometheus_operator_upgrade_and_rollback() {
        let Ok(dir) = std::env::var("GANTRY_PROMETHEUS_OPERATOR_DIR") else {
            return;
        };
        let dir = std::path::Path::new(&dir);
        let (old, new) = (
            real_crds(&dir.join("previous/crds")),
            real_crds(&dir.join("crds")),
        );
        assert_eq!(old.len(), new.len());
        let pairs = || {
            old.iter().map(|o| {
                let name = &o["metadata"]["name"];
                let n = new
                    .iter()
                    .find(|n| n["metadata"]["name"] == *name)
                    .expect("in both");
                (o, n)
            })
        };
        let up: Vec<Finding> = pairs().flat_map(|(o, n)| compare(o, n)).collect();
        assert!(!up.is_empty(), "v0.85.0 tightens limits");
        assert!(up.iter().all(Finding::concerns_values), "{up:?}");
        let prometheus = json!({ "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
            "spec": { "replicas": 1, "minReadySeconds": 10 } });
        assert!(!up.iter().any(|f| f.refuses(&prometheus)));
        let negative = json!({ "spec": { "minReadySeconds": -1 } });
        assert!(
            up.iter()
                .any(|f| f.crd == "prometheuses.monitoring.coreos.com" && f.refuses(&negative))
        );

        let down: Vec<Finding> = pairs().flat_map(|(o, n)| compare(n, o)).collect();
        assert!(
            down.iter()
                .any(|f| f.crd == "prometheuses.monitoring.coreos.com"
                    && f.change == Change::PropertyRemoved
                    && f.path.ends_with(".properties.spec.properties.hostUsers")),
            "{down:?}"
        );
    }

    /// The CRDs of the manifests in `dir`, each with its storage version stored.
    fn real_crds(dir: &std::path::Path) -> Vec<Value> {
        let limits = gantry_image::EffectiveLimits::default();
        let mut crds = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read(&path).unwrap();
            for object in gantry_image::parse_file("crd.yaml", &text, &limits).unwrap() {
                let mut crd = object.value().unwrap();
                if crd["kind"] == "CustomResourceDefinition" {
                    let versions = versions(&crd)
                        .iter()
                        .filter(|(_, v)| v["storage"] == true)
                        .map(|(n, _)| json!(n))
                        .collect::<Vec<_>>();
                    crd["status"] = json!({ "storedVersions": versions });
                    crds.push(crd);
                }
            }
        }
        crds
    }

    /// The CRDs of prometheus-operator v0.85.0 (`tools/prometheus-operator/build.sh`), when
    /// `GANTRY_PROMETHEUS_OPERATOR_DIR` names them: each compared with itself is safe, and
    /// unsafe edits of one are each found where they are.
    #[test]
    fn real_crds_compared_with_themselves_and_edited() {
        let Ok(dir) = std::env::var("GANTRY_PROMETHEUS_OPERATOR_DIR") else {
            return;
        };
        let crds = real_crds(&std::path::Path::new(&dir).join("crds"));
        assert!(crds.len() >= 10, "{} CRDs in {dir}", crds.len());
        for crd in &crds {
            assert_eq!(compare(crd, crd), vec![], "{}", crd["metadata"]["name"]);
        }

        let live = crds
            .iter()
            .find(|c| c["metadata"]["name"] == "alertmanagers.monitoring.coreos.com")
            .expect("the Alertmanager CRD")
            .clone();
        let spec = "spec.versions[v1].schema.openAPIV3Schema.properties.spec";
        let at = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";
        type Edit = Box<dyn Fn(&mut Value)>;
        let edits: [(&str, Edit, &str); 5] = [
            (
                "remove a property",
                Box::new(|s| {
                    s["properties"]
                        .as_object_mut()
                        .map(|p| p.remove("replicas"));
                }),
                "properties.replicas",
            ),
            (
                "add a required field",
                Box::new(|s| s["required"] = json!(["image"])),
                "properties.image",
            ),
            (
                "remove an enum value",
                Box::new(|s| {
                    if let Some(values) = s["properties"]["logLevel"]["enum"].as_array_mut() {
                        values.retain(|v| v != "debug");
                    }
                }),
                "properties.logLevel",
            ),
            (
                "change a type",
                Box::new(|s| s["properties"]["replicas"]["type"] = json!("string")),
                "properties.replicas",
            ),
            (
                "lower a maximum",
                Box::new(|s| s["properties"]["replicas"]["maximum"] = json!(3)),
                "properties.replicas",
            ),
        ];
        for (what, edit, path) in edits {
            let mut new = live.clone();
            edit(new.pointer_mut(at).expect("the spec schema"));
            let findings = compare(&live, &new);
            assert_eq!(findings.len(), 1, "{what}: {findings:?}");
            assert_eq!(findings[0].path, format!("{spec}.{path}"), "{what}");
            assert_eq!(findings[0].version.as_deref(), Some("v1"), "{what}");
        }
    }
}
