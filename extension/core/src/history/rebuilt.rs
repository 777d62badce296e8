//! The changes of a stored save, rebuilt from its columns without a load, byte for byte as
//! the automerge crate's load rebuilds them (0.12, `op_set2/change/collector.rs`): each
//! operation and implied deletion joins the change whose counters hold it
//! ([`doc_changes`]), in counter order; the change's actor is actor 0 of its columns and the
//! actors its objects, element keys and predecessors name follow in document order; the
//! columns are written as the crate writes them (empty ones left out, object, key, expand
//! and mark-name columns only when some operation has one), values re-encoded from what
//! they read as. Every change's bytes include its dependencies' hashes, so the save's heads
//! matching the rebuilt changes' vouches for every byte of every change: [`of_save`] checks
//! them and gives up (a load answers) when they differ.

use std::collections::{HashMap, HashSet};

use automerge::{ActorId, Change, ChangeHash};

use super::appended::in_applied_order;
use crate::chunk::{self, parse_changes, split_save, CHANGE};
use crate::doc_changes::{self, DocChange, Owners, Placed};
use crate::doc_ops::{action, DocumentChunk, DocumentOps, RawKey, RawOpId, RawValue};
use crate::doc_rewrite::{booleans, delta, rle};
use crate::format::StoredValue;
use crate::leb128::{write_sleb, write_uleb};
use crate::Error;

/// A change as a load's change graph has it: the change, and the first counter the graph
/// gives it (for a save's change, the counter after its dependencies'; the change's own
/// first operation can come later).
#[derive(Debug, Clone)]
pub(super) struct GraphChange {
    pub change: Change,
    pub start_op: u64,
}

impl GraphChange {
    /// A change applied to a loaded document, which the graph counts from its own first
    /// operation.
    pub(super) fn applied(change: Change) -> GraphChange {
        GraphChange { start_op: change.start_op().get(), change }
    }
}

/// The changes a replica whose heads are `since` lacks, in the order a load lists them (its
/// change graph's: the save's changes in stored order, then the appended ones as applying
/// them orders them), rebuilt from the stored value without a load; `None` when it cannot
/// tell (a hash of `since` it does not hold, a save it cannot rebuild): a load answers.
/// As the crate does, "lacks" means a later sequence number than any change of its actor
/// that `since` has, itself or among its ancestors.
pub(super) fn lacking(value: &StoredValue<'_>, since: &[ChangeHash]) -> Option<Vec<GraphChange>> {
    let (save, appended) = split_save(value.payload);
    let mut all = if save.is_empty() { Vec::new() } else { of_save(save)? };
    let appended = in_applied_order(parse_changes(appended)?)?;
    all.extend(appended.into_iter().map(GraphChange::applied));
    let position: HashMap<ChangeHash, usize> =
        all.iter().enumerate().map(|(at, listed)| (listed.change.hash(), at)).collect();
    let mut had_seq: HashMap<&ActorId, u64> = HashMap::new();
    let mut visited = vec![false; all.len()];
    let mut to_visit: Vec<usize> =
        since.iter().map(|hash| position.get(hash).copied()).collect::<Option<_>>()?;
    while let Some(at) = to_visit.pop() {
        if std::mem::replace(&mut visited[at], true) {
            continue;
        }
        let change = &all[at].change;
        let seq = had_seq.entry(change.actor_id()).or_default();
        *seq = (*seq).max(change.seq());
        to_visit.extend(change.deps().iter().filter_map(|dep| position.get(dep).copied()));
    }
    let lacks = |listed: &GraphChange| {
        listed.change.seq() > had_seq.get(listed.change.actor_id()).copied().unwrap_or(0)
    };
    let lacking: Vec<bool> = all.iter().map(lacks).collect();
    Some(
        all.into_iter()
            .zip(lacking)
            .filter_map(|(listed, lacks)| lacks.then_some(listed))
            .collect(),
    )
}

/// The changes of the document chunk `save` in stored order (the order a load adds them to
/// its change graph); `None` when they cannot be rebuilt or do not hash to its heads.
fn of_save(save: &[u8]) -> Option<Vec<GraphChange>> {
    rebuild(save).ok().flatten()
}

