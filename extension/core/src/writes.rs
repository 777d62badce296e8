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
//!   the heads or concurrently) are appended to the stored payload without a load, up to
//!   `append_limit` of them since the last save, and the kept JSON follows them. Other
//!   changes are applied to the loaded document: appending what the index cannot check
//!   could store a value that no later load accepts.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use automerge::{
    Automerge, AutomergeError, Change, ChangeHash, LoadOptions, OnPartialLoad, ReadDoc,
};

use crate::document::{contains, has_all, load_stored, to_stored, WriteSettings};
use crate::estimate::{estimate_applied, estimate_client_bytes, estimate_stored, LoadEstimate};
use crate::format::{self, Kept, StoredValue};
use crate::guard::no_panic;
use crate::kept_json;
use crate::structure::Structure;
use crate::{cache, chunk, integrity, memory, Error};

/// The merge of two stored documents. Equal heads mean equal documents, and a side whose
/// headers show it has the other's heads contains the other: no load. Where the right
/// side's actor clock only suggests that it contains the left (the same client saving
/// again, as an upsert of its full save does), the right side alone is checked: taken from
/// the [`cache`] when the statement just loaded it from client input, else loaded.
/// Otherwise the merge result is estimated from both headers and checked against the load
/// limit first.
pub fn merge(left: &[u8], right: &[u8], settings: WriteSettings) -> Result<Vec<u8>, Error> {
    let (l, r) = (format::decode(left)?, format::decode(right)?);
    if contains(&l, &r.summary.heads) {
        return Ok(left.to_vec());
    }
    if contains(&r, &l.summary.heads) {
        return Ok(right.to_vec());
    }
    let incoming = estimate_stored(&r.summary, r.payload);
    let held = cache::take(&r.summary.heads);
    let mut other = if held.is_some() || may_contain(&r, &l) {
        let other = match held {
            Some(doc) => doc,
            None => {
                settings.load_limit.check(&incoming)?;
                load_stored(right)?
            }
        };
        if has_all(&other, &l.summary.heads) {
            return Ok(right.to_vec());
        }
        settings
            .load_limit
            .check(&combined(&[estimate_stored(&l.summary, l.payload), incoming]))?;
        other
    } else {
        // Merging decodes the right document's changes and applies them to the left one.
        settings.load_limit.check(&combined(&[
            estimate_stored(&l.summary, l.payload),
            incoming,
            estimate_applied(&incoming),
        ]))?;
        load_stored(right)?
    };
    let mut doc = load_stored(left)?;
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

/// Merges `other` into `doc`; shared by `merge` and the aggregate. What makes a merge fail
/// is in the documents themselves, such as two clients using one actor id, or a change
/// of one that the other's would keep from loading again (see [`integrity`]).
pub fn merge_into(doc: &mut Automerge, other: &mut Automerge) -> Result<(), Error> {
    let before = doc.get_heads();
    merge_unchecked(doc, other)?;
    integrity::check_added(doc, &before)
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

/// Applies Automerge bytes (one change, several, an incremental save or a full save) to a
/// stored document. Changes whose dependencies are in neither are refused, and nothing is
/// lost: the statement fails and the stored value stays as it was.
pub fn apply(stored: &[u8], changes: &[u8], settings: WriteSettings) -> Result<Vec<u8>, Error> {
    if changes.is_empty() {
        return Ok(stored.to_vec());
    }
    let value = format::decode(stored)?;
    let incoming = estimate_client_bytes(changes)?;
    if let Some(appended) = append(stored, &value, changes, settings, &incoming)? {
        return Ok(appended);
    }
    settings
        .load_limit
        .check(&combined(&[estimate_stored(&value.summary, value.payload), incoming]))?;
    let before = value.summary.heads;
    let mut doc = load_stored(stored)?;
    apply_to(&mut doc, changes)?;
    if doc.get_heads() == before {
        return Ok(stored.to_vec());
    }
    to_stored(&doc, settings)
}

/// The write without a load: `None` when the changes do not simply follow the stored
/// document, or the appended changes would pass the limit, and the caller must load.
fn append(
    stored: &[u8],
    value: &StoredValue<'_>,
    changes: &[u8],
    settings: WriteSettings,
    incoming: &LoadEstimate,
) -> Result<Option<Vec<u8>>, Error> {
    let Some(kept) = &value.kept else { return Ok(None) };
    // Parsing decodes (and inflates) the changes: the limit holds for them as for any load.
    settings.load_limit.check(incoming)?;
    let Some(parsed) = parse_changes(changes) else { return Ok(None) };
    let mut heads: BTreeSet<ChangeHash> = value.summary.heads.iter().copied().collect();
    let mut kept = kept.clone();
    let Some(mut structure) = kept.structure.as_deref().and_then(Structure::decode) else {
        return Ok(None);
    };
    let mut earlier = Appended::new(value.payload);
    let (mut new, mut new_ops) = (Vec::new(), 0u64);
    let mut edits = Vec::new();
    for change in &parsed {
        let hash = change.hash();
        let latest = kept.clock.get(change.actor_id()).copied();
        if heads.contains(&hash) || latest.is_some_and(|(_, latest)| latest == hash) {
            continue; // already in the document
        }
        let next_seq = latest.map_or(1, |(seq, _)| seq + 1);
        let deps_known = change.deps().iter().all(|dep| {
            heads.contains(dep) || kept.is_latest_change(dep) || earlier.max_op(dep).is_some()
        });
        if change.seq() != next_seq
            || !deps_known
            || !loads_after(change, latest, &new, &heads, &kept.clock)
        {
            return Ok(None);
        }
        // Only operations checked against the structure index are appended: a change that
        // names an object, element or operation the document lacks would be stored and
        // make every later load fail.
        let Some(deps_max_op) = deps_max_op(change, &heads, &kept, &structure, &mut earlier) else {
            return Ok(None);
        };
        let Some(change_edits) = structure.apply(change, deps_max_op) else { return Ok(None) };
        edits.extend(change_edits);
        heads.retain(|head| !change.deps().contains(head));
        heads.insert(hash);
        kept.clock.insert(change.actor_id().clone(), (change.seq(), hash));
        kept.max_op = kept.max_op.max(change.max_op());
        new_ops += change.len() as u64;
        new.push(change);
    }
    if new.is_empty() {
        return Ok(Some(stored.to_vec()));
    }
    let appended_changes = kept.appended_changes.saturating_add(new.len() as u32);
    if appended_changes > settings.append_limit {
        return Ok(None);
    }
    // The JSON is read only now that the changes are known to be appended; JSON that
    // cannot follow them leaves the write to the load.
    let json = match kept.json {
        Some(json) if settings.keep_json => {
            match kept_json::patched(&json, &edits, settings.json_codec)? {
                Some(patched) => Some(patched),
                None => return Ok(None),
            }
        }
        _ => None,
    };
    let kept = Kept {
        appended_changes,
        json: json.as_ref().map(|json| json.as_kept()),
        structure: Some(Cow::Owned(structure.encode())),
        ..kept
    };
    let summary = format::Summary {
        change_count: value.summary.change_count + new.len() as u64,
        op_count: value.summary.op_count + new_ops,
        heads: heads.into_iter().collect(),
    };
    let mut payload = value.payload.to_vec();
    for change in new {
        payload.extend_from_slice(change.raw_bytes());
    }
    Ok(Some(format::encode(&summary, &kept, &payload)))
}

/// The largest operation counter of the change's dependencies, which its first counter
/// must follow: the document's when it depends on every head (the largest counter is a
/// head's), else the largest of its dependencies', each an actor's latest change (which
/// the index knows) or one appended since the last save; `None` where one is neither.
fn deps_max_op(
    change: &Change,
    heads: &BTreeSet<ChangeHash>,
    kept: &Kept<'_>,
    structure: &Structure,
    earlier: &mut Appended<'_>,
) -> Option<u64> {
    if heads.iter().all(|head| change.deps().contains(head)) {
        return Some(kept.max_op);
    }
    change.deps().iter().try_fold(0, |max, dep| {
        let latest = kept.clock.iter().find(|(_, (_, latest))| latest == dep);
        let max_op = match latest {
            Some((actor, _)) => structure.latest_max_op(actor),
            None => earlier.max_op(dep),
        };
        Some(max.max(max_op?))
    })
}

/// The changes appended to a stored value since its last save, read when a write first
/// asks: a client that typed while another did depends on changes that are no longer
/// their actors' latest.
struct Appended<'a> {
    payload: &'a [u8],
    max_ops: Option<HashMap<ChangeHash, u64>>,
}

impl<'a> Appended<'a> {
    fn new(payload: &'a [u8]) -> Self {
        Appended { payload, max_ops: None }
    }

    /// The largest operation counter of the appended change `hash`.
    fn max_op(&mut self, hash: &ChangeHash) -> Option<u64> {
        let payload = self.payload;
        let max_ops = self.max_ops.get_or_insert_with(|| {
            let (_, appended) = crate::document::split_save(payload);
            let changes = parse_changes(appended).unwrap_or_default();
            changes.iter().map(|change| (change.hash(), change.max_op())).collect()
        });
        max_ops.get(hash).copied()
    }
}

/// Whether a change that follows the header also passes what Automerge checks when it
/// loads the payload, and what its save records (see [`integrity`]), where the header
/// alone can tell: an author only on an actor's first change; operations only of actors it
/// has; at least one operation, encoded as Automerge encodes it; and a descendant of its
/// actor's previous change (`latest`), through its dependencies within this write or by
/// depending on every head. Anything else is left to the load-apply-save path, which
/// checks it against the loaded document.
fn loads_after(
    change: &Change,
    latest: Option<(u64, ChangeHash)>,
    batch: &[&Change],
    heads: &BTreeSet<ChangeHash>,
    clock: &format::ActorClock,
) -> bool {
    if change.author().is_some() && change.seq() != 1 {
        return false;
    }
    let actors = change.other_actor_ids().iter();
    if !actors.into_iter().all(|actor| clock.contains_key(actor) || actor == change.actor_id()) {
        return false;
    }
    // An empty change must start right after its dependencies' counters, which the header
    // knows only when they are every head (the largest counter is a head's).
    let depends_on_every_head = heads.iter().all(|head| change.deps().contains(head));
    if (change.is_empty() && !depends_on_every_head) || change.max_op() > u64::from(u32::MAX) {
        return false;
    }
    let canonical = no_panic(|| Change::from(change.decode()).hash() == change.hash());
    if canonical != Ok(true) {
        return false;
    }
    let Some((_, previous)) = latest else { return true };
    depends_on_every_head || descends_from(change, previous, batch)
}

/// Whether `ancestor` is among the dependencies of `change`, directly or through changes of
/// `batch` (the changes before it in one write; those stored earlier are not parsed again).
fn descends_from(change: &Change, ancestor: ChangeHash, batch: &[&Change]) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<ChangeHash> = change.deps().to_vec();
    while let Some(hash) = stack.pop() {
        if hash == ancestor {
            return true;
        }
        if seen.insert(hash) {
            if let Some(earlier) = batch.iter().find(|earlier| earlier.hash() == hash) {
                stack.extend_from_slice(earlier.deps());
            }
        }
    }
    false
}

