//! The provisioner plugin contract, version `v1` (docs/plugins.md): the documents of its three
//! calls, `identity`, `probe` and `render`. Their JSON schema is docs/plugins/v1.schema.json;
//! the tests below hold these types, the schema and the page's examples to one another.

use serde::{Deserialize, Serialize};

/// The contract version these types speak.
pub const CONTRACT: &str = "v1";

/// The path prefix of every call of this version.
pub const PATH_PREFIX: &str = "/gantry.dev/v1";

/// The audience of the token Gantry presents to a plugin.
pub const TOKEN_AUDIENCE: &str = "gantry.dev/provisioner-plugin";

/// The label that makes a Service in the provisioner's namespace a plugin.
pub const PLUGIN_LABEL: &str = "gantry.dev/provisioner-plugin";

/// The annotation on a plugin's Service naming the provisioner ID it serves.
pub const PROVISIONER_ANNOTATION: &str = "gantry.dev/provisioner";

/// The annotation on a plugin's Service naming the Secret whose `ca.crt` verifies it.
pub const CA_ANNOTATION: &str = "gantry.dev/provisioner-ca";

/// `GET /gantry.dev/v1/identity`: who the plugin is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Identity {
    pub contract: String,
    /// The provisioner ID classes name (`gantry.dev/helm`).
    pub id: String,
    /// The plugin's version; part of every rendered content's digest.
    pub version: String,
    /// The OCI config media types of the content it accepts.
    pub media_types: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<Capability>,
}

/// Optional behaviour a plugin declares; Gantry relies on none it did not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Capability {
    /// Objects carry a wave.
    Waves,
    /// Answers carry notes for the user.
    Notes,
}

/// `GET /gantry.dev/v1/probe`: whether the plugin can render now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Probe {
    pub ready: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `POST /gantry.dev/v1/render`: one piece of content and one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenderRequest {
    pub contract: String,
    pub content: Content,
    /// The bundle's configuration, merged: a JSON object (`{}` when there is none).
    pub config: serde_json::Map<String, serde_json::Value>,
    pub release: Release,
    pub cluster: Cluster,
}

/// The content as Gantry fetched and verified it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Content {
    /// The manifest's config media type.
    pub media_type: String,
    /// The manifest's digest.
    pub digest: String,
    pub layers: Vec<Layer>,
    /// The config blob, base64.
    pub config: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Layer {
    pub media_type: String,
    pub digest: String,
    /// The layer's bytes, base64.
    pub data: String,
}

/// The release facts a renderer needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Release {
    /// The Bundle's name.
    pub name: String,
    /// The Bundle's install namespace.
    pub namespace: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cluster {
    /// The API server's `gitVersion`.
    pub version: String,
    /// Every served `group/version`, and `group/version/Kind` for each kind.
    pub api_versions: Vec<String>,
}

/// The answer to a render, `200`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenderResponse {
    /// The objects, in the order to apply them.
    pub objects: Vec<RenderedObject>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenderedObject {
    /// A whole Kubernetes object.
    pub object: serde_json::Map<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// Its wave (capability `waves`); 0 when absent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wave: u32,
}

fn is_zero(wave: &u32) -> bool {
    *wave == 0
}

