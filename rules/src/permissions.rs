//! What a bundle will create, summarised for approvers.

use std::collections::BTreeMap;

use gantry_api::{KindCount, NamespacePermissions, PermissionHighlight, RequestedPermissions};
use serde_json::Value;

use crate::plan::PlannedObject;

/// Where a bundle is meant to live, for the highlights that depend on it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scope<'a> {
    /// The bundle's `spec.installNamespace`.
    pub install_namespace: Option<&'a str>,
    /// The provisioner's own namespace (its Secrets, its Lease, its storage).
    pub provisioner_namespace: &'a str,
}

/// Roles that grant (nearly) everything in their scope: binding them is handing that out.
const BROAD_ROLES: &[&str] = &["cluster-admin", "admin", "edit"];

/// Groups that mean "everyone" (or every workload) to RBAC.
const EVERYONE: &[&str] = &[
    "system:authenticated",
    "system:unauthenticated",
    "system:serviceaccounts",
];

/// Counts kinds (cluster-scoped, and per namespace) and flags what deserves attention.
pub fn requested_permissions(objects: &[PlannedObject], scope: &Scope<'_>) -> RequestedPermissions {
    let mut cluster: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut namespaced: BTreeMap<String, BTreeMap<(String, String), i64>> = BTreeMap::new();
    let mut highlights = Vec::new();
    // Roles of the bundle that grant wildcards, or the verbs that get around RBAC: binding one
    // is as broad as binding cluster-admin.
    let broad_roles: BTreeMap<RoleKey, &'static str> = objects
        .iter()
        .filter(|o| is_rbac(o, &["ClusterRole", "Role"]))
        .filter_map(|o| {
            let body = o.value();
            let grants = if !wildcard_rules(&body).is_empty() {
                "wildcards"
            } else if !powerful_verbs(&body).is_empty() {
                "escalate, bind or impersonate"
            } else {
                return None;
            };
            Some((
                (o.gvk.kind.clone(), o.namespace.clone(), o.name.clone()),
                grants,
            ))
        })
        .collect();
    // ClusterRoles of the bundle that read Secrets: a ClusterRoleBinding to one reads every
    // Secret of the cluster, the provisioner's and kube-system's among them.
    let secret_readers: Vec<&str> = objects
        .iter()
        .filter(|o| is_rbac(o, &["ClusterRole"]) && !secret_read_verbs(&o.value()).is_empty())
        .map(|o| o.name.as_str())
        .collect();
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
        if let Some(reason) = attention(object, scope, &broad_roles, &secret_readers) {
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
        service_account: None,
    }
}

/// A role: its kind, namespace (for a Role) and name.
type RoleKey = (String, Option<String>, String);

fn is_rbac(object: &PlannedObject, kinds: &[&str]) -> bool {
    object.gvk.group == "rbac.authorization.k8s.io" && kinds.contains(&object.gvk.kind.as_str())
}

