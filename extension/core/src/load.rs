//! The one place documents are loaded, changes applied and documents merged: client bytes
//! and stored payloads loaded under [`no_panic`], counted as loads
//! ([`memory::timed_load`]), and every change a load or an apply adds checked against the
//! loader's rules ([`integrity`]), so that what is stored loads again. Above the framing
//! and the stored value; the write paths, the reads and compaction load through here.

use automerge::{Automerge, AutomergeError, ChangeHash, LoadOptions, OnPartialLoad, ReadDoc};

use crate::chunk::{parse_changes, split_save};
use crate::format::StoredValue;
use crate::guard::no_panic;
use crate::{integrity, memory, op_owners, Error};

/// Loads what a client sent: a `save()`, an incremental save, encoded changes, or any
/// concatenation of them. Empty input is the empty document. The input must be
/// self-contained: a change whose dependencies are absent is refused rather than queued,
/// because saving a document drops queued changes. A leading save is checked by
/// Automerge's loader and by [`op_owners`] (its operations are its changes'); the changes
/// after it are applied and checked by [`integrity`], so that what is stored loads again.
pub fn load_client_bytes(bytes: &[u8]) -> Result<Automerge, Error> {
    let (save, changes) = split_save(bytes);
    let mut doc = if save.is_empty() {
        Automerge::new()
    } else {
        let doc = memory::timed_load(|| no_panic(|| Automerge::load(save)))
            .map_err(Error::NotAutomerge)?
            .map_err(|err| Error::NotAutomerge(err.to_string()))?;
        op_owners::check(save)?;
        doc
    };
    apply_to(&mut doc, changes).map_err(|err| match err {
        Error::MissingDependenciesOnApply(missing) => Error::MissingDependencies(missing),
        other => other,
    })?;
    Ok(doc)
}

/// Loads the document of a decoded stored value. Changes appended after its save are
/// checked as a write checks them: values that 0.3.0 stored with a change that its save
/// would not load again are refused here, instead of being saved into something no load
/// accepts (`automerge_repair` mends them).
pub fn load_stored(value: &StoredValue<'_>) -> Result<Automerge, Error> {
    load_payload(value.payload, Automerge::load)
}

/// A stored value's payload (a save, then any changes appended since) loaded as
/// [`load_stored`] loads it, with the save loaded by `loader`, such as one that counts
/// text positions in another unit.
pub(crate) fn load_payload(
    payload: &[u8],
    loader: fn(&[u8]) -> Result<Automerge, automerge::AutomergeError>,
) -> Result<Automerge, Error> {
    let (save, appended) = split_save(payload);
    let mut doc = load_saved(save, loader)?;
    apply_to(&mut doc, appended).map_err(|err| match err {
        Error::BreaksLoadRule(broken) => {
            Error::CorruptStoredValue(format!("an appended change breaks a loader rule: {broken}"))
        }
        other => Error::CorruptStoredValue(other.to_string()),
    })?;
    Ok(doc)
}

/// The stored save `bytes` loaded with `loader` (checked or not), counted as a load; what
/// fails is a corrupt stored value.
pub(crate) fn load_saved(
    bytes: &[u8],
    loader: fn(&[u8]) -> Result<Automerge, automerge::AutomergeError>,
) -> Result<Automerge, Error> {
    memory::timed_load(|| no_panic(|| loader(bytes)))
        .map_err(Error::CorruptStoredValue)?
        .map_err(|err| Error::CorruptStoredValue(err.to_string()))
}

/// Applies Automerge bytes to a loaded document, refusing changes it cannot apply and
/// changes that would keep its save from loading (see [`integrity`]).
pub fn apply_to(doc: &mut Automerge, changes: &[u8]) -> Result<(), Error> {
    if changes.is_empty() {
        return Ok(());
    }
    let before = doc.get_heads();
    // Change chunks are checked before they are applied; a save among them, by the loader.
    let marks = match parse_changes(changes) {
        Some(parsed) => Some(integrity::check_incoming(doc, &parsed)?),
        None => None,
    };
    // `load_incremental` skips whatever it fails to parse, so the bytes are parsed strictly
    // first: bad bytes are an error, never a silently shorter write.
    let strict = LoadOptions::new().on_partial_load(OnPartialLoad::Error);
    let loaded = memory::timed_load(|| no_panic(|| Automerge::load_with_options(changes, strict)))
        .map_err(Error::NotAutomerge)?;
    match loaded {
        Ok(mut incoming) if incoming.get_missing_deps(&[]).is_empty() => {
            merge_unchecked(doc, &mut incoming)?;
        }
        // Well-formed, but needing changes that only `doc` may have.
        Ok(_) | Err(AutomergeError::MissingDeps) => {
            no_panic(|| doc.load_incremental(changes))
                .map_err(Error::NotAutomerge)?
                .map_err(|err| refused(err, Error::NotAutomerge))?;
        }
        Err(err) => return Err(Error::NotAutomerge(err.to_string())),
    }
    let missing = doc.get_missing_deps(&[]);
    if !missing.is_empty() {
        return Err(Error::MissingDependenciesOnApply(missing));
    }
    integrity::check_added(doc, &before, marks)
}

