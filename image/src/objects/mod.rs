//! The objects of a bundle: multi-document YAML and `v1 List` flattened, empty documents
//! skipped, `apiVersion`, `kind` and `metadata.name` required, no object twice.
//!
//! - [`rules`]: what both readings apply — documents, List flattening, required fields, and
//!   the messages naming file and document.
//! - [`validate`]: the streaming validation with bounded memory (through [`walk`], which keeps
//!   only the identifying fields of a document), and the checks across files.
//! - [`parse`]: the full parse into [`BundleObject`]s for applying.

mod parse;
mod rules;
mod validate;
mod walk;

pub use parse::{BundleObject, parse_file};
pub use validate::{ObjectSummary, summarize_file, validate_files};
pub(crate) use validate::{check_objects, summarize_stored};
