//! The full parse of a bundle's files into [`BundleObject`]s, for applying them.

use serde_json::Value;

use super::rules::{self, Document, Field, Fields, ItemsShape, Metadata};
use crate::error::ImageError;
use crate::limits::EffectiveLimits;

/// One object of a bundle, as read back for applying.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleObject {
    pub file: String,
    pub document: usize,
    pub item: Option<usize>,
    pub object: Value,
}

impl BundleObject {
    /// The object as a `kube` dynamic object (for server-side apply).
    pub fn to_dynamic(&self) -> Result<kube::api::DynamicObject, ImageError> {
        serde_json::from_value(self.object.clone()).map_err(|e| ImageError::InvalidObject {
            file: self.file.clone(),
            document: self.document,
            reason: e.to_string(),
        })
    }
}

/// Parses one file into its objects (for applying).
pub fn parse_file(
    file: &str,
    content: &[u8],
    limits: &EffectiveLimits,
) -> Result<Vec<BundleObject>, ImageError> {
    let docs: Vec<Value> = rules::documents(file, content, limits)?;
    rules::flatten_file(
        file,
        docs,
        |object, place, _| BundleObject {
            file: file.to_string(),
            document: place.document,
            item: place.item,
            object,
        },
        |_, _| Ok(()),
    )
}

fn field(value: Option<&Value>) -> Field<'_> {
    match value {
        None => Field::Missing,
        Some(Value::Null) => Field::Null,
        Some(Value::String(s)) => Field::Str(s),
        Some(_) => Field::Other,
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
                },
                Some(_) => Metadata::Other,
            },
            items: match map.get("items") {
                None | Some(Value::Null) => ItemsShape::Absent,
                Some(Value::Array(_)) => ItemsShape::Sequence,
                Some(_) => ItemsShape::Other,
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
