//! The full parse of a bundle's files into [`BundleObject`]s, for applying them.

use serde_json::Value;
use serde_json::value::RawValue;

use super::ObjectSummary;
use super::fields::{Field, Fields, ItemsShape, Metadata, Spec, StrMap};
use super::rules::{self, Document};
use crate::error::ImageError;
use crate::limits::EffectiveLimits;

/// One object of a bundle, as read back for applying.
#[derive(Debug, Clone)]
pub struct BundleObject {
    /// What identifies it, and where it is.
    pub summary: ObjectSummary,
    /// The whole object as compact JSON text. Held as a `Value` tree, a bundle of large CRDs
    /// takes several times its size in memory; readers parse what they need when they need it.
    pub object: Box<RawValue>,
}

impl PartialEq for BundleObject {
    fn eq(&self, other: &Self) -> bool {
        self.summary == other.summary && self.object.get() == other.object.get()
    }
}

impl BundleObject {
    /// The object as a JSON value tree.
    pub fn value(&self) -> Result<Value, ImageError> {
        serde_json::from_str(self.object.get()).map_err(|e| self.invalid(e))
    }

    /// The object as a `kube` dynamic object (for server-side apply).
    pub fn to_dynamic(&self) -> Result<kube::api::DynamicObject, ImageError> {
        serde_json::from_str(self.object.get()).map_err(|e| self.invalid(e))
    }

    fn invalid(&self, error: serde_json::Error) -> ImageError {
        ImageError::InvalidObject {
            file: self.summary.file.clone(),
            document: self.summary.document,
            object: None,
            reason: error.to_string(),
        }
    }
}

/// Parses one file into its objects (for applying).
pub fn parse_file(
    file: &str,
    content: &[u8],
    limits: &EffectiveLimits,
) -> Result<Vec<BundleObject>, ImageError> {
    // Each tree becomes compact text as soon as it is checked, and is dropped.
    rules::read_file::<Value, _>(
        file,
        content,
        limits,
        |object, place, identity| {
            let object = serde_json::value::to_raw_value(&object).map_err(|e| {
                ImageError::InvalidObject {
                    file: file.to_string(),
                    document: place.document,
                    object: None,
                    reason: e.to_string(),
                }
            })?;
            Ok(BundleObject {
                summary: ObjectSummary::at(file, place, identity),
                object,
            })
        },
        |_, _| Ok(()),
    )?
    .into_iter()
    .collect()
}

fn field(value: Option<&Value>) -> Field<'_> {
    match value {
        None => Field::Missing,
        Some(Value::Null) => Field::Null,
        Some(Value::String(s)) => Field::Str(s),
        Some(_) => Field::Other,
    }
}

fn str_map(value: Option<&Value>) -> StrMap<'_> {
    match value {
        None | Some(Value::Null) => StrMap::Absent,
        Some(Value::Object(map)) => StrMap::Entries(
            map.iter()
                .map(|(key, value)| (key.as_str(), field(Some(value))))
                .collect(),
        ),
        Some(_) => StrMap::Other,
    }
}

impl Document for Value {
    fn fields(&self) -> Option<Fields<'_>> {
        let map = self.as_object()?;
        Some(Fields {
            api_version: field(map.get("apiVersion")),
            kind: field(map.get("kind")),
            metadata: match map.get("metadata") {
                None => Metadata::Missing,
                Some(Value::Null) => Metadata::Null,
                Some(Value::Object(meta)) => Metadata::Mapping {
                    name: field(meta.get("name")),
                    namespace: field(meta.get("namespace")),
                    labels: str_map(meta.get("labels")),
                    annotations: str_map(meta.get("annotations")),
                },
                Some(_) => Metadata::Other,
            },
            items: match map.get("items") {
                None | Some(Value::Null) => ItemsShape::Absent,
                Some(Value::Array(_)) => ItemsShape::Sequence,
                Some(_) => ItemsShape::Other,
            },
            spec: match map.get("spec") {
                Some(Value::Object(spec)) => Spec {
                    group: field(spec.get("group")),
                    version: field(spec.get("version")),
                    plural: field(spec.get("names").and_then(|names| names.get("plural"))),
                },
                _ => Spec::default(),
            },
        })
    }

    fn into_items(self) -> Vec<Self> {
        match self {
            Value::Object(mut map) => match map.remove("items") {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }
}