/// Why `object` deserves an approver's attention, every reason joined; `None` when nothing.
fn attention(
    object: &PlannedObject,
    scope: &Scope<'_>,
    broad_roles: &BTreeMap<RoleKey, &'static str>,
    secret_readers: &[&str],
) -> Option<String> {
    let group = object.gvk.group.as_str();
    let kind = object.gvk.kind.as_str();
    // Only the objects whose fields are looked at are parsed: the bundle's CRDs, often its
    // largest objects, are not.
    let reads_body = matches!(
        group,
        "rbac.authorization.k8s.io" | "admissionregistration.k8s.io"
    ) || pod_spec_pointer(group, kind).is_some();
    let body = &if reads_body {
        object.value()
    } else {
        Value::Null
    };
    let mut reasons = Vec::new();
    match (group, kind) {
        ("rbac.authorization.k8s.io", "ClusterRole" | "Role") => {
            let wildcards = wildcard_rules(body);
            if !wildcards.is_empty() {
                reasons.push(format!("grants {}", wildcards.join("; ")));
            }
            let powers = powerful_verbs(body);
            if !powers.is_empty() {
                reasons.push(format!("grants {}", powers.join("; ")));
            }
            let reads = secret_read_verbs(body);
            if kind == "ClusterRole" && !reads.is_empty() {
                reasons.push(format!(
                    "reads Secrets cluster-wide where a ClusterRoleBinding binds it ({} on secrets)",
                    reads.join(",")
                ));
            }
            const AGGREGATE: &str = "rbac.authorization.k8s.io/aggregate-to-";
            let aggregated: Vec<&str> = labels(body)
                .filter(|(key, value)| key.starts_with(AGGREGATE) && *value == "true")
                .map(|(key, _)| &key[AGGREGATE.len()..])
                .collect();
            if !aggregated.is_empty() {
                reasons.push(format!(
                    "adds its rules to the aggregated role(s) {}",
                    aggregated.join(", ")
                ));
            }
        }
        ("rbac.authorization.k8s.io", "ClusterRoleBinding" | "RoleBinding") => {
            let role_kind = str_at(body, "/roleRef/kind");
            let role = str_at(body, "/roleRef/name");
            let role_namespace = (role_kind == "Role")
                .then(|| object.namespace.clone())
                .flatten();
            if BROAD_ROLES.contains(&role) && role_kind == "ClusterRole" {
                reasons.push(format!("binds {role}"));
            } else if let Some(grants) =
                broad_roles.get(&(role_kind.to_string(), role_namespace, role.to_string()))
            {
                reasons.push(format!("binds {role_kind} {role}, which grants {grants}"));
            } else if kind == "ClusterRoleBinding"
                && role_kind == "ClusterRole"
                && secret_readers.contains(&role)
            {
                reasons.push(format!(
                    "binds ClusterRole {role}, which reads Secrets, cluster-wide"
                ));
            }
            let everyone: Vec<&str> = body
                .get("subjects")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|s| str_at(s, "/kind") == "Group")
                .map(|s| str_at(s, "/name"))
                .filter(|name| EVERYONE.contains(name))
                .collect();
            if !everyone.is_empty() {
                reasons.push(format!("binds to group(s) {}", everyone.join(", ")));
            }
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            reasons.push("defines a new API".to_string());
        }
        ("apiregistration.k8s.io", "APIService") => {
            reasons.push("routes an API group to a Service (aggregated API)".to_string());
        }
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        ) => reasons.push(format!(
            "intercepts API requests (admission webhook{})",
            webhook_targets(body)
        )),
        (
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicy"
            | "ValidatingAdmissionPolicyBinding"
            | "MutatingAdmissionPolicy"
            | "MutatingAdmissionPolicyBinding",
        ) => reasons.push("intercepts API requests (admission policy)".to_string()),
        _ => {}
    }
    if let Some(spec) = pod_spec_pointer(group, kind).and_then(|p| body.pointer(p)) {
        reasons.extend(pod_risks(spec));
    }
    if (group, kind) == ("", "Namespace") {
        // Applying a Namespace takes it over: its labels (Pod Security admission among them),
        // and its deletion, with everything in it, when the bundle goes.
        if object.name == "kube-system" {
            reasons.push("is the kube-system namespace".to_string());
        } else if object.name == scope.provisioner_namespace {
            reasons.push(format!("is the provisioner's namespace {}", object.name));
        }
    }
    if let Some(namespace) = object.namespace.as_deref() {
        if namespace == "kube-system" {
            reasons.push("lives in kube-system".to_string());
        } else if namespace == scope.provisioner_namespace {
            reasons.push(format!("lives in the provisioner's namespace {namespace}"));
        }
        if let Some(install) = scope.install_namespace
            && namespace != install
        {
            reasons.push(format!(
                "lives outside the install namespace {install} (in {namespace})"
            ));
        }
    }
    (!reasons.is_empty()).then(|| reasons.join(", "))
}

fn str_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn labels(object: &Value) -> impl Iterator<Item = (&str, &str)> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
}

