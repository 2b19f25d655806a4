//! The objects of a bundle: multi-document YAML and list objects flattened, empty documents
//! skipped, `apiVersion`, `kind` and `metadata.name` required, metadata as the API server
//! accepts it, no object twice.
//!
//! - [`fields`]: the fields of a document the rules read, and what identifies an object.
//! - [`rules`]: what both readings apply — documents, list flattening, required fields, and
//!   the messages naming file and document.
//! - [`names`]: the API server's checks of names, namespaces, labels and annotations.
//! - [`validate`]: the streaming validation with bounded memory (through [`walk`], which keeps
//!   only the identifying fields of a document), and the checks across files.
//! - [`parse`]: the full parse into [`BundleObject`]s for applying.

mod fields;
mod names;
mod parse;
mod rules;
mod validate;
mod walk;

pub use names::{dns_label, subdomain};
pub use parse::{BundleObject, parse_file};
pub use rules::{is_list, parse_mapping};
pub use validate::{ObjectSummary, summarize_file, validate_files};
pub(crate) use validate::{check_objects, summarize_stored};
