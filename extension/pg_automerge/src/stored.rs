//! Reading what every function needs from a stored value: its header, or its loaded document.

use pg_automerge_core::format::{self, StoredValue};
use pg_automerge_core::{document, heads};

use crate::datum::StoredDoc;
use crate::errors::OrRaise;

/// The header and payload, without loading the document.
pub fn header<'a>(doc: &'a StoredDoc<'_>, function: &'static str) -> StoredValue<'a> {
    format::decode(doc.stored()).or_raise(function)
}

/// The loaded document.
pub fn load(doc: &StoredDoc<'_>, function: &'static str) -> automerge::Automerge {
    document::load_stored(doc.stored()).or_raise(function)
}

/// Heads given as text, parsed and checked to be changes of `doc`.
pub fn known_heads(
    doc: &automerge::Automerge,
    texts: &[String],
    function: &'static str,
) -> Vec<automerge::ChangeHash> {
    let parsed = heads::parse(texts).or_raise(function);
    heads::require_known(doc, &parsed).or_raise(function);
    parsed
}
