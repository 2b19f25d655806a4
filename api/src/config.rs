//! A bundle's configuration, handed to its class's provisioner: `spec.config` (inline) and
//! `spec.configFrom[]` (keys of ConfigMaps and Secrets), and what status records of the
//! rendering.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The key of a ConfigMap or Secret read when `key` is not given, as Flux's `valuesKey`.
pub const DEFAULT_CONFIG_KEY: &str = "values.yaml";

/// Where part of a bundle's configuration comes from: one key of a ConfigMap or Secret in the
/// bundle's `installNamespace`, holding a YAML or JSON mapping.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSource {
    pub kind: ConfigSourceKind,
    /// The ConfigMap's or Secret's name.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// The key holding the mapping (default `values.yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: Option<String>,
    /// When true, a missing object or key counts as an empty mapping instead of failing the
    /// bundle.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

impl ConfigSource {
    /// The key read.
    pub fn key(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_CONFIG_KEY)
    }

    /// `ConfigMap/name[key]`, as messages name it.
    pub fn describe(&self) -> String {
        format!("{:?}/{}[{}]", self.kind, self.name, self.key())
    }
}

/// The kind of object a [`ConfigSource`] reads.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConfigSourceKind {
    ConfigMap,
    Secret,
}

/// What rendered the content a bundle's status describes: a provisioner other than
/// `gantry.dev/plain` turned the image's content and the configuration into objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rendered {
    /// The provisioner's ID (`gantry.dev/registry`, `gantry.dev/helm`).
    pub provisioner: String,
    /// The provisioner's version: part of the content's digest.
    pub version: String,
    /// What was rendered, by its own name and version: the chart (`metrics-server 3.12.2`),
    /// the operator's ClusterServiceVersion (`argocd-operator.v0.6.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// `sha256:…` of everything the rendering depended on: the image digest, the
    /// configuration's digest, the release (bundle name, install namespace) and the
    /// provisioner's ID and version. Content is rendered again only when it changes.
    pub input_digest: String,
    /// Text for the user from the provisioner (a chart's `NOTES.txt`), cut to 4 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// What the provisioner warned of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The longest `status.rendered.notes` kept.
pub const NOTES_LIMIT: usize = 4096;

/// `spec.config`'s schema: any mapping, kept as written.
pub(crate) fn config_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}
