//! The rules that keep every stored value loadable. Automerge applies changes in memory
//! after far fewer checks than its loader makes, so a change can sit in a document, and be
//! saved, in a form that the next load refuses. Every write that adds changes to a loaded
//! document therefore checks what it added against the loader's rules (automerge 0.12):
//!
//! - each actor's changes are numbered 1, 2, 3… and each descends from its actor's previous
//!   one (the loader sorts changes per actor and requires non-decreasing op counters);
//! - a change's operation counters start above those of every change it depends on (a save
//!   stores only each change's last counter and re-derives the first from the
//!   dependencies), right after them for a change with no operations;
//! - counters fit in 32 bits;
//! - the change is exactly what the document records of it: Automerge re-encodes it from
//!   the operations it holds (as a save does) and the result must hash to the same change.
//!   This is what refuses unknown columns, actors listed but unused, predecessors that are
//!   not where the change says, deletes of nothing and operations Automerge dropped.
//!
//! - each operation is keyed as its object's kind is (an element in a list or text, a name
//!   in a map), and a mark is inserted into a text: checked before the changes are
//!   applied ([`check_incoming`]), since Automerge applies what breaks it into a document
//!   that no save reproduces;
//! - the marks of the document it makes are in the order the loader of a save requires
//!   (see [`mark_order`]): each mark end after its begin, in the same object. Applying a
//!   change does not check it, and a save with the change appended still loads, but the
//!   next save does not; so when the added changes hold a mark operation, the document's
//!   save (uncompressed, which costs a few milliseconds beside the load the write made) is
//!   read for it.
//!
//! We add one rule of our own: counters may not start past every operation the document
//! has (plus one), so one change cannot use up the counters of a document (a change at
//! 2^32 - 1 would leave no counter for any later change). Clients start a change right
//! after the largest counter they have seen, so no client's change breaks it.
//!
//! The checks cost a walk over the new changes' operations, not a load: the document's
//! older changes were checked when they were written.

use std::collections::{BTreeMap, BTreeSet};

use automerge::legacy::{Key, ObjectId, OpType};
use automerge::{ActorId, Automerge, Change, ChangeHash, ChangeMetadata, ObjType};

use crate::guard::no_panic;
use crate::mark_order;
use crate::rules::{Broken, Rule};
use crate::Error;

/// Checks changes before they are applied to `doc`, for what applying them does not check
/// and can leave in a state no save of which loads (in a debug build of the crate, what its
/// own assertions stop): each operation's key must be of its object's kind, an element or
/// the start for a list or text, a name for a map; and a mark operation is an insertion
/// into a text (applied as an update of an element instead, it hides the element from a
/// load of the save but not from the document it was applied to; in a list, which no
/// client's `mark` makes, the crate's two readings of the list disagree on the marks at a
/// later insert). Objects the changes make count, as do the document's; an object neither
/// has is left to the apply, which refuses it. Returns whether any of them holds a mark
/// operation, which [`check_added`] is then told.
pub fn check_incoming(doc: &Automerge, changes: &[Change]) -> Result<bool, Error> {
    keys_and_marks(doc, changes).map_err(Error::BreaksLoadRule)
}

