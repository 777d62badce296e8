//! A document's history: its changes, whether it contains others, and what a client needs
//! to catch up.

use automerge::{Automerge, Change, ChangeHash, ReadDoc};

use crate::chunk::parse_changes;
use crate::format::{header_contains, Header, Prefix, StoredValue};
use crate::guard::no_panic;
use crate::load::{has_all, load_client_bytes, load_stored};
use crate::settings::LoadLimit;
use crate::{estimate, heads, Error};

mod appended;

/// What a change says about itself, as `automerge_changes_meta` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeMeta {
    pub hash: String,
    pub actor: String,
    pub seq: u64,
    pub start_op: u64,
    pub op_count: u64,
    /// Milliseconds since the Unix epoch, as the author's clock said.
    pub time_ms: i64,
    pub message: Option<String>,
    pub deps: Vec<String>,
}

/// One change, as `automerge_changes` lists it: its metadata and its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeInfo {
    pub meta: ChangeMeta,
    pub bytes: Vec<u8>,
}

/// Every change of `doc` in causal order, or only those that `since` does not contain.
pub fn changes(doc: &Automerge, since: Option<&[ChangeHash]>) -> Result<Vec<ChangeInfo>, Error> {
    let since = since.unwrap_or(&[]);
    heads::require_known(doc, since)?;
    let changes = no_panic(|| doc.get_changes(since)).map_err(Error::CorruptStoredValue)?;
    Ok(listed(&changes, info))
}

/// What [`changes`] lists for the stored document `value`: read from the changes appended
/// after its save, without a load, when `since` has the whole save (as a client that synced
/// since the last save has); else from a load.
pub fn stored_changes(
    value: &StoredValue<'_>,
    since: Option<&[ChangeHash]>,
) -> Result<Vec<ChangeInfo>, Error> {
    match appended::lacking(value, since.unwrap_or(&[])) {
        Some(lacking) => Ok(listed(&lacking, info)),
        None => changes(&load_stored(value)?, since),
    }
}

/// What [`changes_meta`] lists for the stored document `value`, read as [`stored_changes`]
/// reads it.
pub fn stored_changes_meta(
    value: &StoredValue<'_>,
    since: Option<&[ChangeHash]>,
) -> Result<Vec<ChangeMeta>, Error> {
    match appended::lacking(value, since.unwrap_or(&[])) {
        Some(lacking) => Ok(listed(&lacking, meta)),
        None => changes_meta(&load_stored(value)?, since),
    }
}

/// Each change as `row` makes it, heeding a cancel between changes.
fn listed<C, T>(changes: impl IntoIterator<Item = C>, row: impl FnMut(C) -> T) -> Vec<T> {
    changes
        .into_iter()
        .inspect(|_| {
            crate::interrupts::check();
        })
        .map(row)
        .collect()
}

fn info(change: &Change) -> ChangeInfo {
    ChangeInfo { meta: meta(change), bytes: change.raw_bytes().to_vec() }
}

fn meta(change: &Change) -> ChangeMeta {
    ChangeMeta {
        hash: change.hash().to_string(),
        actor: change.actor_id().to_hex_string(),
        seq: change.seq(),
        start_op: change.start_op().get(),
        op_count: change.len() as u64,
        time_ms: change.timestamp(),
        message: change.message().map(str::to_string),
        deps: heads::to_hex(change.deps()),
    }
}

/// The metadata of the changes [`changes`] lists, in the same order, without building each
/// change's bytes.
pub fn changes_meta(
    doc: &Automerge,
    since: Option<&[ChangeHash]>,
) -> Result<Vec<ChangeMeta>, Error> {
    let since = since.unwrap_or(&[]);
    heads::require_known(doc, since)?;
    let changes = no_panic(|| doc.get_changes_meta(since)).map_err(Error::CorruptStoredValue)?;
    Ok(listed(changes, |change| ChangeMeta {
        hash: change.hash.to_string(),
        actor: change.actor.to_hex_string(),
        seq: change.seq,
        start_op: change.start_op,
        op_count: (change.max_op + 1).saturating_sub(change.start_op),
        time_ms: change.timestamp,
        message: change.message.map(|m| m.into_owned()),
        deps: heads::to_hex(&change.deps),
    }))
}

/// The bytes of the change `hash`, when `doc` has it.
pub fn change(doc: &Automerge, hash: &ChangeHash) -> Result<Option<Vec<u8>>, Error> {
    no_panic(|| doc.get_change_by_hash(hash).map(|change| change.raw_bytes().to_vec()))
        .map_err(Error::CorruptStoredValue)
}

