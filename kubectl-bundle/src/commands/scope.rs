//! Which kinds are namespaced, for `validate`: a kind a CustomResourceDefinition of the bundle
//! defines has that CRD's scope; otherwise, against a cluster, the scope its discovery gives
//! (a kind it does not serve is an error); otherwise Kubernetes' own kinds from a table, and
//! nothing is known of other kinds.
//!
//! A namespaced object without `metadata.namespace` is installed into the Bundle's
//! `installNamespace`, so it needs one: such objects are warned about.

use std::collections::HashMap;

use gantry_image::BundleObject;
use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::Value;

/// The scope of a kind Kubernetes serves itself; `None` for any other kind.
pub fn builtin_scope(group: &str, kind: &str) -> Option<Scope> {
    let namespaced = match group {
        "" => matches!(
            kind,
            "ConfigMap"
                | "Secret"
                | "Service"
                | "ServiceAccount"
                | "Pod"
                | "PodTemplate"
                | "PersistentVolumeClaim"
                | "ReplicationController"
                | "Endpoints"
                | "Event"
                | "LimitRange"
                | "ResourceQuota"
        ),
        "apps" => matches!(
            kind,
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "ControllerRevision"
        ),
        "batch" => matches!(kind, "Job" | "CronJob"),
        "autoscaling" => kind == "HorizontalPodAutoscaler",
        "policy" => kind == "PodDisruptionBudget",
        "networking.k8s.io" => matches!(kind, "Ingress" | "NetworkPolicy"),
        "rbac.authorization.k8s.io" => matches!(kind, "Role" | "RoleBinding"),
        "coordination.k8s.io" => kind == "Lease",
        "discovery.k8s.io" => kind == "EndpointSlice",
        "events.k8s.io" => kind == "Event",
        "storage.k8s.io" => kind == "CSIStorageCapacity",
        "resource.k8s.io" => matches!(kind, "ResourceClaim" | "ResourceClaimTemplate"),
        _ => false,
    };
    let cluster = match group {
        "" => matches!(
            kind,
            "Namespace" | "Node" | "PersistentVolume" | "ComponentStatus"
        ),
        "rbac.authorization.k8s.io" => matches!(kind, "ClusterRole" | "ClusterRoleBinding"),
        "apiextensions.k8s.io" => kind == "CustomResourceDefinition",
        "admissionregistration.k8s.io" => matches!(
            kind,
            "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
        ),
        "apiregistration.k8s.io" => kind == "APIService",
        "storage.k8s.io" => matches!(
            kind,
            "StorageClass" | "CSIDriver" | "CSINode" | "VolumeAttachment"
        ),
        "scheduling.k8s.io" => kind == "PriorityClass",
        "node.k8s.io" => kind == "RuntimeClass",
        "networking.k8s.io" => matches!(kind, "IngressClass" | "IPAddress" | "ServiceCIDR"),
        "flowcontrol.apiserver.k8s.io" => {
            matches!(kind, "FlowSchema" | "PriorityLevelConfiguration")
        }
        "certificates.k8s.io" => kind == "CertificateSigningRequest",
        _ => false,
    };
    if namespaced {
        Some(Scope::Namespaced)
    } else if cluster {
        Some(Scope::Cluster)
    } else {
        None
    }
}

/// `(group, version)` of an `apiVersion`.
fn group_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// A kind a CRD of the bundle defines.
struct DefinedKind {
    versions: Vec<String>,
    scope: Scope,
}

/// The kinds the bundle's CustomResourceDefinitions define, by group and kind.
fn defined_kinds(objects: &[BundleObject]) -> HashMap<(String, String), DefinedKind> {
    let mut kinds = HashMap::new();
    for object in objects {
        let summary = &object.summary;
        if summary.kind != "CustomResourceDefinition"
            || group_version(&summary.api_version).0 != "apiextensions.k8s.io"
        {
            continue;
        }
        let Ok(crd) = object.value() else { continue };
        let text = |pointer: &str| crd.pointer(pointer).and_then(Value::as_str);
        let (Some(group), Some(kind)) = (text("/spec/group"), text("/spec/names/kind")) else {
            continue;
        };
        let scope = match text("/spec/scope") {
            Some("Cluster") => Scope::Cluster,
            _ => Scope::Namespaced,
        };
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.get("name")?.as_str().map(str::to_string))
            .collect();
        kinds.insert(
            (group.to_string(), kind.to_string()),
            DefinedKind { versions, scope },
        );
    }
    kinds
}

