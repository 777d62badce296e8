//! Finding and repairing stored values that do not keep the invariant of
//! [`integrity`](crate::integrity): their Automerge bytes load, their kept JSON is the
//! loaded document's, and their next save loads. Versions 0.3.0 and 0.5.0 could store values
//! that break it (a crafted change appended to the save, or saved into it; 0.5.0's, a change
//! whose marks break the mark order); this version refuses such writes, and these functions
//! find and mend what is already stored.

use std::collections::BTreeMap;

use automerge::{hydrate, ActorId, Automerge, ChangeHash, ScalarValue, TextEncoding};

use crate::chunk::{self, chunks, split_save};
use crate::compaction::verified;
use crate::doc_rewrite;
use crate::estimate::estimate_stored;
use crate::guard::no_panic;
use crate::load::{apply_to, load_saved, load_stored};
use crate::mark_order;
use crate::save::to_stored;
use crate::settings::WriteSettings;
use crate::{format, json, kept_json, Error};

/// Whether a stored value keeps the invariant: its header decodes; its save loads and the
/// changes appended after it pass the loader's rules (see [`load_stored`]); its
/// header's heads and its kept JSON are the loaded document's; and a save of the loaded
/// document loads again (a save is loaded for that when changes are appended after the
/// stored save). Fails only when the check itself cannot run (the value's load is above the
/// load limit).
pub fn loads(stored: &[u8], settings: WriteSettings) -> Result<bool, Error> {
    let Ok(value) = format::decode(stored) else { return Ok(false) };
    settings.load_limit.check(&estimate_stored(&value.summary, value.payload))?;
    let Ok(doc) = load_stored(&value) else { return Ok(false) };
    if doc.get_heads() != value.summary.heads {
        return Ok(false);
    }
    if let Some(kept) = value.kept.as_ref().and_then(|kept| kept.json) {
        let kept = kept_json::decode(&kept, settings.json_codec);
        if kept.ok() != json::document(&doc, None).ok() {
            return Ok(false);
        }
    }
    // A save the loader took holds its operations in the order its document rules check,
    // and a save of the loaded document writes them in that order again. Only changes
    // applied after a save (not loaded from one) can make a document whose next save the
    // loader refuses (a misplaced mark end), so only then is its save loaded: a compacted
    // value costs one load.
    if chunk::changes_after_a_save(value.payload) == Some(0) {
        return Ok(true);
    }
    let saved = no_panic(|| doc.save()).ok();
    drop(doc);
    let reloaded = saved.map(|saved| no_panic(|| Automerge::load(&saved).is_ok()));
    Ok(reloaded == Some(Ok(true)))
}

/// A stored value made to keep the invariant, and what that cost.
#[derive(Debug)]
pub struct Repaired {
    /// The value: the input itself when it kept the invariant.
    pub stored: Vec<u8>,
    /// The appended changes that were dropped: each breaks a loader rule, or depends on one
    /// that does.
    pub dropped: Vec<ChangeHash>,
    /// How the save was kept, when it did not load as it was.
    pub rebuilt: Option<Rebuilt>,
}

/// How a save that does not load with its recorded heads was rebuilt. Either way its
/// changes have new hashes, so clients must load the document anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebuilt {
    /// From its operations, loaded without checking the heads and saved again: the history
    /// stays, each change as its operations make it.
    FromOperations,
    /// Its operations do not load at all: a new document of one change holding the kept
    /// JSON, strings as text. History, marks and blocks are lost.
    FromJson,
}

/// Repairs a stored value: keeps its save (rebuilt from its operations when it does not load
/// with its recorded heads) and each appended change that still passes the loader's rules
/// after those kept before it; drops the others. The result is saved in the current format
/// with its JSON when the settings keep it.
pub fn repair(stored: &[u8], settings: WriteSettings) -> Result<Repaired, Error> {
    if loads(stored, settings)? {
        return Ok(Repaired { stored: stored.to_vec(), dropped: Vec::new(), rebuilt: None });
    }
    let value = format::decode(stored)?;
    let (save, appended) = split_save(value.payload);
    let (mut doc, rebuilt, mut dropped) = match load_saved(save, Automerge::load) {
        Ok(doc) => (doc, None, Vec::new()),
        Err(_) => match without_misplaced_marks(save) {
            Some((doc, dropped)) => (doc, None, dropped),
            None => match rebuild(save) {
                Ok(doc) => (doc, Some(Rebuilt::FromOperations), Vec::new()),
                Err(err) => {
                    let kept = value.kept.as_ref().and_then(|kept| kept.json).ok_or(err)?;
                    let json = kept_json::decode(&kept, settings.json_codec)?;
                    (from_json(json)?, Some(Rebuilt::FromJson), Vec::new())
                }
            },
        },
    };
    for chunk in chunks(appended) {
        let Ok((_, chunk)) = chunk else { break };
        let mut attempt = no_panic(|| doc.fork()).map_err(Error::CorruptStoredValue)?;
        match apply_to(&mut attempt, chunk) {
            Ok(()) => doc = attempt,
            Err(_) => dropped.extend(change_hash(chunk)),
        }
    }
    Ok(Repaired { stored: verified(to_stored(&doc, settings)?)?, dropped, rebuilt })
}