/// [`change`] of the stored document `value`: an appended change without a load, any other
/// from a load.
pub fn stored_change(value: &StoredValue<'_>, hash: &ChangeHash) -> Result<Option<Vec<u8>>, Error> {
    match appended::find(value, hash) {
        Some(change) => Ok(Some(change.raw_bytes().to_vec())),
        None => change(&load_stored(value)?, hash),
    }
}

/// Whether merging the stored document `other`, whose heads are `other_heads`, into the
/// stored `doc` would add nothing: from `doc`'s header when it answers, else from a load of
/// `doc` alone (a document's heads name its whole history).
pub fn contains_document<'a>(
    doc: &impl Prefix<'a>,
    other_heads: &[ChangeHash],
) -> Result<bool, Error> {
    has_changes(doc, other_heads)
}

/// Whether applying the Automerge bytes `incoming` (changes, an incremental save, a save) to
/// the stored `doc` would add nothing. Change chunks are read for their hashes without a
/// load; anything else is loaded as client input, within `limit`, for its heads. `doc` is
/// then asked as [`contains_document`] asks it.
pub fn contains_changes<'a>(
    doc: &impl Prefix<'a>,
    incoming: &[u8],
    limit: LoadLimit,
) -> Result<bool, Error> {
    let hashes = match parse_changes(incoming) {
        Some(changes) => changes.iter().map(|change| change.hash()).collect(),
        None => {
            limit.check(&estimate::estimate_client_bytes(incoming)?)?;
            load_client_bytes(incoming)?.get_heads()
        }
    };
    has_changes(doc, &hashes)
}

/// Whether the document has every change in `hashes`, as a client asks before sending
/// what it has: from the header and actor table when they answer (a client that is up to
/// date, or that synced since its last write), which are all that is fetched then; else
/// from a load.
pub fn has_changes<'a>(value: &impl Prefix<'a>, hashes: &[ChangeHash]) -> Result<bool, Error> {
    let header = Header::read(value)?;
    let clock = header.clock(value.prefix(header.clock_end()))?;
    if header_contains(&header.summary.heads, Some(&clock), hashes) {
        return Ok(true);
    }
    let value = header.decode(value.prefix(usize::MAX))?;
    Ok(has_all(&load_stored(&value)?, hashes))
}

/// The bytes a client that has `since` needs to catch up: the changes it lacks, as an
/// incremental save it can load with `loadIncremental`.
pub fn catch_up(doc: &Automerge, since: &[ChangeHash]) -> Result<Vec<u8>, Error> {
    heads::require_known(doc, since)?;
    no_panic(|| doc.save_after(since)).map_err(Error::CorruptStoredValue)
}

