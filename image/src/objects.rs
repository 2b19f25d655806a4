//! Parsing and validation of the objects of a bundle: multi-document YAML and `v1 List`
//! flattened, empty documents skipped, `apiVersion`, `kind` and `metadata.name` required,
//! no object twice.
//!
//! Validation walks each document without building it in memory (only the identifying fields
//! are kept), yet accepts exactly what [`parse_file`] later accepts, because both go through
//! the same deserializers and the walk rejects what `serde_json::Value` rejects.

use std::collections::HashSet;
use std::fmt;
use std::io::Read;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::error::ImageError;
use super::layer::BundleFiles;
use super::limits::{EffectiveLimits, LimitKind};

/// What identifies one object of a bundle, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSummary {
    pub file: String,
    /// Index (from 0) of the document among the file's non-empty documents.
    pub document: usize,
    /// Index in `items` when the document is a `v1 List`.
    pub item: Option<usize>,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
}

impl ObjectSummary {
    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }
}

/// One object of a bundle, as read back for applying.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleObject {
    pub file: String,
    pub document: usize,
    pub item: Option<usize>,
    pub object: serde_json::Value,
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

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

fn is_json(file: &str) -> bool {
    file.to_ascii_lowercase().ends_with(".json")
}

/// The YAML parser's own resource budget, scaled to our limits.
fn yaml_options(limits: &EffectiveLimits) -> serde_saphyr::Options {
    let bytes = usize::try_from(limits.max_file_bytes).unwrap_or(usize::MAX);
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = budget.max_events.max(bytes);
    budget.max_nodes = budget.max_nodes.max(bytes);
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(bytes);
    budget.max_documents = budget.max_documents.max(
        usize::try_from(limits.max_objects)
            .unwrap_or(usize::MAX)
            .saturating_add(1),
    );
    budget.max_depth = 128;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.with_snippet = false;
    // Comments are not kept: the parser need not collect them.
    options.emit_comments = false;
    options
}

fn yaml_error(file: &str, error: &serde_saphyr::Error) -> ImageError {
    ImageError::InvalidYaml {
        file: file.to_string(),
        line: error.location().map(|l| l.line()),
        message: error.without_snippet().to_string(),
    }
}

fn json_error(file: &str, error: &serde_json::Error) -> ImageError {
    ImageError::InvalidYaml {
        file: file.to_string(),
        line: Some(error.line() as u64),
        message: error.to_string(),
    }
}

/// Documents of one file, in order, empty ones skipped.
fn documents<'de, T: Deserialize<'de>>(
    file: &str,
    content: &'de [u8],
    limits: &EffectiveLimits,
) -> Result<Vec<T>, ImageError> {
    if is_json(file) {
        if content.iter().all(u8::is_ascii_whitespace) {
            return Ok(Vec::new());
        }
        let doc = serde_json::from_slice::<Option<T>>(content).map_err(|e| json_error(file, &e))?;
        return Ok(doc.into_iter().collect());
    }
    serde_saphyr::from_slice_multiple_with_options(content, yaml_options(limits))
        .map_err(|e| yaml_error(file, &e))
}

/// Validates one file and returns the objects it holds.
pub fn summarize_file(
    file: &str,
    content: &[u8],
    limits: &EffectiveLimits,
) -> Result<Vec<ObjectSummary>, ImageError> {
    let docs: Vec<DocSummary> = documents(file, content, limits)?;
    let mut out = Vec::new();
    for (document, doc) in docs.into_iter().enumerate() {
        let invalid = |reason: String| ImageError::InvalidObject {
            file: file.to_string(),
            document,
            reason,
        };
        if doc.is_list() {
            if doc.items_other {
                return Err(invalid("items of a List must be a sequence".into()));
            }
            for (i, item) in doc.items.unwrap_or_default().into_iter().enumerate() {
                let summary = item
                    .into_summary(file, document, Some(i))
                    .map_err(|r| invalid(format!("items[{i}]: {r}")))?;
                out.push(summary);
            }
        } else {
            out.push(doc.into_summary(file, document, None).map_err(invalid)?);
        }
        if out.len() as u64 > limits.max_objects {
            return Err(limits.exceeded(LimitKind::Objects, format!("{file}, document {document}")));
        }
    }
    Ok(out)
}

