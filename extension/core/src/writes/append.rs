//! The write without a load: changes that follow the stored document, checked and placed
//! by its [`Structure`] index, appended to its payload, with the kept JSON patched at the
//! paths they edit. The index such a write leaves is held by [`index_cache`] for the
//! backend's next write; the write that passes `append_limit` saves the document anew
//! ([`saved_anew`]), keeping that JSON and index.

use std::borrow::Cow;
use std::collections::BTreeSet;

use automerge::{Change, ChangeHash};

use crate::chunk::{self, parse_change, parse_changes, split_save};
use crate::estimate::LoadEstimate;
use crate::format::{self, Kept, StoredValue, FORMAT_VERSION};
use crate::guard::no_panic;
use crate::json_edit::JsonEdit;
use crate::save::saved_anew;
use crate::settings::WriteSettings;
use crate::structure::Structure;
use crate::{index_cache, kept_json, Error};

/// The write without a load: `None` when the changes do not simply follow the stored
/// document, and the caller must load. The write whose changes pass `append_limit` also
/// saves the document anew: one load, but the JSON and the index are not built again.
pub(super) fn append(
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
    let mut earlier = Appended::new(value.payload);
    // The index is decoded when the first new change needs it: a write of changes the
    // document has returns without it, and one past the limit loads anyway.
    let mut indexed = None;
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
        let (structure, _, heap_bytes) = match &mut indexed {
            Some(indexed) => indexed,
            None if settings.append_limit == 0 => return Ok(None),
            None => match held_index(&value.summary.heads, &kept, settings).or_else(|| {
                index(&kept, &mut earlier).map(|(index, includes)| (index, includes, None))
            }) {
                Some(found) => indexed.insert(found),
                None => return Ok(None),
            },
        };
        // Only operations checked against the structure index are appended: a change that
        // names an object, element or operation the document lacks would be stored and
        // make every later load fail.
        let Some(deps_max_op) = deps_max_op(change, &heads, &kept, structure, &mut earlier) else {
            return Ok(None);
        };
        let Some(change_edits) = structure.apply(change, deps_max_op, heap_bytes.as_mut()) else {
            return Ok(None);
        };
        edits.extend(change_edits);
        heads.retain(|head| !change.deps().contains(head));
        heads.insert(hash);
        kept.clock.insert(change.actor_id().clone(), (change.seq(), hash));
        kept.max_op = kept.max_op.max(change.max_op());
        new_ops += change.len() as u64;
        new.push(change);
    }
    let Some((structure, stored_includes, heap_bytes)) = indexed else {
        return Ok(Some(stored.to_vec())); // every change was in the document
    };
    let appended_changes = kept.appended_changes.saturating_add(new.len() as u32);
    // The write that passes the limit saves the document anew (see below).
    let folds = appended_changes > settings.append_limit;
    // The JSON is read only now that the changes are known to be appended; JSON that
    // cannot follow them leaves the write to the load. Changes that show nothing (marks,
    // losing values) keep its bytes as they are.
    let patched = match kept.json {
        Some(json) if settings.keep_json && !unchanged(&json, &edits, settings) => {
            match kept_json::patched(&json, &edits, settings.json_codec)? {
                Some(patched) => Some(patched),
                None => return Ok(None),
            }
        }
        _ => None,
    };
    let json = match (&patched, kept.json) {
        (Some(patched), _) => Some(patched.as_kept()),
        (None, Some(json)) if settings.keep_json => Some(json),
        _ => None,
    };
    let heads: Vec<ChangeHash> = heads.into_iter().collect();
    let summary = format::Summary {
        change_count: value.summary.change_count + new.len() as u64,
        op_count: value.summary.op_count + new_ops,
        heads: heads.clone(),
    };
    let mut payload = value.payload.to_vec();
    for change in new {
        payload.extend_from_slice(change.raw_bytes());
    }
    let appended = if folds {
        // One load and a save, as a write that loads takes; the JSON and the index follow
        // the changes already, so they are kept rather than built again from the load. The
        // value built here goes to the save as it is, never encoded.
        let kept = Kept { appended_changes, json, structure: None, ..kept };
        let built =
            StoredValue { version: FORMAT_VERSION, summary, kept: Some(kept), payload: &payload };
        saved_anew(built, structure.encode(0), settings)?
    } else {
        // The stored index may lack a few appended changes, which the next write replays:
        // encoding it is most of what an appended write costs on a long text.
        let stored_structure = match stored_includes {
            Some(includes) if appended_changes - includes < REENCODE_AFTER => kept.structure.take(),
            _ => Some(Cow::Owned(structure.encode(appended_changes))),
        };
        let kept = Kept { appended_changes, json, structure: stored_structure, ..kept };
        format::encode(&summary, &kept, &payload)
    };
    if settings.index_cache_budget > 0 {
        index_cache::keep(heads, structure, heap_bytes, settings.index_cache_budget);
    }
    Ok(Some(appended))
}

