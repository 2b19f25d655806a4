//! The `Bundle` resource: one plain+v0 image to install.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A bundle of plain Kubernetes manifests, shipped as an OCI image, to install on the cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "gantry.dev",
    version = "v1alpha1",
    kind = "Bundle",
    plural = "bundles",
    singular = "bundle",
    shortname = "bdl",
    category = "gantry",
    status = "BundleStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A Bundle names an OCI image of plain Kubernetes manifests (plain+v0) that Gantry installs.",
    printcolumn = r#"{"name":"Class","type":"string","jsonPath":".status.className","description":"the ProvisionerClass serving the bundle (the default class included)"}"#,
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Healthy","type":"string","jsonPath":".status.conditions[?(@.type==\"Healthy\")].status","description":"whether the objects are healthy: Ready can be True while they are not"}"#,
    printcolumn = r#"{"name":"Since","type":"date","jsonPath":".status.conditions[?(@.type==\"Ready\")].lastTransitionTime","description":"when Ready last changed"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Installed","type":"string","priority":1,"jsonPath":".status.installedImage","description":"the image reference pinned to the digest whose content is installed"}"#,
    printcolumn = r#"{"name":"Version","type":"string","priority":1,"jsonPath":".status.resolvedTag","description":"with spec.ref: the tag the version range chose"}"#,
    printcolumn = r#"{"name":"Resolved","type":"string","priority":1,"jsonPath":".status.resolvedImage","description":"the image reference pinned to the digest the reference last resolved to"}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.message","description":"the Ready condition's message in one short line (the whole message is the Ready condition's)"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "!has(self.ref) || !self.image.matches('@|:[^/]*$')", "message": "spec.image must name a repository without a tag or digest when spec.ref is set"}]))]
pub struct BundleSpec {
    /// Name of the ProvisionerClass that serves this bundle. When empty, the class annotated
    /// `gantry.dev/is-default-class: "true"` serves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub provisioner_class_name: Option<String>,

    /// The OCI image holding the manifests, by tag (`registry/repo:tag`) or by digest
    /// (`registry/repo@sha256:...`). With `ref`, the repository alone (`registry/repo`), whose
    /// tags `ref` chooses from.
    #[schemars(length(min = 1, max = 4096), regex(pattern = r"^\S+$"))]
    pub image: String,

    /// Chooses the tag of `image` (then the repository alone) by version, as Flux's
    /// `OCIRepository.spec.ref`: the highest tag that is a semantic version matching `semver`.
    /// The chosen tag is in `status.resolvedTag`, and is resolved to a digest as a tag in
    /// `image` would be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#ref: Option<VersionRef>,

    /// Name of a `kubernetes.io/dockerconfigjson` secret in the provisioner's namespace used to
    /// pull the image, in addition to the class's pull secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub pull_secret: Option<String>,

    /// Namespace given to namespaced objects of the bundle that carry none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub install_namespace: Option<String>,

    /// Names of Bundles that must be Ready before this one is installed or updated. A bundle
    /// waiting on them reports which in its `Ready` condition (reason `DependencyNotReady`);
    /// a missing bundle (`DependencyNotFound`) or a cycle (`DependencyCycle`) is reported too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub depends_on: Vec<String>,

    /// When true, Gantry stops reconciling the bundle: nothing is pulled, applied, pruned or
    /// repaired until it is false again. Deleting a suspended bundle still uninstalls it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,

    /// Whether `Ready` waits for the objects to be healthy, and for how long; each field set
    /// here overrides the class's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::HealthPolicy>,

    /// Health rules in CEL for custom kinds, as Flux's `healthCheckExprs`: for this bundle; a rule here replaces the class's rule for the same kind.
    /// Kinds without a rule are judged by the built-in rules (kstatus). An expression that
    /// does not parse is refused with its position.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub health_check_exprs: Vec<crate::HealthCheckExpr>,

    /// How often a tag is resolved again, as a Go duration (`30s`, `5m`, `1h`): overrides the
    /// provisioner's `--resolve-interval` for this bundle (Flux's `interval`). At least `1s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"),
        extend("x-kubernetes-validations" = [{"rule": "duration(self) >= duration('1s')", "message": "must be at least 1s"}])
    )]
    pub interval: Option<String>,

    /// The longest wait between retries after failures, as a Go duration: overrides the
    /// provisioner's `--backoff-cap` for this bundle (Flux's `retryInterval`). At least `1s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"),
        extend("x-kubernetes-validations" = [{"rule": "duration(self) >= duration('1s')", "message": "must be at least 1s"}])
    )]
    pub retry_interval: Option<String>,

    /// How long applying the objects (waiting for bundled CRDs included) may take before the
    /// attempt fails, as a Go duration: overrides the provisioner's `--apply-timeout` for this
    /// bundle (Flux's `timeout`). At least `1s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        regex(pattern = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"),
        extend("x-kubernetes-validations" = [{"rule": "duration(self) >= duration('1s')", "message": "must be at least 1s"}])
    )]
    pub timeout: Option<String>,

    /// A ServiceAccount in `installNamespace` whose permissions the bundle's objects are
    /// applied with, instead of the class's; only where the class sets
    /// `allowBundleServiceAccount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub service_account_name: Option<String>,

    /// Container images rewritten before the objects are applied, as Kustomize's `images:`:
    /// every container image named `name` gets `newName`, `newTag` or `digest`. The approval
    /// of a digest covers the rewrite it was given with: a change here needs a new approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub images: Vec<crate::ImageOverride>,

    /// What happens when a live object no longer holds what the bundle applied: `Correct`
    /// (default) applies it again; `Report` only reports it (the `Drifted` condition lists the
    /// objects and fields) until the mode changes, new content or spec is applied, or
    /// `kubectl bundle reconcile --force` corrects it once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftMode>,

    /// What happens to the bundle's objects when the Bundle is deleted: `Delete` (default)
    /// deletes them in waves, each gone before the next, a Namespace counting as gone once it
    /// terminates; `Orphan` leaves them in place, no longer labelled as managed;
    /// `WaitForTermination` deletes them as `Delete` does and keeps the Bundle until every one
    /// is gone, Namespaces included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,

    /// JSON patches (RFC 6902) applied to the objects each `target` selects before they are
    /// planned and applied, as Flux's `Kustomization.spec.patches` (JSON 6902 only; no
    /// strategic-merge patches). Patches apply in order, then `images` rewrites. A patch that
    /// cannot be applied fails the bundle and nothing is applied; one that selects no object
    /// is reported in an Event. The approval of a digest covers the patches it was given with:
    /// a change here needs a new approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub patches: Vec<crate::BundlePatch>,

    /// Fields Gantry neither sets nor repairs, because another controller owns them (an HPA's
    /// `/spec/replicas`, a webhook's `caBundle`): JSON pointers, for the objects each `target`
    /// selects. They are left out of the comparison with the live object, and an apply keeps
    /// their live values. The approval of a digest covers the rules it was given with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub ignore: Vec<crate::IgnoreRule>,

    /// Configuration for the class's provisioner, a mapping: a Helm chart's values
    /// (`gantry.dev/helm`), `watchNamespace` (`gantry.dev/registry`). Merged over
    /// `configFrom`, so what is written here wins. `gantry.dev/plain` takes none. The
    /// approval of a digest covers the configuration it was given with (`status.configDigest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::config::config_schema")]
    pub config: Option<serde_json::Map<String, serde_json::Value>>,

    /// Keys of ConfigMaps and Secrets in `installNamespace`, each a YAML or JSON mapping, merged
    /// in order (later ones win, maps merged key by key) under `config`, as Flux's
    /// `valuesFrom`. They are read with the bundle's identity; a change to one is noticed at
    /// once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub config_from: Vec<crate::ConfigSource>,
}

