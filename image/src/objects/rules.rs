//! The rules every reading of a bundle's files applies, written once: how a file splits into
//! documents (multi-document YAML or one JSON value, empty documents skipped, the parser's
//! budget scaled to the limits), how a list object is flattened, which fields identify an
//! object, and the checks of its metadata the API server would make ([`super::names`]). The full parse ([`super::parse`]) and the streaming validation
//! ([`super::validate`]) only differ in how much of a document they keep; both present it to
//! these rules as a [`Document`], so they accept the same objects and refuse the rest with the
//! same messages.

use serde::Deserialize;

use super::fields::{Field, Fields, Identity, ItemsShape, Metadata};
use super::names;
use crate::error::ImageError;
use crate::limits::{EffectiveLimits, MAX_DEPTH, on_parse_stack};

impl Fields<'_> {
    /// The kind of a list object, whose items are the objects: as kubectl reads them, any kind
    /// ending in `List` (`List`, `ConfigMapList`, `RoleBindingList`, in any group) with `items`.
    fn list_kind(&self) -> Option<&str> {
        match self.kind {
            Field::Str(kind) if kind.ends_with("List") && self.items != ItemsShape::Absent => {
                Some(kind)
            }
            _ => None,
        }
    }
}

/// Whether `document` is a list object, whose `items` are the objects (the rule of
/// [`Fields::list_kind`], for readers of a bundle's files that keep their own parse).
pub fn is_list(document: &serde_json::Value) -> bool {
    document.fields().is_some_and(|f| f.list_kind().is_some())
}

fn items_not_a_sequence(kind: &str) -> String {
    format!("items of a {kind} must be a sequence")
}

/// One document of a file, however much of it was kept.
pub(crate) trait Document: Sized {
    /// The identifying fields; `None` when the document is not a mapping.
    fn fields(&self) -> Option<Fields<'_>>;
    /// The elements of `items` (empty unless it is a sequence).
    fn into_items(self) -> Vec<Self>;
}

/// Why an object is refused, and which object it is when that is known.
struct Refusal {
    object: Option<String>,
    reason: String,
}

impl From<String> for Refusal {
    fn from(reason: String) -> Self {
        Refusal {
            object: None,
            reason,
        }
    }
}

impl From<&str> for Refusal {
    fn from(reason: &str) -> Self {
        reason.to_string().into()
    }
}

/// Checks one object (a document, or an item of a list).
fn identify(fields: Option<Fields<'_>>) -> Result<Identity, Refusal> {
    let fields = fields.ok_or("not a mapping")?;
    let required = |field: Field<'_>, name: &str| match field {
        Field::Str(s) if !s.is_empty() => Ok(s.to_string()),
        Field::Missing | Field::Null => Err(format!("{name} is missing")),
        Field::Str(_) | Field::Other => Err(format!("{name} must be a non-empty string")),
    };
    let api_version = required(fields.api_version, "apiVersion")?;
    let kind = required(fields.kind, "kind")?;
    let (name, namespace, labels, annotations) = match &fields.metadata {
        Metadata::Mapping {
            name,
            namespace,
            labels,
            annotations,
        } => (*name, *namespace, labels, annotations),
        Metadata::Other => return Err("metadata must be a mapping".into()),
        Metadata::Missing | Metadata::Null => return Err("metadata.name is missing".into()),
    };
    let name = required(name, "metadata.name")?;
    let namespace = match namespace {
        Field::Missing | Field::Null => None,
        Field::Str(ns) => Some(ns).filter(|ns| !ns.is_empty()).map(str::to_string),
        Field::Other => return Err("metadata.namespace must be a string".into()),
    };
    let identity = Identity {
        api_version,
        kind,
        name,
        namespace,
    };
    names::check(&identity, labels, annotations, &fields.spec).map_err(|reason| Refusal {
        object: Some(identity.label()),
        reason,
    })?;
    Ok(identity)
}

/// Where an object was found: its document's index in the file, and its index in `items` when
/// the document is a list.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub document: usize,
    pub item: Option<usize>,
}

