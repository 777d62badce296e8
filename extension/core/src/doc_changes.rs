//! The changes of a document chunk as its load rebuilds them, without an op set: the change
//! table read from the change columns (automerge 0.12, `change_graph.rs`
//! `ChangeGraphCols::load`), which change's counters hold each id, and the operations in
//! document order with the predecessors and deletions a load derives from successor lists
//! (`op_set2/change/collector.rs`). [`op_owners`](crate::op_owners) checks the partition;
//! [`history`](crate::history) rebuilds the changes from it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use automerge::ActorId;
use smallvec::SmallVec;

use crate::doc_ops::{corrupt, inflate, spec, Delta, DocumentChunk, DocumentOps, RawKey, RawOp};
use crate::doc_ops::{RawOpId, Rle};
use crate::Error;

/// Change column specs (the deflate bit cleared).
mod change_spec {
    pub const ACTOR: u32 = 0x01;
    pub const SEQ: u32 = 0x03;
    pub const MAX_OP: u32 = 0x13;
    pub const TIME: u32 = 0x23;
    pub const MESSAGE: u32 = 0x35;
    pub const DEPS_COUNT: u32 = 0x40;
    pub const DEPS: u32 = 0x43;
    pub const EXTRA_META: u32 = 0x56;
    pub const EXTRA: u32 = 0x57;
}

/// One row of the change columns, with the counters a load gives it: above its
/// dependencies' (`start`), up to its own last (`max_op`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocChange {
    /// The index of its actor in the document's actor list.
    pub actor: usize,
    pub seq: u64,
    pub start: u64,
    pub max_op: u64,
    pub time: i64,
    pub message: Option<String>,
    /// The indexes of its dependencies in the change table, in stored order.
    pub deps: Vec<usize>,
    pub extra: Vec<u8>,
}

/// The change table of `chunk`, in stored order.
pub fn changes(chunk: &DocumentChunk<'_>) -> Result<Vec<DocChange>, Error> {
    let column = |wanted: u32| {
        let found = chunk.change_columns.iter().find(|(s, _)| *s & !spec::DEFLATE == wanted);
        found.map_or(Ok(Cow::Borrowed(&[][..])), |(s, data)| inflate(*s, data))
    };
    let actors = column(change_spec::ACTOR)?;
    let seqs = column(change_spec::SEQ)?;
    let max_ops = column(change_spec::MAX_OP)?;
    let times = column(change_spec::TIME)?;
    let messages = column(change_spec::MESSAGE)?;
    let deps_counts = column(change_spec::DEPS_COUNT)?;
    let deps = column(change_spec::DEPS)?;
    let extra_metas = column(change_spec::EXTRA_META)?;
    let extras = column(change_spec::EXTRA)?;
    let (mut actors, mut seqs) = (Rle::<u64>::new(&actors), Delta::new(&seqs));
    let (mut max_ops, mut times) = (Delta::new(&max_ops), Rle::<i64>::new(&times));
    let (mut messages, mut deps_counts) =
        (Rle::<&str>::new(&messages), Rle::<u64>::new(&deps_counts));
    let (mut deps, mut extra_metas) = (Delta::new(&deps), Rle::<u64>::new(&extra_metas));
    let mut extras: &[u8] = &extras;
    let mut time = 0i64;
    let mut changes: Vec<DocChange> = Vec::new();
    while let Some(actor) = actors.next()? {
        let actor = actor.and_then(|a| usize::try_from(a).ok()).filter(|a| *a < chunk.actors.len());
        let actor = actor.ok_or_else(|| corrupt("a change names no actor"))?;
        let seq = seqs.next()?.flatten().ok_or_else(|| corrupt("a change has no seq"))?;
        let max_op = max_ops.next()?.flatten().ok_or_else(|| corrupt("a change has no max op"))?;
        // The time column is a delta column that may go down: its deltas, summed.
        time = time.wrapping_add(times.next()?.flatten().unwrap_or(0));
        let message = messages.next()?.flatten().map(str::to_string);
        let mut change_deps = Vec::new();
        let mut deps_max_op = 0;
        for _ in 0..deps_counts.next()?.flatten().unwrap_or(0) {
            let dep = deps.next()?.flatten().ok_or_else(|| corrupt("a dependency"))?;
            let dep = usize::try_from(dep).ok().filter(|dep| *dep < changes.len());
            let dep = dep.ok_or_else(|| corrupt("a dependency that is not an earlier change"))?;
            deps_max_op = deps_max_op.max(changes[dep].max_op);
            change_deps.push(dep);
        }
        let extra_len = usize::try_from(extra_metas.next()?.flatten().unwrap_or(0) >> 4).ok();
        let extra_len = extra_len.filter(|len| *len <= extras.len());
        let (extra, rest) = extras.split_at(extra_len.ok_or_else(|| corrupt("extra bytes"))?);
        extras = rest;
        changes.push(DocChange {
            actor,
            seq,
            start: deps_max_op + 1,
            max_op,
            time,
            message,
            deps: change_deps,
            extra: extra.to_vec(),
        });
    }
    Ok(changes)
}