/// How many misplaced mark ends a repair turns into mark begins before it gives up on a
/// save (and rebuilds it otherwise).
const MAX_MISPLACED_MARKS: usize = 64;

/// A save that does not load because marks in it break the mark order (as 0.5.0 could
/// store them: see [`mark_order`]), without the changes that hold those marks and the
/// changes that depend on them: the document of the other changes, as they were, and the
/// hashes the dropped changes had. Each mark end the loader refuses is made a mark begin,
/// which the loader takes (a begin without an end marks nothing); loaded so, without
/// checking the heads, the changes holding them hash otherwise than they did, and so do
/// those that depend on them. `None` when the save does not load that way either.
fn without_misplaced_marks(save: &[u8]) -> Option<(Automerge, Vec<ChangeHash>)> {
    let mut save = save.to_vec();
    let mut ends = Vec::new();
    while let Some(misplaced) = mark_order::misplaced_mark_end(&save).ok()? {
        if ends.len() == MAX_MISPLACED_MARKS {
            return None;
        }
        save = doc_rewrite::with_mark_name_at(&save, misplaced.row, "").ok()?;
        ends.push((misplaced.counter, misplaced.actor));
    }
    if ends.is_empty() {
        return None;
    }
    let unchecked = load_saved(&save, Automerge::load_unverified_heads).ok()?;
    // In dependency order, so that a change's dependencies are decided before it.
    let changes = no_panic(|| unchecked.get_changes(&[])).ok()?;
    drop(unchecked);
    let mut as_stored: BTreeMap<ChangeHash, ChangeHash> = BTreeMap::new();
    let mut kept = Vec::new();
    for change in changes {
        let range = change.start_op().get()..=change.max_op();
        let holds_end = |(counter, actor): &(u64, ActorId)| {
            actor == change.actor_id() && range.contains(counter)
        };
        if ends.iter().any(holds_end) || change.deps().iter().any(|dep| as_stored.contains_key(dep))
        {
            let hash = hash_as_stored(&change, &ends, &as_stored)?;
            as_stored.insert(change.hash(), hash);
        } else {
            kept.push(change);
        }
    }
    let mut doc = Automerge::new();
    no_panic(|| doc.apply_changes(kept)).ok()?.ok()?;
    Some((doc, as_stored.into_values().collect()))
}

/// The hash a change that [`without_misplaced_marks`] drops had as it was stored: its
/// mark ends made begins by the repair are ends again, and its dependencies hash as they
/// were stored.
fn hash_as_stored(
    change: &automerge::Change,
    ends: &[(u64, ActorId)],
    as_stored: &BTreeMap<ChangeHash, ChangeHash>,
) -> Option<ChangeHash> {
    use automerge::legacy::OpType;
    let mut expanded = no_panic(|| change.decode()).ok()?;
    let start = change.start_op().get();
    for (index, op) in expanded.operations.iter_mut().enumerate() {
        let id = (start + index as u64, change.actor_id().clone());
        if let (true, OpType::MarkBegin(data)) = (ends.contains(&id), &op.action) {
            op.action = OpType::MarkEnd(data.expand);
        }
    }
    for dep in &mut expanded.deps {
        *dep = as_stored.get(dep).copied().unwrap_or(*dep);
    }
    expanded.deps.sort();
    expanded.hash = None;
    no_panic(|| automerge::Change::from(expanded).hash()).ok()
}

/// A save that does not load with its recorded heads, rebuilt from its operations: loaded
/// without checking the heads, saved (which records each change as its operations make
/// it) and loaded again, checked.
fn rebuild(save: &[u8]) -> Result<Automerge, Error> {
    let unchecked = load_saved(save, Automerge::load_unverified_heads)?;
    let saved = no_panic(|| unchecked.save()).map_err(Error::CorruptStoredValue)?;
    drop(unchecked);
    load_saved(&saved, Automerge::load)
        .map_err(|err| Error::CorruptStoredValue(format!("it cannot be rebuilt either: {err}")))
}