/// The index that this backend's write of the value's heads left (see [`index_cache`]),
/// how many appended changes the stored one includes, as [`index`] returns them, and its
/// heap bytes.
fn held_index(
    heads: &[ChangeHash],
    kept: &Kept<'_>,
    settings: WriteSettings,
) -> Option<(Structure, Option<u32>, Option<u64>)> {
    if settings.index_cache_budget == 0 {
        return None;
    }
    let includes = Structure::includes(kept.structure.as_deref()?)?;
    if includes.is_some_and(|includes| includes > kept.appended_changes) {
        return None;
    }
    let (index, heap_bytes) = index_cache::take(heads)?;
    Some((index, includes, Some(heap_bytes)))
}

/// Whether the kept JSON stays as it is: no edits, and already in the layout this build
/// writes.
fn unchanged(json: &format::KeptJson<'_>, edits: &[JsonEdit], settings: WriteSettings) -> bool {
    edits.is_empty() && json.layout == settings.json_codec.layout()
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

/// How many appended changes the stored structure index may lack: a write replays those
/// (each costs about what applying it did: a mark on the rich text about 1 ms, its encode
/// about 8 ms), and the write that would pass this encodes the index anew.
pub(super) const REENCODE_AFTER: u32 = 4;

/// The structure index of a stored value as of its last change: what it keeps, with the
/// appended changes it lacks replayed; and how many appended changes the kept one includes
/// (`None`: all, and it must be encoded again when it changes). `None` when the value
/// keeps none, or it does not read.
fn index(kept: &Kept<'_>, appended: &mut Appended<'_>) -> Option<(Structure, Option<u32>)> {
    let (mut structure, includes) = Structure::decode(kept.structure.as_deref()?)?;
    let from = includes.unwrap_or(kept.appended_changes);
    if from > kept.appended_changes {
        return None;
    }
    // Each was checked against the index when it was appended: its counters follow its
    // dependencies'.
    for change in appended.since(from as usize, kept.appended_changes as usize)? {
        structure.apply(&change, change.start_op().get() - 1, None)?;
    }
    Some((structure, includes))
}

/// The structure index of a stored value as of its last change (see [`index`]); for tests
/// and tools.
pub fn current_index(value: &StoredValue<'_>) -> Option<Structure> {
    index(value.kept.as_ref()?, &mut Appended::new(value.payload)).map(|(index, _)| index)
}

/// The changes appended to a stored value since its last save, framed when a write first
/// asks and parsed one by one as it needs them (a value holds up to `append_limit`, and
/// a write needs few): a client that typed while another did depends on changes that are
/// no longer their actors' latest, and the index replays those it lacks.
struct Appended<'a> {
    payload: &'a [u8],
    chunks: Option<Option<Vec<&'a [u8]>>>,
}

impl<'a> Appended<'a> {
    fn new(payload: &'a [u8]) -> Self {
        Appended { payload, chunks: None }
    }

    /// Each appended change's chunk; `None` when they do not frame.
    fn chunks(&mut self) -> Option<&[&'a [u8]]> {
        let payload = self.payload;
        self.chunks
            .get_or_insert_with(|| {
                let (_, appended) = split_save(payload);
                chunk::chunks(appended).map(|chunk| chunk.ok().map(|(_, bytes)| bytes)).collect()
            })
            .as_deref()
    }

    /// The appended changes from the `from`th on, of `count` in all; `None` when the
    /// value holds another number of them, or one does not parse.
    fn since(&mut self, from: usize, count: usize) -> Option<Vec<Change>> {
        if from == count {
            return Some(Vec::new());
        }
        let chunks = self.chunks().filter(|chunks| chunks.len() == count)?;
        chunks[from..].iter().map(|chunk| parse_change(chunk)).collect()
    }

    /// The largest operation counter of the appended change `hash`: only a chunk whose
    /// checksum is the start of that hash is parsed.
    fn max_op(&mut self, hash: &ChangeHash) -> Option<u64> {
        let chunks = self.chunks()?;
        let candidates = chunks.iter().filter(|chunk| chunk.get(4..8) == Some(&hash.0[..4]));
        candidates
            .filter_map(|chunk| parse_change(chunk))
            .find(|c| c.hash() == *hash)
            .map(|c| c.max_op())
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