/// `Bundle.spec.ref`: which tag of the repository to install, by version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionRef {
    /// A semantic version range (`>=1.0.0 <2.0.0`, `1.x`, `~1.4`, `^1.2`, `1.2.3`, alternatives
    /// joined by `||`): the highest tag within it is installed. Tags that are not semantic
    /// versions are ignored (a leading `v` is allowed); pre-releases count only when the
    /// range names one.
    #[schemars(length(min = 1, max = 256))]
    pub semver: String,

    /// A regular expression a tag must match before its version is considered, as Flux's
    /// `semverFilter` (`^1\.4\.\d+-rc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub semver_filter: Option<String>,
}

/// Where a bundle stands. Written by the controller, except `approval`, which only approvers write.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// A one-word summary of where the bundle stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BundlePhase>,

    /// The `Ready` condition's message in one short line, for `kubectl get`: its first line,
    /// without the retry note, image references shortened to `name:tag` or
    /// `name@sha256:` and 12 hex digits, at most 100 characters. The condition holds the
    /// whole message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// The ProvisionerClass serving the bundle: the one `spec.provisionerClassName` names, or
    /// the default class when it names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,

    /// With `spec.ref`: the tag the version range last chose, the one `resolvedImage` was
    /// resolved from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_tag: Option<String>,

    /// With `spec.ref`: the semantic version of `resolvedTag` (without a leading `v`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_version: Option<String>,

    /// `repo@sha256:...` of the top-level manifest the image reference last resolved to (the
    /// index digest for multi-platform images): the digest being unpacked, reviewed, applied, or
    /// that failed. Approvals are bound to this digest. The content fields below describe it,
    /// and are absent while its content is not unpacked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_image: Option<String>,

    /// `repo@sha256:...` whose content is installed (the inventory's source), as Flux's
    /// `lastAppliedRevision`. It differs from `resolvedImage` while a new digest is unpacked,
    /// awaits approval, is applied, or failed: the previous content stays installed meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_image: Option<String>,

    /// Digest of the platform image manifest actually unpacked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_digest: Option<String>,

    /// Platform (`os/arch[/variant]`) of the unpacked image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,

    /// URL of the canonical tarball on the storage server.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "contentURL"
    )]
    pub content_url: Option<String>,

    /// `sha256:...` of the canonical tarball.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_digest: Option<String>,

    /// `sha256:…` of the bundle's configuration (`spec.configFrom` merged with `spec.config`),
    /// for a provisioner that takes one: an approval holds only while it is the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_digest: Option<String>,

    /// What rendered the content, for a provisioner other than `gantry.dev/plain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendered: Option<crate::Rendered>,

    /// What the content will create, for approvers to review.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_permissions: Option<RequestedPermissions>,

    /// The approver's decision. Written only by approvers through the status subresource;
    /// the controller never changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,

    /// `sha256:...` of the canonical tarball whose content is installed (`installedImage`'s):
    /// while new content or a new spec fails, drift repair restores the installed objects
    /// from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_content_digest: Option<String>,

    /// The fields of the spec the installed content was applied with, as they were then: drift
    /// repair applies the installed content with them while a new spec fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_spec: Option<InstalledSpec>,

    /// Every object applied for this bundle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,

    /// The health of the inventory's objects at the last assessment: counts per state, and
    /// the objects that are not healthy (failed first, at most 20), so that status stays small
    /// for bundles of thousands of objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_health: Option<ObjectHealth>,

    /// The digests installed, newest first, at most 10: what
    /// `kubectl bundle rollback` may return to. A digest installed again moves to the front.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub history: Vec<HistoryEntry>,

    /// The value of the annotation `gantry.dev/reconcile-requested-at` that the last reconcile
    /// handled (as Flux's `lastHandledReconcileAt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,

    /// `Unpacked`, `Approved`, `Installed`, `Healthy` and the summary `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The fields of a Bundle's spec that make its objects what they are (besides the content):
