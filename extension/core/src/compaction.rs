//! Compacting a stored value off the write path, as the adapter's background worker does:
//! the value read without a lock is loaded and saved anew (the slow part), and the result
//! is then put onto the value as it is by the time the row is locked. Writes that appended
//! changes meanwhile only extended the payload, so those changes follow the new save; a
//! write that loaded, or an upsert that merged, replaced the payload, and the compaction
//! is dropped.

use std::borrow::Cow;

use crate::document::{self, WriteSettings};
use crate::format::{self, Kept};
use crate::{estimate, writes, Error};

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
        // Off the write path, the new save is loaded before it replaces anything.
        let compacted = match carried_over(&value, settings) {
            Some(structure) => document::verified(saved_anew(stored, structure, settings)?)?,
            None => document::compact(stored, settings)?,
        };
        Ok(Some(Compacted { from: value.payload.to_vec(), value: compacted }))
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
        let Some(appended_changes) = document::changes_after_a_save(&payload) else {
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
fn carried_over(value: &format::StoredValue<'_>, settings: WriteSettings) -> Option<Vec<u8>> {
    let kept = value.kept.as_ref().filter(|_| value.version == format::FORMAT_VERSION)?;
    let json_layout = kept.json.map(|json| json.layout);
    let wanted = settings.keep_json.then(|| settings.json_codec.layout());
    if json_layout != wanted {
        return None;
    }
    Some(writes::current_index(value)?.encode(0))
}

/// `stored` (a value of the current format that keeps its document's JSON and actors) with
/// its payload loaded and saved anew, nothing appended, and `structure` as its index: one
/// load, within the load limit. The JSON and the actors are kept as they are.
pub(crate) fn saved_anew(
    stored: &[u8],
    structure: Vec<u8>,
    settings: WriteSettings,
) -> Result<Vec<u8>, Error> {
    let value = format::decode(stored)?;
    let kept = value
        .kept
        .ok_or_else(|| Error::CorruptStoredValue("a value to save anew keeps nothing".into()))?;
    settings.load_limit.check(&estimate::estimate_stored(&value.summary, value.payload))?;
    let save = document::save(&document::load_stored(stored)?)?;
    let kept = Kept { appended_changes: 0, structure: Some(Cow::Owned(structure)), ..kept };
    Ok(format::encode(&value.summary, &kept, &save))
}

#[cfg(test)]
mod tests;
