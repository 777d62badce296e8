//! Turning client bytes into stored values and back.

use std::borrow::Cow;
use std::collections::BTreeMap;

use automerge::{ActorId, Automerge, ChangeHash, ReadDoc};

use crate::estimate::{self, LoadEstimate};
use crate::format::{self, ActorClock, Header, Kept, Prefix, StoredValue, Summary};
use crate::guard::no_panic;
use crate::kept_json::{self, JsonCodec, TextJson};
use crate::structure::Structure;
use crate::{cache, chunk, json, memory, writes, Error};

/// Loads what a client sent: a `save()`, an incremental save, encoded changes, or any
/// concatenation of them. Empty input is the empty document. The input must be
/// self-contained: a change whose dependencies are absent is refused rather than queued,
/// because saving a document drops queued changes. A leading save is checked by
/// Automerge's loader; the changes after it are applied and checked by
/// [`integrity`](crate::integrity), so that what is stored loads again.
pub fn load_client_bytes(bytes: &[u8]) -> Result<Automerge, Error> {
    let (save, changes) = split_save(bytes);
    let mut doc = if save.is_empty() {
        Automerge::new()
    } else {
        memory::timed_load(|| no_panic(|| Automerge::load(save)))
            .map_err(Error::NotAutomerge)?
            .map_err(|err| Error::NotAutomerge(err.to_string()))?
    };
    writes::apply_to(&mut doc, changes).map_err(|err| match err {
        Error::MissingDependenciesOnApply(missing) => Error::MissingDependencies(missing),
        other => other,
    })?;
    Ok(doc)
}

/// `bytes` split after a leading document chunk (a save), when they start with one: the
/// save and what follows it.
pub(crate) fn split_save(bytes: &[u8]) -> (&[u8], &[u8]) {
    match chunk::chunks(bytes).next() {
        Some(Ok((chunk::DOCUMENT, chunk))) => {
            let end = chunk.as_ptr() as usize + chunk.len() - bytes.as_ptr() as usize;
            bytes.split_at(end)
        }
        _ => (&[], bytes),
    }
}

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
    for change in writes::parse_changes(appended)? {
        structure.apply(&change, max_op)?;
        max_op = change.max_op();
    }
    for (actor, max_op) in latest_max_op {
        structure.set_latest_max_op(actor, *max_op);
    }
    Some(structure)
}

