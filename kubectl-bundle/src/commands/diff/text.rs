//! The diff's text: volatile metadata dropped, Secrets masked, a unified diff of the YAML.

use std::collections::BTreeMap;

use serde_json::Value;

/// Drops what changes on every write and says nothing about the object.
pub(super) fn clean(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
            "selfLink",
        ] {
            metadata.remove(field);
        }
    }
    object
}

/// The annotation client-side `kubectl apply` leaves on an object: the whole object as last
/// applied, a Secret's values included.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Replaces Secret values (`data`, `stringData`, and the copy of them in the
/// last-applied-configuration annotation) with `***`, or `*** (before)` / `*** (after)` where
/// the value changes, as `kubectl diff` does.
pub(super) fn mask_secrets(before: Option<&mut Value>, after: &mut Value) {
    /// The maps holding secret values: `data`, `stringData`, and the annotations (of which
    /// only the last-applied one is masked).
    const FIELDS: [&str; 3] = ["/data", "/stringData", "/metadata/annotations"];
    let secret_value = |field: &str, key: &str| field != FIELDS[2] || key == LAST_APPLIED;
    let values = |object: &Value| -> BTreeMap<(&'static str, String), Value> {
        FIELDS
            .iter()
            .filter_map(|field| Some((*field, object.pointer(field)?.as_object()?)))
            .flat_map(|(field, map)| {
                map.iter()
                    .filter(move |(k, _)| secret_value(field, k))
                    .map(move |(k, v)| ((field, k.clone()), v.clone()))
            })
            .collect()
    };
    let old = before.as_deref().map(values).unwrap_or_default();
    let new = values(after);
    let mask = |object: &mut Value, other: &BTreeMap<(&'static str, String), Value>, side: &str| {
        for field in FIELDS {
            if let Some(map) = object.pointer_mut(field).and_then(Value::as_object_mut) {
                for (key, value) in map.iter_mut() {
                    if !secret_value(field, key) {
                        continue;
                    }
                    let masked = match other.get(&(field, key.clone())) {
                        Some(same) if same == value => "***".to_string(),
                        Some(_) => format!("*** ({side})"),
                        None => "***".to_string(),
                    };
                    *value = Value::String(masked);
                }
            }
        }
    };
    if let Some(before) = before {
        mask(before, &new, "before");
    }
    mask(after, &old, "after");
}

/// A unified diff of two objects rendered as YAML, with `--- TITLE (live)` and
/// `+++ TITLE (after apply)` headers (`(pruned)` when the object goes).
pub(super) fn unified(
    title: &str,
    before: Option<&Value>,
    after: Option<&Value>,
    note: &str,
) -> String {
    let render = |value: Option<&Value>| {
        value
            .map(|v| {
                serde_saphyr::to_string(v).unwrap_or_else(|e| format!("# not rendered: {e}\n"))
            })
            .unwrap_or_default()
    };
    let (old, new) = (render(before), render(after));
    let after_label = match after {
        Some(_) => "after apply",
        None => "pruned",
    };
    let mut text = similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{title} (live)"),
            &format!("{title} ({after_label})"),
        )
        .to_string();
    if !note.is_empty() && after.is_some() {
        text = format!("# {title}: {note}\n{text}");
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    #[test]
    fn secrets_are_masked_and_changes_marked() {
        let mut before = json!({ "kind": "Secret", "data": { "same": "YQ==", "changed": "Yg==", "gone": "Yw==" } });
        let mut after = json!({ "kind": "Secret", "data": { "same": "YQ==", "changed": "ZA==", "new": "ZQ==" } });
        mask_secrets(Some(&mut before), &mut after);
        assert_eq!(
            before["data"],
            json!({ "same": "***", "changed": "*** (before)", "gone": "***" })
        );
        assert_eq!(
            after["data"],
            json!({ "same": "***", "changed": "*** (after)", "new": "***" })
        );
    }

    #[test]
    fn a_secrets_last_applied_configuration_is_masked() {
        // A Secret created by client-side `kubectl apply` carries its values in an annotation.
        let secret = |value: &str| {
            json!({ "kind": "Secret",
                "metadata": { "name": "s", "annotations": {
                    LAST_APPLIED: format!("{{\"data\":{{\"password\":\"{value}\"}}}}"),
                    "team": "web" } },
                "data": { "password": value } })
        };
        let mut live = secret("b2xk");
        let mut after = secret("bmV3");
        mask_secrets(Some(&mut live), &mut after);
        assert_eq!(
            live["metadata"]["annotations"][LAST_APPLIED],
            "*** (before)"
        );
        assert_eq!(
            after["metadata"]["annotations"][LAST_APPLIED],
            "*** (after)"
        );
        assert_eq!(after["metadata"]["annotations"]["team"], "web");
        assert_eq!(after["data"]["password"], "*** (after)");
        // Pruned: only the live side.
        let mut live = secret("b2xk");
        mask_secrets(Some(&mut live), &mut Value::Null);
        let text = serde_json::to_string(&live).unwrap();
        assert!(!text.contains("b2xk"), "{text}");
        assert_eq!(live["data"]["password"], "***");
    }

    #[test]
    fn the_diff_has_headers_and_changed_lines() {
        let before = json!({ "kind": "ConfigMap", "data": { "a": "1", "b": "2" } });
        let after = json!({ "kind": "ConfigMap", "data": { "a": "1", "b": "3" } });
        let text = unified("ConfigMap ns/c", Some(&before), Some(&after), "");
        assert!(text.contains("--- ConfigMap ns/c (live)"), "{text}");
        assert!(text.contains("+++ ConfigMap ns/c (after apply)"), "{text}");
        assert!(
            text.contains("-  b: '2'") || text.contains("-  b: \"2\""),
            "{text}"
        );
        let pruned = unified("ConfigMap ns/c", Some(&before), None, "pruned");
        assert!(pruned.contains("+++ ConfigMap ns/c (pruned)"), "{pruned}");
        assert!(pruned.contains("-kind: ConfigMap"), "{pruned}");
    }

    #[test]
    fn volatile_metadata_is_no_change() {
        let a = json!({ "metadata": { "name": "x", "resourceVersion": "1", "managedFields": [] } });
        let b = json!({ "metadata": { "name": "x", "resourceVersion": "2", "generation": 3 } });
        assert_eq!(clean(a), clean(b));
    }
}
