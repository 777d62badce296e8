//! Merging documents and applying changes to a stored document. Both return the stored
//! value unchanged, without saving, when nothing new arrives.

use automerge::{Automerge, AutomergeError, LoadOptions, OnPartialLoad, ReadDoc};

use crate::document::{load_stored, to_stored, LoadLimit};
use crate::estimate::{estimate_applied, estimate_client_bytes, estimate_stored, LoadEstimate};
use crate::guard::no_panic;
use crate::memory;
use crate::{format, Error};

/// The merge of two stored documents. Equal heads mean equal documents: no load. The
/// merge result is estimated from both headers and checked against `limit` first.
pub fn merge(left: &[u8], right: &[u8], limit: LoadLimit) -> Result<Vec<u8>, Error> {
    let (l, r) = (format::decode(left)?, format::decode(right)?);
    if l.summary.heads == r.summary.heads {
        return Ok(left.to_vec());
    }
    // Merging decodes the right document's changes and applies them to the left one.
    let incoming = estimate_stored(&r.summary, r.payload.len());
    limit.check(&combined(&[
        estimate_stored(&l.summary, l.payload.len()),
        incoming,
        estimate_applied(&incoming),
    ]))?;
    let mut doc = load_stored(left)?;
    let mut other = load_stored(right)?;
    merge_into(&mut doc, &mut other)?;
    to_stored(&doc)
}

/// Merges `other` into `doc`; shared by `merge` and the aggregate. What makes a merge fail
/// is in the documents themselves, such as two clients using one actor id.
pub fn merge_into(doc: &mut Automerge, other: &mut Automerge) -> Result<(), Error> {
    no_panic(|| doc.merge(other))
        .map_err(Error::CannotMerge)?
        .map_err(|err| Error::CannotMerge(err.to_string()))?;
    Ok(())
}

/// Applies Automerge bytes (one change, several, an incremental save or a full save) to a
/// stored document. Changes whose dependencies are in neither are refused, and nothing is
/// lost: the statement fails and the stored value stays as it was.
pub fn apply(stored: &[u8], changes: &[u8], limit: LoadLimit) -> Result<Vec<u8>, Error> {
    if changes.is_empty() {
        return Ok(stored.to_vec());
    }
    let value = format::decode(stored)?;
    limit.check(&combined(&[
        estimate_stored(&value.summary, value.payload.len()),
        estimate_client_bytes(changes)?,
    ]))?;
    let before = value.summary.heads;
    let mut doc = load_stored(stored)?;
    apply_to(&mut doc, changes)?;
    if doc.get_heads() == before {
        return Ok(stored.to_vec());
    }
    to_stored(&doc)
}

/// What loading several inputs into one document is estimated to take.
fn combined(parts: &[LoadEstimate]) -> LoadEstimate {
    parts.iter().fold(LoadEstimate { ops: 0, changes: 0, bytes: 0 }, |sum, part| LoadEstimate {
        ops: sum.ops.saturating_add(part.ops),
        changes: sum.changes.saturating_add(part.changes),
        bytes: sum.bytes.saturating_add(part.bytes),
    })
}