/// The changes that have counters, per actor by first counter, to find an id's change.
pub struct Owners<'a> {
    by_actor: Vec<Vec<(u64, u64, u32)>>,
    actors: &'a [ActorId],
}

impl<'a> Owners<'a> {
    /// Refuses two changes of one actor whose counters overlap.
    pub fn new(changes: &[DocChange], actors: &'a [ActorId]) -> Result<Owners<'a>, Error> {
        let mut by_actor = vec![Vec::new(); actors.len()];
        for (index, change) in changes.iter().enumerate() {
            if change.start <= change.max_op {
                by_actor[change.actor].push((change.start, change.max_op, index as u32));
            }
        }
        for (actor, changes) in by_actor.iter_mut().enumerate() {
            changes.sort_unstable();
            if let Some(pair) = changes.windows(2).find(|pair| pair[1].0 <= pair[0].1) {
                return Err(Error::SaveNotItsChanges(format!(
                    "two changes of actor {} claim counters {} to {}",
                    actors[actor],
                    pair[1].0,
                    pair[0].1.min(pair[1].1)
                )));
            }
        }
        Ok(Owners { by_actor, actors })
    }

    /// The index of the change whose counters hold `id`.
    pub fn of(&self, (counter, actor): RawOpId) -> Result<u32, Error> {
        let changes = &self.by_actor[actor];
        let after = changes.partition_point(|(start, _, _)| *start <= counter);
        match after.checked_sub(1).map(|at| changes[at]) {
            Some((_, max_op, index)) if counter <= max_op => Ok(index),
            _ => Err(Error::SaveNotItsChanges(format!(
                "operation {counter}@{} belongs to none of its changes",
                self.actors[actor]
            ))),
        }
    }
}

/// An operation as a load rebuilds it into its change: a row of the document, or a
/// deletion that successor lists imply, with its predecessors (the earlier operations of
/// its group that list it, in document order).
#[derive(Debug, Clone, PartialEq)]
pub struct Placed<'a> {
    /// The row, or `None` for a deletion.
    pub row: Option<RawOp<'a>>,
    pub id: RawOpId,
    /// `None` for the root map (an object id with counter 0 is the root, as a load reads it).
    pub obj: Option<RawOpId>,
    pub key: RawKey<'a>,
    pub pred: SmallVec<[RawOpId; 2]>,
}

/// Calls `each` with every operation of `ops` as a load places it, in document order: a
/// group (an object's key, or an inserted element with its updates) ends with the
/// deletions its successor lists imply, in id order.
pub fn placed<'a>(
    ops: &'a DocumentOps<'_>,
    mut each: impl FnMut(Placed<'a>) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut group: Option<Group<'a>> = None;
    let mut listed = Listed::new();
    for op in ops.iter() {
        let op = op?;
        let obj = op.obj.filter(|(counter, _)| *counter != 0);
        let key = if op.insert { RawKey::Elem(op.id) } else { op.key };
        if group != Some((obj, key)) {
            if let Some(ended) = group {
                deletions(&mut each, ended, &mut listed)?;
            }
            group = Some((obj, key));
        }
        let pred = listed.remove(&op.id).unwrap_or_default();
        for succ in &op.succ {
            listed.entry(*succ).or_default().push(op.id);
        }
        each(Placed { id: op.id, obj, key: op.key, pred, row: Some(op) })?;
    }
    if let Some(ended) = group {
        deletions(&mut each, ended, &mut listed)?;
    }
    Ok(())
}

/// A group's object and key.
type Group<'a> = (Option<RawOpId>, RawKey<'a>);
/// The successors a group's operations listed that no later operation of it has been, with
/// the operations that listed each.
type Listed = BTreeMap<RawOpId, SmallVec<[RawOpId; 2]>>;

fn deletions<'a>(
    each: &mut impl FnMut(Placed<'a>) -> Result<(), Error>,
    (obj, key): Group<'a>,
    listed: &mut Listed,
) -> Result<(), Error> {
    for (id, pred) in std::mem::take(listed) {
        each(Placed { row: None, id, obj, key, pred })?;
    }
    Ok(())
}
