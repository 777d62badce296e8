//! Merging documents and applying changes to a stored document. Both return the stored
//! value unchanged, without saving, when nothing new arrives, and both avoid the load when
//! the stored headers answer:
//!
//! - a merge where one side already contains the other returns that side;
//! - changes that follow the stored document (each new, its actor's next, its
//!   dependencies among the document's heads and actors' latest changes, its counters
//!   right after theirs) and whose every operation the [`Structure`] index can check and
//!   place (text splices, marks, block splits, map puts and deletes at any depth, list
//!   inserts and deletes, counter increments, objects made with content, by a client on
//!   the heads or concurrently) are appended to the stored payload without a load, and the
//!   kept JSON follows them; the index each such write leaves is held for the next (see
//!   [`index_cache`](crate::index_cache)). The write that passes `append_limit` appended changes since the last
//!   save also saves the document anew, keeping that JSON and index. Other
//!   changes are applied to the loaded document: appending what the index cannot check
//!   could store a value that no later load accepts.

use crate::estimate::{estimate_applied, estimate_client_bytes, estimate_stored, sum};
use crate::format::{self, StoredValue};
use crate::load::{apply_to, has_all, load_client_bytes, load_stored, merge_into};
use crate::save::{encode_loaded, to_stored};
use crate::settings::WriteSettings;
use crate::{cache, chunk, memory, Error};

mod append;

pub use append::current_index;

/// Validates client bytes, within the load limit, and returns their stored form: the
/// input of every value (`automerge_in`, `automerge_recv`, `bytea::automerge`). The loaded
/// document stays in the [`cache`] for a merge that follows.
pub fn stored_from_client_bytes(bytes: &[u8], settings: WriteSettings) -> Result<Vec<u8>, Error> {
    settings.load_limit.check(&estimate_client_bytes(bytes)?)?;
    let before = memory::usage().allocated_bytes;
    let doc = load_client_bytes(bytes)?;
    let kept_bytes = memory::usage().allocated_bytes.saturating_sub(before) as u64;
    // A save, with or without changes after it, is stored as it came: the load checked it,
    // and a dump restores byte for byte. Anything else is stored as the document it makes.
    let stored = match chunk::changes_after_a_save(bytes) {
        Some(changes) => encode_loaded(&doc, settings, bytes, changes)?,
        None => to_stored(&doc, settings)?,
    };
    cache::keep(doc.get_heads(), doc, kept_bytes, settings.cache_budget);
    Ok(stored)
}

/// The merge of two stored documents. Equal heads mean equal documents, and a side whose
/// headers show it has the other's heads contains the other: no load. Where the right
/// side's actor clock only suggests that it contains the left (the same client saving
/// again, as an upsert of its full save does), the right side alone is checked: taken from
/// the [`cache`] when the statement just loaded it from client input, else loaded.
/// Otherwise the merge result is estimated from both headers and checked against the load
/// limit first.
pub fn merge(left: &[u8], right: &[u8], settings: WriteSettings) -> Result<Vec<u8>, Error> {
    let (l, r) = (format::decode(left)?, format::decode(right)?);
    if l.contains(&r.summary.heads) {
        return Ok(left.to_vec());
    }
    if r.contains(&l.summary.heads) {
        return Ok(right.to_vec());
    }
    let incoming = estimate_stored(&r.summary, r.payload);
    let held = cache::take(&r.summary.heads);
    let mut other = if held.is_some() || may_contain(&r, &l) {
        let other = match held {
            Some(doc) => doc,
            None => {
                settings.load_limit.check(&incoming)?;
                load_stored(&r)?
            }
        };
        if has_all(&other, &l.summary.heads) {
            return Ok(right.to_vec());
        }
        settings.load_limit.check(&sum(&[estimate_stored(&l.summary, l.payload), incoming]))?;
        other
    } else {
        // Merging decodes the right document's changes and applies them to the left one.
        settings.load_limit.check(&sum(&[
            estimate_stored(&l.summary, l.payload),
            incoming,
            estimate_applied(&incoming),
        ]))?;
        load_stored(&r)?
    };
    let mut doc = load_stored(&l)?;
    if has_all(&doc, &r.summary.heads) {
        return Ok(left.to_vec());
    }
    merge_into(&mut doc, &mut other)?;
    to_stored(&doc, settings)
}

/// Whether `container` has, for each head of `contained`, a change of that head's actor
/// with at least its sequence number: necessary for containing it, and with actors that
/// are never shared, sufficient.
fn may_contain(container: &StoredValue<'_>, contained: &StoredValue<'_>) -> bool {
    let (Some(outer), Some(inner)) = (&container.kept, &contained.kept) else { return false };
    contained.summary.heads.iter().all(|head| {
        inner.clock.iter().any(|(actor, (seq, latest))| {
            latest == head && outer.clock.get(actor).is_some_and(|(outer_seq, _)| outer_seq >= seq)
        })
    })
}

/// Applies Automerge bytes (one change, several, an incremental save or a full save) to a
/// stored document. Changes whose dependencies are in neither are refused, and nothing is
/// lost: the statement fails and the stored value stays as it was.
pub fn apply(stored: &[u8], changes: &[u8], settings: WriteSettings) -> Result<Vec<u8>, Error> {
    if changes.is_empty() {
        return Ok(stored.to_vec());
    }
    let value = format::decode(stored)?;
    let incoming = estimate_client_bytes(changes)?;
    if let Some(appended) = append::append(stored, &value, changes, settings, &incoming)? {
        return Ok(appended);
    }
    settings.load_limit.check(&sum(&[estimate_stored(&value.summary, value.payload), incoming]))?;
    let mut doc = load_stored(&value)?;
    apply_to(&mut doc, changes)?;
    if doc.get_heads() == value.summary.heads {
        return Ok(stored.to_vec());
    }
    to_stored(&doc, settings)
}

#[cfg(test)]
mod tests;
