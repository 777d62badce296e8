//! The changes of a document chunk as its load sees them, without an op set: the counters
//! the change columns give each change (automerge 0.12, `change_graph.rs`
//! `ChangeGraphCols::load`), which change's counters hold an id, and the ids of the
//! operations and of the deletions a load derives from successor lists, in document order
//! (`op_set2/change/collector.rs`). [`op_owners`](crate::op_owners) checks the partition.

use std::borrow::Cow;
use std::collections::BTreeSet;

use automerge::ActorId;

use crate::doc_ops::{corrupt, inflate, spec, Delta, DocumentChunk, DocumentOps, RawKey};
use crate::doc_ops::{RawOpId, Rle};
use crate::Error;

/// The change column specs a load's counters come from (the deflate bit cleared).
pub mod change_spec {
    pub const ACTOR: u32 = 0x01;
    pub const MAX_OP: u32 = 0x13;
    pub const DEPS_COUNT: u32 = 0x40;
    pub const DEPS: u32 = 0x43;
}

/// The counters a load gives one change of the change columns: above its dependencies'
/// (`start`), up to its own last (`max_op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocChange {
    /// The index of its actor in the document's actor list.
    pub actor: usize,
    pub start: u64,
    pub max_op: u64,
}

/// The changes of `chunk`, in stored order.
pub fn changes(chunk: &DocumentChunk<'_>) -> Result<Vec<DocChange>, Error> {
    let column = |wanted: u32| {
        let found = chunk.change_columns.iter().find(|(s, _)| *s & !spec::DEFLATE == wanted);
        found.map_or(Ok(Cow::Borrowed(&[][..])), |(s, data)| inflate(*s, data))
    };
    let (actors, max_ops) = (column(change_spec::ACTOR)?, column(change_spec::MAX_OP)?);
    let (deps_counts, deps) = (column(change_spec::DEPS_COUNT)?, column(change_spec::DEPS)?);
    let (mut actors, mut max_ops) = (Rle::<u64>::new(&actors), Delta::new(&max_ops));
    let (mut deps_counts, mut deps) = (Rle::<u64>::new(&deps_counts), Delta::new(&deps));
    let mut changes: Vec<DocChange> = Vec::new();
    while let Some(actor) = actors.next()? {
        let actor = actor.and_then(|a| usize::try_from(a).ok()).filter(|a| *a < chunk.actors.len());
        let actor = actor.ok_or_else(|| corrupt("a change names no actor"))?;
        let max_op = max_ops.next()?.flatten().ok_or_else(|| corrupt("a change has no max op"))?;
        let mut deps_max_op = 0;
        for _ in 0..deps_counts.next()?.flatten().unwrap_or(0) {
            let dep = deps.next()?.flatten().ok_or_else(|| corrupt("a dependency"))?;
            let dep = usize::try_from(dep).ok().and_then(|dep| changes.get(dep));
            let dep = dep.ok_or_else(|| corrupt("a dependency that is not an earlier change"))?;
            deps_max_op = deps_max_op.max(dep.max_op);
        }
        changes.push(DocChange { actor, start: deps_max_op + 1, max_op });
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

/// Calls `each` with the id of every operation of `ops` and of every deletion a load
/// derives, in document order: a group (an object's key, or an inserted element with its
/// updates) ends with the successors its operations listed that are not among its own.
pub fn placed(
    ops: &DocumentOps<'_>,
    mut each: impl FnMut(RawOpId) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut group: Option<(Option<RawOpId>, RawKey<'_>)> = None;
    let mut listed: BTreeSet<RawOpId> = BTreeSet::new();
    for op in ops.iter() {
        let op = op?;
        // The crate reads an object id with counter 0 as the root, whatever its actor.
        let obj = op.obj.filter(|(counter, _)| *counter != 0);
        let key = if op.insert { RawKey::Elem(op.id) } else { op.key };
        if group != Some((obj, key)) {
            std::mem::take(&mut listed).into_iter().try_for_each(&mut each)?;
            group = Some((obj, key));
        }
        listed.remove(&op.id);
        each(op.id)?;
        listed.extend(op.succ.iter().copied());
    }
    listed.into_iter().try_for_each(each)
}