/// The changes in `bytes`, when they are nothing but well-formed change chunks.
pub(crate) fn parse_changes(bytes: &[u8]) -> Option<Vec<Change>> {
    chunk::chunks(bytes)
        .map(|chunk| {
            let (chunk_type, chunk) = chunk.ok()?;
            if !matches!(chunk_type, chunk::CHANGE | chunk::COMPRESSED_CHANGE) {
                return None;
            }
            let change = no_panic(|| Change::try_from(chunk)).ok()?.ok()?;
            // Parsing does not check the checksum (the first bytes of the change's hash, also
            // for a compressed chunk); every load does, and refuses the whole payload.
            (chunk.get(4..8)? == &change.hash().0[..4]).then_some(change)
        })
        .collect()
}

/// What loading several inputs into one document is estimated to take.
fn combined(parts: &[LoadEstimate]) -> LoadEstimate {
    parts.iter().fold(LoadEstimate { ops: 0, changes: 0, bytes: 0 }, |sum, part| LoadEstimate {
        ops: sum.ops.saturating_add(part.ops),
        changes: sum.changes.saturating_add(part.changes),
        bytes: sum.bytes.saturating_add(part.bytes),
    })
}

/// Applies Automerge bytes to a loaded document, refusing changes it cannot apply and
/// changes that would keep its save from loading (see [`integrity`]).
pub fn apply_to(doc: &mut Automerge, changes: &[u8]) -> Result<(), Error> {
    if changes.is_empty() {
        return Ok(());
    }
    let before = doc.get_heads();
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
    integrity::check_added(doc, &before)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::{stored_from_client_bytes, LoadLimit};
    use automerge::transaction::Transactable;
    use automerge::{ActorId, AutoCommit, ReadDoc, ROOT};

    fn doc(actor: u8, key: &str) -> AutoCommit {
        let mut doc = AutoCommit::new().with_actor(ActorId::from([actor; 16]));
        doc.put(ROOT, key, actor as i64).unwrap();
        doc
    }

    #[test]
    fn merging_equal_heads_returns_the_left_value() {
        let stored =
            stored_from_client_bytes(&doc(1, "a").save(), WriteSettings::UNLIMITED).unwrap();
        assert_eq!(merge(&stored, &stored, WriteSettings::UNLIMITED).unwrap(), stored);
    }

    #[test]
    fn merge_combines_both_sides() {
        let a = stored_from_client_bytes(&doc(1, "a").save(), WriteSettings::UNLIMITED).unwrap();
        let b = stored_from_client_bytes(&doc(2, "b").save(), WriteSettings::UNLIMITED).unwrap();
        let merged = load_stored(&merge(&a, &b, WriteSettings::UNLIMITED).unwrap()).unwrap();
        assert_eq!(merged.get_heads().len(), 2);
        assert!(merged.get(ROOT, "a").unwrap().is_some());
        assert!(merged.get(ROOT, "b").unwrap().is_some());
    }

    #[test]
    fn applies_new_changes_and_ignores_known_ones() {
        let mut local = doc(1, "a");
        let stored = stored_from_client_bytes(&local.save(), WriteSettings::UNLIMITED).unwrap();
        let heads = local.get_heads();
        local.put(ROOT, "more", 2_i64).unwrap();
        let change = local.save_after(&heads);
        let applied = apply(&stored, &change, WriteSettings::UNLIMITED).unwrap();
        assert_eq!(load_stored(&applied).unwrap().get_heads(), local.get_heads());
        // The same change again, or nothing, changes nothing.
        assert_eq!(apply(&applied, &change, WriteSettings::UNLIMITED).unwrap(), applied);
        assert_eq!(apply(&applied, &[], WriteSettings::UNLIMITED).unwrap(), applied);
    }

    #[test]
    fn applies_changes_that_depend_on_the_stored_document() {
        let mut local = doc(1, "a");
        let stored = stored_from_client_bytes(&local.save(), WriteSettings::UNLIMITED).unwrap();
        let heads = local.get_heads();
        local.put(ROOT, "b", 1_i64).unwrap();
        local.commit();
        local.put(ROOT, "c", 1_i64).unwrap();
        let two_changes = local.save_after(&heads);
        let applied =
            load_stored(&apply(&stored, &two_changes, WriteSettings::UNLIMITED).unwrap()).unwrap();
        assert_eq!(applied.get_heads(), local.get_heads());
    }

    #[test]
    fn refuses_changes_with_missing_dependencies_and_garbage() {
        let mut local = doc(1, "a");
        let stored =
            stored_from_client_bytes(&AutoCommit::new().save(), WriteSettings::UNLIMITED).unwrap();
        let heads = local.get_heads();
        local.put(ROOT, "more", 2_i64).unwrap();
        let orphan = local.save_after(&heads);
        assert!(
            matches!(apply(&stored, &orphan, WriteSettings::UNLIMITED), Err(Error::MissingDependenciesOnApply(h)) if h == heads)
        );
        for garbage in [&b"junk"[..], &[0xde, 0xad], &[0x85, 0x6f, 0x4a, 0x83]] {
            assert!(
                matches!(
                    apply(&stored, garbage, WriteSettings::UNLIMITED),
                    Err(Error::NotAutomerge(_))
                ),
                "{garbage:?}"
            );
        }
        let mut truncated = local.save();
        truncated.pop();
        assert!(matches!(
            apply(&stored, &truncated, WriteSettings::UNLIMITED),
            Err(Error::NotAutomerge(_))
        ));
    }

    #[test]
    fn a_change_that_reuses_an_actors_sequence_number_says_so() {
        let stored =
            stored_from_client_bytes(&doc(1, "a").save(), WriteSettings::UNLIMITED).unwrap();
        // The same actor's first change, with other content: a client that started over.
        let mut restarted = doc(1, "b");
        for bytes in [restarted.save(), restarted.save_after(&[])] {
            let refused = apply(&stored, &bytes, WriteSettings::UNLIMITED).unwrap_err();
            assert!(matches!(refused, Error::ReusedSeq { seq: 1, .. }), "{refused}");
            assert!(refused.to_string().contains(&"01".repeat(16)), "{refused}");
        }
        let merged = merge(
            &stored,
            &stored_from_client_bytes(&restarted.save(), WriteSettings::UNLIMITED).unwrap(),
            WriteSettings::UNLIMITED,
        );
        assert!(matches!(merged, Err(Error::ReusedSeq { seq: 1, .. })), "{merged:?}");
    }

    /// A client document with a title and a text, and its stored form.
    fn titled() -> (AutoCommit, Vec<u8>) {
        let mut client = doc(1, "views");
        client.put(ROOT, "title", "Draft").unwrap();
        let text = client.put_object(ROOT, "text", automerge::ObjType::Text).unwrap();
        client.splice_text(&text, 0, 0, "hello").unwrap();
        let stored = stored_from_client_bytes(&client.save(), WriteSettings::UNLIMITED).unwrap();
        (client, stored)
    }

    fn kept_json(stored: &[u8]) -> Option<serde_json::Value> {
        kept_json::of(stored, &kept_json::TextJson).unwrap()
    }

    fn appended(stored: &[u8]) -> u32 {
        format::decode(stored).unwrap().kept.unwrap().appended_changes
    }

    fn loaded_json(stored: &[u8]) -> serde_json::Value {
        crate::json::document(&load_stored(stored).unwrap(), None).unwrap()
    }

    #[test]
    fn a_change_on_the_current_heads_is_appended_and_its_root_puts_patch_the_json() {
        let (mut client, stored) = titled();
        let heads = client.get_heads();
        client.put(ROOT, "title", "Final").unwrap();
        client.put(ROOT, "views", 2_i64).unwrap();
        let change = client.save_after(&heads);
        let written = apply(&stored, &change, WriteSettings::UNLIMITED).unwrap();
        let (before, after) = (format::decode(&stored).unwrap(), format::decode(&written).unwrap());
        assert_eq!(after.payload, [before.payload, &change[..]].concat(), "appended, not re-saved");
        assert_eq!(appended(&written), 1);
        assert_eq!(after.summary.heads, client.get_heads());
        assert_eq!(after.summary.change_count, before.summary.change_count + 1);
        assert_eq!(
            kept_json(&written).unwrap(),
            serde_json::json!({"title": "Final", "views": 2, "text": "hello"})
        );
        assert_eq!(kept_json(&written).unwrap(), loaded_json(&written));
    }

    #[test]
    fn a_text_edit_is_appended_and_patches_the_json() {
        let (mut client, stored) = titled();
        let heads = client.get_heads();
        let text = client.get(ROOT, "text").unwrap().unwrap().1;
        client.splice_text(&text, 5, 0, " world").unwrap();
        client.splice_text(&text, 0, 1, "H").unwrap();
        let written = apply(&stored, &client.save_after(&heads), WriteSettings::UNLIMITED).unwrap();
        assert_eq!(appended(&written), 1, "appended, not re-saved");
        assert_eq!(kept_json(&written).unwrap()["text"], "Hello world");
        assert_eq!(kept_json(&written).unwrap(), loaded_json(&written));
    }

    #[test]
    fn a_put_that_does_not_replace_what_a_root_key_shows_is_loaded_and_applied() {
        let (mut client, stored) = titled();
        // Two clients set the title concurrently: the second one's put does not replace the
        // first one's, so the key shows both and Automerge picks the winner.
        let mut first = client.fork().with_actor(ActorId::from([3; 16]));
        let mut second = client.fork().with_actor(ActorId::from([4; 16]));
        let heads = first.get_heads();
        first.put(ROOT, "title", "First").unwrap();
        second.put(ROOT, "title", "Second").unwrap();
        let stored = apply(&stored, &first.save_after(&heads), WriteSettings::UNLIMITED).unwrap();
        assert_eq!(appended(&stored), 1);
        let written = apply(&stored, &second.save_after(&heads), WriteSettings::UNLIMITED).unwrap();
        assert_eq!(appended(&written), 0, "saved anew");
        let title = kept_json(&written).unwrap()["title"].clone();
        assert!(title == "First" || title == "Second", "{title}");
        assert_eq!(kept_json(&written).unwrap(), loaded_json(&written));
    }

    #[test]
    fn changes_that_do_not_follow_the_stored_heads_are_loaded_and_applied() {
        let (mut client, _) = titled();
        let first = client.get_heads();
        client.put(ROOT, "title", "Second").unwrap();
        let stored = stored_from_client_bytes(&client.save(), WriteSettings::UNLIMITED).unwrap();
        // A second client that saw only the first state edits concurrently.
        let mut other = client.fork_at(&first).unwrap().with_actor(ActorId::from([2; 16]));
        other.put(ROOT, "other", 1_i64).unwrap();
        let change = other.save_after(&first);
        let written = apply(&stored, &change, WriteSettings::UNLIMITED).unwrap();
        assert_eq!(appended(&written), 0, "saved anew");
        assert_eq!(kept_json(&written).unwrap(), loaded_json(&written));
        assert_eq!(loaded_json(&written)["other"], 1);
    }

    #[test]
    fn the_append_limit_makes_a_write_load_and_save_anew() {
        let (mut client, mut stored) = titled();
        let settings = WriteSettings { append_limit: 2, ..WriteSettings::UNLIMITED };
        for (round, expected) in [1, 2, 0, 1].into_iter().enumerate() {
            let heads = client.get_heads();
            client.put(ROOT, "round", round as i64).unwrap();
            stored = apply(&stored, &client.save_after(&heads), settings).unwrap();
            assert_eq!(appended(&stored), expected, "round {round}");
            assert_eq!(kept_json(&stored).unwrap(), loaded_json(&stored));
        }
        let naive = WriteSettings { append_limit: 0, keep_json: false, ..WriteSettings::UNLIMITED };
        let heads = client.get_heads();
        client.put(ROOT, "round", 9_i64).unwrap();
        let written = apply(&stored, &client.save_after(&heads), naive).unwrap();
        assert_eq!((appended(&written), kept_json(&written)), (0, None));
    }

    #[test]
    fn a_merge_where_one_side_contains_the_other_returns_that_side() {
        let (mut client, older) = titled();
        let mut another = client.fork().with_actor(ActorId::from([2; 16]));
        another.put(ROOT, "title", "Newer").unwrap();
        let newer = stored_from_client_bytes(&another.save(), WriteSettings::UNLIMITED).unwrap();
        // Nothing to load: the older side's head is the newer side's latest change of its actor.
        let no_loads = WriteSettings { load_limit: LoadLimit(Some(0)), ..WriteSettings::UNLIMITED };
        assert_eq!(merge(&older, &newer, no_loads).unwrap(), newer);
        assert_eq!(merge(&newer, &older, no_loads).unwrap(), newer);
    }

    #[test]
    fn a_merge_with_the_same_clients_later_save_loads_only_that_save() {
        let (mut client, older) = titled();
        client.put(ROOT, "title", "Newer").unwrap();
        let newer = stored_from_client_bytes(&client.save(), WriteSettings::UNLIMITED).unwrap();
        let value = format::decode(&newer).unwrap();
        let one_load = estimate_stored(&value.summary, value.payload).peak_bytes();
        let one_load_only =
            WriteSettings { load_limit: LoadLimit(Some(one_load)), ..WriteSettings::UNLIMITED };
        assert_eq!(merge(&older, &newer, one_load_only).unwrap(), newer);
    }
}