/// those the installed content was applied with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstalledSpec {
    /// `spec.installNamespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_namespace: Option<String>,
    /// `spec.images`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<crate::ImageOverride>,
    /// `spec.patches`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<crate::BundlePatch>,
    /// `spec.ignore`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<crate::IgnoreRule>,
}

impl InstalledSpec {
    /// These fields of `spec`.
    pub fn of(spec: &BundleSpec) -> Self {
        Self {
            install_namespace: spec.install_namespace.clone(),
            images: spec.images.clone(),
            patches: spec.patches.clone(),
            ignore: spec.ignore.clone(),
        }
    }
}

/// A one-word summary of a bundle's state.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum BundlePhase {
    Pending,
    Unpacking,
    AwaitingApproval,
    Installing,
    Installed,
    Failing,
    /// New content (a new digest or spec) failed before it was applied, and the previous
    /// content stays installed (`Installed=True` names it, `Ready=False` the failure).
    UpdateFailing,
    Denied,
    Deleting,
}

impl BundlePhase {
    /// The phase as it appears in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Unpacking => "Unpacking",
            Self::AwaitingApproval => "AwaitingApproval",
            Self::Installing => "Installing",
            Self::Installed => "Installed",
            Self::Failing => "Failing",
            Self::UpdateFailing => "UpdateFailing",
            Self::Denied => "Denied",
            Self::Deleting => "Deleting",
        }
    }
}