/// Merges `other` into `doc`, as a merge of two stored documents and the aggregate do.
/// What makes a merge fail is in the documents themselves, such as two clients using one
/// actor id, or a change of one that the other's would keep from loading again (see
/// [`integrity`]).
pub fn merge_into(doc: &mut Automerge, other: &mut Automerge) -> Result<(), Error> {
    let before = doc.get_heads();
    merge_unchecked(doc, other)?;
    integrity::check_added(doc, &before, None)
}

fn merge_unchecked(doc: &mut Automerge, other: &mut Automerge) -> Result<(), Error> {
    no_panic(|| doc.merge(other))
        .map_err(Error::CannotMerge)?
        .map_err(|err| refused(err, Error::CannotMerge))?;
    Ok(())
}

/// What the automerge crate's refusal means for the user: a reused sequence number is an
/// actor id shared by two clients, whatever the bytes looked like.
fn refused(err: AutomergeError, otherwise: fn(String) -> Error) -> Error {
    match err {
        AutomergeError::DuplicateSeqNumber(seq, actor) => {
            Error::ReusedSeq { actor: actor.to_hex_string(), seq }
        }
        err => otherwise(err.to_string()),
    }
}

/// Whether `doc` has every change in `hashes`.
pub fn has_all(doc: &Automerge, hashes: &[ChangeHash]) -> bool {
    no_panic(|| hashes.iter().all(|hash| doc.get_change_by_hash(hash).is_some())).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::{CommitOptions, Transactable};
    use automerge::{ActorId, ROOT};

    fn doc_with_title(actor: u8, title: &str) -> Automerge {
        let mut doc = Automerge::new().with_actor(ActorId::from([actor; 16]));
        retitle(&mut doc, title);
        doc
    }

    /// One change: the title set to `title`.
    fn retitle(doc: &mut Automerge, title: &str) {
        let mut tx = doc.transaction();
        tx.put(ROOT, "title", title).unwrap();
        tx.commit_with(CommitOptions::default().with_time(0));
    }

    #[test]
    fn accepts_changes_and_incremental_saves() {
        let mut doc = doc_with_title(1, "one");
        let first = doc.save();
        retitle(&mut doc, "two");
        let incremental = doc.save_after(&automerge::AutoCommit::load(&first).unwrap().get_heads());
        let mut both = first.clone();
        both.extend_from_slice(&incremental);
        let loaded = load_client_bytes(&both).unwrap();
        assert_eq!(loaded.get_heads(), doc.get_heads());

        let mut changes = Vec::new();
        for change in doc.get_changes(&[]) {
            changes.extend_from_slice(change.raw_bytes());
        }
        let loaded = load_client_bytes(&changes).unwrap();
        assert_eq!(loaded.get_heads(), doc.get_heads());
    }

    #[test]
    fn refuses_changes_whose_dependencies_are_missing() {
        let mut doc = doc_with_title(1, "one");
        let before = doc.get_heads();
        retitle(&mut doc, "two");
        let second_change_only = doc.save_after(&before);
        let err = load_client_bytes(&second_change_only).unwrap_err();
        assert!(matches!(&err, Error::MissingDependencies(hashes) if *hashes == before), "{err}");
        assert_eq!(err.kind(), crate::ErrorKind::InvalidBinary);
        assert!(err.detail().unwrap().contains(&before[0].to_string()));

        // After a document chunk, automerge queues such changes instead of failing.
        let mut saved_then_orphan = Automerge::new().save();
        saved_then_orphan.extend_from_slice(&second_change_only);
        let err = load_client_bytes(&saved_then_orphan).unwrap_err();
        assert!(matches!(&err, Error::MissingDependencies(hashes) if *hashes == before), "{err}");
    }

    #[test]
    fn refuses_garbage_and_truncation() {
        let saved = doc_with_title(1, "hello").save();
        let truncated = &saved[..saved.len() - 3];
        let mut flipped = saved.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        for bad in [&b"not automerge"[..], &[0x85, 0x6f, 0x4a, 0x83], truncated, &flipped] {
            let err = load_client_bytes(bad).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidBinary, "{err}");
        }
    }
}
