//! OLM `registry+v1` bundles rendered into plain objects, as OLM v1 renders them
//! (docs/registry-v1.md): the ClusterServiceVersion's deployments, service accounts and
//! permissions become Deployments, ServiceAccounts, Roles and ClusterRoles with their bindings;
//! the CRDs and the other manifests pass through. What Gantry cannot do (APIServices, webhooks,
//! which need a certificate provider, package dependencies) is refused with the CSV field named.

mod install_modes;
mod names;

use serde_json::{Map, Value, json};

pub use install_modes::{InstallMode, TargetNamespaces};
pub use names::permission_name;

/// `metadata/annotations.yaml`'s key naming the bundle's package.
pub const PACKAGE_ANNOTATION: &str = "operators.operatorframework.io.bundle.package.v1";
/// `metadata/annotations.yaml`'s key naming the bundle's format.
pub const MEDIA_TYPE_ANNOTATION: &str = "operators.operatorframework.io.bundle.mediatype.v1";
/// The format this module renders.
pub const MEDIA_TYPE: &str = "registry+v1";

/// A bundle as read from its image: the objects of `manifests/` and `metadata/annotations.yaml`.
#[derive(Debug, Clone)]
pub struct RegistryBundle {
    pub package: String,
    /// The ClusterServiceVersion.
    pub csv: Value,
    pub crds: Vec<Value>,
    /// Every other object of `manifests/`, in file order.
    pub others: Vec<Value>,
}

/// Why a bundle cannot be rendered. Each names the file or CSV field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("metadata/annotations.yaml: {0}")]
    Annotations(String),
    #[error("manifests/: no ClusterServiceVersion")]
    NoCsv,
    #[error("manifests/: {count} ClusterServiceVersions ({names}); a bundle has one")]
    SeveralCsvs { count: usize, names: String },
    #[error("ClusterServiceVersion {csv}, {field}: {message}")]
    Unsupported {
        csv: String,
        field: String,
        message: String,
    },
    #[error("ClusterServiceVersion {csv}, {field}: {message}")]
    Invalid {
        csv: String,
        field: String,
        message: String,
    },
    #[error("{kind} {name} in manifests/: kind {kind} is not allowed in a registry+v1 bundle")]
    UnsupportedObject { kind: String, name: String },
    #[error("spec.config.watchNamespace: {0}")]
    WatchNamespace(String),
    #[error("spec.config: {0}")]
    Config(String),
}

/// The options a bundle's configuration (`spec.config`) may set for `gantry.dev/registry`, as
/// OLM v1's ClusterExtension takes them: `watchNamespace` only.
pub fn watch_namespace(
    config: &serde_json::Map<String, Value>,
) -> Result<Option<String>, RegistryError> {
    if let Some(unknown) = config.keys().find(|key| *key != "watchNamespace") {
        return Err(RegistryError::Config(format!(
            "{unknown} is not an option of gantry.dev/registry (it takes watchNamespace only)"
        )));
    }
    match config.get("watchNamespace") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(namespace)) => match gantry_image::objects::dns_label(namespace) {
            Ok(()) => Ok(Some(namespace.clone())),
            Err(why) => Err(RegistryError::WatchNamespace(format!(
                "{namespace:?} is not a namespace name: {why}"
            ))),
        },
        Some(_) => Err(RegistryError::WatchNamespace("must be a string".into())),
    }
}

impl RegistryBundle {
    /// The bundle of these `manifests/` objects and this `metadata/annotations.yaml` text.
    pub fn new(
        objects: impl IntoIterator<Item = Value>,
        annotations: &str,
    ) -> Result<Self, RegistryError> {
        let package = package_of(annotations)?;
        let mut csvs = Vec::new();
        let mut crds = Vec::new();
        let mut others = Vec::new();
        for object in objects {
            match object["kind"].as_str() {
                Some("ClusterServiceVersion") => csvs.push(object),
                Some("CustomResourceDefinition") => crds.push(object),
                _ => others.push(object),
            }
        }
        let csv = match csvs.len() {
            0 => return Err(RegistryError::NoCsv),
            1 => csvs.remove(0),
            count => {
                let names = csvs.iter().map(name).collect::<Vec<_>>().join(", ");
                return Err(RegistryError::SeveralCsvs { count, names });
            }
        };
        Ok(Self {
            package,
            csv,
            crds,
            others,
        })
    }

    /// The ClusterServiceVersion's name (`argocd-operator.v0.6.0`).
    pub fn csv_name(&self) -> String {
        name(&self.csv)
    }