impl std::fmt::Display for BundlePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a bundle's content creates: what an approver reviews.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestedPermissions {
    /// Cluster-scoped kinds with their counts.
    #[serde(default)]
    pub cluster_scoped: Vec<KindCount>,
    /// Namespaced kinds with their counts, per namespace.
    #[serde(default)]
    pub namespaced: Vec<NamespacePermissions>,
    /// Objects that deserve an approver's attention, each with why: RBAC granting `*`,
    /// `escalate`, `bind` or `impersonate`, bindings to cluster-admin-like roles, CRDs,
    /// admission webhooks and policies, objects outside `installNamespace`, in `kube-system` or
    /// in the provisioner's namespace, privileged workloads or ones using host namespaces or
    /// paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub highlights: Vec<PermissionHighlight>,
    /// The ServiceAccount the objects are applied as; absent: the provisioner's own identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<crate::ServiceAccountReference>,
}

/// How many objects of one kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KindCount {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub count: i64,
}

/// Namespaced kinds of one namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespacePermissions {
    pub namespace: String,
    pub kinds: Vec<KindCount>,
}

/// One object an approver should look at, and why.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionHighlight {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// Why the object deserves attention.
    pub reason: String,
}

/// An approver's decision on one resolved digest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub decision: ApprovalDecision,
    /// The digest (`sha256:...`) of `status.resolvedImage` the decision is about.
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub digest: String,
    /// Why the approver decided so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// When the decision was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// Who decided: the username the API server authenticated for the credentials that wrote
    /// the decision, as a SelfSubjectReview made with them reports it. Absent when the API
    /// server would not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub approved_by: Option<String>,
    /// `spec.images` when the decision was made: an approval holds only while they are the
    /// same (the approved objects are the ones that run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub images: Vec<crate::ImageOverride>,
    /// `spec.patches` when the decision was made: an approval holds only while they are the
    /// same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub patches: Vec<crate::BundlePatch>,
    /// `spec.ignore` when the decision was made: an approval holds only while it is the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub ignore: Vec<crate::IgnoreRule>,
    /// `status.configDigest` when the decision was made: an approval holds only while the
    /// configuration is the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub config_digest: Option<String>,
    /// `status.contentDigest` when the decision was made, for content a provisioner rendered
    /// (`status.rendered`): an approval holds only while the rendered objects are the same, so
    /// a new version of the provisioner that renders other objects needs a new decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub content_digest: Option<String>,
}