/// What [`check_incoming`] checks: whether any change holds a mark, or the first operation
/// keyed as no operation of its object can be.
fn keys_and_marks(doc: &Automerge, changes: &[Change]) -> Result<bool, Broken> {
    let mut marks = false;
    let mut made: BTreeMap<(u64, ActorId), ObjType> = BTreeMap::new();
    for change in changes {
        let Ok(expanded) = no_panic(|| change.decode()) else { continue };
        let start = change.start_op().get();
        for (index, op) in expanded.operations.iter().enumerate() {
            if let OpType::Make(obj_type) = op.action {
                made.insert((start + index as u64, change.actor_id().clone()), obj_type);
            }
            let obj_type = match &op.obj {
                ObjectId::Root => ObjType::Map,
                ObjectId::Id(id) => {
                    let key = (id.counter(), id.actor().clone());
                    match made.get(&key) {
                        Some(obj_type) => *obj_type,
                        None => match no_panic(|| doc.import(&format!("{}@{}", key.0, key.1))) {
                            Ok(Ok((_, obj_type))) => obj_type,
                            _ => continue,
                        },
                    }
                }
            };
            let sequence = matches!(obj_type, ObjType::List | ObjType::Text);
            let mark = is_mark(&op.action);
            marks |= mark;
            let fits = match op.key {
                Key::Seq(_) if mark => op.insert && obj_type == ObjType::Text,
                Key::Seq(_) => sequence,
                Key::Map(_) => !sequence && !mark,
            };
            if !fits {
                let op_id = format!("{}@{}", start + index as u64, change.actor_id());
                let rule = Rule::KeyOfOtherObjectKind { op: op_id, object: obj_type };
                return Err(Broken { change: change.hash(), rule });
            }
        }
    }
    Ok(marks)
}

fn is_mark(action: &OpType) -> bool {
    matches!(action, OpType::MarkBegin(..) | OpType::MarkEnd(_))
}

/// Checks the changes that `doc` gained since it had the heads `before`: the document's
/// save loads again if and only if they keep the rules (its older changes kept them).
/// `marks` says whether they hold a mark operation, where the caller checked them with
/// [`check_incoming`] before applying them; `None` (a merge), and they are checked now.
pub fn check_added(
    doc: &Automerge,
    before: &[ChangeHash],
    marks: Option<bool>,
) -> Result<(), Error> {
    broken_added(doc, before, marks).map_or(Ok(()), |broken| Err(Error::BreaksLoadRule(broken)))
}

/// The first rule that the changes added since `before` break, if any.
fn broken_added(doc: &Automerge, before: &[ChangeHash], marks: Option<bool>) -> Option<Broken> {
    let Ok(added) = no_panic(|| doc.get_changes_meta(before)) else {
        return Some(Broken { change: ChangeHash([0; 32]), rule: Rule::NotAsRecorded });
    };
    if added.is_empty() {
        return None;
    }
    let added_hashes: BTreeSet<ChangeHash> = added.iter().map(|change| change.hash).collect();
    let previous = previous_changes(doc, &added);
    // Counters never decrease along dependencies, so the document's largest is a head's.
    let document_max_op = before.iter().filter_map(|head| max_op_of(doc, head)).max().unwrap_or(0);
    for change in &added {
        if let Some(rule) = broken_rule(doc, change, &previous, document_max_op) {
            return Some(Broken { change: change.hash, rule });
        }
    }
    // What a save would record of the added changes: they must hash as they came.
    let recorded = no_panic(|| doc.get_changes(before)).unwrap_or_default();
    let recorded_hashes: BTreeSet<ChangeHash> =
        recorded.iter().map(|change| change.hash()).collect();
    if recorded_hashes != added_hashes {
        let change = added_hashes.difference(&recorded_hashes).next().copied();
        return Some(Broken { change: change.unwrap_or(added[0].hash), rule: Rule::NotAsRecorded });
    }
    let marks = match marks {
        Some(marks) => marks,
        None => match keys_and_marks(doc, &recorded) {
            Ok(marks) => marks,
            Err(broken) => return Some(broken),
        },
    };
    if marks {
        return broken_mark_order(doc);
    }
    None
}