    /// The image references the CSV lists as related (`spec.relatedImages[].image`), which
    /// `kubectl bundle push --pin-images` and `relocate` handle.
    pub fn related_images(&self) -> Vec<String> {
        self.csv["spec"]["relatedImages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["image"].as_str().map(str::to_string))
            .collect()
    }
}

fn package_of(annotations: &str) -> Result<String, RegistryError> {
    let document: Value = serde_saphyr::from_str(annotations)
        .map_err(|e| RegistryError::Annotations(e.to_string()))?;
    let annotations = &document["annotations"];
    if let Some(media_type) = annotations[MEDIA_TYPE_ANNOTATION].as_str()
        && media_type != MEDIA_TYPE
    {
        return Err(RegistryError::Annotations(format!(
            "{MEDIA_TYPE_ANNOTATION} is {media_type:?}, not {MEDIA_TYPE:?}"
        )));
    }
    match annotations[PACKAGE_ANNOTATION].as_str() {
        Some(package) if !package.is_empty() => Ok(package.to_string()),
        _ => Err(RegistryError::Annotations(format!(
            "annotations.{PACKAGE_ANNOTATION} is missing"
        ))),
    }
}

fn name(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The kinds a bundle may carry beside its CSV and CRDs, and whether each is namespaced (it
/// is then installed in the install namespace). As OLM's list.
const OTHER_KINDS: &[(&str, bool)] = &[
    ("Service", true),
    ("ServiceAccount", true),
    ("Role", true),
    ("RoleBinding", true),
    ("Secret", true),
    ("ConfigMap", true),
    ("PrometheusRule", true),
    ("ServiceMonitor", true),
    ("PodDisruptionBudget", true),
    ("NetworkPolicy", true),
    ("PodMonitor", true),
    ("ClusterRole", false),
    ("ClusterRoleBinding", false),
    ("PriorityClass", false),
    ("VerticalPodAutoscaler", false),
    ("ConsoleYAMLSample", false),
    ("ConsoleQuickStart", false),
    ("ConsoleCLIDownload", false),
    ("ConsoleLink", false),
    ("ConsolePlugin", false),
];

/// The objects of `bundle` installed in `install_namespace`, watching `watch_namespace` (the
/// bundle's `spec.config.watchNamespace`; all namespaces when absent), in OLM's order:
/// ServiceAccounts, Roles and RoleBindings, ClusterRoles and ClusterRoleBindings, CRDs, the
/// other objects, Deployments.
pub fn render(
    bundle: &RegistryBundle,
    install_namespace: &str,
    watch_namespace: Option<&str>,
) -> Result<Vec<Value>, RegistryError> {
    let csv_name = bundle.csv_name();
    let spec = &bundle.csv["spec"];
    refuse_unsupported(bundle, &csv_name)?;
    validate(bundle, &csv_name)?;
    let targets = TargetNamespaces::resolve(&csv_name, spec, install_namespace, watch_namespace)?;
    let install = &spec["install"]["spec"];
    let permissions = list(&install["permissions"]);
    let cluster_permissions = list(&install["clusterPermissions"]);

    let mut objects = Vec::new();
    // ServiceAccounts: every one the permissions name but `default`, once, first seen first.
    let mut accounts: Vec<&str> = Vec::new();
    for permission in permissions.iter().chain(&cluster_permissions) {
        let account = names::service_account(permission);
        if account != "default" && !accounts.contains(&account) {
            accounts.push(account);
        }
    }
    for account in accounts {
        objects.push(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": install_namespace},
        }));
    }
    // Namespaced permissions: a Role and its binding in each watched namespace; watching all
    // namespaces, a ClusterRole that may also read Namespaces.
    let mut cluster_wide = cluster_permissions;
    match &targets {
        TargetNamespaces::All => {
            for permission in &permissions {
                let mut permission = permission.clone();
                if let Some(rules) = permission["rules"].as_array_mut() {
                    rules.push(json!({
                        "verbs": ["get", "list", "watch"],
                        "apiGroups": [""],
                        "resources": ["namespaces"],
                    }));
                }
                cluster_wide.push(permission);
            }
        }
        TargetNamespaces::Some(namespaces) => {
            for namespace in namespaces {
                for permission in &permissions {
                    let role = permission_name(&csv_name, permission);
                    objects.push(json!({
                        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                        "metadata": {"name": role, "namespace": namespace},
                        "rules": permission["rules"],
                    }));
                    objects.push(binding(
                        "RoleBinding",
                        "Role",
                        &role,
                        Some(namespace),
                        permission,
                        install_namespace,
                    ));
                }
            }
        }
    }
    for permission in &cluster_wide {
        let role = permission_name(&csv_name, permission);
        objects.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": permission["rules"],
        }));
        objects.push(binding(
            "ClusterRoleBinding",
            "ClusterRole",
            &role,
            None,
            permission,
            install_namespace,
        ));
    }
    objects.extend(bundle.crds.iter().cloned());
    for other in &bundle.others {
        let mut other = other.clone();
        let namespaced = OTHER_KINDS
            .iter()
            .any(|(kind, namespaced)| *namespaced && other["kind"] == *kind);
        if namespaced && let Some(metadata) = other["metadata"].as_object_mut() {
            metadata.insert("namespace".into(), install_namespace.into());
        }
        objects.push(other);
    }
    let csv_annotations = bundle.csv["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for deployment in list(&install["deployments"]) {
        objects.push(deployment_of(
            &deployment,
            &csv_annotations,
            install_namespace,
            &targets,
        ));
    }
    Ok(objects)
}

