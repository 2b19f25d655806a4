//! Per-object apply policies: the annotations `gantry.dev/ssa` and `gantry.dev/force` on an
//! object of a bundle, read from the object alone.

use gantry_api::{
    FORCE_ANNOTATION, FORCE_DISABLED, FORCE_ENABLED, SSA_ANNOTATION, SSA_IF_NOT_PRESENT,
    SSA_IGNORE, SSA_MERGE,
};
use serde::Deserialize;
use serde_json::{Map, Value};

/// How an object is applied (`gantry.dev/ssa`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ssa {
    /// No annotation: server-side apply with force; Gantry takes every field the object sets.
    #[default]
    Apply,
    /// Server-side apply without force: fields other field managers own stay theirs.
    Merge,
    /// Created when absent, never updated or repaired while it exists.
    IfNotPresent,
    /// Never applied, repaired, health-checked or deleted.
    Ignore,
}

/// The policy of one object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectPolicy {
    pub ssa: Ssa,
    /// `gantry.dev/force: enabled`: an object whose change the API server refuses as a change
    /// of an immutable field is deleted and created again.
    pub force: bool,
}

/// An annotation with a value Gantry does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation} has the value {value}; allowed values are {}", .allowed.join(", "))]
pub struct InvalidPolicy {
    pub annotation: &'static str,
    /// The value as JSON (quoted), so that an empty or odd value reads unambiguously.
    pub value: String,
    pub allowed: &'static [&'static str],
}

const SSA_VALUES: &[&str] = &[SSA_MERGE, SSA_IF_NOT_PRESENT, SSA_IGNORE];
const FORCE_VALUES: &[&str] = &[FORCE_ENABLED, FORCE_DISABLED];

/// The annotations of an object; the rest of it is skipped while parsing, not built.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    metadata: Option<HeadMetadata>,
}

#[derive(Deserialize)]
struct HeadMetadata {
    #[serde(default)]
    annotations: Option<Map<String, Value>>,
}

impl ObjectPolicy {
    /// The policy of the object in JSON text `object`. Text that does not parse, or whose
    /// annotations are not a map, has no policy: the API server refuses such an object anyway.
    pub fn of(object: &str) -> Result<Self, InvalidPolicy> {
        // Most objects carry neither annotation: not parsed.
        if !object.contains(SSA_ANNOTATION) && !object.contains(FORCE_ANNOTATION) {
            return Ok(Self::default());
        }
        let annotations = serde_json::from_str::<Head>(object)
            .ok()
            .and_then(|head| head.metadata?.annotations)
            .unwrap_or_default();
        Self::from_annotations(&annotations)
    }

    /// The policy the annotations say. Values are matched exactly (as the API server matches
    /// enum values): `merge` is refused with the allowed spellings, not guessed.
    pub fn from_annotations(annotations: &Map<String, Value>) -> Result<Self, InvalidPolicy> {
        let ssa = match annotations.get(SSA_ANNOTATION) {
            None => Ssa::Apply,
            Some(value) => match value.as_str() {
                Some(SSA_MERGE) => Ssa::Merge,
                Some(SSA_IF_NOT_PRESENT) => Ssa::IfNotPresent,
                Some(SSA_IGNORE) => Ssa::Ignore,
                _ => return Err(invalid(SSA_ANNOTATION, value, SSA_VALUES)),
            },
        };
        let force = match annotations.get(FORCE_ANNOTATION) {
            None => false,
            Some(value) => match value.as_str() {
                Some(FORCE_ENABLED) => true,
                Some(FORCE_DISABLED) => false,
                _ => return Err(invalid(FORCE_ANNOTATION, value, FORCE_VALUES)),
            },
        };
        Ok(Self { ssa, force })
    }
}

fn invalid(
    annotation: &'static str,
    value: &Value,
    allowed: &'static [&'static str],
) -> InvalidPolicy {
    InvalidPolicy {
        annotation,
        value: value.to_string(),
        allowed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(annotations: Value) -> Result<ObjectPolicy, InvalidPolicy> {
        let object = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "c", "annotations": annotations },
            "data": { "k": "v" }
        });
        ObjectPolicy::of(&object.to_string())
    }

    #[test]
    fn no_annotation_is_the_default_apply() {
        assert_eq!(policy(json!({})), Ok(ObjectPolicy::default()));
        assert_eq!(policy(json!({ "other": "x" })), Ok(ObjectPolicy::default()));
        let bare = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" } });
        assert_eq!(
            ObjectPolicy::of(&bare.to_string()),
            Ok(ObjectPolicy::default())
        );
        assert_eq!(ObjectPolicy::default().ssa, Ssa::Apply);
        assert!(!ObjectPolicy::default().force);
    }

    #[test]
    fn each_value_reads_as_its_policy() {
        for (value, ssa) in [
            ("Merge", Ssa::Merge),
            ("IfNotPresent", Ssa::IfNotPresent),
            ("Ignore", Ssa::Ignore),
        ] {
            assert_eq!(
                policy(json!({ "gantry.dev/ssa": value })),
                Ok(ObjectPolicy { ssa, force: false })
            );
        }
        assert_eq!(
            policy(json!({ "gantry.dev/force": "enabled", "gantry.dev/ssa": "Merge" })),
            Ok(ObjectPolicy {
                ssa: Ssa::Merge,
                force: true
            })
        );
        assert_eq!(
            policy(json!({ "gantry.dev/force": "disabled" })),
            Ok(ObjectPolicy::default())
        );
    }

    #[test]
    fn an_unknown_value_names_the_annotation_the_value_and_the_allowed_ones() {
        let error = policy(json!({ "gantry.dev/ssa": "merge" })).unwrap_err();
        assert_eq!(
            error.to_string(),
            "annotation gantry.dev/ssa has the value \"merge\"; allowed values are Merge, IfNotPresent, Ignore"
        );
        let error = policy(json!({ "gantry.dev/force": "true" })).unwrap_err();
        assert_eq!(
            error.to_string(),
            "annotation gantry.dev/force has the value \"true\"; allowed values are enabled, disabled"
        );
        // Not a string at all (a YAML `true` unquoted): refused too, shown as it was written.
        let error = policy(json!({ "gantry.dev/force": true })).unwrap_err();
        assert_eq!(error.value, "true");
        assert_eq!(
            policy(json!({ "gantry.dev/ssa": "" })).unwrap_err().value,
            "\"\""
        );
    }
}
