//! The rules every reading of a bundle's files applies, written once: how a file splits into
//! documents (multi-document YAML or one JSON value, empty documents skipped, the parser's
//! budget scaled to the limits), how a `v1 List` is flattened, and which fields identify an
//! object. The full parse ([`super::parse`]) and the streaming validation
//! ([`super::validate`]) only differ in how much of a document they keep; both present it to
//! these rules as a [`Document`], so they accept the same objects and refuse the rest with the
//! same messages.

use serde::Deserialize;

use crate::error::ImageError;
use crate::limits::EffectiveLimits;

/// The message for a `List` whose `items` is neither a sequence nor null.
const ITEMS_NOT_A_SEQUENCE: &str = "items of a List must be a sequence";

/// A field that should hold a string, as found in a document.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Field<'a> {
    Missing,
    Null,
    Str(&'a str),
    Other,
}

/// `metadata`, as found in a document.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Metadata<'a> {
    Missing,
    Null,
    Mapping {
        name: Field<'a>,
        namespace: Field<'a>,
    },
    Other,
}

/// The shape of `items` (only a `List`'s items matter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemsShape {
    /// Missing or null: a `List` without objects.
    Absent,
    Sequence,
    Other,
}

/// What the rules look at in a document that is a mapping.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'a> {
    pub api_version: Field<'a>,
    pub kind: Field<'a>,
    pub metadata: Metadata<'a>,
    pub items: ItemsShape,
}

impl Fields<'_> {
    /// A `v1 List`, whose items are the objects (Lists inside a List are not flattened).
    fn is_list(&self) -> bool {
        matches!(self.api_version, Field::Str("v1")) && matches!(self.kind, Field::Str("List"))
    }
}

/// One document of a file, however much of it was kept.
pub(crate) trait Document: Sized {
    /// The identifying fields; `None` when the document is not a mapping.
    fn fields(&self) -> Option<Fields<'_>>;
    /// The elements of `items` (empty unless it is a sequence).
    fn into_items(self) -> Vec<Self>;
}

/// What identifies an object, once the rules accepted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// `None` when missing, null or empty.
    pub namespace: Option<String>,
}

/// Checks one object (a document, or an item of a `List`); the error is the reason only.
fn identify(fields: Option<Fields<'_>>) -> Result<Identity, String> {
    let fields = fields.ok_or("not a mapping")?;
    if fields.is_list() && fields.items == ItemsShape::Other {
        return Err(ITEMS_NOT_A_SEQUENCE.into());
    }
    let required = |field: Field<'_>, name: &str| match field {
        Field::Str(s) if !s.is_empty() => Ok(s.to_string()),
        Field::Missing | Field::Null => Err(format!("{name} is missing")),
        Field::Str(_) | Field::Other => Err(format!("{name} must be a non-empty string")),
    };
    let api_version = required(fields.api_version, "apiVersion")?;
    let kind = required(fields.kind, "kind")?;
    let (name, namespace) = match fields.metadata {
        Metadata::Mapping { name, namespace } => (name, namespace),
        Metadata::Other => return Err("metadata must be a mapping".into()),
        Metadata::Missing | Metadata::Null => return Err("metadata.name is missing".into()),
    };
    let name = required(name, "metadata.name")?;
    let namespace = match namespace {
        Field::Missing | Field::Null => None,
        Field::Str(ns) => Some(ns).filter(|ns| !ns.is_empty()).map(str::to_string),
        Field::Other => return Err("metadata.namespace must be a string".into()),
    };
    Ok(Identity {
        api_version,
        kind,
        name,
        namespace,
    })
}

/// Where an object was found: its document's index in the file, and its index in `items` when
/// the document is a `v1 List`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub document: usize,
    pub item: Option<usize>,
}

/// Flattens the documents of `file` into objects: a `v1 List` gives its items, any other
/// document itself. `emit` turns each accepted object into what the caller keeps;
/// `after_document` sees the objects so far once each document is done.
pub(crate) fn flatten_file<D: Document, T>(
    file: &str,
    docs: Vec<D>,
    mut emit: impl FnMut(D, Place, Identity) -> T,
    mut after_document: impl FnMut(&[T], usize) -> Result<(), ImageError>,
) -> Result<Vec<T>, ImageError> {
    let mut out = Vec::new();
    for (document, doc) in docs.into_iter().enumerate() {
        let invalid = |reason: String| ImageError::InvalidObject {
            file: file.to_string(),
            document,
            reason,
        };
        match doc.fields() {
            Some(fields) if fields.is_list() => {
                if fields.items == ItemsShape::Other {
                    return Err(invalid(ITEMS_NOT_A_SEQUENCE.into()));
                }
                for (i, item) in doc.into_items().into_iter().enumerate() {
                    let identity =
                        identify(item.fields()).map_err(|r| invalid(format!("items[{i}]: {r}")))?;
                    let place = Place {
                        document,
                        item: Some(i),
                    };
                    out.push(emit(item, place, identity));
                }
            }
            fields => {
                let identity = identify(fields).map_err(invalid)?;
                let place = Place {
                    document,
                    item: None,
                };
                out.push(emit(doc, place, identity));
            }
        }
        after_document(&out, document)?;
    }
    Ok(out)
}

/// The API group of an `apiVersion` (empty for the core group).
pub(crate) fn group_of(api_version: &str) -> &str {
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
pub(crate) fn documents<'de, T: Deserialize<'de>>(
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