/// Applies Automerge bytes to a loaded document, refusing changes it cannot apply.
pub fn apply_to(doc: &mut Automerge, changes: &[u8]) -> Result<(), Error> {
    // `load_incremental` skips whatever it fails to parse, so the bytes are parsed strictly
    // first: bad bytes are an error, never a silently shorter write.
    let strict = LoadOptions::new().on_partial_load(OnPartialLoad::Error);
    let loaded = memory::timed_load(|| no_panic(|| Automerge::load_with_options(changes, strict)))
        .map_err(Error::NotAutomerge)?;
    match loaded {
        Ok(mut incoming) if incoming.get_missing_deps(&[]).is_empty() => {
            merge_into(doc, &mut incoming)?;
        }
        // Well-formed, but needing changes that only `doc` may have.
        Ok(_) | Err(AutomergeError::MissingDeps) => {
            no_panic(|| doc.load_incremental(changes))
                .map_err(Error::NotAutomerge)?
                .map_err(|err| Error::NotAutomerge(err.to_string()))?;
        }
        Err(err) => return Err(Error::NotAutomerge(err.to_string())),
    }
    let missing = doc.get_missing_deps(&[]);
    if !missing.is_empty() {
        return Err(Error::MissingDependenciesOnApply(missing));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::stored_from_client_bytes;
    use automerge::transaction::Transactable;
    use automerge::{ActorId, AutoCommit, ROOT};

    fn doc(actor: u8, key: &str) -> AutoCommit {
        let mut doc = AutoCommit::new().with_actor(ActorId::from([actor; 16]));
        doc.put(ROOT, key, actor as i64).unwrap();
        doc
    }

    #[test]
    fn merging_equal_heads_returns_the_left_value() {
        let stored = stored_from_client_bytes(&doc(1, "a").save(), LoadLimit::NONE).unwrap();
        assert_eq!(merge(&stored, &stored, LoadLimit::NONE).unwrap(), stored);
    }

    #[test]
    fn merge_combines_both_sides() {
        let a = stored_from_client_bytes(&doc(1, "a").save(), LoadLimit::NONE).unwrap();
        let b = stored_from_client_bytes(&doc(2, "b").save(), LoadLimit::NONE).unwrap();
        let merged = load_stored(&merge(&a, &b, LoadLimit::NONE).unwrap()).unwrap();
        assert_eq!(merged.get_heads().len(), 2);
        assert!(merged.get(ROOT, "a").unwrap().is_some());
        assert!(merged.get(ROOT, "b").unwrap().is_some());
    }

    #[test]
    fn applies_new_changes_and_ignores_known_ones() {
        let mut local = doc(1, "a");
        let stored = stored_from_client_bytes(&local.save(), LoadLimit::NONE).unwrap();
        let heads = local.get_heads();
        local.put(ROOT, "more", 2_i64).unwrap();
        let change = local.save_after(&heads);
        let applied = apply(&stored, &change, LoadLimit::NONE).unwrap();
        assert_eq!(load_stored(&applied).unwrap().get_heads(), local.get_heads());
        // The same change again, or nothing, changes nothing.
        assert_eq!(apply(&applied, &change, LoadLimit::NONE).unwrap(), applied);
        assert_eq!(apply(&applied, &[], LoadLimit::NONE).unwrap(), applied);
    }

    #[test]
    fn applies_changes_that_depend_on_the_stored_document() {
        let mut local = doc(1, "a");
        let stored = stored_from_client_bytes(&local.save(), LoadLimit::NONE).unwrap();
        let heads = local.get_heads();
        local.put(ROOT, "b", 1_i64).unwrap();
        local.commit();
        local.put(ROOT, "c", 1_i64).unwrap();
        let two_changes = local.save_after(&heads);
        let applied = load_stored(&apply(&stored, &two_changes, LoadLimit::NONE).unwrap()).unwrap();
        assert_eq!(applied.get_heads(), local.get_heads());
    }

    #[test]
    fn refuses_changes_with_missing_dependencies_and_garbage() {
        let mut local = doc(1, "a");
        let stored = stored_from_client_bytes(&AutoCommit::new().save(), LoadLimit::NONE).unwrap();
        let heads = local.get_heads();
        local.put(ROOT, "more", 2_i64).unwrap();
        let orphan = local.save_after(&heads);
        assert!(matches!(apply(&stored, &orphan, LoadLimit::NONE), Err(Error::MissingDependenciesOnApply(h)) if h == heads));
        for garbage in [&b"junk"[..], &[0xde, 0xad], &[0x85, 0x6f, 0x4a, 0x83]] {
            assert!(matches!(apply(&stored, garbage, LoadLimit::NONE), Err(Error::NotAutomerge(_))), "{garbage:?}");
        }
        let mut truncated = local.save();
        truncated.pop();
        assert!(matches!(apply(&stored, &truncated, LoadLimit::NONE), Err(Error::NotAutomerge(_))));
    }
}
