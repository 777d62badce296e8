//! A loaded document in its stored form: the Automerge save, what the header records
//! about it, the JSON and structure index it keeps; and a stored value's payload saved
//! anew, keeping what it keeps. The save half of the load/apply layer: the write paths
//! and compaction store through here.

use std::borrow::Cow;
use std::collections::BTreeMap;

use automerge::{ActorId, Automerge};

use crate::chunk::{parse_changes, split_save};
use crate::estimate::estimate_stored;
use crate::format::{self, ActorClock, Kept, StoredValue, Summary};
use crate::guard::no_panic;
use crate::load::load_payload;
use crate::settings::WriteSettings;
use crate::structure::Structure;
use crate::{json, kept_json, Error};

/// What the stored header records about a loaded document, and what format 2 keeps for
/// writes that do not load (the JSON aside); and each actor's latest change's largest
/// operation counter, which the [`Structure`] index keeps.
pub fn summarize(doc: &Automerge) -> (Summary, Kept<'static>, BTreeMap<ActorId, u64>) {
    let changes = doc.get_changes_meta(&[]);
    let mut clock = ActorClock::new();
    let mut latest_max_op = BTreeMap::new();
    let (mut op_count, mut max_op) = (0u64, 0u64);
    for change in &changes {
        op_count += (change.max_op + 1).saturating_sub(change.start_op);
        max_op = max_op.max(change.max_op);
        let latest = clock.entry(change.actor.clone().into_owned()).or_insert((0, change.hash));
        if change.seq >= latest.0 {
            *latest = (change.seq, change.hash);
            latest_max_op.insert(change.actor.clone().into_owned(), change.max_op);
        }
    }
    let summary = Summary { change_count: changes.len() as u64, op_count, heads: doc.get_heads() };
    (
        summary,
        Kept { max_op, appended_changes: 0, json: None, clock, structure: None },
        latest_max_op,
    )
}

/// The stored form of a loaded document, keeping its JSON when the settings do (a document too
/// deeply nested for JSON is stored without it: reading it as JSON fails either way).
/// Automerge's save refuses (panics on) documents it considers inconsistent, such as one
/// listing an actor that no change uses.
pub fn to_stored(doc: &Automerge, settings: WriteSettings) -> Result<Vec<u8>, Error> {
    let saved = save(doc)?;
    encode_loaded(doc, settings, &saved, 0)
}

/// The document's Automerge save, as clients load it.
pub fn save(doc: &Automerge) -> Result<Vec<u8>, Error> {
    no_panic(|| doc.save()).map_err(Error::NotAutomerge)
}

/// The [`Structure`] of the document in `payload` (a save, then any changes), whose
/// actors' latest changes end at `latest_max_op`: `None` when a change does not follow the
/// operations before it, or the save does not index.
fn structure_of(payload: &[u8], latest_max_op: &BTreeMap<ActorId, u64>) -> Option<Structure> {
    let (save, appended) = split_save(payload);
    let (mut structure, mut max_op) = Structure::of_save(save)?;
    for change in parse_changes(appended)? {
        structure.apply(&change, max_op, None)?;
        max_op = change.max_op();
    }
    for (actor, max_op) in latest_max_op {
        structure.set_latest_max_op(actor, *max_op);
    }
    Some(structure)
}

/// The stored form of `doc`, whose Automerge bytes are `payload` (a save, then
/// `appended_changes` change chunks).
pub(crate) fn encode_loaded(
    doc: &Automerge,
    settings: WriteSettings,
    payload: &[u8],
    appended_changes: u32,
) -> Result<Vec<u8>, Error> {
    let json = match settings.keep_json {
        true => match json::document(doc, None) {
            Ok(json) => Some(kept_json::keep(&json, settings.json_codec)?),
            Err(Error::TooDeep { .. }) => None,
            Err(other) => return Err(other),
        },
        false => None,
    };
    let (summary, kept, latest_max_op) = summarize(doc);
    let structure =
        structure_of(payload, &latest_max_op).map(|s| Cow::Owned(s.encode(appended_changes)));
    let kept = Kept {
        json: json.as_ref().map(|json| json.as_kept()),
        appended_changes,
        structure,
        ..kept
    };
    Ok(format::encode(&summary, &kept, payload))
}

/// `value` (of the current format, keeping its document's JSON and actors) with its
/// payload loaded and saved anew, nothing appended, and `structure` as its index: one load,
/// within the load limit. The header, the JSON and the actors are kept as they are: they are
/// the document's, as every write keeps them. The fold of a write past `append_limit` passes
/// the value it has just built, never encoded; compaction, the value it decoded.
pub(crate) fn saved_anew(
    value: StoredValue<'_>,
    structure: Vec<u8>,
    settings: WriteSettings,
) -> Result<Vec<u8>, Error> {
    let StoredValue { summary, kept, payload, .. } = value;
    let kept =
        kept.ok_or_else(|| Error::CorruptStoredValue("a value to save anew keeps nothing".into()))?;
    settings.load_limit.check(&estimate_stored(&summary, payload))?;
    let save = save(&load_payload(payload, Automerge::load)?)?;
    let kept = Kept { appended_changes: 0, structure: Some(Cow::Owned(structure)), ..kept };
    Ok(format::encode(&summary, &kept, &save))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{load_client_bytes, load_stored};

    #[test]
    fn empty_input_is_the_empty_document() {
        let doc = load_client_bytes(&[]).unwrap();
        assert!(doc.get_heads().is_empty());
        let stored = to_stored(&doc, WriteSettings::UNLIMITED).unwrap();
        let value = format::decode(&stored).unwrap();
        assert_eq!(value.summary, Summary { change_count: 0, op_count: 0, heads: vec![] });
        assert!(load_stored(&value).unwrap().get_heads().is_empty());
    }
}
