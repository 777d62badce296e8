//! Merging documents and applying changes to a stored document. Both return the stored
//! value unchanged, without saving, when nothing new arrives, and both avoid the load when
//! the stored headers answer:
//!
//! - a merge where one side already contains the other returns that side;
//! - changes that follow the stored document (each new, its actor's next, its
//!   dependencies in the document) are appended to the stored payload without a load,
//!   up to `append_limit` of them since the last save. The kept JSON follows them when
//!   they only set scalar values at the root of a document they had all of; otherwise it
//!   is dropped, and reads load until a write that loads re-saves the document.

use std::collections::BTreeSet;

use automerge::legacy::{Key, ObjectId, OpType};
use automerge::{Automerge, AutomergeError, Change, ChangeHash, LoadOptions, OnPartialLoad, ReadDoc};
use serde_json::Value as Json;

use crate::document::{contains, load_stored, to_stored, WriteSettings};
use crate::estimate::{self, estimate_applied, estimate_client_bytes, estimate_stored, LoadEstimate};
use crate::format::{self, Kept, StoredValue};
use crate::guard::no_panic;
use crate::{json, memory, Error};

/// The merge of two stored documents. Equal heads mean equal documents, and a side whose
/// headers show it has the other's heads contains the other: no load. Where the right
/// side's actor clock only suggests that it contains the left (the same client saving
/// again, as an upsert of its full save does), the right side alone is loaded to check.
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
    let incoming = estimate_stored(&r.summary, r.payload.len());
    let mut other = if may_contain(&r, &l) {
        settings.load_limit.check(&incoming)?;
        let other = load_stored(right)?;
        if l.summary.heads.iter().all(|head| other.get_change_by_hash(head).is_some()) {
            return Ok(right.to_vec());
        }
        other
    } else {
        // Merging decodes the right document's changes and applies them to the left one.
        settings.load_limit.check(&combined(&[
            estimate_stored(&l.summary, l.payload.len()),
            incoming,
            estimate_applied(&incoming),
        ]))?;
        load_stored(right)?
    };
    let mut doc = load_stored(left)?;
    merge_into(&mut doc, &mut other)?;
    to_stored(&doc, settings.keep_json)
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
pub fn apply(stored: &[u8], changes: &[u8], settings: WriteSettings) -> Result<Vec<u8>, Error> {
    if changes.is_empty() {
        return Ok(stored.to_vec());
    }
    let value = format::decode(stored)?;
    let incoming = estimate_client_bytes(changes)?;
    if let Some(appended) = append(stored, &value, changes, settings, &incoming)? {
        return Ok(appended);
    }
    settings.load_limit.check(&combined(&[estimate_stored(&value.summary, value.payload.len()), incoming]))?;
    let before = value.summary.heads;
    let mut doc = load_stored(stored)?;
    apply_to(&mut doc, changes)?;
    if doc.get_heads() == before {
        return Ok(stored.to_vec());
    }
    to_stored(&doc, settings.keep_json)
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
    let mut kept = Kept { json: kept.json, clock: kept.clock.clone(), ..*kept };
    let (mut new, mut new_ops) = (Vec::new(), 0u64);
    let mut json = kept.json.map(Patch::Pending);
    for change in &parsed {
        let hash = change.hash();
        let latest = kept.clock.get(change.actor_id()).copied();
        if heads.contains(&hash) || latest.is_some_and(|(_, latest)| latest == hash) {
            continue; // already in the document
        }
        let next_seq = latest.map_or(1, |(seq, _)| seq + 1);
        let deps_known = change.deps().iter().all(|dep| {
            heads.contains(dep) || kept.clock.values().any(|(_, latest)| latest == dep)
        });
        if change.seq() != next_seq || !deps_known {
            return Ok(None);
        }
        json = json.and_then(|json| json.follow(change, &heads, kept.max_op));
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
    let patched = match (settings.keep_json, json) {
        (true, Some(patch)) => patch.finish()?,
        _ => None,
    };
    let kept = Kept { appended_changes, json: patched.as_deref(), ..kept };
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

/// The changes in `bytes`, when they are nothing but well-formed change chunks.
fn parse_changes(bytes: &[u8]) -> Option<Vec<Change>> {
    let mut changes = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (chunk_type, _, after) = estimate::chunk(rest).ok()?;
        if !matches!(chunk_type, estimate::CHANGE | estimate::COMPRESSED_CHANGE) {
            return None;
        }
        let chunk = &rest[..rest.len() - after.len()];
        changes.push(no_panic(|| Change::try_from(chunk)).ok()?.ok()?);
        rest = after;
    }
    Some(changes)
}

/// The kept JSON following appended changes: edited only for what it can follow exactly.
enum Patch<'a> {
    /// Not edited yet.
    Pending(&'a str),
    Edited(serde_json::Map<String, Json>),
}

impl<'a> Patch<'a> {
    /// The JSON after `change`, or `None` when it cannot follow. It can when the change
    /// was made on exactly the document's current heads (its author saw every operation)
    /// and only puts scalar values on root keys: its operations then have counters above
    /// all others, so each wins its key as Automerge's `get` picks winners.
    fn follow(self, change: &Change, heads: &BTreeSet<ChangeHash>, max_op: u64) -> Option<Patch<'a>> {
        let on_heads = change.deps().len() == heads.len() && change.deps().iter().all(|dep| heads.contains(dep));
        if !on_heads || change.start_op().get() <= max_op {
            return None;
        }
        let ops = no_panic(|| change.decode()).ok()?.operations;
        let puts = ops
            .into_iter()
            .map(|op| match (op.obj, op.key, op.action, op.insert) {
                (ObjectId::Root, Key::Map(key), OpType::Put(value), false) => Some((key.to_string(), json::scalar(&value))),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let mut map = match self {
            Patch::Pending(text) => match serde_json::from_str(text).ok()? {
                Json::Object(map) => map,
                _ => return None,
            },
            Patch::Edited(map) => map,
        };
        map.extend(puts);
        Some(Patch::Edited(map))
    }

    fn finish(self) -> Result<Option<String>, Error> {
        Ok(Some(match self {
            Patch::Pending(text) => text.to_string(),
            Patch::Edited(map) => Json::Object(map).to_string(),
        }))
    }
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
        let stored = stored_from_client_bytes(&doc(1, "a").save(), WriteSettings::UNLIMITED).unwrap();
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
        let applied = load_stored(&apply(&stored, &two_changes, WriteSettings::UNLIMITED).unwrap()).unwrap();
        assert_eq!(applied.get_heads(), local.get_heads());
    }

    #[test]
    fn refuses_changes_with_missing_dependencies_and_garbage() {
        let mut local = doc(1, "a");
        let stored = stored_from_client_bytes(&AutoCommit::new().save(), WriteSettings::UNLIMITED).unwrap();
        let heads = local.get_heads();
        local.put(ROOT, "more", 2_i64).unwrap();
        let orphan = local.save_after(&heads);
        assert!(matches!(apply(&stored, &orphan, WriteSettings::UNLIMITED), Err(Error::MissingDependenciesOnApply(h)) if h == heads));
        for garbage in [&b"junk"[..], &[0xde, 0xad], &[0x85, 0x6f, 0x4a, 0x83]] {
            assert!(matches!(apply(&stored, garbage, WriteSettings::UNLIMITED), Err(Error::NotAutomerge(_))), "{garbage:?}");
        }
        let mut truncated = local.save();
        truncated.pop();
        assert!(matches!(apply(&stored, &truncated, WriteSettings::UNLIMITED), Err(Error::NotAutomerge(_))));
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
        let value = format::decode(stored).unwrap();
        value.kept.unwrap().json.map(|json| serde_json::from_str(json).unwrap())
    }

    fn appended(stored: &[u8]) -> u32 {
        format::decode(stored).unwrap().kept.unwrap().appended_changes
    }

    fn loaded_json(stored: &[u8]) -> serde_json::Value {
        json::document(&load_stored(stored).unwrap(), None).unwrap()
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
        assert_eq!(kept_json(&written).unwrap(), serde_json::json!({"title": "Final", "views": 2, "text": "hello"}));
        assert_eq!(kept_json(&written).unwrap(), loaded_json(&written));
    }

    #[test]
    fn a_text_edit_is_appended_and_drops_the_kept_json() {
        let (mut client, stored) = titled();
        let heads = client.get_heads();
        let text = client.get(ROOT, "text").unwrap().unwrap().1;
        client.splice_text(&text, 5, 0, " world").unwrap();
        let written = apply(&stored, &client.save_after(&heads), WriteSettings::UNLIMITED).unwrap();
        assert_eq!(appended(&written), 1);
        assert_eq!(kept_json(&written), None);
        let json = crate::document::json_text(&written).unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&json).unwrap()["text"], "hello world");
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
        let one_load = estimate_stored(&format::decode(&newer).unwrap().summary, newer.len()).peak_bytes();
        let one_load_only = WriteSettings { load_limit: LoadLimit(Some(one_load)), ..WriteSettings::UNLIMITED };
        assert_eq!(merge(&older, &newer, one_load_only).unwrap(), newer);
    }

}