/// The mark rule of a save, checked on the document's uncompressed save: the change of the
/// first mark end it refuses (an added change, or one an older version stored), if any.
fn broken_mark_order(doc: &Automerge) -> Option<Broken> {
    let unreadable = || Some(Broken { change: ChangeHash([0; 32]), rule: Rule::NotAsRecorded });
    let Ok(save) = no_panic(|| doc.save_nocompress()) else { return unreadable() };
    let misplaced = match mark_order::misplaced_mark_end(&save) {
        Ok(found) => found?,
        Err(_) => return unreadable(),
    };
    let (counter, actor) = (misplaced.counter, &misplaced.actor);
    let changes = no_panic(|| doc.get_changes_meta(&[])).unwrap_or_default();
    let change = changes
        .iter()
        .find(|c| *c.actor == *actor && (c.start_op..=c.max_op).contains(&counter))
        .map_or(ChangeHash([0; 32]), |c| c.hash);
    let end = format!("{counter}@{actor}");
    Some(Broken { change, rule: Rule::MarkOrder { end, cause: misplaced.cause } })
}

/// The hash of each change that an added change must follow: its actor's change with the
/// sequence number before its own.
type Previous = BTreeMap<(ActorId, u64), ChangeHash>;

fn previous_changes(doc: &Automerge, added: &[ChangeMetadata<'_>]) -> Previous {
    let wanted: BTreeSet<(ActorId, u64)> = added
        .iter()
        .filter(|change| change.seq > 1)
        .map(|change| (change.actor.clone().into_owned(), change.seq - 1))
        .collect();
    let mut found = Previous::new();
    if wanted.is_empty() {
        return found;
    }
    // The actors' previous changes are mostly among the added changes or their direct
    // dependencies (a client's own last change is one of its heads); the walk over every
    // change's metadata (no operations) is for the rest.
    let dependencies = added.iter().flat_map(|change| &change.deps);
    let near = dependencies.filter_map(|dep| no_panic(|| doc.get_change_meta_by_hash(dep)).ok()?);
    for change in added.iter().cloned().chain(near) {
        let key = (change.actor.into_owned(), change.seq);
        if wanted.contains(&key) {
            found.insert(key, change.hash);
        }
    }
    if found.len() < wanted.len() {
        for change in no_panic(|| doc.get_changes_meta(&[])).unwrap_or_default() {
            let key = (change.actor.into_owned(), change.seq);
            if wanted.contains(&key) {
                found.entry(key).or_insert(change.hash);
            }
        }
    }
    found
}

fn max_op_of(doc: &Automerge, hash: &ChangeHash) -> Option<u64> {
    no_panic(|| doc.get_change_meta_by_hash(hash).map(|meta| meta.max_op)).ok().flatten()
}

fn broken_rule(
    doc: &Automerge,
    change: &ChangeMetadata<'_>,
    previous: &Previous,
    document_max_op: u64,
) -> Option<Rule> {
    if change.seq > 1 {
        let Some(previous_hash) =
            previous.get(&(change.actor.clone().into_owned(), change.seq - 1))
        else {
            return Some(Rule::SequenceGap { seq: change.seq });
        };
        // The changes that are not ancestors of this one's dependencies: the previous change
        // of its actor must not be among them.
        let not_before = no_panic(|| doc.get_changes_meta(&change.deps)).unwrap_or_default();
        if not_before.iter().any(|other| other.hash == *previous_hash) {
            return Some(Rule::NotAfterActorsPreviousChange);
        }
    }
    let dependencies_max_op =
        change.deps.iter().filter_map(|dep| max_op_of(doc, dep)).max().unwrap_or(0);
    let start_op = change.start_op;
    let empty = change.max_op < start_op;
    if empty && start_op != dependencies_max_op + 1 {
        return Some(Rule::EmptyChangeSkipsCounters { start_op, dependencies_max_op });
    }
    if start_op <= dependencies_max_op {
        return Some(Rule::CountersNotAboveDependencies { start_op, dependencies_max_op });
    }
    if start_op > dependencies_max_op + 1 && start_op > document_max_op + 1 {
        return Some(Rule::CountersSkipAhead { start_op, document_max_op });
    }
    if change.max_op > u64::from(u32::MAX) {
        return Some(Rule::CountersOverflow { max_op: change.max_op });
    }
    None
}
