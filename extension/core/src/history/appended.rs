//! History read from the changes appended after a stored value's save, without a load. A
//! replica that has the whole save (each of the save's heads is in `since`, or an ancestor
//! of one through appended changes) lacks appended changes only. A load lists changes in
//! the order its change graph added them: the save's, then the appended ones as applying
//! them in one batch orders them (automerge 0.12, `ChangeQueue::pop_topo_sorted_ready`:
//! Kahn's algorithm over the batch in stored order, ready changes first in, first out),
//! which [`in_applied_order`] follows.

use std::collections::{HashMap, VecDeque};

use automerge::{Change, ChangeHash};

use crate::chunk::{parse_changes, split_save};
use crate::doc_ops::DocumentChunk;
use crate::format::StoredValue;

/// The stored save's heads and the changes appended after it; `None` when the payload is
/// not a save followed by change chunks alone (a load says what is wrong with it).
fn split(value: &StoredValue<'_>) -> Option<(Vec<ChangeHash>, Vec<Change>)> {
    let (save, appended) = split_save(value.payload);
    let save_heads =
        if save.is_empty() { Vec::new() } else { DocumentChunk::split(save).ok()?.heads };
    Some((save_heads, in_applied_order(parse_changes(appended)?)?))
}

/// `changes` in the order applying them in one batch adds them to the change graph; `None`
/// when some never become ready (a load then says what is wrong).
fn in_applied_order(changes: Vec<Change>) -> Option<Vec<Change>> {
    let position: HashMap<ChangeHash, usize> =
        changes.iter().enumerate().map(|(at, change)| (change.hash(), at)).collect();
    let mut waiting_for = vec![0usize; changes.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); changes.len()];
    for (at, change) in changes.iter().enumerate() {
        for dep in change.deps() {
            if let Some(&dep_at) = position.get(dep) {
                waiting_for[at] += 1;
                dependents[dep_at].push(at);
            }
        }
    }
    let mut ready: VecDeque<usize> =
        (0..changes.len()).filter(|&at| waiting_for[at] == 0).collect();
    let mut order = Vec::with_capacity(changes.len());
    while let Some(at) = ready.pop_front() {
        order.push(at);
        for &dependent in &dependents[at] {
            waiting_for[dependent] -= 1;
            if waiting_for[dependent] == 0 {
                ready.push_back(dependent);
            }
        }
    }
    if order.len() != changes.len() {
        return None;
    }
    let mut slots: Vec<Option<Change>> = changes.into_iter().map(Some).collect();
    order.into_iter().map(|at| slots[at].take()).collect()
}

/// The appended changes a replica whose heads are `since` lacks, in the order a load lists
/// them; `None` when the appended changes cannot tell: a hash in `since` is neither one of
/// the save's heads nor an appended change (it may be older, or unknown), or the replica
/// does not have the whole save.
pub(super) fn lacking(value: &StoredValue<'_>, since: &[ChangeHash]) -> Option<Vec<Change>> {
    let (save_heads, appended) = split(value)?;
    let position: HashMap<ChangeHash, usize> =
        appended.iter().enumerate().map(|(at, change)| (change.hash(), at)).collect();
    if !since.iter().all(|hash| position.contains_key(hash) || save_heads.contains(hash)) {
        return None;
    }
    let mut had = vec![false; appended.len()];
    let mut save_heads_had = vec![false; save_heads.len()];
    let mut to_visit = since.to_vec();
    while let Some(hash) = to_visit.pop() {
        if let Some(&at) = position.get(&hash) {
            if !had[at] {
                had[at] = true;
                to_visit.extend_from_slice(appended[at].deps());
            }
        } else if let Some(head) = save_heads.iter().position(|head| *head == hash) {
            save_heads_had[head] = true;
        }
        // Any other dependency is a change of the save's history, which is had when every
        // one of its heads is.
    }
    if save_heads_had.contains(&false) {
        return None;
    }
    Some(
        appended
            .into_iter()
            .zip(had)
            .filter_map(|(change, had)| (!had).then_some(change))
            .collect(),
    )
}

/// The appended change whose hash is `hash`; `None` when no appended change has it (the
/// save may). Neither the save's heads nor the order a load applies them in matter here.
pub(super) fn find(value: &StoredValue<'_>, hash: &ChangeHash) -> Option<Change> {
    let (_save, appended) = split_save(value.payload);
    parse_changes(appended)?.into_iter().find(|change| change.hash() == *hash)
}
