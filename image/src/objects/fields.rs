//! The fields of a document that the rules read ([`super::rules`], [`super::names`]), as both
//! readings of a bundle's files present them, and what identifies an accepted object.

/// A field that should hold a string, as found in a document.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Field<'a> {
    Missing,
    Null,
    Str(&'a str),
    Other,
}

/// A mapping whose values should be strings (`metadata.labels`, `metadata.annotations`).
#[derive(Debug, Clone, Default)]
pub(crate) enum StrMap<'a> {
    /// Missing or null.
    #[default]
    Absent,
    Entries(Vec<(&'a str, Field<'a>)>),
    Other,
}

/// `metadata`, as found in a document.
#[derive(Debug, Clone)]
pub(crate) enum Metadata<'a> {
    Missing,
    Null,
    Mapping {
        name: Field<'a>,
        namespace: Field<'a>,
        labels: StrMap<'a>,
        /// The values only as far as their kind goes: the rules read no annotation's value.
        annotations: StrMap<'a>,
    },
    Other,
}

/// The fields of `spec` that decide the names of some kinds: a CRD is named
/// `<spec.names.plural>.<spec.group>`, an APIService `<spec.version>.<spec.group>`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec<'a> {
    pub group: Field<'a>,
    pub version: Field<'a>,
    pub plural: Field<'a>,
}

impl Default for Spec<'_> {
    fn default() -> Self {
        Spec {
            group: Field::Missing,
            version: Field::Missing,
            plural: Field::Missing,
        }
    }
}

/// The shape of `items` (only a list's items matter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemsShape {
    /// Missing or null.
    Absent,
    Sequence,
    Other,
}

/// What the rules look at in a document that is a mapping.
#[derive(Debug, Clone)]
pub(crate) struct Fields<'a> {
    pub api_version: Field<'a>,
    pub kind: Field<'a>,
    pub metadata: Metadata<'a>,
    pub items: ItemsShape,
    pub spec: Spec<'a>,
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

impl Identity {
    /// `Kind name` or `Kind namespace/name`, as messages name an object.
    pub(crate) fn label(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{} {namespace}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

/// The API group of an `apiVersion` (empty for the core group).
pub(crate) fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}