fn rebuild(save: &[u8]) -> Result<Option<Vec<GraphChange>>, Error> {
    let chunk = DocumentChunk::split(save)?;
    let table = doc_changes::changes(&chunk)?;
    let owners = Owners::new(&table, &chunk.actors)?;
    let ops = DocumentOps::read(save)?;
    let mut members: Vec<Vec<Placed<'_>>> = vec![Vec::new(); table.len()];
    doc_changes::placed(&ops, |placed| {
        members[owners.of(placed.id)? as usize].push(placed);
        Ok(())
    })?;
    let mut changes: Vec<GraphChange> = Vec::with_capacity(table.len());
    for (change, mut ops) in table.iter().zip(members) {
        crate::interrupts::check();
        ops.sort_unstable_by_key(|placed| placed.id.0);
        let deps: Vec<ChangeHash> =
            change.deps.iter().map(|dep| changes[*dep].change.hash()).collect();
        let data = change_data(change, &deps, &ops, &chunk.actors);
        let Ok(rebuilt) = Change::try_from(&chunk::framed(CHANGE, &data)[..]) else {
            return Ok(None);
        };
        changes.push(GraphChange { change: rebuilt, start_op: change.start });
    }
    let mut heads: Vec<ChangeHash> = {
        let depended: HashSet<ChangeHash> =
            changes.iter().flat_map(|listed| listed.change.deps().iter().copied()).collect();
        let hashes = changes.iter().map(|listed| listed.change.hash());
        hashes.filter(|hash| !depended.contains(hash)).collect()
    };
    heads.sort_unstable();
    let mut stored = chunk.heads.clone();
    stored.sort_unstable();
    Ok((heads == stored).then_some(changes))
}

