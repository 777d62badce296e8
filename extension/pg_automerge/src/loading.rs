//! Loading stored values for the reads that need the whole document, and checking heads
//! given as arguments against them; it defines no SQL of its own.

use pg_automerge_core::{format, heads, load};

use crate::datum::StoredDoc;
use crate::errors::OrRaise;

/// The loaded document.
pub fn load(doc: &StoredDoc<'_>, function: &'static str) -> automerge::Automerge {
    load_bytes(doc.stored(), function)
}

/// The document of the stored value `stored`, loaded.
pub fn load_bytes(stored: &[u8], function: &'static str) -> automerge::Automerge {
    let value = format::decode(stored).or_raise(function);
    load::load_stored(&value).or_raise(function)
}

/// Heads given as text, parsed; for functions of the core crate that check them themselves.
pub fn parse_heads(texts: &[String], function: &'static str) -> Vec<automerge::ChangeHash> {
    heads::parse(texts).or_raise(function)
}

/// Heads given as text, parsed and checked to be changes of `doc`.
pub fn known_heads(
    doc: &automerge::Automerge,
    texts: &[String],
    function: &'static str,
) -> Vec<automerge::ChangeHash> {
    let parsed = parse_heads(texts, function);
    heads::require_known(doc, &parsed).or_raise(function);
    parsed
}

/// The loaded document, and `heads` (when given) parsed and checked to be its changes: for
/// the reads that can look at the document as it was.
pub fn load_at(
    doc: &StoredDoc<'_>,
    heads: Option<&[String]>,
    function: &'static str,
) -> (automerge::Automerge, Option<Vec<automerge::ChangeHash>>) {
    let loaded = load(doc, function);
    let heads = heads.map(|heads| known_heads(&loaded, heads, function));
    (loaded, heads)
}