impl Approval {
    /// A decision on `digest` and nothing else: no reason, time, approver or spec fields.
    pub fn of(decision: ApprovalDecision, digest: &str) -> Self {
        Approval {
            decision,
            digest: digest.into(),
            reason: None,
            time: None,
            approved_by: None,
            images: Vec::new(),
            patches: Vec::new(),
            ignore: Vec::new(),
            config_digest: None,
            content_digest: None,
        }
    }
}

/// An approver's decision.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ApprovalDecision {
    Approved,
    Denied,
}

/// One object applied for a bundle.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

/// `Bundle.spec.drift`: what a drifted object gets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DriftMode {
    /// Applied again (Flux's and Argo CD's self-heal).
    #[default]
    Correct,
    /// Reported in the `Drifted` condition, left as it is.
    Report,
}

/// `Bundle.spec.deletionPolicy`: what happens to a bundle's objects when the Bundle is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Deleted in waves; the Bundle goes once they are gone, a Namespace once it terminates.
    #[default]
    Delete,
    /// Left in place without the `gantry.dev/bundle` label, so nothing manages them any more.
    Orphan,
    /// Deleted as with `Delete`; the Bundle goes only once every object is gone, Namespaces
    /// included.
    WaitForTermination,
}

/// How many objects `status.objectHealth.notHealthy` lists.
pub const NOT_HEALTHY_LIMIT: usize = 20;

/// The health of a bundle's objects (`status.objectHealth`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectHealth {
    /// Objects that are healthy (kstatus `Current`, or their CEL rule's `current`).
    pub healthy: i64,
    /// Objects on their way: not healthy yet, nothing says they failed.
    pub progressing: i64,
    /// Objects that failed (a failed Job or Pod, a stalled resource, a rule's `failed`).
    pub failed: i64,
    /// The objects that are not healthy, failed first, then in inventory order; at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub not_healthy: Vec<NotHealthyObject>,
}

/// One object that is not healthy, and why.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotHealthyObject {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// `Progressing` or `Failed`.
    pub state: String,
    /// Why, as the health rules say it (at most 512 characters).
    pub message: String,
}

impl NotHealthyObject {
    /// Whether this is the inventory entry `entry`.
    pub fn is(&self, entry: &InventoryEntry) -> bool {
        self.group == entry.group
            && self.kind == entry.kind
            && self.namespace == entry.namespace
            && self.name == entry.name
    }
}

/// How many entries `status.history` keeps.
pub const HISTORY_LIMIT: usize = 10;

/// One digest that was installed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// `repo@sha256:...` that was installed: what a rollback pins `spec.image` to.
    pub image: String,
    /// Its digest (`sha256:...`).
    pub digest: String,
    /// With `spec.ref`: the tag the version range chose for it (`status.resolvedTag` then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// When its content was installed.
    pub installed_at: Time,
    /// How it was approved: `Automatic` (the class approves every digest) or `Manual` (an
    /// approver's decision).
    pub approval: HistoryApproval,
    /// When the approver decided (`Manual` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<Time>,
    /// The approver's reason (`Manual` only, when one was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_reason: Option<String>,
    /// Who approved (`Manual` only, when the approval names them): the approval's
    /// `approvedBy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

/// How an installed digest was approved.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum HistoryApproval {
    Automatic,
    Manual,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ref_is_spelled_as_flux_spells_it() {
        let spec: BundleSpec = serde_json::from_value(serde_json::json!({
            "image": "registry.example/team/app",
            "ref": {"semver": ">=1.0.0 <2.0.0", "semverFilter": "^v?1\\."}
        }))
        .unwrap();
        let version = spec.r#ref.as_ref().unwrap();
        assert_eq!(version.semver, ">=1.0.0 <2.0.0");
        assert_eq!(version.semver_filter.as_deref(), Some("^v?1\\."));
        let back = serde_json::to_value(&spec).unwrap();
        assert_eq!(back["ref"]["semverFilter"], "^v?1\\.");
    }
}
