//! `Bundle.spec.ignore`: fields of the bundle's objects that Gantry neither sets nor repairs,
//! because another controller owns them (an HPA's `/spec/replicas`, a webhook's `caBundle`
//! injected by cert-manager's cainjector). As Argo CD's `ignoreDifferences` with
//! `RespectIgnoreDifferences`: the field is left out of the comparison, and an apply carries the
//! live value, so that neither drift repair nor new content resets it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::selector::ObjectSelector;

/// Fields (JSON pointers, RFC 6901) of the objects `target` selects (every object without one).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreRule {
    /// JSON pointers of the fields, e.g. `/spec/replicas` or
    /// `/webhooks/0/clientConfig/caBundle` (`~1` for a `/` in a key, `~0` for `~`).
    #[schemars(length(min = 1, max = 32))]
    pub paths: Vec<String>,

    /// The objects the rule is for; every object of the bundle when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<ObjectSelector>,
}

/// Checks every rule: pointers that start with `/`, escapes that are `~0` or `~1`, a valid
/// target. The error names the rule and the pointer (`spec.ignore[1].paths[0]`).
pub fn validate(rules: &[IgnoreRule]) -> Result<(), String> {
    for (i, rule) in rules.iter().enumerate() {
        if rule.paths.is_empty() {
            return Err(format!("spec.ignore[{i}].paths: at least one path"));
        }
        for (j, path) in rule.paths.iter().enumerate() {
            check_pointer(path)
                .map_err(|why| format!("spec.ignore[{i}].paths[{j}] {path:?}: {why}"))?;
        }
        if let Some(target) = &rule.target {
            target
                .validate()
                .map_err(|why| format!("spec.ignore[{i}].target: {why}"))?;
        }
    }
    Ok(())
}

fn check_pointer(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') || path == "/" {
        return Err("a JSON pointer starts with / and names a field");
    }
    if matches!(
        path,
        "/apiVersion" | "/kind" | "/metadata" | "/metadata/name" | "/metadata/namespace"
    ) {
        return Err("the object's identity cannot be ignored");
    }
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err("~ must be followed by 0 or 1");
        }
    }
    Ok(())
}

/// The pointers `rules` ignore in `object` (deduplicated, in rule order).
pub fn ignored_paths<'a>(rules: &'a [IgnoreRule], object: &Value) -> Vec<&'a str> {
    let mut paths: Vec<&str> = Vec::new();
    for rule in rules {
        if rule.target.as_ref().is_none_or(|t| t.matches(object)) {
            for path in &rule.paths {
                if !paths.contains(&path.as_str()) {
                    paths.push(path);
                }
            }
        }
    }
    paths
}

/// Removes the fields at `paths` from `object`; returns the pointers that were there, with the
/// values they had.
pub fn remove_fields(object: &mut Value, paths: &[&str]) -> Vec<(String, Value)> {
    let mut removed = Vec::new();
    for path in paths {
        let Some((parent, key)) = path.rsplit_once('/') else {
            continue;
        };
        let key = unescape(key);
        let parent = if parent.is_empty() {
            Some(&mut *object)
        } else {
            object.pointer_mut(parent)
        };
        // Only fields of maps: a whole element of a list cannot be left out of an apply
        // without shifting the elements after it (a pointer may go through a list, as
        // `/webhooks/0/clientConfig/caBundle` does).
        if let Some(Value::Object(map)) = parent
            && let Some(value) = map.remove(&key)
        {
            removed.push((path.to_string(), value));
        }
    }
    removed
}

/// Puts the `removed` fields back into `desired` (where their parent exists there) for an
/// apply: with the live object's value where `live` has one, so that the field keeps it, else
/// with the bundle's own (an object created, or a field nobody set yet, starts as the bundle
/// says).
pub fn restore_fields(desired: &mut Value, removed: &[(String, Value)], live: Option<&Value>) {
    for (path, own) in removed {
        let value = live.and_then(|l| l.pointer(path)).unwrap_or(own);
        let Some((parent, key)) = path.rsplit_once('/') else {
            continue;
        };
        let key = unescape(key);
        let parent = if parent.is_empty() {
            Some(&mut *desired)
        } else {
            desired.pointer_mut(parent)
        };
        if let Some(Value::Object(map)) = parent {
            map.insert(key, value.clone());
        }
    }
}

