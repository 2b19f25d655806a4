//! The `ProvisionerClass` resource: how a set of bundles is provisioned.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the bundles of a class are pulled, approved and limited.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "gantry.dev",
    version = "v1alpha1",
    kind = "ProvisionerClass",
    plural = "provisionerclasses",
    singular = "provisionerclass",
    category = "gantry",
    status = "ProvisionerClassStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A ProvisionerClass says which provisioner serves its bundles and with which parameters.",
    printcolumn = r#"{"name":"Provisioner","type":"string","jsonPath":".spec.provisioner"}"#,
    printcolumn = r#"{"name":"Approval","type":"string","jsonPath":".spec.approval"}"#,
    printcolumn = r#"{"name":"Default","type":"string","jsonPath":".metadata.annotations.gantry\\.dev/is-default-class"}"#,
    printcolumn = r#"{"name":"Accepted","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionerClassSpec {
    /// ID of the provisioner serving this class; Gantry's plain provisioner is `gantry.dev/plain`.
    /// Classes naming another ID are left to that provisioner.
    #[schemars(
        length(min = 1, max = 253),
        regex(
            pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
        )
    )]
    pub provisioner: String,

    /// `Automatic` installs every resolved digest; `Manual` waits for an approver.
    #[serde(default)]
    pub approval: ApprovalPolicy,

    /// When true, bundles must name their image by digest.
    #[serde(default)]
    pub require_digest: bool,

    /// Platform (`os/arch[/variant]`) selected from image indexes; defaults to the provisioner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$"))]
    pub platform: Option<String>,

    /// Names of `kubernetes.io/dockerconfigjson` secrets in the provisioner's namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1, max = 253)))]
    pub pull_secrets: Vec<String>,

    /// Registries (`host[:port]`) reached over plain HTTP instead of TLS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1, max = 253), regex(pattern = r"^[^\s/]+$")))]
    pub insecure_registries: Vec<String>,

    /// A secret in the provisioner's namespace whose `ca.crt` is trusted for registry TLS.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "registryCASecret"
    )]
    #[schemars(length(min = 1, max = 253))]
    pub registry_ca_secret: Option<String>,

    /// Limits on the content of bundles; absent fields take safe defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,

    /// How bundle images are pulled: `Direct` (the provisioner asks the registry) or `Node`
    /// (an unpack Pod runs the image, pulled by the node's container runtime).
    #[serde(default, skip_serializing_if = "PullMode::is_direct")]
    pub pull_mode: PullMode,

    /// Whether `Ready` waits for a bundle's objects to be healthy, and for how long (default:
    /// `wait: false`, `timeout: 5m`); a bundle's `spec.health` overrides each field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::HealthPolicy>,

    /// Health rules in CEL for custom kinds, as Flux's `healthCheckExprs`: for the class's bundles.
    /// Kinds without a rule are judged by the built-in rules (kstatus). An expression that
    /// does not parse is refused with its position.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub health_check_exprs: Vec<crate::HealthCheckExpr>,

    /// Signatures every resolved digest must carry before its content is stored or applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verification>,

    /// The ServiceAccount whose permissions every read, apply, prune and delete of the class's
    /// bundles' objects uses: the provisioner impersonates it. When absent, the provisioner's
    /// `--default-service-account`, else its own identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<crate::ServiceAccountReference>,

    /// When true, a bundle may name its own ServiceAccount (`spec.serviceAccountName`, in its
    /// `installNamespace`), used instead of the class's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_bundle_service_account: bool,

    /// Registries (`host[:port]`) or repository prefixes (`host[:port]/path`) bundles may name;
    /// a prefix matches whole path segments. Empty: any image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1, max = 512), regex(pattern = r"^[^\s@]+$")))]
    pub allowed_images: Vec<String>,
}

/// Who pulls a bundle's image.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PullMode {
    /// The provisioner pulls from the registry itself.
    #[default]
    Direct,
    /// The node's container runtime pulls the image for an unpack Pod.
    Node,
}

impl PullMode {
    /// Whether this is the default, `Direct`.
    pub fn is_direct(&self) -> bool {
        *self == PullMode::Direct
    }
}

/// Whether installs wait for an approver.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ApprovalPolicy {
    #[default]
    Automatic,
    Manual,
}

/// Limits enforced while a bundle's image is streamed; a bundle over any of them is rejected.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Total compressed bytes of the image's layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_compressed_bytes: Option<i64>,
    /// Total uncompressed bytes of the image's layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_uncompressed_bytes: Option<i64>,
    /// Number of files under `manifests/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_files: Option<i64>,
    /// Size of one file under `manifests/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_file_bytes: Option<i64>,
    /// Number of objects in the bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_objects: Option<i64>,
}

/// Whether the class's parameters were accepted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionerClassStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// How the signatures of a class's images are verified (as Flux's `OCIRepository.spec.verify`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    /// The signature format: `cosign` (the only one, and the default).
    #[serde(default)]
    pub provider: VerificationProvider,
    /// A Secret in the provisioner's namespace whose `*.pub` entries are the trusted public
    /// keys (PEM); a signature by any one of them is enough.
    pub secret_ref: SecretReference,
}

/// Who made the signatures being verified.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum VerificationProvider {
    /// Cosign signatures by a key pair: Sigstore bundles attached as OCI referrers (what cosign
    /// 3 writes) or `sha256-<digest>.sig` signature images (cosign 2). Keyless signatures are
    /// not verified.
    #[default]
    #[serde(rename = "cosign")]
    Cosign,
}

/// The name of a Secret in the provisioner's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretReference {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}
