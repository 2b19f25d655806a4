//! Which objects of a bundle a setting applies to: the target of `Bundle.spec.patches` (and of
//! settings to come that address objects the same way). The shape of Flux's and Kustomize's
//! patch `target`, with exact names.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Selects objects by API group, version, kind, name, namespace, labels and annotations. Every
/// field set must match; a field left out (or empty) matches every object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSelector {
    /// API group (`apps`, `rbac.authorization.k8s.io`); as in Kustomize, empty matches every
    /// group, the core group included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub group: Option<String>,
    /// API version (`v1`, `v1beta1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub version: Option<String>,
    /// Kind (`Deployment`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub kind: Option<String>,
    /// The object's name, exactly (not a regular expression, unlike Kustomize's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), regex(pattern = r"^[^/%*?+|()\[\]{}^$\\\s]*$"))]
    pub name: Option<String>,
    /// The object's namespace, exactly, as it is applied: `spec.installNamespace` for
    /// namespaced objects the manifests give none. Cluster-scoped objects have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
    )]
    pub namespace: Option<String>,
    /// A label selector in Kubernetes' syntax: `app=web`, `tier!=db`, `env in (a,b)`,
    /// `env notin (c)`, `key`, `!key`, joined by commas (all must hold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub label_selector: Option<String>,
    /// An annotation selector, in the syntax of `labelSelector`, over the object's annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub annotation_selector: Option<String>,
}

impl ObjectSelector {
    /// Checks the label and annotation selectors' syntax; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        for (field, selector) in [
            ("labelSelector", &self.label_selector),
            ("annotationSelector", &self.annotation_selector),
        ] {
            if let Some(selector) = selector {
                Requirements::parse(selector).map_err(|e| format!("{field} {selector:?}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Whether `object` (a whole Kubernetes object: `apiVersion`, `kind`, `metadata`) is
    /// selected. A selector whose label or annotation selector does not parse selects nothing
    /// ([`ObjectSelector::validate`] says why).
    pub fn matches(&self, object: &Value) -> bool {
        let api_version = str_at(object, "/apiVersion");
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", api_version),
        };
        let equal = |wanted: &Option<String>, actual: &str| {
            wanted
                .as_deref()
                .is_none_or(|w| w.is_empty() || w == actual)
        };
        equal(&self.group, group)
            && equal(&self.version, version)
            && equal(&self.kind, str_at(object, "/kind"))
            && equal(&self.name, str_at(object, "/metadata/name"))
            && equal(&self.namespace, str_at(object, "/metadata/namespace"))
            && selects(&self.label_selector, object.pointer("/metadata/labels"))
            && selects(
                &self.annotation_selector,
                object.pointer("/metadata/annotations"),
            )
    }
}

impl std::fmt::Display for ObjectSelector {
    /// `group=apps kind=Deployment name=web`: the fields set, or `every object`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields = [
            ("group", &self.group),
            ("version", &self.version),
            ("kind", &self.kind),
            ("name", &self.name),
            ("namespace", &self.namespace),
            ("labelSelector", &self.label_selector),
            ("annotationSelector", &self.annotation_selector),
        ];
        let set: Vec<String> = fields
            .iter()
            .filter_map(|(field, value)| {
                value
                    .as_deref()
                    .filter(|v| !v.is_empty())
                    .map(|v| format!("{field}={v}"))
            })
            .collect();
        if set.is_empty() {
            f.write_str("every object")
        } else {
            f.write_str(&set.join(" "))
        }
    }
}

fn str_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Whether the selector (absent: every object) holds for the map of labels or annotations.
fn selects(selector: &Option<String>, map: Option<&Value>) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let Ok(requirements) = Requirements::parse(selector) else {
        return false;
    };
    let get = |key: &str| map.and_then(|m| m.get(key)).and_then(Value::as_str);
    requirements.0.iter().all(|r| r.holds(get(r.key())))
}

/// A parsed label selector: every requirement must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirements(Vec<Requirement>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    /// `key=value`, `key==value`, `key in (a,b)`.
    In(String, Vec<String>),
    /// `key!=value`, `key notin (a,b)`: also holds where the key is absent, as in Kubernetes.
    NotIn(String, Vec<String>),
}

impl Requirement {
    fn key(&self) -> &str {
        match self {
            Requirement::Exists(k)
            | Requirement::NotExists(k)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _) => k,
        }
    }

    fn holds(&self, value: Option<&str>) -> bool {
        match self {
            Requirement::Exists(_) => value.is_some(),
            Requirement::NotExists(_) => value.is_none(),
            Requirement::In(_, values) => value.is_some_and(|v| values.iter().any(|w| w == v)),
            Requirement::NotIn(_, values) => value.is_none_or(|v| values.iter().all(|w| w != v)),
        }
    }
}

impl Requirements {
    /// Parses Kubernetes' selector syntax (the subset without `>` and `<`).
    fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in split_terms(text)? {
            let term = term.trim();
            if term.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err("an empty requirement between commas".into());
            }
            requirements.push(parse_term(term)?);
        }
        Ok(Requirements(requirements))
    }
}

/// The text split at the commas outside parentheses.
fn split_terms(text: &str) -> Result<Vec<&str>, String> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("nested parentheses".into()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("a `)` without its `(`".into()),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a `(` without its `)`".into());
    }
    terms.push(&text[start..]);
    Ok(terms)
}