/// Flattens the documents of `file` into objects: a list gives its items (a list among them is
/// refused), any other document itself. `emit` turns each accepted object into what the caller
/// keeps; `after_document` sees the objects so far once each document is done.
fn flatten_file<D: Document, T>(
    file: &str,
    docs: Vec<D>,
    mut emit: impl FnMut(D, Place, Identity) -> T,
    mut after_document: impl FnMut(&[T], usize) -> Result<(), ImageError>,
) -> Result<Vec<T>, ImageError> {
    let mut out = Vec::new();
    for (document, doc) in docs.into_iter().enumerate() {
        let invalid = |refusal: Refusal| ImageError::InvalidObject {
            file: file.to_string(),
            document,
            object: refusal.object,
            reason: refusal.reason,
        };
        let list_kind = doc.fields().and_then(|f| f.list_kind().map(str::to_string));
        match list_kind {
            Some(kind) => {
                if doc.fields().is_some_and(|f| f.items == ItemsShape::Other) {
                    return Err(invalid(items_not_a_sequence(&kind).into()));
                }
                for (i, item) in doc.into_items().into_iter().enumerate() {
                    let in_items = |refusal: Refusal| {
                        invalid(Refusal {
                            reason: format!("items[{i}]: {}", refusal.reason),
                            ..refusal
                        })
                    };
                    if let Some(inner) = item.fields().as_ref().and_then(Fields::list_kind) {
                        return Err(in_items(
                            format!(
                                "a {inner} inside a {kind} is not flattened: give it a document of its own"
                            )
                            .into(),
                        ));
                    }
                    let identity = identify(item.fields()).map_err(in_items)?;
                    let place = Place {
                        document,
                        item: Some(i),
                    };
                    out.push(emit(item, place, identity));
                }
            }
            None => {
                let identity = identify(doc.fields()).map_err(invalid)?;
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
    budget.max_depth = MAX_DEPTH;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.with_snippet = false;
    // Comments are not kept: the parser need not collect them.
    options.emit_comments = false;
    options
}

/// What the parsers say of nesting past [`MAX_DEPTH`], said with the limit: the depth budget,
/// YAML's limit on nested flow collections (which is higher), serde_json's recursion limit.
fn depth_message(message: String) -> String {
    let too_deep = message.starts_with("budget breached: Depth")
        || message.starts_with("recursion limit exceeded");
    if too_deep {
        format!("nested deeper than {MAX_DEPTH} levels of mappings and sequences, the limit")
    } else {
        message
    }
}

fn yaml_error(file: &str, error: &serde_saphyr::Error) -> ImageError {
    ImageError::InvalidYaml {
        file: file.to_string(),
        line: error.location().map(|l| l.line()),
        message: depth_message(error.without_snippet().to_string()),
    }
}

fn json_error(file: &str, error: &serde_json::Error) -> ImageError {
    ImageError::InvalidYaml {
        file: file.to_string(),
        line: Some(error.line() as u64),
        message: depth_message(error.to_string()),
    }
}

/// The objects of one file: its documents, in order, empty ones skipped, flattened as
/// [`flatten_file`] does. Parsing nests a call per level of the input, so this runs on a stack
/// sized for the depth limit ([`on_parse_stack`]), whichever thread calls it.
pub(crate) fn read_file<'de, D: Document + Deserialize<'de>, T>(
    file: &str,
    content: &'de [u8],
    limits: &EffectiveLimits,
    emit: impl FnMut(D, Place, Identity) -> T,
    after_document: impl FnMut(&[T], usize) -> Result<(), ImageError>,
) -> Result<Vec<T>, ImageError> {
    on_parse_stack(|| {
        flatten_file(
            file,
            documents(file, content, limits)?,
            emit,
            after_document,
        )
    })
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

/// One YAML (or JSON) document holding a mapping, such as a key of a ConfigMap holding a
/// bundle's configuration, parsed within the limits on the parse stack. `what` names it in
/// errors. An empty document is an empty mapping.
pub fn parse_mapping(
    what: &str,
    content: &[u8],
    limits: &EffectiveLimits,
) -> Result<serde_json::Map<String, serde_json::Value>, ImageError> {
    if content.len() as u64 > limits.max_file_bytes {
        return Err(limits.exceeded(crate::error::LimitKind::FileBytes, what.to_string()));
    }
    let documents: Vec<serde_json::Value> = on_parse_stack(|| {
        serde_saphyr::from_slice_multiple_with_options(content, yaml_options(limits))
            .map_err(|e| yaml_error(what, &e))
    })?;
    let invalid = |message: &str| ImageError::InvalidYaml {
        file: what.to_string(),
        line: None,
        message: message.to_string(),
    };
    let mut documents = documents.into_iter().filter(|d| !d.is_null());
    let mapping = match documents.next() {
        None => serde_json::Map::new(),
        Some(serde_json::Value::Object(map)) => map,
        Some(_) => return Err(invalid("holds no mapping")),
    };
    if documents.next().is_some() {
        return Err(invalid("holds more than one document"));
    }
    Ok(mapping)
}