fn list(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

fn binding(
    kind: &str,
    role_kind: &str,
    role: &str,
    namespace: Option<&str>,
    permission: &Value,
    install_namespace: &str,
) -> Value {
    let account = names::service_account(permission);
    let mut metadata = json!({"name": role});
    if let Some(namespace) = namespace {
        metadata["namespace"] = namespace.into();
    }
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": install_namespace}],
    })
}

/// A CSV deployment as a Deployment: its spec as written, one old ReplicaSet kept, the CSV's
/// annotations under the pod template's own, and the namespaces it watches.
fn deployment_of(
    deployment: &Value,
    csv_annotations: &Map<String, Value>,
    install_namespace: &str,
    targets: &TargetNamespaces,
) -> Value {
    let mut spec = deployment["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    spec["revisionHistoryLimit"] = 1.into();
    if !spec["template"].is_object() {
        spec["template"] = json!({});
    }
    if !spec["template"]["metadata"].is_object() {
        spec["template"]["metadata"] = json!({});
    }
    let mut annotations = csv_annotations.clone();
    if let Some(own) = spec["template"]["metadata"]["annotations"].as_object() {
        annotations.extend(own.clone());
    }
    annotations.insert("olm.targetNamespaces".into(), targets.annotation().into());
    annotations.insert("olm.operatorNamespace".into(), install_namespace.into());
    spec["template"]["metadata"]["annotations"] = Value::Object(annotations);
    let mut metadata = json!({"name": deployment["name"], "namespace": install_namespace});
    if deployment["label"].is_object() {
        metadata["labels"] = deployment["label"].clone();
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec})
}

/// What OLM v1 refuses, and what Gantry cannot do either: each names the CSV field.
fn refuse_unsupported(bundle: &RegistryBundle, csv: &str) -> Result<(), RegistryError> {
    let spec = &bundle.csv["spec"];
    let unsupported = |field: &str, message: &str| RegistryError::Unsupported {
        csv: csv.to_string(),
        field: field.to_string(),
        message: message.to_string(),
    };
    if spec["apiservicedefinitions"]["owned"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        return Err(unsupported(
            "spec.apiservicedefinitions.owned",
            "APIServices are not supported",
        ));
    }
    if spec["webhookdefinitions"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        return Err(unsupported(
            "spec.webhookdefinitions",
            "webhooks are not supported: they need a certificate provider, which Gantry does not have",
        ));
    }
    let properties = bundle.csv["metadata"]["annotations"]["olm.properties"]
        .as_str()
        .and_then(|p| serde_json::from_str::<Vec<Value>>(p).ok())
        .unwrap_or_default();
    if let Some(dependency) = properties.iter().find_map(|p| {
        p["type"]
            .as_str()
            .filter(|t| matches!(*t, "olm.package.required" | "olm.gvk.required"))
    }) {
        return Err(unsupported(
            "metadata.annotations[olm.properties]",
            &format!(
                "{dependency}: package dependencies are not resolved; install the dependency as a bundle of its own"
            ),
        ));
    }
    Ok(())
}

/// What makes a bundle invalid, checked before anything is rendered.
fn validate(bundle: &RegistryBundle, csv: &str) -> Result<(), RegistryError> {
    let spec = &bundle.csv["spec"];
    let invalid = |field: &str, message: String| RegistryError::Invalid {
        csv: csv.to_string(),
        field: field.to_string(),
        message,
    };
    let mut seen = Vec::new();
    for (i, deployment) in list(&spec["install"]["spec"]["deployments"])
        .iter()
        .enumerate()
    {
        let name = deployment["name"].as_str().unwrap_or_default();
        if let Err(why) = gantry_image::objects::subdomain(name) {
            return Err(invalid(
                &format!("spec.install.spec.deployments[{i}].name"),
                format!("{name:?} is not a valid name: {why}"),
            ));
        }
        if seen.contains(&name.to_string()) {
            return Err(invalid(
                &format!("spec.install.spec.deployments[{i}].name"),
                format!("deployment {name} is listed twice"),
            ));
        }
        seen.push(name.to_string());
    }
    let bundled: Vec<String> = bundle.crds.iter().map(name).collect();
    for (i, owned) in list(&spec["customresourcedefinitions"]["owned"])
        .iter()
        .enumerate()
    {
        let owned = owned["name"].as_str().unwrap_or_default();
        if !bundled.iter().any(|b| b == owned) {
            return Err(invalid(
                &format!("spec.customresourcedefinitions.owned[{i}]"),
                format!("CRD {owned} is not in the bundle's manifests/"),
            ));
        }
    }
    let mut crd_names = Vec::new();
    for crd in &bundle.crds {
        let crd = name(crd);
        if crd_names.contains(&crd) {
            return Err(RegistryError::UnsupportedObject {
                kind: "CustomResourceDefinition".into(),
                name: format!("{crd} (twice)"),
            });
        }
        crd_names.push(crd);
    }
    for other in &bundle.others {
        let kind = other["kind"].as_str().unwrap_or_default();
        if !OTHER_KINDS.iter().any(|(k, _)| *k == kind) {
            return Err(RegistryError::UnsupportedObject {
                kind: kind.to_string(),
                name: name(other),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