fn strings<'v>(value: &'v Value, field: &str) -> Vec<&'v str> {
    value
        .get(field)
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The rules of a Role or ClusterRole.
fn rules(role: &Value) -> impl Iterator<Item = &Value> {
    role.get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Rules of a Role/ClusterRole that use `*` in verbs, resources or API groups.
fn wildcard_rules(role: &Value) -> Vec<String> {
    rules(role)
        .filter_map(|rule| {
            let verbs = strings(rule, "verbs");
            let resources = strings(rule, "resources");
            let groups = strings(rule, "apiGroups");
            let non_resource = strings(rule, "nonResourceURLs");
            let star = |v: &[&str]| v.contains(&"*");
            if !non_resource.is_empty() {
                if non_resource.contains(&"*") {
                    Some(format!(
                        "verbs [{}] on every non-resource URL",
                        verbs.join(",")
                    ))
                } else if star(&verbs) {
                    Some(format!(
                        "verbs [*] on non-resource URLs [{}]",
                        non_resource.join(",")
                    ))
                } else {
                    None
                }
            } else if star(&verbs) || star(&resources) || star(&groups) {
                Some(format!(
                    "verbs [{}] on resources [{}] in groups [{}]",
                    verbs.join(","),
                    resources.join(","),
                    groups.join(",")
                ))
            } else {
                None
            }
        })
        .collect()
}

/// The verbs of a role's rules that read Secrets (`get`, `list`, `watch` or `*`) on `secrets`
/// or `*` of the core group (or `*`), not narrowed to Secrets named in `resourceNames`.
fn secret_read_verbs(role: &Value) -> Vec<&str> {
    let mut verbs = Vec::new();
    for rule in rules(role) {
        let core = strings(rule, "apiGroups")
            .iter()
            .any(|g| g.is_empty() || *g == "*");
        let secrets = strings(rule, "resources")
            .iter()
            .any(|r| *r == "secrets" || *r == "*");
        if !core || !secrets || !strings(rule, "resourceNames").is_empty() {
            continue;
        }
        for verb in strings(rule, "verbs") {
            if matches!(verb, "get" | "list" | "watch" | "*") && !verbs.contains(&verb) {
                verbs.push(verb);
            }
        }
    }
    verbs
}

/// Rules granting the verbs that get around RBAC: `escalate`, `bind`, `impersonate` (a `*`
/// verb is reported as a wildcard already).
fn powerful_verbs(role: &Value) -> Vec<String> {
    rules(role)
        .filter_map(|rule| {
            let verbs = strings(rule, "verbs");
            let powers: Vec<&str> = verbs
                .iter()
                .copied()
                .filter(|v| matches!(*v, "escalate" | "bind" | "impersonate"))
                .collect();
            (!powers.is_empty()).then(|| {
                format!(
                    "{} on [{}]",
                    powers.join(","),
                    strings(rule, "resources").join(",")
                )
            })
        })
        .collect()
}

/// What a webhook configuration intercepts: its webhooks' names and failure policies.
fn webhook_targets(body: &Value) -> String {
    let hooks: Vec<String> = body
        .get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|hook| {
            let policy = hook
                .get("failurePolicy")
                .and_then(Value::as_str)
                .unwrap_or("Fail");
            format!("{} failurePolicy {policy}", str_at(hook, "/name"))
        })
        .collect();
    if hooks.is_empty() {
        String::new()
    } else {
        format!(": {}", hooks.join("; "))
    }
}

/// Where a Pod, or a workload's Pod template, holds its Pod spec.
fn pod_spec_pointer(group: &str, kind: &str) -> Option<&'static str> {
    match (group, kind) {
        ("", "Pod") => Some("/spec"),
        ("", "ReplicationController")
        | ("apps", "Deployment" | "DaemonSet" | "StatefulSet" | "ReplicaSet")
        | ("batch", "Job") => Some("/spec/template/spec"),
        ("batch", "CronJob") => Some("/spec/jobTemplate/spec/template/spec"),
        _ => None,
    }
}