/// The data of the change chunk `change` makes with `ops` (its operations, in counter
/// order) and `deps` (its dependencies' hashes, in stored order).
fn change_data(
    change: &DocChange,
    deps: &[ChangeHash],
    ops: &[Placed<'_>],
    actors: &[ActorId],
) -> Vec<u8> {
    // Actor 0 is the change's; then the actors its operations refer to, by document index.
    let mut named = vec![false; actors.len()];
    for placed in ops {
        let keyed = match placed.key {
            RawKey::Elem(id) => Some(id),
            _ => None,
        };
        for (_, actor) in placed.obj.into_iter().chain(keyed).chain(placed.pred.iter().copied()) {
            named[actor] = true;
        }
    }
    named[change.actor] = false;
    let mut mapping = vec![0u64; actors.len()];
    let others: Vec<usize> = (0..actors.len()).filter(|actor| named[*actor]).collect();
    for (at, actor) in others.iter().enumerate() {
        mapping[*actor] = at as u64 + 1;
    }
    let remap = |(_, actor): RawOpId| mapping[actor];

    let mut data = Vec::new();
    write_uleb(&mut data, deps.len() as u64);
    for dep in deps {
        data.extend_from_slice(&dep.0);
    }
    let prefixed = |data: &mut Vec<u8>, bytes: &[u8]| {
        write_uleb(data, bytes.len() as u64);
        data.extend_from_slice(bytes);
    };
    prefixed(&mut data, actors[change.actor].to_bytes());
    write_uleb(&mut data, change.seq);
    write_uleb(&mut data, ops.first().map_or(change.max_op + 1, |placed| placed.id.0));
    write_sleb(&mut data, change.time);
    prefixed(&mut data, change.message.as_deref().unwrap_or("").as_bytes());
    write_uleb(&mut data, others.len() as u64);
    for actor in &others {
        prefixed(&mut data, actors[*actor].to_bytes());
    }
    let columns = op_columns(ops, &remap);
    write_uleb(&mut data, columns.len() as u64);
    for (spec, column) in &columns {
        write_uleb(&mut data, u64::from(*spec));
        write_uleb(&mut data, column.len() as u64);
    }
    for (_, column) in columns {
        data.extend_from_slice(&column);
    }
    data.extend_from_slice(&change.extra);
    data
}

/// A change's operation columns, as the crate writes them: each column's spec and data, in
/// spec order, empty ones left out.
fn op_columns(ops: &[Placed<'_>], remap: &impl Fn(RawOpId) -> u64) -> Vec<(u32, Vec<u8>)> {
    if ops.is_empty() {
        return Vec::new();
    }
    let uleb = |out: &mut Vec<u8>, value: u64| write_uleb(out, value);
    let string = |out: &mut Vec<u8>, value: &str| {
        write_uleb(out, value.len() as u64);
        out.extend_from_slice(value.as_bytes());
    };
    let unless_all_none = |column: Vec<u8>, any: bool| if any { column } else { Vec::new() };

    let obj_actor: Vec<Option<u64>> = ops.iter().map(|p| p.obj.map(remap)).collect();
    let obj_counter: Vec<Option<u64>> = ops.iter().map(|p| p.obj.map(|id| id.0)).collect();
    let key_actor: Vec<Option<u64>> = ops
        .iter()
        .map(|p| match p.key {
            RawKey::Elem(id) => Some(remap(id)),
            _ => None,
        })
        .collect();
    let key_counter: Vec<Option<i64>> = ops
        .iter()
        .map(|p| match p.key {
            RawKey::Elem(id) => Some(id.0 as i64),
            RawKey::Head => Some(0),
            RawKey::Map(_) => None,
        })
        .collect();
    let key_string: Vec<Option<&str>> = ops
        .iter()
        .map(|p| match p.key {
            RawKey::Map(key) => Some(key),
            _ => None,
        })
        .collect();
    let any_obj = obj_actor.iter().any(Option::is_some);
    let any_key_counter = key_counter.iter().any(Option::is_some);
    let any_key_string = key_string.iter().any(Option::is_some);
    let actions: Vec<Option<u64>> =
        ops.iter().map(|p| Some(p.row.as_ref().map_or(action::DELETE, |op| op.action))).collect();
    let mut values = Vec::new();
    let metas: Vec<Option<u64>> = ops
        .iter()
        .map(|p| Some(p.row.as_ref().map_or(0, |op| encode_value(&op.value, &mut values))))
        .collect();
    let pred_counts: Vec<Option<u64>> = ops.iter().map(|p| Some(p.pred.len() as u64)).collect();
    let preds = || ops.iter().flat_map(|p| p.pred.iter().copied());
    let pred_actors: Vec<Option<u64>> = preds().map(|id| Some(remap(id))).collect();
    let expand = ops.iter().map(|p| p.row.as_ref().is_some_and(|op| op.expand));
    let any_expand = expand.clone().any(|expand| expand);
    let mark_names: Vec<Option<&str>> =
        ops.iter().map(|p| p.row.as_ref().and_then(|op| op.mark_name)).collect();
    let any_mark_name = mark_names.iter().any(Option::is_some);

    let columns = [
        (0x01, unless_all_none(rle(&obj_actor, uleb), any_obj)),
        (0x02, unless_all_none(rle(&obj_counter, uleb), any_obj)),
        (0x11, unless_all_none(rle(&key_actor, uleb), key_actor.iter().any(Option::is_some))),
        (0x13, unless_all_none(delta(key_counter.iter().copied()), any_key_counter)),
        (0x15, unless_all_none(rle(&key_string, string), any_key_string)),
        (0x34, booleans(ops.iter().map(|p| p.row.as_ref().is_some_and(|op| op.insert)))),
        (0x42, rle(&actions, uleb)),
        (0x56, rle(&metas, uleb)),
        (0x57, values),
        (0x70, rle(&pred_counts, uleb)),
        (0x71, rle(&pred_actors, uleb)),
        (0x73, delta(preds().map(|id| Some(id.0 as i64)))),
        (0x94, if any_expand { booleans(expand) } else { Vec::new() }),
        (0xa5, unless_all_none(rle(&mark_names, string), any_mark_name)),
    ];
    columns.into_iter().filter(|(_, column)| !column.is_empty()).collect()
}

/// Appends `value`'s bytes to `out` as the crate re-encodes a value it read, and returns
/// its metadata (its length, shifted, and its type code).
fn encode_value(value: &RawValue<'_>, out: &mut Vec<u8>) -> u64 {
    let start = out.len();
    let type_code = match *value {
        RawValue::Null => 0,
        RawValue::Bool(false) => 1,
        RawValue::Bool(true) => 2,
        RawValue::Uint(n) => {
            write_uleb(out, n);
            3
        }
        RawValue::Int(n) => {
            write_sleb(out, n);
            4
        }
        RawValue::F64(f) => {
            out.extend_from_slice(&f.to_le_bytes());
            5
        }
        RawValue::Str(s) => {
            out.extend_from_slice(s.as_bytes());
            6
        }
        RawValue::Bytes(b) => {
            out.extend_from_slice(b);
            7
        }
        RawValue::Counter(n) => {
            write_sleb(out, n);
            8
        }
        RawValue::Timestamp(n) => {
            write_sleb(out, n);
            9
        }
        RawValue::Unknown { type_code, bytes } => {
            out.extend_from_slice(bytes);
            u64::from(type_code)
        }
    };
    (((out.len() - start) as u64) << 4) | type_code
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, Automerge, ObjType, ROOT};

    /// Every change rebuilt from the columns is the crate's, byte for byte, in its order.
    #[track_caller]
    fn assert_rebuilt_as_the_crate_does(save: &[u8]) {
        let loaded = Automerge::load(save).unwrap();
        let theirs: Vec<Vec<u8>> =
            loaded.get_changes(&[]).iter().map(|c| c.raw_bytes().to_vec()).collect();
        let ours = rebuild(save).unwrap().expect("the rebuilt changes hash to the heads");
        let ours: Vec<Vec<u8>> = ours.iter().map(|c| c.change.raw_bytes().to_vec()).collect();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn rebuilds_a_small_document_as_the_crate_does() {
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "title", "Draft").unwrap();
        let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
        doc.splice_text(&text, 0, 0, "hello").unwrap();
        doc.commit();
        doc.splice_text(&text, 1, 2, "").unwrap();
        doc.put(ROOT, "title", "Final").unwrap();
        doc.commit();
        let mut other = doc.fork();
        other.put(ROOT, "n", 3_i64).unwrap();
        other.commit();
        doc.delete(ROOT, "title").unwrap();
        doc.commit();
        doc.merge(&mut other).unwrap();
        assert_rebuilt_as_the_crate_does(&doc.save());
        assert_rebuilt_as_the_crate_does(&doc.save_nocompress());
    }
}