/// Parses one file into its objects (for applying).
pub fn parse_file(
    file: &str,
    content: &[u8],
    limits: &EffectiveLimits,
) -> Result<Vec<BundleObject>, ImageError> {
    let docs: Vec<serde_json::Value> = documents(file, content, limits)?;
    let mut out = Vec::new();
    for (document, doc) in docs.into_iter().enumerate() {
        let invalid = |reason: String| ImageError::InvalidObject {
            file: file.to_string(),
            document,
            reason,
        };
        let is_list = doc.get("apiVersion").and_then(|v| v.as_str()) == Some("v1")
            && doc.get("kind").and_then(|v| v.as_str()) == Some("List");
        if is_list {
            let items = match doc {
                serde_json::Value::Object(mut map) => map.remove("items"),
                _ => None,
            };
            let items = match items {
                None | Some(serde_json::Value::Null) => Vec::new(),
                Some(serde_json::Value::Array(items)) => items,
                Some(_) => return Err(invalid("items of a List must be a sequence".into())),
            };
            for (i, item) in items.into_iter().enumerate() {
                check_value(&item).map_err(|r| invalid(format!("items[{i}]: {r}")))?;
                out.push(BundleObject {
                    file: file.to_string(),
                    document,
                    item: Some(i),
                    object: item,
                });
            }
        } else {
            check_value(&doc).map_err(invalid)?;
            out.push(BundleObject {
                file: file.to_string(),
                document,
                item: None,
                object: doc,
            });
        }
    }
    Ok(out)
}

fn check_value(value: &serde_json::Value) -> Result<(), String> {
    let map = value.as_object().ok_or("not a mapping")?;
    let string = |v: Option<&serde_json::Value>, field: &str| match v {
        None | Some(serde_json::Value::Null) => Err(format!("{field} is missing")),
        Some(serde_json::Value::String(s)) if !s.is_empty() => Ok(()),
        Some(_) => Err(format!("{field} must be a non-empty string")),
    };
    string(map.get("apiVersion"), "apiVersion")?;
    string(map.get("kind"), "kind")?;
    match map.get("metadata") {
        None | Some(serde_json::Value::Null) => return Err("metadata.name is missing".into()),
        Some(serde_json::Value::Object(meta)) => {
            string(meta.get("name"), "metadata.name")?;
            match meta.get("namespace") {
                None | Some(serde_json::Value::Null) | Some(serde_json::Value::String(_)) => {}
                Some(_) => return Err("metadata.namespace must be a string".into()),
            }
        }
        Some(_) => return Err("metadata must be a mapping".into()),
    }
    Ok(())
}

/// Validates every file of a bundle: parsable, objects complete, no object twice, at least one
/// object, at most `maxObjects`.
pub fn validate_files(
    files: &BundleFiles,
    limits: &EffectiveLimits,
) -> Result<Vec<ObjectSummary>, ImageError> {
    check_objects(
        files
            .files
            .iter()
            .map(|(name, stored)| summarize_stored(name, &stored.path, limits)),
        limits,
    )
}

/// Validates one file stored at `path`.
pub(crate) fn summarize_stored(
    name: &str,
    path: &std::path::Path,
    limits: &EffectiveLimits,
) -> Result<Vec<ObjectSummary>, ImageError> {
    let file = std::fs::File::open(path)
        .map_err(|e| ImageError::from_io(format!("manifests/{name}"), e))?;
    // Sized up front: growing the buffer while reading would copy the file several times.
    let size = file.metadata().map_or(0, |m| m.len());
    let mut buffer = Vec::with_capacity(size.min(limits.max_file_bytes) as usize + 1);
    file.take(limits.max_file_bytes.saturating_add(1))
        .read_to_end(&mut buffer)
        .map_err(|e| ImageError::from_io(format!("manifests/{name}"), e))?;
    if buffer.len() as u64 > limits.max_file_bytes {
        return Err(limits.exceeded(LimitKind::FileBytes, format!("manifests/{name}")));
    }
    summarize_file(name, &buffer, limits)
}