fn parse_term(term: &str) -> Result<Requirement, String> {
    if term.contains(['<', '>']) {
        return Err(format!(
            "{term:?}: the operators `<` and `>` are not supported"
        ));
    }
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::NotExists(key_of(key.trim())?));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(Requirement::NotIn(
            key_of(key.trim())?,
            vec![value_of(value.trim())?],
        ));
    }
    if let Some((key, value)) = term.split_once('=') {
        let value = value.strip_prefix('=').unwrap_or(value);
        return Ok(Requirement::In(
            key_of(key.trim())?,
            vec![value_of(value.trim())?],
        ));
    }
    let mut words = term.splitn(2, char::is_whitespace);
    let key = key_of(words.next().unwrap_or_default())?;
    let Some(rest) = words.next().map(str::trim) else {
        return Ok(Requirement::Exists(key));
    };
    let (operator, set) = rest
        .split_once(|c: char| c.is_whitespace() || c == '(')
        .map(|(op, _)| (op, rest[op.len()..].trim()))
        .ok_or_else(|| format!("{term:?}: expected `in (...)` or `notin (...)` after {key}"))?;
    let values = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("{term:?}: the values of `{operator}` go in parentheses"))?
        .split(',')
        .map(|v| value_of(v.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    match operator {
        "in" => Ok(Requirement::In(key, values)),
        "notin" => Ok(Requirement::NotIn(key, values)),
        other => Err(format!(
            "{term:?}: unknown operator {other:?} (=, ==, !=, in, notin, or a key alone)"
        )),
    }
}

/// A label key: `[prefix/]name`, letters, digits, `-`, `_`, `.`.
fn key_of(key: &str) -> Result<String, String> {
    let valid = !key.is_empty()
        && key.len() <= 317
        && key.split('/').count() <= 2
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && !key.starts_with('/')
        && !key.ends_with('/');
    if valid {
        Ok(key.to_string())
    } else {
        Err(format!("{key:?} is not a valid key"))
    }
}

/// A label value: letters, digits, `-`, `_`, `.`, or empty.
fn value_of(value: &str) -> Result<String, String> {
    if value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Ok(value.to_string())
    } else {
        Err(format!("{value:?} is not a valid value"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "shop",
                "labels": { "app": "web", "tier": "front", "app.kubernetes.io/part-of": "shop" },
                "annotations": { "team": "blue" },
            },
        })
    }

    fn config_map() -> Value {
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "web", "namespace": "shop" } })
    }

    fn cluster_role() -> Value {
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": { "name": "system:web" } })
    }

    fn select(f: impl FnOnce(&mut ObjectSelector)) -> ObjectSelector {
        let mut s = ObjectSelector::default();
        f(&mut s);
        s
    }

    #[test]
    fn an_empty_selector_selects_every_object() {
        let all = ObjectSelector::default();
        for object in [deployment(), config_map(), cluster_role()] {
            assert!(all.matches(&object));
        }
        assert_eq!(all.to_string(), "every object");
        let blank = select(|s| s.group = Some(String::new()));
        assert!(
            blank.matches(&config_map()),
            "empty means any, as in Kustomize"
        );
    }

    #[test]
    fn group_version_kind_name_and_namespace_must_all_match() {
        let web = select(|s| {
            s.group = Some("apps".into());
            s.kind = Some("Deployment".into());
            s.name = Some("web".into());
        });
        assert!(web.matches(&deployment()));
        assert!(!web.matches(&config_map()), "another group and kind");
        assert_eq!(web.to_string(), "group=apps kind=Deployment name=web");

        let core = select(|s| {
            s.version = Some("v1".into());
            s.kind = Some("ConfigMap".into());
        });
        assert!(core.matches(&config_map()));
        assert!(!core.matches(&deployment()));

        let named = select(|s| s.name = Some("we".into()));
        assert!(
            !named.matches(&deployment()),
            "exact, not a prefix or pattern"
        );

        let in_shop = select(|s| s.namespace = Some("shop".into()));
        assert!(in_shop.matches(&deployment()));
        assert!(
            !in_shop.matches(&cluster_role()),
            "cluster-scoped: no namespace"
        );
        let elsewhere = select(|s| s.namespace = Some("other".into()));
        assert!(!elsewhere.matches(&deployment()));

        let role = select(|s| s.name = Some("system:web".into()));
        assert!(role.matches(&cluster_role()));
    }

    #[test]
    fn label_and_annotation_selectors_use_kubernetes_syntax() {
        let labels = |selector: &str| {
            let s = select(|s| s.label_selector = Some(selector.into()));
            s.validate().unwrap();
            s.matches(&deployment())
        };
        assert!(labels("app=web"));
        assert!(labels("app==web,tier=front"));
        assert!(!labels("app=web,tier=back"));
        assert!(labels("tier!=back"));
        assert!(labels("missing!=x"), "!= holds where the key is absent");
        assert!(labels("app in (api, web)"));
        assert!(!labels("app notin (api,web)"));
        assert!(labels("app.kubernetes.io/part-of"));
        assert!(labels("!missing"));
        assert!(!labels("!app"));
        assert!(!labels("missing"));
        assert!(labels(""), "an empty selector selects everything");

        let annotations = select(|s| s.annotation_selector = Some("team=blue".into()));
        assert!(annotations.matches(&deployment()));
        assert!(!annotations.matches(&config_map()), "no annotations at all");
    }

    #[test]
    fn a_bad_selector_is_named_and_selects_nothing() {
        for (selector, says) in [
            ("app in web", "parentheses"),
            ("app in (web", "without its `)`"),
            ("replicas>1", "not supported"),
            ("app=web,,tier=front", "empty requirement"),
            ("app has (web)", "unknown operator"),
            ("a b=c", "not a valid key"),
        ] {
            let s = select(|s| s.label_selector = Some(selector.into()));
            let error = s.validate().unwrap_err();
            assert!(
                error.starts_with("labelSelector") && error.contains(says),
                "{selector}: {error}"
            );
            assert!(!s.matches(&deployment()), "{selector}");
        }
    }
}
