//! A bundle's configuration: `spec.configFrom[]` merged in order, then `spec.config` over
//! them, as Flux merges a HelmRelease's `valuesFrom` and `values`; its digest, which an
//! approval records; and the digest of everything a rendering depends on.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Merges `over` into `base`: a mapping in both is merged key by key, anything else in `over`
/// replaces what `base` has (Helm's coalescing of values files, and Flux's of `valuesFrom`).
pub fn merge(base: &mut Map<String, Value>, over: Map<String, Value>) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(Value::Object(into)), Value::Object(from)) => merge(into, from),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The configuration of `sources` (in order) under `inline`.
pub fn merged(
    sources: impl IntoIterator<Item = Map<String, Value>>,
    inline: Option<&Map<String, Value>>,
) -> Map<String, Value> {
    let mut config = Map::new();
    for source in sources {
        merge(&mut config, source);
    }
    if let Some(inline) = inline {
        merge(&mut config, inline.clone());
    }
    config
}

/// `sha256:…` of `config` as JSON with every mapping's keys sorted (as Go writes it), so that the digest
/// depends on the configuration only, not on the order it was written in.
pub fn digest(config: &Map<String, Value>) -> String {
    let mut hasher = Sha256::new();
    // Go's encoding/json sorts keys: the text depends on the configuration only.
    let text = crate::go_json::to_string(&Value::Object(config.clone()));
    hasher.update(text.as_bytes());
    format!("sha256:{}", hex(&hasher.finalize()))
}

/// What a rendering depends on: content rendered with the same input is the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderInput<'a> {
    /// `sha256:…` of the image the content came from.
    pub source_digest: &'a str,
    /// [`digest`] of the configuration.
    pub config_digest: &'a str,
    pub release_name: &'a str,
    pub release_namespace: &'a str,
    pub provisioner: &'a str,
    pub provisioner_version: &'a str,
}

impl RenderInput<'_> {
    /// `sha256:…` of the input (`status.rendered.inputDigest`).
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [
            self.source_digest,
            self.config_digest,
            self.release_name,
            self.release_namespace,
            self.provisioner,
            self.provisioner_version,
        ] {
            // Each part with its length first, so no two inputs write the same bytes.
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        format!("sha256:{}", hex(&hasher.finalize()))
    }

    /// The comment heading each rendered file: what the content was rendered from, so that
    /// the content's digest covers it. Not the provisioner's version: a new version that
    /// renders the same objects gives the same content (and its approval holds), one that
    /// renders others gives new content.
    pub fn header(&self) -> String {
        format!(
            "# Rendered by {} from {} with configuration {} for release {} in namespace {}.\n",
            self.provisioner,
            self.source_digest,
            self.config_digest,
            self.release_name,
            self.release_namespace,
        )
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn later_sources_win_and_mappings_merge_key_by_key() {
        let config = merged(
            [
                map(
                    json!({"image": {"tag": "1", "repository": "a"}, "replicas": 1, "list": [1, 2]}),
                ),
                map(json!({"image": {"tag": "2"}, "list": [3]})),
            ],
            Some(&map(
                json!({"replicas": 3, "image": {"pullPolicy": "Always"}}),
            )),
        );
        assert_eq!(
            Value::Object(config),
            json!({"image": {"tag": "2", "repository": "a", "pullPolicy": "Always"}, "replicas": 3, "list": [3]})
        );
    }

    #[test]
    fn a_mapping_replaces_a_scalar_and_a_scalar_a_mapping() {
        let config = merged(
            [map(json!({"a": 1, "b": {"c": 1}}))],
            Some(&map(json!({"a": {"x": 1}, "b": null}))),
        );
        assert_eq!(Value::Object(config), json!({"a": {"x": 1}, "b": null}));
    }

    #[test]
    fn the_digest_ignores_key_order_and_sees_every_value() {
        let a = map(json!({"b": 1, "a": {"y": [1, "x"], "x": true}}));
        let b = map(json!({"a": {"x": true, "y": [1, "x"]}, "b": 1}));
        assert_eq!(digest(&a), digest(&b));
        let c = map(json!({"a": {"x": true, "y": [1, "y"]}, "b": 1}));
        assert_ne!(digest(&a), digest(&c));
        assert_eq!(
            digest(&Map::new()),
            format!("sha256:{}", hex(&Sha256::digest(b"{}")))
        );
    }

    #[test]
    fn every_part_of_the_input_changes_its_digest() {
        let input = RenderInput {
            source_digest: "sha256:a",
            config_digest: "sha256:b",
            release_name: "r",
            release_namespace: "ns",
            provisioner: "gantry.dev/registry",
            provisioner_version: "0.1.0",
        };
        let base = input.digest();
        let variants = [
            RenderInput {
                source_digest: "sha256:x",
                ..input.clone()
            },
            RenderInput {
                config_digest: "sha256:x",
                ..input.clone()
            },
            RenderInput {
                release_name: "x",
                ..input.clone()
            },
            RenderInput {
                release_namespace: "x",
                ..input.clone()
            },
            RenderInput {
                provisioner: "x",
                ..input.clone()
            },
            RenderInput {
                provisioner_version: "0.1.1",
                ..input.clone()
            },
            // The parts are not simply concatenated.
            RenderInput {
                release_name: "rn",
                release_namespace: "s",
                ..input.clone()
            },
        ];
        for variant in variants {
            assert_ne!(variant.digest(), base, "{variant:?}");
        }
        assert!(input.header().contains("gantry.dev/registry from sha256:a"));
        let upgraded = RenderInput {
            provisioner_version: "0.2.0",
            ..input.clone()
        };
        assert_eq!(upgraded.header(), input.header());
    }
}