/// [`catch_up`] of the stored document `value`, read as [`stored_changes`] reads it: the
/// lacking changes' bytes one after another, as `save_after` writes them.
pub fn stored_catch_up(value: &StoredValue<'_>, since: &[ChangeHash]) -> Result<Vec<u8>, Error> {
    match appended::lacking(value, since) {
        Some(lacking) => Ok(lacking.iter().fold(Vec::new(), |mut bytes, change| {
            bytes.extend_from_slice(change.raw_bytes());
            bytes
        })),
        None => catch_up(&load_stored(value)?, since),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::{CommitOptions, Transactable};
    use automerge::{ActorId, AutoCommit, ROOT};

    use crate::save::to_stored;
    use crate::settings::WriteSettings;
    use crate::writes::stored_from_client_bytes;

    fn two_changes() -> (AutoCommit, Vec<ChangeHash>) {
        let mut doc = AutoCommit::new().with_actor(ActorId::from([9; 16]));
        doc.put(ROOT, "a", 1_i64).unwrap();
        doc.commit_with(CommitOptions::default().with_message("first").with_time(1000));
        let first = doc.get_heads();
        doc.put(ROOT, "b", 2_i64).unwrap();
        doc.commit_with(CommitOptions::default().with_time(2000));
        (doc, first)
    }

    #[test]
    fn lists_changes_with_their_metadata() {
        let (mut doc, first) = two_changes();
        let all = changes(doc.document(), None).unwrap();
        assert_eq!(all.len(), 2);
        let (one, two) = (&all[0].meta, &all[1].meta);
        assert_eq!(one.hash, first[0].to_string());
        assert_eq!(one.actor, "09".repeat(16));
        assert_eq!((one.seq, one.start_op, one.op_count), (1, 1, 1));
        assert_eq!(one.message.as_deref(), Some("first"));
        assert_eq!(one.time_ms, 1000);
        assert!(one.deps.is_empty());
        assert_eq!(two.deps, vec![one.hash.clone()]);
        assert_eq!((two.seq, two.start_op), (2, 2));
        assert_eq!(all[0].bytes, doc.get_changes(&[])[0].raw_bytes());

        let since = changes(doc.document(), Some(&first)).unwrap();
        assert_eq!(since, all[1..].to_vec());
    }

    #[test]
    fn metadata_alone_is_what_the_changes_say() {
        let (mut doc, first) = two_changes();
        // Two operations in one change, then an empty change: its op count is 0.
        let mut with_more = doc.clone();
        with_more.put(ROOT, "c", 3_i64).unwrap();
        with_more.put(ROOT, "d", 4_i64).unwrap();
        with_more.commit_with(CommitOptions::default().with_time(3000).with_message("two ops"));
        with_more.empty_change(CommitOptions::default().with_time(4000));
        let full: Vec<ChangeMeta> =
            changes(with_more.document(), None).unwrap().into_iter().map(|c| c.meta).collect();
        assert_eq!(changes_meta(with_more.document(), None).unwrap(), full);
        assert_eq!(full[2].op_count, 2);
        assert_eq!(full[3].op_count, 0);
        let since = changes_meta(with_more.document(), Some(&first)).unwrap();
        assert_eq!(since, full[1..].to_vec());
        let unknown = [ChangeHash([1; 32])];
        assert!(matches!(
            changes_meta(doc.document(), Some(&unknown)),
            Err(Error::UnknownHeads(_))
        ));
    }

    #[test]
    fn one_change_by_its_hash() {
        let (mut doc, first) = two_changes();
        let bytes = change(doc.document(), &first[0]).unwrap().unwrap();
        assert_eq!(bytes, doc.get_changes(&[])[0].raw_bytes());
        assert_eq!(change(doc.document(), &ChangeHash([1; 32])).unwrap(), None);
    }

    #[test]
    fn contains_what_a_merge_would_not_add() {
        let (mut doc, first) = two_changes();
        let stored = |doc: &Automerge| to_stored(doc, WriteSettings::UNLIMITED).unwrap();
        let (whole, older) =
            (stored(doc.document()), stored(&doc.document().fork_at(&first).unwrap()));
        let mut other = AutoCommit::new().with_actor(ActorId::from([5; 16]));
        other.put(ROOT, "x", 1_i64).unwrap();
        let unrelated = stored(other.document());
        let (whole, older, unrelated) = (&whole[..], &older[..], &unrelated[..]);
        let heads = |stored: &[u8]| crate::format::decode(stored).unwrap().summary.heads;

        assert!(contains_document(&whole, &heads(older)).unwrap(), "an ancestor");
        assert!(contains_document(&whole, &heads(whole)).unwrap(), "itself");
        assert!(!contains_document(&older, &heads(whole)).unwrap(), "a descendant");
        assert!(!contains_document(&whole, &heads(unrelated)).unwrap());
        assert!(contains_document(&whole, &[]).unwrap(), "the empty document");

        let no_limit = LoadLimit::NONE;
        let second_change = doc.get_changes(&first)[0].raw_bytes().to_vec();
        assert!(contains_changes(&whole, &second_change, no_limit).unwrap());
        assert!(!contains_changes(&older, &second_change, no_limit).unwrap());
        assert!(contains_changes(&whole, &doc.save(), no_limit).unwrap(), "a save");
        assert!(!contains_changes(&whole, &other.save(), no_limit).unwrap());
        assert!(contains_changes(&whole, &[], no_limit).unwrap(), "nothing");
        // Changes are read for their hashes without a load, so no limit applies to them; a
        // save is loaded within it.
        let nothing = LoadLimit(Some(0));
        assert!(contains_changes(&whole, &second_change, nothing).unwrap());
        assert!(matches!(
            contains_changes(&whole, &doc.save(), nothing),
            Err(Error::LoadTooLarge { .. })
        ));
        assert!(matches!(
            contains_changes(&whole, b"not automerge", no_limit),
            Err(Error::NotAutomerge(_))
        ));
    }

    #[test]
    fn changes_after_the_save_are_read_without_a_load() {
        let (mut doc, first) = two_changes();
        let settings = WriteSettings::UNLIMITED;
        let mut stored = stored_from_client_bytes(&doc.save(), settings).unwrap();
        let save_heads = doc.get_heads();
        // One change on the save, then two concurrent ones on it: all three appended.
        doc.put(ROOT, "c", 3_i64).unwrap();
        let on_the_save = doc.get_changes(&save_heads)[0].clone();
        let (mut ours, mut theirs) = (doc.fork(), doc.fork().with_actor(ActorId::from([7; 16])));
        ours.put(ROOT, "d", 4_i64).unwrap();
        theirs.put(ROOT, "e", 5_i64).unwrap();
        let (our_change, their_change) = (
            ours.get_last_local_change().unwrap().clone(),
            theirs.get_last_local_change().unwrap().clone(),
        );
        let (ours, theirs) = (ours.get_heads(), theirs.get_heads());
        for change in [on_the_save, our_change, their_change] {
            stored = crate::writes::apply(&stored, change.raw_bytes(), settings).unwrap();
        }
        let value = crate::format::decode(&stored).unwrap();
        assert_eq!(crate::chunk::changes_after_a_save(value.payload), Some(3), "all appended");
        let loaded = load_stored(&value).unwrap();
        for since in [&save_heads, &ours, &theirs, &value.summary.heads] {
            assert!(appended::lacking(&value, since).is_some(), "{since:?} has the save");
            assert_eq!(
                stored_changes(&value, Some(since)).unwrap(),
                changes(&loaded, Some(since)).unwrap()
            );
            assert_eq!(
                stored_changes_meta(&value, Some(since)).unwrap(),
                changes_meta(&loaded, Some(since)).unwrap()
            );
            assert_eq!(stored_catch_up(&value, since).unwrap(), catch_up(&loaded, since).unwrap());
        }
        assert_eq!(stored_changes(&value, Some(&ours)).unwrap().len(), 1, "theirs alone");
        assert!(stored_changes(&value, Some(&value.summary.heads)).unwrap().is_empty());
        // An older change, or nothing: only a load knows what the replica lacks.
        assert!(appended::lacking(&value, &first).is_none());
        assert!(appended::lacking(&value, &[]).is_none());
        assert_eq!(stored_changes(&value, None).unwrap(), changes(&loaded, None).unwrap());
        assert_eq!(stored_changes(&value, Some(&first)).unwrap().len(), 4);
        let unknown = [ChangeHash([1; 32])];
        assert!(matches!(stored_changes(&value, Some(&unknown)), Err(Error::UnknownHeads(_))));
        assert_eq!(
            stored_change(&value, &theirs[0]).unwrap(),
            change(&loaded, &theirs[0]).unwrap()
        );
        assert_eq!(stored_change(&value, &first[0]).unwrap(), change(&loaded, &first[0]).unwrap());
        assert_eq!(stored_change(&value, &unknown[0]).unwrap(), None);
    }

    #[test]
    fn catching_up_gives_what_a_client_lacks() {
        let (mut doc, first) = two_changes();
        let mut client = Automerge::new();
        client.load_incremental(&catch_up(doc.document(), &[]).unwrap()).unwrap();
        assert_eq!(client.get_heads(), doc.get_heads());

        let mut behind =
            AutoCommit::load(&doc.document().save()).unwrap().document().fork_at(&first).unwrap();
        behind.load_incremental(&catch_up(doc.document(), &first).unwrap()).unwrap();
        assert_eq!(behind.get_heads(), doc.get_heads());
    }

    #[test]
    fn unknown_heads_are_refused() {
        let (mut doc, _) = two_changes();
        let unknown = [ChangeHash([1; 32])];
        assert!(matches!(changes(doc.document(), Some(&unknown)), Err(Error::UnknownHeads(_))));
        assert!(matches!(catch_up(doc.document(), &unknown), Err(Error::UnknownHeads(_))));
    }

    #[test]
    fn knows_its_changes_from_the_header_or_a_load() {
        let mut doc = AutoCommit::new().with_actor(ActorId::from([1; 16]));
        doc.put(ROOT, "a", 1_i64).unwrap();
        let first = doc.get_heads();
        doc.put(ROOT, "a", 2_i64).unwrap();
        let second = doc.get_heads();
        let mut other = AutoCommit::new();
        other.put(ROOT, "b", 1_i64).unwrap();
        let stored = stored_from_client_bytes(&doc.save(), WriteSettings::UNLIMITED).unwrap();
        let value = crate::format::decode(&stored).unwrap();
        assert!(value.contains(&second), "a head");
        assert!(!value.contains(&first), "an older change: the header cannot tell");
        let stored = &stored[..];
        assert!(has_changes(&stored, &first).unwrap(), "a load can");
        assert!(has_changes(&stored, &[]).unwrap());
        assert!(!has_changes(&stored, &[second[0], other.get_heads()[0]]).unwrap());
    }
}