fn unescape(key: &str) -> String {
    key.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(paths: &[&str], kind: Option<&str>) -> IgnoreRule {
        IgnoreRule {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            target: kind.map(|k| ObjectSelector {
                kind: Some(k.into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn rules_select_their_objects_and_remove_then_restore_fields() {
        let rules = [
            rule(&["/spec/replicas"], Some("Deployment")),
            rule(
                &[
                    "/webhooks/0/clientConfig/caBundle",
                    "/metadata/annotations/a~1b",
                ],
                None,
            ),
        ];
        let mut deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "annotations": {"a/b": "x", "c": "y"}},
            "spec": {"replicas": 2, "selector": {}}});
        let paths = ignored_paths(&rules, &deployment);
        assert_eq!(
            paths,
            [
                "/spec/replicas",
                "/webhooks/0/clientConfig/caBundle",
                "/metadata/annotations/a~1b"
            ]
        );
        let removed = remove_fields(&mut deployment, &paths);
        let removed_paths: Vec<&str> = removed.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            removed_paths,
            ["/spec/replicas", "/metadata/annotations/a~1b"]
        );
        assert_eq!(deployment["spec"], json!({"selector": {}}));
        assert_eq!(deployment["metadata"]["annotations"], json!({"c": "y"}));

        // Not live yet: created as the bundle says.
        let mut created = deployment.clone();
        restore_fields(&mut created, &removed, None);
        assert_eq!(created["spec"]["replicas"], 2);
        assert_eq!(created["metadata"]["annotations"]["a/b"], "x");
        // Live: the live values, and the bundle's where the live object has none.
        let live = json!({"spec": {"replicas": 5}, "metadata": {"annotations": {}}});
        restore_fields(&mut deployment, &removed, Some(&live));
        assert_eq!(deployment["spec"]["replicas"], 5);
        assert_eq!(deployment["metadata"]["annotations"]["a/b"], "x");

        let config_map =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(ignored_paths(&rules[..1], &config_map), Vec::<&str>::new());
    }

    #[test]
    fn fields_inside_list_elements_go_and_elements_stay() {
        let mut object = json!({"spec": {"args": ["a", "b"]},
            "webhooks": [{"name": "w", "clientConfig": {"caBundle": "Q0E="}}]});
        assert!(remove_fields(&mut object, &["/spec/args/1"]).is_empty());
        assert_eq!(object["spec"]["args"], json!(["a", "b"]));
        assert_eq!(
            remove_fields(&mut object, &["/webhooks/0/clientConfig/caBundle"]),
            [(
                "/webhooks/0/clientConfig/caBundle".to_string(),
                json!("Q0E=")
            )]
        );
        assert_eq!(
            object["webhooks"],
            json!([{"name": "w", "clientConfig": {}}])
        );
    }

    #[test]
    fn invalid_rules_are_named() {
        assert!(validate(&[rule(&["/spec/replicas"], Some("Deployment"))]).is_ok());
        let error =
            validate(&[rule(&["/spec/replicas"], None), rule(&["spec/x"], None)]).unwrap_err();
        assert!(
            error.starts_with("spec.ignore[1].paths[0] \"spec/x\""),
            "{error}"
        );
        assert!(
            validate(&[rule(&["/a~2"], None)])
                .unwrap_err()
                .contains("~ must be")
        );
        assert!(
            validate(&[rule(&["/metadata/name"], None)])
                .unwrap_err()
                .contains("identity")
        );
        assert!(
            validate(&[rule(&[], None)])
                .unwrap_err()
                .contains("at least one")
        );
    }
}