/// What the namespace check found: warnings, and (against a cluster) errors.
#[derive(Debug, Default)]
pub struct Findings {
    pub warnings: Vec<String>,
    pub errors: Vec<String>,
}

/// Checks every object's kind and namespace: against `cluster`'s discovery when given, else
/// against the kinds known without it. An error reaching the cluster is an error.
pub async fn check_namespaces(
    objects: &[BundleObject],
    cluster: Option<&Client>,
) -> anyhow::Result<Findings> {
    let defined = defined_kinds(objects);
    let mut served: HashMap<(String, String), Option<Scope>> = HashMap::new();
    let mut findings = Findings::default();
    for object in objects {
        let summary = &object.summary;
        let (group, version) = group_version(&summary.api_version);
        let described = format!(
            "{}: {} {} (apiVersion {})",
            summary.file, summary.kind, summary.name, summary.api_version
        );
        let scope = match defined.get(&(group.to_string(), summary.kind.clone())) {
            Some(kind) if kind.versions.iter().any(|v| v == version) => Some(kind.scope.clone()),
            _ => match cluster {
                Some(client) => {
                    let key = (summary.api_version.clone(), summary.kind.clone());
                    let scope = match served.get(&key) {
                        Some(scope) => scope.clone(),
                        None => {
                            let scope =
                                discovered_scope(client, group, version, &summary.kind).await?;
                            served.insert(key, scope.clone());
                            scope
                        }
                    };
                    if scope.is_none() {
                        findings.errors.push(format!(
                            "{described}: the cluster does not serve {}/{} and no \
                             CustomResourceDefinition of the bundle defines it",
                            summary.api_version, summary.kind
                        ));
                        continue;
                    }
                    scope
                }
                None => builtin_scope(group, &summary.kind),
            },
        };
        if matches!(scope, Some(Scope::Namespaced)) && summary.namespace.is_none() {
            findings.warnings.push(format!(
                "{described} is namespaced and has no metadata.namespace: it is installed into \
                 the Bundle's spec.installNamespace, which must then be set"
            ));
        }
    }
    Ok(findings)
}

/// The scope of a kind the cluster serves; `None` when it does not serve it.
async fn discovered_scope(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
) -> anyhow::Result<Option<Scope>> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((_, capabilities)) => Ok(Some(capabilities.scope)),
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(error) => Err(anyhow::Error::new(error).context(format!(
            "discovering {group}/{version} {kind} on the cluster"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_image::{EffectiveLimits, parse_file};

    fn objects(yaml: &str) -> Vec<BundleObject> {
        parse_file("a.yaml", yaml.as_bytes(), &EffectiveLimits::default()).unwrap()
    }

    #[tokio::test]
    async fn namespaced_objects_without_a_namespace_are_warned_about() {
        let found = check_namespaces(
            &objects(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bare\n---\n\
                 apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: placed\n  namespace: x\n---\n\
                 apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n---\n\
                 apiVersion: example.com/v1\nkind: Unknown\nmetadata:\n  name: u\n---\n\
                 apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
                 metadata:\n  name: widgets.example.org\nspec:\n  group: example.org\n  \
                 scope: Namespaced\n  names:\n    kind: Widget\n    plural: widgets\n  \
                 versions:\n  - name: v1\n    served: true\n    storage: true\n---\n\
                 apiVersion: example.org/v1\nkind: Widget\nmetadata:\n  name: w\n",
            ),
            None,
        )
        .await
        .unwrap();
        assert!(found.errors.is_empty());
        assert_eq!(found.warnings.len(), 2, "{:?}", found.warnings);
        assert!(found.warnings[0].starts_with("a.yaml: ConfigMap bare (apiVersion v1)"));
        assert!(found.warnings[1].starts_with("a.yaml: Widget w (apiVersion example.org/v1)"));
    }

    #[test]
    fn built_in_kinds_have_their_scope() {
        assert_eq!(builtin_scope("apps", "Deployment"), Some(Scope::Namespaced));
        assert_eq!(
            builtin_scope("rbac.authorization.k8s.io", "ClusterRole"),
            Some(Scope::Cluster)
        );
        assert_eq!(builtin_scope("example.com", "Deployment"), None);
    }
}
