//! The Automerge logic of pg_automerge, kept free of any Postgres dependency so that it
//! can be unit-tested, property-tested and benchmarked on its own. The pgrx crate beside
//! it is a thin adapter that turns these functions into SQL.

pub mod aggregate;
pub mod cache;
pub mod chunk;
pub mod compaction;
pub mod conflicts;
pub mod diff;
pub mod doc_changes;
pub mod doc_ops;
pub mod doc_rewrite;
pub mod edits;
mod error;
pub mod estimate;
pub mod format;
mod guard;
pub mod heads;
pub mod history;
pub mod html;
pub mod index_cache;
mod inline;
pub mod integrity;
pub mod interrupts;
pub mod json;
pub mod json_edit;
pub mod json_reads;
pub mod kept_json;
pub mod leb128;
pub mod load;
pub mod mark_order;
pub mod markdown;
pub mod memory;
pub mod op_owners;
pub mod repair;
mod rich_text;
pub mod rules;
pub mod save;
pub mod settings;
pub mod spans;
pub mod structure;
pub mod text_form;
pub mod writes;

pub use error::{Error, ErrorKind};
