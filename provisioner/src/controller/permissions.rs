//! What a bundle will create, summarised for approvers.

use std::collections::BTreeMap;

use gantry_api::{KindCount, NamespacePermissions, PermissionHighlight, RequestedPermissions};
use serde_json::Value;

use super::plan::PlannedObject;

/// Counts kinds (cluster-scoped, and per namespace) and flags what deserves attention.
pub fn requested_permissions(objects: &[PlannedObject]) -> RequestedPermissions {
    let mut cluster: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut namespaced: BTreeMap<String, BTreeMap<(String, String), i64>> = BTreeMap::new();
    let mut highlights = Vec::new();
    for object in objects {
        let key = (object.gvk.group.clone(), object.gvk.kind.clone());
        match &object.namespace {
            Some(ns) => {
                *namespaced
                    .entry(ns.clone())
                    .or_default()
                    .entry(key)
                    .or_default() += 1
            }
            None => *cluster.entry(key).or_default() += 1,
        }
        if let Some(reason) = attention(object) {
            highlights.push(PermissionHighlight {
                group: object.gvk.group.clone(),
                kind: object.gvk.kind.clone(),
                namespace: object.namespace.clone(),
                name: object.name.clone(),
                reason,
            });
        }
    }
    let counts = |m: BTreeMap<(String, String), i64>| {
        m.into_iter()
            .map(|((group, kind), count)| KindCount { group, kind, count })
            .collect()
    };
    RequestedPermissions {
        cluster_scoped: counts(cluster),
        namespaced: namespaced
            .into_iter()
            .map(|(namespace, kinds)| NamespacePermissions {
                namespace,
                kinds: counts(kinds),
            })
            .collect(),
        highlights,
    }
}

fn attention(object: &PlannedObject) -> Option<String> {
    let group = object.gvk.group.as_str();
    let kind = object.gvk.kind.as_str();
    let mut reasons = Vec::new();
    match (group, kind) {
        ("rbac.authorization.k8s.io", "ClusterRole" | "Role") => {
            let wildcards = wildcard_rules(&object.object);
            if !wildcards.is_empty() {
                reasons.push(format!("grants {}", wildcards.join("; ")));
            }
        }
        ("rbac.authorization.k8s.io", "ClusterRoleBinding" | "RoleBinding") => {
            let role = object
                .object
                .pointer("/roleRef/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if role == "cluster-admin" {
                reasons.push("binds cluster-admin".to_string());
            }
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            reasons.push("defines a new API".to_string());
        }
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration"
            | "MutatingWebhookConfiguration"
            | "ValidatingAdmissionPolicy"
            | "ValidatingAdmissionPolicyBinding"
            | "MutatingAdmissionPolicy"
            | "MutatingAdmissionPolicyBinding",
        ) => reasons.push("intercepts API requests (admission)".to_string()),
        _ => {}
    }
    if object.namespace.as_deref() == Some("kube-system") {
        reasons.push("lives in kube-system".to_string());
    }
    (!reasons.is_empty()).then(|| reasons.join(", "))
}

/// Rules of a Role/ClusterRole that use `*` in verbs, resources or API groups.
fn wildcard_rules(role: &Value) -> Vec<String> {
    let Some(rules) = role.get("rules").and_then(Value::as_array) else {
        return Vec::new();
    };
    let list = |rule: &Value, field: &str| -> Vec<String> {
        rule.get(field)
            .and_then(Value::as_array)
            .map(|v| {
                v.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    rules
        .iter()
        .filter_map(|rule| {
            let verbs = list(rule, "verbs");
            let resources = list(rule, "resources");
            let groups = list(rule, "apiGroups");
            let star = |v: &[String]| v.iter().any(|s| s == "*");
            (star(&verbs) || star(&resources) || star(&groups)).then(|| {
                format!(
                    "verbs [{}] on resources [{}] in groups [{}]",
                    verbs.join(","),
                    resources.join(","),
                    groups.join(",")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{ApiResource, GroupVersionKind};
    use serde_json::json;

    fn object(
        group: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        body: Value,
    ) -> PlannedObject {
        let gvk = GroupVersionKind::gvk(group, "v1", kind);
        PlannedObject {
            file: "f.yaml".into(),
            document: 0,
            resource: ApiResource::from_gvk(&gvk),
            gvk,
            namespaced: namespace.is_some(),
            namespace: namespace.map(Into::into),
            name: name.into(),
            object: body,
            defines_crd: None,
            needs_crd: None,
        }
    }

    #[test]
    fn counts_by_scope_and_namespace_and_flags_risks() {
        let objects = vec![
            object("", "Namespace", None, "app", json!({})),
            object("", "ConfigMap", Some("app"), "a", json!({})),
            object("", "ConfigMap", Some("app"), "b", json!({})),
            object("", "Secret", Some("kube-system"), "s", json!({})),
            object(
                "rbac.authorization.k8s.io",
                "ClusterRole",
                None,
                "all",
                json!({ "rules": [{ "apiGroups": ["*"], "resources": ["*"], "verbs": ["*"] }] }),
            ),
            object(
                "rbac.authorization.k8s.io",
                "ClusterRole",
                None,
                "view",
                json!({ "rules": [{ "apiGroups": [""], "resources": ["pods"], "verbs": ["get"] }] }),
            ),
        ];
        let p = requested_permissions(&objects);
        assert_eq!(p.cluster_scoped.len(), 2);
        assert_eq!(p.namespaced.len(), 2);
        let app = p.namespaced.iter().find(|n| n.namespace == "app").unwrap();
        assert_eq!(
            app.kinds,
            vec![KindCount {
                group: "".into(),
                kind: "ConfigMap".into(),
                count: 2
            }]
        );
        let flagged: Vec<&str> = p.highlights.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(flagged, ["s", "all"]);
        assert!(p.highlights[1].reason.contains("verbs [*]"));
    }
}