/// A new document holding `json` (an object), strings as text as JavaScript clients make
/// them.
fn from_json(json: serde_json::Value) -> Result<Automerge, Error> {
    let corrupt = |what: &str| Error::CorruptStoredValue(format!("its kept JSON {what}"));
    let serde_json::Value::Object(root) = json else {
        return Err(corrupt("is not an object"));
    };
    let root: std::collections::HashMap<String, hydrate::Value> =
        root.into_iter().map(|(key, value)| (key, hydrated(value))).collect();
    let mut doc = Automerge::new();
    no_panic(|| doc.init_from_hydrate(&root.into()))
        .map_err(Error::CorruptStoredValue)?
        .map_err(|err| corrupt(&format!("cannot be written: {err}")))?;
    Ok(doc)
}

fn hydrated(json: serde_json::Value) -> hydrate::Value {
    use serde_json::Value as Json;
    match json {
        Json::Null => hydrate::Value::scalar(ScalarValue::Null),
        Json::Bool(value) => hydrate::Value::scalar(value),
        Json::Number(number) => match (number.as_i64(), number.as_u64()) {
            (Some(value), _) => value.into(),
            (None, Some(value)) => value.into(),
            _ => number.as_f64().unwrap_or(0.0).into(),
        },
        Json::String(text) => hydrate::Value::text(TextEncoding::platform_default(), &text),
        Json::Array(items) => items.into_iter().map(hydrated).collect::<Vec<_>>().into(),
        Json::Object(map) => {
            let map: std::collections::HashMap<String, hydrate::Value> =
                map.into_iter().map(|(key, value)| (key, hydrated(value))).collect();
            hydrate::Value::Map(map.into())
        }
    }
}