/// What a Pod spec may do to its node: privileged containers, added capabilities, host
/// namespaces, hostPath volumes.
fn pod_risks(spec: &Value) -> Vec<String> {
    let mut risks = Vec::new();
    let host: Vec<&str> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|field| spec.get(*field).and_then(Value::as_bool) == Some(true))
        .collect();
    if !host.is_empty() {
        risks.push(format!("uses the node's namespaces ({})", host.join(", ")));
    }
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(|field| {
            spec.get(field)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        });
    for container in containers {
        let name = str_at(container, "/name");
        let context = container.get("securityContext");
        if context
            .and_then(|c| c.get("privileged"))
            .and_then(Value::as_bool)
            == Some(true)
        {
            risks.push(format!("runs container {name} privileged"));
        }
        let added: Vec<&str> = context
            .and_then(|c| c.pointer("/capabilities/add"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !added.is_empty() {
            risks.push(format!(
                "adds capabilities {} to container {name}",
                added.join(",")
            ));
        }
    }
    let paths: Vec<&str> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|volume| volume.pointer("/hostPath/path").and_then(Value::as_str))
        .collect();
    if !paths.is_empty() {
        risks.push(format!("mounts host paths {}", paths.join(", ")));
    }
    risks
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_core::{ApiResource, GroupVersionKind};
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
            object: serde_json::value::to_raw_value(&body).unwrap(),
            defines_crd: None,
            needs_crd: None,
            ignored: Vec::new(),
        }
    }

    const SCOPE: Scope<'static> = Scope {
        install_namespace: None,
        provisioner_namespace: "gantry-system",
    };

    const IN_APP: Scope<'static> = Scope {
        install_namespace: Some("app"),
        ..SCOPE
    };

    /// The highlight of the one object named `name`, or `None`.
    fn reason_of(objects: &[PlannedObject], scope: &Scope<'_>, name: &str) -> Option<String> {
        requested_permissions(objects, scope)
            .highlights
            .into_iter()
            .find(|h| h.name == name)
            .map(|h| h.reason)
    }

    /// Asserts that the highlight of the object named `name` says `part`.
    #[track_caller]
    fn assert_reason_has(objects: &[PlannedObject], scope: &Scope<'_>, name: &str, part: &str) {
        let reason =
            reason_of(objects, scope, name).unwrap_or_else(|| panic!("{name}: no highlight"));
        assert!(reason.contains(part), "{reason}");
    }

    fn cluster_role(name: &str, rules: Value) -> PlannedObject {
        rbac("ClusterRole", None, name, json!({ "rules": rules }))
    }

    fn rbac(kind: &str, namespace: Option<&str>, name: &str, body: Value) -> PlannedObject {
        object("rbac.authorization.k8s.io", kind, namespace, name, body)
    }

    #[test]
    fn counts_by_scope_and_namespace_and_flags_risks() {
        let objects = vec![
            object("", "Namespace", None, "app", json!({})),
            object("", "ConfigMap", Some("app"), "a", json!({})),
            object("", "ConfigMap", Some("app"), "b", json!({})),
            object("", "Secret", Some("kube-system"), "s", json!({})),
            cluster_role(
                "all",
                json!([{ "apiGroups": ["*"], "resources": ["*"], "verbs": ["*"] }]),
            ),
            cluster_role(
                "view",
                json!([{ "apiGroups": [""], "resources": ["pods"], "verbs": ["get"] }]),
            ),
        ];
        let p = requested_permissions(&objects, &SCOPE);
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

    #[test]
    fn rbac_wildcards_and_verbs_that_get_around_rbac() {
        // Shaped like Argo CD's application controller and OLM's operator roles.
        let objects = [
            cluster_role(
                "argocd-application-controller",
                json!([
                    { "apiGroups": ["*"], "resources": ["*"], "verbs": ["*"] },
                    { "nonResourceURLs": ["*"], "verbs": ["*"] }
                ]),
            ),
            cluster_role(
                "olm-operator-binding",
                json!([
                    { "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles", "roles"], "verbs": ["escalate", "bind", "get"] },
                    { "apiGroups": [""], "resources": ["users", "groups", "serviceaccounts"], "verbs": ["impersonate"] }
                ]),
            ),
            rbac(
                "Role",
                Some("app"),
                "reader",
                json!({ "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"] }] }),
            ),
            rbac(
                "ClusterRole",
                None,
                "widgets-edit",
                json!({
                    "metadata": { "labels": { "rbac.authorization.k8s.io/aggregate-to-edit": "true" } },
                    "rules": [{ "apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"] }]
                }),
            ),
        ];
        assert_reason_has(
            &objects,
            &IN_APP,
            "argocd-application-controller",
            "verbs [*] on resources [*] in groups [*]",
        );
        assert_reason_has(
            &objects,
            &IN_APP,
            "argocd-application-controller",
            "every non-resource URL",
        );
        assert_reason_has(
            &objects,
            &IN_APP,
            "olm-operator-binding",
            "escalate,bind on [clusterroles,roles]",
        );
        assert_reason_has(
            &objects,
            &IN_APP,
            "olm-operator-binding",
            "impersonate on [users,groups,serviceaccounts]",
        );
        assert_eq!(reason_of(&objects, &IN_APP, "reader"), None);
        assert_reason_has(&objects, &IN_APP, "widgets-edit", "aggregated role(s) edit");
    }

    #[test]
    fn bindings_to_broad_roles_and_to_everyone() {
        let binding = |kind: &str,
                       ns: Option<&str>,
                       name: &str,
                       role_kind: &str,
                       role: &str,
                       subject: Value| {
            rbac(
                kind,
                ns,
                name,
                json!({
                    "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role },
                    "subjects": [subject]
                }),
            )
        };
        let sa = json!({ "kind": "ServiceAccount", "name": "controller", "namespace": "app" });
        let objects = [
            cluster_role(
                "everything",
                json!([{ "apiGroups": ["*"], "resources": ["*"], "verbs": ["*"] }]),
            ),
            binding(
                "ClusterRoleBinding",
                None,
                "to-cluster-admin",
                "ClusterRole",
                "cluster-admin",
                sa.clone(),
            ),
            binding(
                "RoleBinding",
                Some("app"),
                "to-admin",
                "ClusterRole",
                "admin",
                sa.clone(),
            ),
            binding(
                "ClusterRoleBinding",
                None,
                "to-everything",
                "ClusterRole",
                "everything",
                sa.clone(),
            ),
            binding(
                "ClusterRoleBinding",
                None,
                "to-all-users",
                "ClusterRole",
                "view",
                json!({ "kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io" }),
            ),
            binding(
                "RoleBinding",
                Some("app"),
                "to-view",
                "ClusterRole",
                "view",
                sa,
            ),
        ];
        assert_eq!(
            reason_of(&objects, &IN_APP, "to-cluster-admin").as_deref(),
            Some("binds cluster-admin")
        );
        assert_eq!(
            reason_of(&objects, &IN_APP, "to-admin").as_deref(),
            Some("binds admin")
        );
        assert_reason_has(
            &objects,
            &IN_APP,
            "to-everything",
            "ClusterRole everything, which grants wildcards",
        );
        assert_reason_has(
            &objects,
            &IN_APP,
            "to-all-users",
            "group(s) system:authenticated",
        );
        assert_eq!(reason_of(&objects, &IN_APP, "to-view"), None);
    }

    #[test]
    fn cluster_wide_read_access_to_secrets() {
        let role = |name: &str, rule: Value| cluster_role(name, json!([rule]));
        let cluster_binding = |name: &str, role: &str| {
            rbac(
                "ClusterRoleBinding",
                None,
                name,
                json!({ "roleRef": { "kind": "ClusterRole", "name": role },
                    "subjects": [{ "kind": "ServiceAccount", "name": "app", "namespace": "app" }] }),
            )
        };
        let objects = [
            role(
                "secret-watcher",
                json!({ "apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["list", "watch"] }),
            ),
            role(
                "core-reader",
                json!({ "apiGroups": [""], "resources": ["*"], "verbs": ["get"] }),
            ),
            role(
                "secret-writer",
                json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete"] }),
            ),
            role(
                "one-secret",
                json!({ "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["tls"], "verbs": ["get"] }),
            ),
            role(
                "other-group",
                json!({ "apiGroups": ["example.com"], "resources": ["secrets"], "verbs": ["list"] }),
            ),
            // Reading Secrets in its own namespace only is what a Role is for.
            rbac(
                "Role",
                Some("app"),
                "local-secrets",
                json!({ "rules": [{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"] }] }),
            ),
            cluster_binding("to-secret-watcher", "secret-watcher"),
            cluster_binding("to-secret-writer", "secret-writer"),
            rbac(
                "RoleBinding",
                Some("app"),
                "in-app-to-secret-watcher",
                json!({ "roleRef": { "kind": "ClusterRole", "name": "secret-watcher" } }),
            ),
        ];
        assert_eq!(
            reason_of(&objects, &IN_APP, "secret-watcher").as_deref(),
            Some(
                "reads Secrets cluster-wide where a ClusterRoleBinding binds it (list,watch on secrets)"
            )
        );
        assert_reason_has(&objects, &IN_APP, "core-reader", "(get on secrets)");
        assert_eq!(
            reason_of(&objects, &IN_APP, "to-secret-watcher").as_deref(),
            Some("binds ClusterRole secret-watcher, which reads Secrets, cluster-wide")
        );
        for name in [
            "secret-writer",
            "one-secret",
            "other-group",
            "local-secrets",
            "to-secret-writer",
            "in-app-to-secret-watcher",
        ] {
            assert_eq!(reason_of(&objects, &IN_APP, name), None, "{name}");
        }
    }

    #[test]
    fn bindings_to_the_bundles_roles_that_get_around_rbac() {
        // Shaped like OLM's operator and a Role that may impersonate in its namespace.
        let sa = json!({ "kind": "ServiceAccount", "name": "olm-operator", "namespace": "olm" });
        let objects = [
            rbac(
                "ClusterRole",
                None,
                "role-binder",
                json!({ "rules": [{ "apiGroups": ["rbac.authorization.k8s.io"],
                    "resources": ["clusterroles"], "verbs": ["bind", "escalate"] }] }),
            ),
            rbac(
                "Role",
                Some("olm"),
                "impersonator",
                json!({ "rules": [{ "apiGroups": [""],
                    "resources": ["serviceaccounts"], "verbs": ["impersonate"] }] }),
            ),
            cluster_role(
                "reader",
                json!([{ "apiGroups": [""], "resources": ["pods"], "verbs": ["get"] }]),
            ),
            rbac(
                "ClusterRoleBinding",
                None,
                "to-role-binder",
                json!({ "roleRef": { "kind": "ClusterRole", "name": "role-binder" }, "subjects": [sa] }),
            ),
            rbac(
                "RoleBinding",
                Some("olm"),
                "to-role-binder-in-olm",
                json!({ "roleRef": { "kind": "ClusterRole", "name": "role-binder" }, "subjects": [sa] }),
            ),
            rbac(
                "RoleBinding",
                Some("olm"),
                "to-impersonator",
                json!({ "roleRef": { "kind": "Role", "name": "impersonator" }, "subjects": [sa] }),
            ),
            // A Role of the same name in another namespace is another Role.
            rbac(
                "RoleBinding",
                Some("elsewhere"),
                "to-other-impersonator",
                json!({ "roleRef": { "kind": "Role", "name": "impersonator" }, "subjects": [sa] }),
            ),
            rbac(
                "ClusterRoleBinding",
                None,
                "to-reader",
                json!({ "roleRef": { "kind": "ClusterRole", "name": "reader" }, "subjects": [sa] }),
            ),
        ];
        let by_role = "binds ClusterRole role-binder, which grants escalate, bind or impersonate";
        assert_eq!(
            reason_of(&objects, &SCOPE, "to-role-binder").as_deref(),
            Some(by_role)
        );
        assert_eq!(
            reason_of(&objects, &SCOPE, "to-role-binder-in-olm").as_deref(),
            Some(by_role)
        );
        assert_eq!(
            reason_of(&objects, &SCOPE, "to-impersonator").as_deref(),
            Some("binds Role impersonator, which grants escalate, bind or impersonate")
        );
        assert_eq!(reason_of(&objects, &SCOPE, "to-other-impersonator"), None);
        assert_eq!(reason_of(&objects, &SCOPE, "to-reader"), None);
    }

    #[test]
    fn admission_webhooks_and_aggregated_apis() {
        // Shaped like cert-manager's webhook.
        let objects = [
            object(
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
                None,
                "cert-manager-webhook",
                json!({ "webhooks": [{
                    "name": "webhook.cert-manager.io",
                    "failurePolicy": "Fail",
                    "clientConfig": { "service": { "name": "cert-manager-webhook", "namespace": "cert-manager", "path": "/validate" } },
                    "rules": [{ "apiGroups": ["cert-manager.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["*/*"] }]
                }] }),
            ),
            object(
                "admissionregistration.k8s.io",
                "MutatingWebhookConfiguration",
                None,
                "mutator",
                json!({ "webhooks": [{ "name": "m.example.com", "failurePolicy": "Ignore" }] }),
            ),
            object(
                "apiregistration.k8s.io",
                "APIService",
                None,
                "v1beta1.metrics.k8s.io",
                json!({ "spec": { "group": "metrics.k8s.io", "service": { "name": "metrics-server", "namespace": "kube-system" } } }),
            ),
        ];
        assert_reason_has(
            &objects,
            &SCOPE,
            "cert-manager-webhook",
            "admission webhook: webhook.cert-manager.io failurePolicy Fail",
        );
        assert_reason_has(
            &objects,
            &SCOPE,
            "mutator",
            "m.example.com failurePolicy Ignore",
        );
        assert_reason_has(&objects, &SCOPE, "v1beta1.metrics.k8s.io", "aggregated API");
    }

    #[test]
    fn namespaces_outside_the_install_namespace_kube_system_and_the_provisioners() {
        let config_map = |ns: &str, name: &str| object("", "ConfigMap", Some(ns), name, json!({}));
        let objects = [
            config_map("app", "inside"),
            config_map("other", "outside"),
            config_map("kube-system", "system"),
            config_map("gantry-system", "provisioner"),
            object("", "Namespace", None, "app", json!({})),
        ];
        assert_eq!(reason_of(&objects, &IN_APP, "inside"), None);
        assert_eq!(
            reason_of(&objects, &IN_APP, "outside").as_deref(),
            Some("lives outside the install namespace app (in other)")
        );
        assert_reason_has(&objects, &IN_APP, "system", "lives in kube-system");
        assert_reason_has(&objects, &IN_APP, "system", "outside the install namespace");
        assert_reason_has(
            &objects,
            &IN_APP,
            "provisioner",
            "the provisioner's namespace gantry-system",
        );
        // Without an install namespace, nothing is "outside" it.
        assert_eq!(reason_of(&objects, &SCOPE, "outside"), None);
        // The bundle's own Namespace is no reason for attention.
        assert_eq!(reason_of(&objects, &IN_APP, "app"), None);
    }

    #[test]
    fn namespace_objects_that_take_over_kube_system_or_the_provisioners() {
        let objects = [
            object("", "Namespace", None, "kube-system", json!({})),
            object("", "Namespace", None, "gantry-system", json!({})),
            object("", "Namespace", None, "monitoring", json!({})),
        ];
        for scope in [
            SCOPE,
            Scope {
                install_namespace: Some("monitoring"),
                ..SCOPE
            },
        ] {
            assert_eq!(
                reason_of(&objects, &scope, "kube-system").as_deref(),
                Some("is the kube-system namespace")
            );
            assert_eq!(
                reason_of(&objects, &scope, "gantry-system").as_deref(),
                Some("is the provisioner's namespace gantry-system")
            );
            assert_eq!(reason_of(&objects, &scope, "monitoring"), None);
        }
        // A ConfigMap named like a system namespace is just a ConfigMap.
        let config_map = [object(
            "",
            "ConfigMap",
            Some("app"),
            "kube-system",
            json!({}),
        )];
        assert_eq!(reason_of(&config_map, &SCOPE, "kube-system"), None);
    }

    #[test]
    fn workloads_that_reach_into_their_node() {
        let template = |spec: Value| json!({ "spec": { "template": { "spec": spec } } });
        // Shaped like prometheus node-exporter's DaemonSet.
        let node_exporter = template(json!({
            "hostNetwork": true, "hostPID": true,
            "containers": [{ "name": "node-exporter", "image": "quay.io/prometheus/node-exporter:v1.8.2",
                "args": ["--path.rootfs=/host/root"],
                "volumeMounts": [{ "name": "root", "mountPath": "/host/root", "readOnly": true }] }],
            "volumes": [{ "name": "root", "hostPath": { "path": "/" } }]
        }));
        // Shaped like a CNI agent.
        let agent = template(json!({
            "initContainers": [{ "name": "mount-bpf", "securityContext": { "privileged": true } }],
            "containers": [{ "name": "agent", "securityContext": { "capabilities": { "add": ["NET_ADMIN", "SYS_ADMIN"] } } }]
        }));
        let plain = template(json!({ "containers": [{ "name": "web", "image": "nginx" }] }));
        let objects = [
            object(
                "apps",
                "DaemonSet",
                Some("app"),
                "node-exporter",
                node_exporter,
            ),
            object("apps", "DaemonSet", Some("app"), "agent", agent),
            object("apps", "Deployment", Some("app"), "web", plain.clone()),
            object("apps", "StatefulSet", Some("app"), "db", plain.clone()),
            object(
                "batch",
                "Job",
                Some("app"),
                "ipc",
                template(json!({ "hostIPC": true, "containers": [] })),
            ),
            object(
                "batch",
                "CronJob",
                Some("app"),
                "cleanup",
                json!({ "spec": { "jobTemplate": { "spec": { "template": { "spec": {
                    "containers": [{ "name": "c" }], "volumes": [{ "name": "logs", "hostPath": { "path": "/var/log" } }]
                } } } } } }),
            ),
            object(
                "",
                "Pod",
                Some("app"),
                "debug",
                json!({ "spec": { "containers": [{ "name": "shell", "securityContext": { "privileged": true } }] } }),
            ),
            object(
                "apps",
                "ReplicaSet",
                Some("app"),
                "rs",
                template(json!({ "hostNetwork": true })),
            ),
        ];
        assert_reason_has(
            &objects,
            &IN_APP,
            "node-exporter",
            "node's namespaces (hostNetwork, hostPID)",
        );
        assert_reason_has(&objects, &IN_APP, "node-exporter", "mounts host paths /");
        assert_reason_has(
            &objects,
            &IN_APP,
            "agent",
            "runs container mount-bpf privileged",
        );
        assert_reason_has(
            &objects,
            &IN_APP,
            "agent",
            "adds capabilities NET_ADMIN,SYS_ADMIN to container agent",
        );
        assert_eq!(reason_of(&objects, &IN_APP, "web"), None);
        assert_eq!(reason_of(&objects, &IN_APP, "db"), None);
        assert_reason_has(&objects, &IN_APP, "ipc", "hostIPC");
        assert_reason_has(&objects, &IN_APP, "cleanup", "mounts host paths /var/log");
        assert_reason_has(&objects, &IN_APP, "debug", "container shell privileged");
        assert_reason_has(&objects, &IN_APP, "rs", "hostNetwork");
    }
}