/// The checks across files, given each file's objects in file-name order.
pub(crate) fn check_objects(
    per_file: impl Iterator<Item = Result<Vec<ObjectSummary>, ImageError>>,
    limits: &EffectiveLimits,
) -> Result<Vec<ObjectSummary>, ImageError> {
    let mut all = Vec::new();
    let mut seen = HashSet::new();
    for objects in per_file {
        for object in objects? {
            if all.len() as u64 >= limits.max_objects {
                return Err(limits.exceeded(
                    LimitKind::Objects,
                    format!("{}, document {}", object.file, object.document),
                ));
            }
            let key = (
                object.group().to_string(),
                object.kind.clone(),
                object.namespace.clone().unwrap_or_default(),
                object.name.clone(),
            );
            if !seen.insert(key) {
                let first = all
                    .iter()
                    .find(|o: &&ObjectSummary| {
                        o.group() == object.group()
                            && o.kind == object.kind
                            && o.namespace == object.namespace
                            && o.name == object.name
                    })
                    .map(|o| format!("{}, document {}", o.file, o.document))
                    .unwrap_or_default();
                return Err(ImageError::InvalidObject {
                    file: object.file.clone(),
                    document: object.document,
                    reason: format!(
                        "{} {}{} is defined twice (first in {first})",
                        object.kind,
                        object
                            .namespace
                            .as_deref()
                            .map(|ns| format!("{ns}/"))
                            .unwrap_or_default(),
                        object.name
                    ),
                });
            }
            all.push(object);
        }
    }
    if all.is_empty() {
        return Err(ImageError::EmptyManifests);
    }
    Ok(all)
}

// ---- a walk over a document that keeps only the identifying fields ----

#[derive(Debug, Default)]
enum StrField {
    #[default]
    Missing,
    Null,
    Str(String),
    Other,
}

#[derive(Debug, Default)]
struct MetaSummary {
    is_map: bool,
    null: bool,
    name: StrField,
    namespace: StrField,
}

#[derive(Debug, Default)]
struct DocSummary {
    is_map: bool,
    api_version: StrField,
    kind: StrField,
    metadata: Option<MetaSummary>,
    /// `items`, when it is a sequence.
    items: Option<Vec<DocSummary>>,
    items_other: bool,
}

impl DocSummary {
    fn is_list(&self) -> bool {
        matches!(&self.api_version, StrField::Str(v) if v == "v1")
            && matches!(&self.kind, StrField::Str(k) if k == "List")
    }

    fn into_summary(
        self,
        file: &str,
        document: usize,
        item: Option<usize>,
    ) -> Result<ObjectSummary, String> {
        if !self.is_map {
            return Err("not a mapping".into());
        }
        if self.is_list() && self.items_other {
            return Err("items of a List must be a sequence".into());
        }
        let required = |f: StrField, field: &str| match f {
            StrField::Str(s) if !s.is_empty() => Ok(s),
            StrField::Missing | StrField::Null => Err(format!("{field} is missing")),
            _ => Err(format!("{field} must be a non-empty string")),
        };
        let api_version = required(self.api_version, "apiVersion")?;
        let kind = required(self.kind, "kind")?;
        let meta = match self.metadata {
            Some(meta) if meta.is_map => meta,
            Some(meta) if !meta.null => return Err("metadata must be a mapping".into()),
            _ => return Err("metadata.name is missing".into()),
        };
        let name = required(meta.name, "metadata.name")?;
        let namespace = match meta.namespace {
            StrField::Missing | StrField::Null => None,
            StrField::Str(ns) => Some(ns).filter(|ns| !ns.is_empty()),
            StrField::Other => return Err("metadata.namespace must be a string".into()),
        };
        Ok(ObjectSummary {
            file: file.to_string(),
            document,
            item,
            api_version,
            kind,
            name,
            namespace,
        })
    }
}

/// Walks any value the way `serde_json::Value` would, keeping nothing.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

macro_rules! accept_scalars {
    ($out:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_i128<E: de::Error>(self, _: i128) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_u128<E: de::Error>(self, _: u128) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($out)
        }
        fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
            Ok($out)
        }
    };
}

fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<Skip>()?.is_some() {}
    Ok(())
}

fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_key::<Key>()?.is_some() {
        map.next_value::<Skip>()?;
    }
    Ok(())
}

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    accept_scalars!(Skip);
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_none<E: de::Error>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Skip, D::Error> {
        Skip::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Skip, D::Error> {
        Skip::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Skip, A::Error> {
        skip_seq(seq).map(|_| Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Skip, A::Error> {
        skip_map(map).map(|_| Skip)
    }
}

/// A mapping key, which must be a string (as for `serde_json::Value`).
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key, E> {
                Ok(Key(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for StrField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrField;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            accept_scalars!(StrField::Other);
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrField, E> {
                Ok(StrField::Str(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<StrField, E> {
                Ok(StrField::Str(v))
            }
            fn visit_none<E: de::Error>(self) -> Result<StrField, E> {
                Ok(StrField::Null)
            }
            fn visit_unit<E: de::Error>(self) -> Result<StrField, E> {
                Ok(StrField::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<StrField, D::Error> {
                StrField::deserialize(d)
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<StrField, D::Error> {
                StrField::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<StrField, A::Error> {
                skip_seq(seq).map(|_| StrField::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<StrField, A::Error> {
                skip_map(map).map(|_| StrField::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for MetaSummary {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MetaSummary;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            accept_scalars!(MetaSummary::default());
            fn visit_str<E: de::Error>(self, _: &str) -> Result<MetaSummary, E> {
                Ok(MetaSummary::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<MetaSummary, E> {
                Ok(MetaSummary {
                    null: true,
                    ..Default::default()
                })
            }
            fn visit_unit<E: de::Error>(self) -> Result<MetaSummary, E> {
                self.visit_none()
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<MetaSummary, D::Error> {
                MetaSummary::deserialize(d)
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<MetaSummary, D::Error> {
                MetaSummary::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<MetaSummary, A::Error> {
                skip_seq(seq).map(|_| MetaSummary::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetaSummary, A::Error> {
                let mut meta = MetaSummary {
                    is_map: true,
                    ..Default::default()
                };
                while let Some(Key(key)) = map.next_key::<Key>()? {
                    match key.as_str() {
                        "name" => meta.name = map.next_value()?,
                        "namespace" => meta.namespace = map.next_value()?,
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(meta)
            }
        }
        d.deserialize_any(V)
    }
}

/// `items`: a sequence of documents, or anything else (ignored unless the document is a List).
enum Items {
    Seq(Vec<DocSummary>),
    Null,
    Other,
}

impl<'de> Deserialize<'de> for Items {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Items;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            accept_scalars!(Items::Other);
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Items, E> {
                Ok(Items::Other)
            }
            fn visit_none<E: de::Error>(self) -> Result<Items, E> {
                Ok(Items::Null)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Items, E> {
                Ok(Items::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Items, D::Error> {
                Items::deserialize(d)
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Items, D::Error> {
                Items::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<DocSummary>()? {
                    items.push(item);
                }
                Ok(Items::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Items, A::Error> {
                skip_map(map).map(|_| Items::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for DocSummary {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DocSummary;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            accept_scalars!(DocSummary::default());
            fn visit_str<E: de::Error>(self, _: &str) -> Result<DocSummary, E> {
                Ok(DocSummary::default())
            }
            fn visit_none<E: de::Error>(self) -> Result<DocSummary, E> {
                Ok(DocSummary::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<DocSummary, E> {
                Ok(DocSummary::default())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<DocSummary, D::Error> {
                DocSummary::deserialize(d)
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<DocSummary, D::Error> {
                DocSummary::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<DocSummary, A::Error> {
                skip_seq(seq).map(|_| DocSummary::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DocSummary, A::Error> {
                let mut doc = DocSummary {
                    is_map: true,
                    ..Default::default()
                };
                while let Some(Key(key)) = map.next_key::<Key>()? {
                    match key.as_str() {
                        "apiVersion" => doc.api_version = map.next_value()?,
                        "kind" => doc.kind = map.next_value()?,
                        "metadata" => doc.metadata = Some(map.next_value()?),
                        "items" => match map.next_value::<Items>()? {
                            Items::Seq(items) => doc.items = Some(items),
                            Items::Null => {}
                            Items::Other => doc.items_other = true,
                        },
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(doc)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> EffectiveLimits {
        EffectiveLimits::default()
    }

    fn summaries(file: &str, content: &str) -> Result<Vec<ObjectSummary>, ImageError> {
        summarize_file(file, content.as_bytes(), &limits())
    }

    fn ids(objects: &[ObjectSummary]) -> Vec<(usize, Option<usize>, &str, &str)> {
        objects
            .iter()
            .map(|o| (o.document, o.item, o.kind.as_str(), o.name.as_str()))
            .collect()
    }

    const MULTI: &str = "\
---
# an empty document
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: ns
data:
  key: value
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  metadata: {name: s1}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: d1}
  spec: {replicas: 2}
...
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
rules: []
";

    #[test]
    fn multi_document_yaml_and_lists_are_flattened() {
        let objects = summaries("a.yaml", MULTI).unwrap();
        assert_eq!(
            ids(&objects),
            vec![
                (0, None, "ConfigMap", "a"),
                (1, Some(0), "Secret", "s1"),
                (1, Some(1), "Deployment", "d1"),
                (2, None, "ClusterRole", "r"),
            ]
        );
        assert_eq!(objects[0].namespace.as_deref(), Some("ns"));
        assert_eq!(objects[2].group(), "apps");
        assert_eq!(objects[3].group(), "rbac.authorization.k8s.io");
        assert_eq!(objects[0].group(), "");
    }

    #[test]
    fn the_full_parse_agrees_with_validation() {
        let objects = parse_file("a.yaml", MULTI.as_bytes(), &limits()).unwrap();
        let summary = summaries("a.yaml", MULTI).unwrap();
        assert_eq!(objects.len(), summary.len());
        for (object, summary) in objects.iter().zip(&summary) {
            assert_eq!(object.document, summary.document);
            assert_eq!(object.item, summary.item);
            assert_eq!(object.object["kind"], summary.kind.as_str());
            assert_eq!(object.object["metadata"]["name"], summary.name.as_str());
        }
        assert_eq!(objects[2].object["spec"]["replicas"], 2);
        let dynamic = objects[0].to_dynamic().unwrap();
        assert_eq!(dynamic.metadata.name.as_deref(), Some("a"));
        assert_eq!(dynamic.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(dynamic.types.unwrap().kind, "ConfigMap");
        assert_eq!(dynamic.data["data"]["key"], "value");
    }

    #[test]
    fn json_files() {
        let json = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"j"}}]}"#;
        let objects = summaries("x.json", json).unwrap();
        assert_eq!(ids(&objects), vec![(0, Some(0), "ConfigMap", "j")]);
        assert!(summaries("x.json", "  \n").unwrap().is_empty());
        match summaries("x.json", "{\n\"a\": }") {
            Err(ImageError::InvalidYaml { file, line, .. }) => {
                assert_eq!(file, "x.json");
                assert_eq!(line, Some(2));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unparsable_yaml_names_the_file_and_line() {
        let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: [unclosed\n";
        match summaries("bad.yaml", yaml) {
            Err(ImageError::InvalidYaml {
                file,
                line,
                message,
            }) => {
                assert_eq!(file, "bad.yaml");
                assert!(
                    line.is_some_and(|l| (5..=6).contains(&l)),
                    "{line:?} {message}"
                );
            }
            other => panic!("{other:?}"),
        }
        let yaml = "a: 1\nb: [\n  - x\n";
        let err = summaries("bad.yaml", yaml).unwrap_err();
        assert!(err.to_string().contains("bad.yaml at line"), "{err}");
    }

    #[test]
    fn missing_fields_name_the_file_and_document() {
        for (yaml, field, document) in [
            ("kind: A\nmetadata: {name: a}\n", "apiVersion is missing", 0),
            (
                "apiVersion: v1\nmetadata: {name: a}\n",
                "kind is missing",
                0,
            ),
            ("apiVersion: v1\nkind: A\n", "metadata.name is missing", 0),
            (
                "apiVersion: v1\nkind: A\nmetadata: {}\n",
                "metadata.name is missing",
                0,
            ),
            (
                "apiVersion: v1\nkind: A\nmetadata: {name: x}\n---\napiVersion: v1\nkind: A\nmetadata: {name: 3}\n",
                "metadata.name must be a non-empty string",
                1,
            ),
            (
                "apiVersion: v1\nkind: A\nmetadata: [a]\n",
                "metadata must be a mapping",
                0,
            ),
            ("- a\n- b\n", "not a mapping", 0),
            ("just a string\n", "not a mapping", 0),
            (
                "apiVersion: v1\nkind: List\nitems:\n- kind: A\n  metadata: {name: a}\n",
                "items[0]: apiVersion is missing",
                0,
            ),
            (
                "apiVersion: v1\nkind: List\nitems: 3\n",
                "items of a List must be a sequence",
                0,
            ),
        ] {
            match summaries("f.yaml", yaml) {
                Err(ImageError::InvalidObject {
                    file,
                    document: d,
                    reason,
                }) => {
                    assert_eq!(file, "f.yaml");
                    assert_eq!(d, document, "{yaml}");
                    assert_eq!(reason, field, "{yaml}");
                }
                other => panic!("{yaml}: {other:?}"),
            }
            // The full parse refuses the same documents.
            assert!(
                parse_file("f.yaml", yaml.as_bytes(), &limits()).is_err(),
                "{yaml}"
            );
        }
    }

    #[test]
    fn non_string_keys_are_refused_by_both_parsers() {
        let yaml = "apiVersion: v1\nkind: A\nmetadata: {name: a}\ndata:\n  ? [a, b]\n  : c\n";
        assert!(summaries("f.yaml", yaml).is_err());
        assert!(parse_file("f.yaml", yaml.as_bytes(), &limits()).is_err());
    }

    #[test]
    fn empty_documents_are_skipped() {
        assert!(summaries("e.yaml", "").unwrap().is_empty());
        assert!(
            summaries("e.yaml", "---\n---\n# comment\n")
                .unwrap()
                .is_empty()
        );
        assert!(summaries("e.yaml", "~\n").unwrap().is_empty());
    }

    fn bundle(files: &[(&str, &str)]) -> (tempfile::TempDir, BundleFiles) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("manifests")).unwrap();
        for (name, content) in files {
            std::fs::write(dir.path().join("manifests").join(name), content).unwrap();
        }
        let files = BundleFiles::from_dir(dir.path(), &limits()).unwrap();
        (dir, files)
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n";

    #[test]
    fn the_same_object_twice_is_an_error() {
        let (_d, files) = bundle(&[("a.yaml", CM), ("b.yaml", CM)]);
        match validate_files(&files, &limits()) {
            Err(ImageError::InvalidObject {
                file,
                document,
                reason,
            }) => {
                assert_eq!(file, "b.yaml");
                assert_eq!(document, 0);
                assert!(reason.contains("x/a is defined twice"), "{reason}");
                assert!(reason.contains("a.yaml, document 0"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Another namespace, group or kind makes another object.
        let other_ns = CM.replace("namespace: x", "namespace: other");
        let other_group = CM.replace("apiVersion: v1", "apiVersion: example.com/v1");
        let same_group_other_version = CM.replace("apiVersion: v1", "apiVersion: v2");
        let (_d, files) = bundle(&[
            ("a.yaml", CM),
            ("b.yaml", &other_ns),
            ("c.yaml", &other_group),
        ]);
        assert_eq!(validate_files(&files, &limits()).unwrap().len(), 3);
        let (_d, files) = bundle(&[("a.yaml", CM), ("b.yaml", &same_group_other_version)]);
        assert!(validate_files(&files, &limits()).is_err());
    }

    #[test]
    fn a_bundle_needs_an_object_and_at_most_max_objects() {
        let (_d, files) = bundle(&[("a.yaml", "---\n")]);
        assert!(matches!(
            validate_files(&files, &limits()),
            Err(ImageError::EmptyManifests)
        ));
        let two = format!("{CM}---\n{}", CM.replace("name: a", "name: b"));
        let (_d, files) = bundle(&[("a.yaml", &two)]);
        let small = EffectiveLimits {
            max_objects: 1,
            ..limits()
        };
        match validate_files(&files, &small) {
            Err(ImageError::LimitExceeded {
                limit: LimitKind::Objects,
                value: 1,
                culprit,
            }) => assert_eq!(culprit, "a.yaml, document 1"),
            other => panic!("{other:?}"),
        }
        assert_eq!(validate_files(&files, &limits()).unwrap().len(), 2);
    }
}
