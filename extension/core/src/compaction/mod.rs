//! Saving stored values anew off the write path, the top layer of the core: the
//! adapter's background worker compacts values whose payloads hold appended changes
//! ([`Compacted`]), `automerge_compact` saves one anew now ([`compact`]), and every new save
//! made here loads before it replaces anything ([`verified`]).
//!
//! The worker's value is read without a lock, loaded and saved anew (the slow part), and
//! the result is then put onto the value as it is by the time the row is locked. Writes
//! that appended changes meanwhile only extended the payload, so those changes follow the
//! new save; a write that loaded, or an upsert that merged, replaced the payload, and the
//! compaction is dropped.

use std::borrow::Cow;

use automerge::Automerge;

use crate::chunk::changes_after_a_save;
use crate::estimate::estimate_stored;
use crate::format::{self, Kept, StoredValue};
use crate::guard::no_panic;
use crate::load::load_stored;
use crate::save::{saved_anew, to_stored};
use crate::settings::WriteSettings;
use crate::{memory, writes, Error};

/// A value compacted from the payload it had when it was read.
pub struct Compacted {
    /// The Automerge bytes that were compacted.
    from: Vec<u8>,
    /// Their save, in the stored form: no appended changes.
    value: Vec<u8>,
}

impl Compacted {
    /// Compacts `stored` (one load, within the load limit, and one of the new save to
    /// verify it); `None` when it holds no appended changes and is already in the current
    /// format. The JSON and the structure index the value keeps are the document's
    /// (appended writes keep them so), so they are kept as they are rather than built again
    /// from the load: about as long as the load itself on a long text.
    pub fn of(stored: &[u8], settings: WriteSettings) -> Result<Option<Compacted>, Error> {
        let value = format::decode(stored)?;
        let appended = value.kept.as_ref().map_or(0, |kept| kept.appended_changes);
        if appended == 0 && value.version == format::FORMAT_VERSION {
            return Ok(None);
        }
        let from = value.payload.to_vec();
        // Off the write path, the new save is loaded before it replaces anything.
        let compacted = match carried_over(&value, settings) {
            Some(structure) => verified(saved_anew(value, structure, settings)?)?,
            None => compact(&value, settings)?,
        };
        Ok(Some(Compacted { from, value: compacted }))
    }

    /// The compacted value to store in place of `current`, the value as it is now: the
    /// new save followed by the changes appended since it was read, with the JSON, heads
    /// and actors `current` keeps. `None` when `current`'s payload no longer starts with
    /// what was compacted.
    pub fn onto(&self, current: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let current_value = format::decode(current)?;
        let Some(since) = current_value.payload.strip_prefix(self.from.as_slice()) else {
            return Ok(None);
        };
        if since.is_empty() {
            return Ok(Some(self.value.clone()));
        }
        let Some(kept) = &current_value.kept else { return Ok(None) };
        let compacted = format::decode(&self.value)?;
        let save = compacted.payload;
        let mut payload = Vec::with_capacity(save.len() + since.len());
        payload.extend_from_slice(save);
        payload.extend_from_slice(since);
        let Some(appended_changes) = changes_after_a_save(&payload) else {
            return Ok(None);
        };
        // The compacted index describes the save alone: it includes none of the changes
        // after it, which the next write replays.
        let structure = compacted.kept.and_then(|kept| kept.structure).map(Cow::into_owned);
        let kept = Kept { appended_changes, structure: structure.map(Cow::Owned), ..kept.clone() };
        Ok(Some(format::encode(&current_value.summary, &kept, &payload)))
    }
}

/// The structure index of `value` encoded for a save with nothing appended, when a
/// compaction can keep what the value keeps as it is: `None` when the value is of an
/// earlier format, keeps no index, or keeps its JSON otherwise than the settings would
/// (then it is built anew).
fn carried_over(value: &StoredValue<'_>, settings: WriteSettings) -> Option<Vec<u8>> {
    let kept = value.kept.as_ref().filter(|_| value.version == format::FORMAT_VERSION)?;
    let json_layout = kept.json.map(|json| json.layout);
    let wanted = settings.keep_json.then(|| settings.json_codec.layout());
    if json_layout != wanted {
        return None;
    }
    Some(writes::current_index(value)?.encode(0))
}

/// The stored value saved anew in the current format, with no appended changes and its JSON
/// when the settings keep it: one load, within the load limit, and one of the new save,
/// which must load before it replaces anything (see [`verified`]).
pub fn compact(value: &StoredValue<'_>, settings: WriteSettings) -> Result<Vec<u8>, Error> {
    settings.load_limit.check(&estimate_stored(&value.summary, value.payload))?;
    verified(to_stored(&load_stored(value)?, settings)?)
}

/// `written`, a value saved anew off the write path (by the compactor, `automerge_compact`
/// or a repair), once its payload is known to load in Automerge with the heads its header
/// records: what no write rule caught (a change an older version stored) must not turn a
/// value that clients load into a save that none does. The value it was made from is then
/// left as it is.
pub fn verified(written: Vec<u8>) -> Result<Vec<u8>, Error> {
    let value = format::decode(&written)?;
    let unsafe_save = |why: String| {
        Error::CorruptStoredValue(format!(
            "its new save would not load ({why}), so the value is left as it is"
        ))
    };
    let loaded = memory::timed_load(|| no_panic(|| Automerge::load(value.payload)))
        .map_err(unsafe_save)?
        .map_err(|err| unsafe_save(err.to_string()))?;
    if loaded.get_heads() != value.summary.heads {
        return Err(unsafe_save("it loads with other heads".into()));
    }
    Ok(written)
}

#[cfg(test)]
mod tests;