/// Where an object, or an error, came from in the content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Source {
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// A failed call's answer: `422` (retrying the same input cannot help) or `503`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorResponse {
    pub error: PluginError,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginError {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Whether a retry of the same input can help; `false` makes the bundle `Stalled`.
    pub retryable: bool,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    use super::*;

    fn schema() -> Value {
        let text = include_str!("../../docs/plugins/v1.schema.json");
        serde_json::from_str(text).expect("docs/plugins/v1.schema.json is JSON")
    }

    /// The ```json examples of docs/plugins.md, in order.
    fn examples() -> Vec<Value> {
        let page = include_str!("../../docs/plugins.md");
        page.split("```json\n")
            .skip(1)
            .map(|rest| {
                let block = rest.split("```").next().unwrap();
                serde_json::from_str(block).unwrap_or_else(|e| panic!("{e}: {block}"))
            })
            .collect()
    }

    /// `example` read as `T` and written back is the same document: no field the type lacks.
    fn round_trips<T: Serialize + DeserializeOwned>(example: &Value) -> T {
        let typed: T =
            serde_json::from_value(example.clone()).unwrap_or_else(|e| panic!("{e}: {example:#}"));
        assert_eq!(&serde_json::to_value(&typed).unwrap(), example);
        typed
    }

    #[test]
    fn the_pages_examples_are_documents_of_the_contract() {
        let examples = examples();
        assert_eq!(
            examples.len(),
            5,
            "identity, probe, render request, answer, error"
        );
        let identity: Identity = round_trips(&examples[0]);
        assert_eq!(identity.contract, CONTRACT);
        round_trips::<Probe>(&examples[1]);
        let request: RenderRequest = round_trips(&examples[2]);
        assert_eq!(request.contract, CONTRACT);
        round_trips::<RenderResponse>(&examples[3]);
        let error: ErrorResponse = round_trips(&examples[4]);
        assert!(!error.error.retryable);
    }

    /// The keys a schema definition (at `pointer`) allows, and those it requires.
    fn keys(schema: &Value, pointer: &str) -> (BTreeSet<String>, BTreeSet<String>) {
        let definition = schema
            .pointer(pointer)
            .unwrap_or_else(|| panic!("{pointer}"));
        let allowed = definition["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let required = definition["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().to_string())
            .collect();
        (allowed, required)
    }

    fn object_keys(value: &Value) -> BTreeSet<String> {
        value.as_object().unwrap().keys().cloned().collect()
    }

    /// Each type writes exactly the keys its schema definition allows when every field is set,
    /// and exactly the required ones when every optional field is left out.
    #[test]
    fn the_types_and_the_schema_name_the_same_fields() {
        let schema = schema();
        let source = Source {
            file: "templates/a.yaml".into(),
            line: Some(3),
        };
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "/$defs/identity",
                serde_json::to_value(Identity {
                    contract: CONTRACT.into(),
                    id: "gantry.dev/helm".into(),
                    version: "1.0.0".into(),
                    media_types: vec!["a".into()],
                    capabilities: vec![Capability::Waves],
                })
                .unwrap(),
                serde_json::to_value(Identity {
                    contract: CONTRACT.into(),
                    id: "gantry.dev/helm".into(),
                    version: "1.0.0".into(),
                    media_types: vec!["a".into()],
                    capabilities: vec![],
                })
                .unwrap(),
            ),
            (
                "/$defs/probe",
                serde_json::to_value(Probe {
                    ready: false,
                    message: "warming".into(),
                })
                .unwrap(),
                serde_json::to_value(Probe {
                    ready: true,
                    message: String::new(),
                })
                .unwrap(),
            ),
            (
                "/$defs/renderResponse/properties/objects/items",
                serde_json::to_value(RenderedObject {
                    object: object.as_object().unwrap().clone(),
                    source: Some(source.clone()),
                    wave: 2,
                })
                .unwrap(),
                serde_json::to_value(RenderedObject {
                    object: object.as_object().unwrap().clone(),
                    source: None,
                    wave: 0,
                })
                .unwrap(),
            ),
            (
                "/$defs/renderResponse/properties/objects/items/properties/source",
                serde_json::to_value(&source).unwrap(),
                serde_json::to_value(Source {
                    file: "a".into(),
                    line: None,
                })
                .unwrap(),
            ),
            (
                "/$defs/renderResponse",
                serde_json::to_value(RenderResponse {
                    objects: vec![],
                    warnings: vec!["w".into()],
                    notes: "n".into(),
                })
                .unwrap(),
                serde_json::to_value(RenderResponse {
                    objects: vec![],
                    warnings: vec![],
                    notes: String::new(),
                })
                .unwrap(),
            ),
            (
                "/$defs/error/properties/error",
                serde_json::to_value(PluginError {
                    message: "m".into(),
                    file: Some("f".into()),
                    line: Some(1),
                    retryable: true,
                })
                .unwrap(),
                serde_json::to_value(PluginError {
                    message: "m".into(),
                    file: None,
                    line: None,
                    retryable: true,
                })
                .unwrap(),
            ),
        ];
        for (pointer, full, minimal) in cases {
            let (allowed, required) = keys(&schema, pointer);
            assert_eq!(object_keys(&full), allowed, "{pointer}: every field set");
            assert_eq!(
                object_keys(&minimal),
                required,
                "{pointer}: only what is required"
            );
        }
        // The request has no optional field: the page's example sets them all.
        let request = &examples()[2];
        for (pointer, value) in [
            ("/$defs/renderRequest", request.clone()),
            (
                "/$defs/renderRequest/properties/content",
                request["content"].clone(),
            ),
            (
                "/$defs/renderRequest/properties/content/properties/layers/items",
                request["content"]["layers"][0].clone(),
            ),
            (
                "/$defs/renderRequest/properties/release",
                request["release"].clone(),
            ),
            (
                "/$defs/renderRequest/properties/cluster",
                request["cluster"].clone(),
            ),
        ] {
            let (allowed, required) = keys(&schema, pointer);
            assert_eq!(allowed, required, "{pointer}: nothing optional");
            assert_eq!(object_keys(&value), allowed, "{pointer}");
        }
        assert_eq!(
            schema.pointer("/$defs/identity/properties/contract/const"),
            Some(&json!(CONTRACT))
        );
        let capabilities: Vec<Value> = [Capability::Waves, Capability::Notes]
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        assert_eq!(
            schema.pointer("/$defs/identity/properties/capabilities/items/enum"),
            Some(&Value::Array(capabilities))
        );
    }
}