/// The stored form of `doc`, whose Automerge bytes are `payload` (a save, then
/// `appended_changes` change chunks).
fn encode_loaded(
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

/// How many change chunks follow the document chunk that `bytes` start with, when that is
/// all they hold: the shape of a save, and of a stored payload with changes appended.
pub(crate) fn changes_after_a_save(bytes: &[u8]) -> Option<u32> {
    let mut chunks = chunk::chunks(bytes);
    if chunks.next()?.ok()?.0 != chunk::DOCUMENT {
        return None;
    }
    chunks.try_fold(0u32, |changes, chunk| match chunk {
        Ok((chunk::CHANGE | chunk::COMPRESSED_CHANGE, _)) => changes.checked_add(1),
        _ => None,
    })
}

/// The most memory a load may be estimated to take (`pg_automerge.max_load_memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadLimit(pub Option<u64>);

impl LoadLimit {
    pub const NONE: LoadLimit = LoadLimit(None);

    /// Refuses a load whose estimated peak is above the limit, before it starts.
    pub fn check(self, estimate: &LoadEstimate) -> Result<(), Error> {
        match self.0 {
            Some(limit) if estimate.peak_bytes() > limit => {
                Err(Error::LoadTooLarge { estimate: estimate.peak_bytes(), limit })
            }
            _ => Ok(()),
        }
    }
}

/// How many changes a write may append by default (`pg_automerge.append_limit`).
pub const DEFAULT_APPEND_LIMIT: u32 = 64;

/// How many bytes a held document may keep by default (`pg_automerge.document_cache`):
/// room for the Operations page's largest documents, which keep 10–24 MB once loaded.
pub const DEFAULT_CACHE_BUDGET: u64 = 64 << 20;

/// How many bytes of structure indexes a backend may hold by default
/// (`pg_automerge.index_cache`): the index of a JS client's document of a few hundred
/// kilobytes holds 0.3–1.6 MB, of the Operations page's documents 3–10 MB.
pub const DEFAULT_INDEX_CACHE_BUDGET: u64 = 32 << 20;

/// How writes load and store documents; the adapter fills it from the `pg_automerge.*`
/// settings.
#[derive(Debug, Clone, Copy)]
pub struct WriteSettings {
    /// `max_load_memory`.
    pub load_limit: LoadLimit,
    /// `keep_jsonb`: keep the document's JSON in what is stored, so reads need no load.
    pub keep_json: bool,
    /// How the JSON is kept: PostgreSQL's `jsonb` in the extension, text without it.
    pub json_codec: &'static dyn JsonCodec,
    /// `append_limit`: how many changes may sit appended after the last save before a
    /// write loads and re-saves the document; 0 makes every write load.
    pub append_limit: u32,
    /// `document_cache`: the most bytes the last document loaded from client input may keep
    /// to be held for a merge that follows (see [`cache`](crate::cache)); 0 holds none.
    pub cache_budget: u64,
    /// `index_cache`: the most bytes the structure indexes of documents this backend wrote
    /// without a load may hold for the next such write (see
    /// [`index_cache`](crate::index_cache)); 0 holds none.
    pub index_cache_budget: u64,
}

impl WriteSettings {
    /// The defaults with no load limit: for tests, benchmarks and tools.
    pub const UNLIMITED: WriteSettings = WriteSettings {
        load_limit: LoadLimit::NONE,
        keep_json: true,
        json_codec: &TextJson,
        append_limit: DEFAULT_APPEND_LIMIT,
        cache_budget: DEFAULT_CACHE_BUDGET,
        // Each write decodes the stored index, as a backend's first write of a value does.
        index_cache_budget: 0,
    };
}

/// Validates client bytes, within the load limit, and returns their stored form. The loaded
/// document stays in the [`cache`](crate::cache) for a merge that follows.
pub fn stored_from_client_bytes(bytes: &[u8], settings: WriteSettings) -> Result<Vec<u8>, Error> {
    settings.load_limit.check(&estimate::estimate_client_bytes(bytes)?)?;
    let before = memory::usage().allocated_bytes;
    let doc = load_client_bytes(bytes)?;
    let kept_bytes = memory::usage().allocated_bytes.saturating_sub(before) as u64;
    // A save, with or without changes after it, is stored as it came: the load checked it,
    // and a dump restores byte for byte. Anything else is stored as the document it makes.
    let stored = match changes_after_a_save(bytes) {
        Some(changes) => encode_loaded(&doc, settings, bytes, changes)?,
        None => to_stored(&doc, settings)?,
    };
    cache::keep(doc.get_heads(), doc, kept_bytes, settings.cache_budget);
    Ok(stored)
}

/// The document as JSON text, for a value that keeps none in `codec`'s layout: kept text
/// as it is, any other kept JSON read back, else from a load.
pub fn json_text<'a>(
    stored: &'a [u8],
    codec: &'static dyn JsonCodec,
) -> Result<Cow<'a, str>, Error> {
    match format::decode(stored)?.kept.and_then(|kept| kept.json) {
        Some(json) if json.layout == format::JsonLayout::Text => match json.raw()? {
            Cow::Borrowed(raw) => std::str::from_utf8(raw)
                .map(Cow::Borrowed)
                .map_err(|_| Error::CorruptStoredValue("kept JSON is not UTF-8".into())),
            Cow::Owned(raw) => String::from_utf8(raw)
                .map(Cow::Owned)
                .map_err(|_| Error::CorruptStoredValue("kept JSON is not UTF-8".into())),
        },
        Some(json) => Ok(Cow::Owned(kept_json::decode(&json, codec)?.to_string())),
        None => Ok(Cow::Owned(json::document(&load_stored(stored)?, None)?.to_string())),
    }
}