/// The hash of a change chunk, for naming a dropped change.
fn change_hash(chunk: &[u8]) -> Option<ChangeHash> {
    no_panic(|| automerge::Change::try_from(chunk).ok().map(|change| change.hash())).ok()?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Kept;
    use crate::writes::stored_from_client_bytes;
    use automerge::legacy::Key;
    use automerge::transaction::Transactable;
    use automerge::{ActorId, AutoCommit, Change, ReadDoc, ROOT};

    const SETTINGS: WriteSettings = WriteSettings::UNLIMITED;

    fn client() -> AutoCommit {
        let mut doc = AutoCommit::new().with_actor(ActorId::from([1; 16]));
        doc.put(ROOT, "a", 1_i64).unwrap();
        doc.put(ROOT, "b", 1_i64).unwrap();
        doc
    }

    /// The next change of `doc`, putting `a`, with its key moved to `b`: its predecessor is
    /// then on another key, which Automerge applies but its save does not load.
    fn predecessor_on_another_key(doc: &mut AutoCommit) -> Change {
        let mut fork = doc.fork().with_actor(ActorId::from([1; 16]));
        fork.put(ROOT, "a", 2_i64).unwrap();
        fork.commit();
        let head = fork.get_heads()[0];
        let change = fork.get_change_by_hash(&head).unwrap().clone();
        let mut expanded = change.decode();
        expanded.hash = None;
        expanded.operations[0].key = Key::Map("b".into());
        Change::from(expanded)
    }

    /// What 0.3.0's append stored: the save, then a change no later save loads, with the
    /// header and JSON of the save's document.
    fn appended_by_0_3_0(doc: &mut AutoCommit, change: &Change) -> Vec<u8> {
        let good = stored_from_client_bytes(&doc.save(), SETTINGS).unwrap();
        let value = format::decode(&good).unwrap();
        let mut payload = value.payload.to_vec();
        payload.extend_from_slice(change.raw_bytes());
        let kept = value.kept.unwrap();
        let summary = format::Summary {
            change_count: value.summary.change_count + 1,
            op_count: value.summary.op_count + 1,
            heads: vec![change.hash()],
        };
        format::encode(&summary, &Kept { appended_changes: 1, ..kept }, &payload)
    }

    /// What 0.3.0's load-apply-save stored: the save of a document holding that change.
    fn saved_by_0_3_0(doc: &mut AutoCommit, change: &Change) -> Vec<u8> {
        let mut loaded = Automerge::load(&doc.save()).unwrap();
        loaded.apply_changes([change.clone()]).unwrap();
        to_stored(&loaded, SETTINGS).unwrap()
    }

    #[test]
    fn good_values_load_and_are_left_as_they_are() {
        let stored = stored_from_client_bytes(&client().save(), SETTINGS).unwrap();
        assert!(loads(&stored, SETTINGS).unwrap());
        let repaired = repair(&stored, SETTINGS).unwrap();
        assert_eq!((repaired.stored, repaired.dropped, repaired.rebuilt), (stored, vec![], None));
    }

    #[test]
    fn a_broken_change_appended_by_0_3_0_is_found_and_dropped() {
        let mut doc = client();
        let change = predecessor_on_another_key(&mut doc);
        let stored = appended_by_0_3_0(&mut doc, &change);
        assert!(!loads(&stored, SETTINGS).unwrap());
        assert!(
            load_stored(&format::decode(&stored).unwrap()).is_err(),
            "refused rather than re-saved"
        );
        let repaired = repair(&stored, SETTINGS).unwrap();
        assert_eq!(repaired.dropped, vec![change.hash()]);
        assert_eq!(repaired.rebuilt, None);
        assert!(loads(&repaired.stored, SETTINGS).unwrap());
        let heads = format::decode(&repaired.stored).unwrap().summary.heads;
        assert_eq!(heads, doc.get_heads(), "the document as it was before the change");
    }

    #[test]
    fn a_save_holding_a_broken_change_is_rebuilt() {
        let mut doc = client();
        let change = predecessor_on_another_key(&mut doc);
        let stored = saved_by_0_3_0(&mut doc, &change);
        assert!(!loads(&stored, SETTINGS).unwrap());
        let kept = crate::json_reads::kept(&stored, SETTINGS.json_codec).unwrap().unwrap();
        let repaired = repair(&stored, SETTINGS).unwrap();
        // Automerge cannot load this save even without checking its heads.
        assert_eq!(repaired.rebuilt, Some(Rebuilt::FromJson));
        assert!(loads(&repaired.stored, SETTINGS).unwrap());
        let json = crate::json_reads::kept(&repaired.stored, SETTINGS.json_codec).unwrap().unwrap();
        assert_eq!(json, kept);
    }

    /// Issue 35: what 0.5.0 stored from a change whose marks break the mark order. Appended
    /// after the save (as `doc || change`, an INSERT of save and change and an upsert
    /// keeping the incoming value stored it), clients load it, but no save of it loads:
    /// compacting it, in the background or by `automerge_compact`, leaves it as it is
    /// (an error, never a save that does not load), and a repair drops the change. Saved
    /// into the save (as the write paths that loaded stored it), it does not load at all,
    /// and a repair drops it too, keeping every other change as it was.
    #[test]
    fn a_mark_change_stored_by_0_5_0_is_never_compacted_and_is_repaired() {
        use crate::compaction::Compacted;
        use fixtures::wrong_changes::{client_document, wrong_change, Choices, Wrong};
        for kind in [Wrong::MarkEndWithoutBegin, Wrong::MarkEndBeforeBegin, Wrong::MarkEndAtHead] {
            let mut doc = client_document(1);
            let bytes = wrong_change(&mut doc, kind, &mut Choices::new(&[2])).unwrap();
            let change = Change::from_bytes(bytes).unwrap();
            let appended = appended_by_0_3_0(&mut doc, &change);
            assert!(Automerge::load(format::client_bytes(&appended).unwrap()).is_ok());
            assert!(!loads(&appended, SETTINGS).unwrap(), "{kind:?}");
            let compacted = Compacted::of(&appended, SETTINGS);
            assert!(compacted.is_err(), "{kind:?}: the compactor would store a save");
            let err = crate::compaction::compact(&format::decode(&appended).unwrap(), SETTINGS)
                .unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::DataCorrupted, "{kind:?}: {err}");
            let repaired = repair(&appended, SETTINGS).unwrap();
            assert_eq!(repaired.dropped, vec![change.hash()], "{kind:?}");
            assert!(loads(&repaired.stored, SETTINGS).unwrap(), "{kind:?}");
            assert_eq!(format::decode(&repaired.stored).unwrap().summary.heads, doc.get_heads());

            let saved = saved_by_0_3_0(&mut doc, &change);
            assert!(Automerge::load(format::client_bytes(&saved).unwrap()).is_err());
            assert!(
                crate::compaction::compact(&format::decode(&saved).unwrap(), SETTINGS).is_err(),
                "{kind:?}"
            );
            let repaired = repair(&saved, SETTINGS).unwrap();
            assert_eq!(repaired.dropped, vec![change.hash()], "{kind:?}: the change, by its hash");
            assert_eq!(repaired.rebuilt, None, "{kind:?}: the other changes as they were");
            assert!(loads(&repaired.stored, SETTINGS).unwrap(), "{kind:?}");
            assert_eq!(format::decode(&repaired.stored).unwrap().summary.heads, doc.get_heads());
        }
    }

    #[test]
    fn garbage_does_not_load() {
        assert!(!loads(b"not a stored value", SETTINGS).unwrap());
        assert!(repair(b"not a stored value", SETTINGS).is_err());
    }
}