/// The stored value saved anew in the current format, with no appended changes and its JSON
/// when the settings keep it: one load, within the load limit, and one of the new save,
/// which must load before it replaces anything (see [`verified`]).
pub fn compact(stored: &[u8], settings: WriteSettings) -> Result<Vec<u8>, Error> {
    let value = format::decode(stored)?;
    settings.load_limit.check(&estimate::estimate_stored(&value.summary, value.payload))?;
    verified(to_stored(&load_stored(stored)?, settings)?)
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

/// Whether the stored value is known, from its header alone, to contain every change in
/// `hashes`: each is one of its heads or the latest change of one of its actors (a change
/// hash names its whole history, so the value then has their ancestors too).
pub fn contains(value: &StoredValue<'_>, hashes: &[ChangeHash]) -> bool {
    let clock = value.kept.as_ref().map(|kept| &kept.clock);
    header_contains(&value.summary.heads, clock, hashes)
}

fn header_contains(
    heads: &[ChangeHash],
    clock: Option<&ActorClock>,
    hashes: &[ChangeHash],
) -> bool {
    hashes.iter().all(|hash| {
        heads.contains(hash) || clock.is_some_and(|clock| format::is_latest_change(clock, hash))
    })
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
    Ok(has_all(&load_stored(value.prefix(usize::MAX))?, hashes))
}

/// The Automerge bytes of a stored value, as clients load them: no load needed.
pub fn client_bytes(stored: &[u8]) -> Result<&[u8], Error> {
    format::decode(stored).map(|value: StoredValue<'_>| value.payload)
}

/// Loads the document of a stored value. Changes appended after its save are checked as
/// a write checks them: values that 0.3.0 stored with a change that its save would not
/// load again are refused here, instead of being saved into something no load accepts
/// (`automerge_repair` mends them).
pub fn load_stored(stored: &[u8]) -> Result<Automerge, Error> {
    load_stored_with(stored, Automerge::load)
}

/// [`load_stored`] with the save loaded by `loader`, such as one that counts text
/// positions in another unit.
pub(crate) fn load_stored_with(
    stored: &[u8],
    loader: fn(&[u8]) -> Result<Automerge, automerge::AutomergeError>,
) -> Result<Automerge, Error> {
    let (save, appended) = split_save(format::decode(stored)?.payload);
    let mut doc = load_saved(save, loader)?;
    writes::apply_to(&mut doc, appended).map_err(|err| match err {
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
        let mut tx = doc.transaction();
        tx.put(ROOT, "title", title).unwrap();
        tx.commit_with(CommitOptions::default().with_time(0));
        doc
    }

    #[test]
    fn empty_input_is_the_empty_document() {
        let doc = load_client_bytes(&[]).unwrap();
        assert!(doc.get_heads().is_empty());
        let stored = to_stored(&doc, WriteSettings::UNLIMITED).unwrap();
        let value = format::decode(&stored).unwrap();
        assert_eq!(value.summary, Summary { change_count: 0, op_count: 0, heads: vec![] });
        assert!(load_stored(&stored).unwrap().get_heads().is_empty());
    }

    #[test]
    fn stores_a_save_unchanged_with_its_summary() {
        let doc = doc_with_title(1, "hello");
        let saved = doc.save();
        let stored = stored_from_client_bytes(&saved, WriteSettings::UNLIMITED).unwrap();
        assert_eq!(client_bytes(&stored).unwrap(), &saved[..]);
        let value = format::decode(&stored).unwrap();
        assert_eq!(value.summary.change_count, 1);
        assert_eq!(value.summary.op_count, 1);
        assert_eq!(value.summary.heads, doc.get_heads());
    }

    #[test]
    fn accepts_changes_and_incremental_saves() {
        let mut doc = doc_with_title(1, "one");
        let first = doc.save();
        let mut tx = doc.transaction();
        tx.put(ROOT, "title", "two").unwrap();
        tx.commit_with(CommitOptions::default().with_time(0));
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
        let mut tx = doc.transaction();
        tx.put(ROOT, "title", "two").unwrap();
        tx.commit_with(CommitOptions::default().with_time(0));
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

    #[test]
    fn knows_its_changes_from_the_header_or_a_load() {
        let mut doc = automerge::AutoCommit::new().with_actor(ActorId::from([1; 16]));
        doc.put(ROOT, "a", 1_i64).unwrap();
        let first = doc.get_heads();
        doc.put(ROOT, "a", 2_i64).unwrap();
        let second = doc.get_heads();
        let mut other = automerge::AutoCommit::new();
        other.put(ROOT, "b", 1_i64).unwrap();
        let stored = stored_from_client_bytes(&doc.save(), WriteSettings::UNLIMITED).unwrap();
        let value = format::decode(&stored).unwrap();
        assert!(contains(&value, &second), "a head");
        assert!(!contains(&value, &first), "an older change: the header cannot tell");
        let stored = &stored[..];
        assert!(has_changes(&stored, &first).unwrap(), "a load can");
        assert!(has_changes(&stored, &[]).unwrap());
        assert!(!has_changes(&stored, &[second[0], other.get_heads()[0]]).unwrap());
    }

    #[test]
    fn a_save_with_changes_after_it_is_stored_as_it_came() {
        let mut doc = doc_with_title(1, "one");
        let saved = doc.save();
        let heads = doc.get_heads();
        let mut tx = doc.transaction();
        tx.put(ROOT, "title", "two").unwrap();
        tx.commit_with(CommitOptions::default().with_time(0));
        let mut payload = saved.clone();
        payload.extend_from_slice(&doc.save_after(&heads));
        let stored = stored_from_client_bytes(&payload, WriteSettings::UNLIMITED).unwrap();
        assert_eq!(client_bytes(&stored).unwrap(), &payload[..]);
        assert_eq!(format::decode(&stored).unwrap().kept.unwrap().appended_changes, 1);
        // Changes alone are stored as the document they make.
        let changes = doc.save_after(&[]);
        let stored = stored_from_client_bytes(&changes, WriteSettings::UNLIMITED).unwrap();
        assert_eq!(client_bytes(&stored).unwrap(), &doc.save()[..]);
        assert_eq!(format::decode(&stored).unwrap().kept.unwrap().appended_changes, 0);
    }
}
