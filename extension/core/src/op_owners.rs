//! Which change of a save each operation belongs to, and the rule that every operation
//! belongs to exactly one, with no counter of a change left out.
//!
//! A save stores the operations (by object, key and id) apart from the changes (actor,
//! seq, last counter and dependencies of each); a load gives each change the counters
//! above its dependencies' and up to its own last, rebuilds the change from the
//! operations whose ids fall there (and the deletions that successor lists imply), and
//! checks the heads against the rebuilt changes' hashes. Automerge's load (0.12, native)
//! accepts saves where this partition fails, because the heads were computed from the
//! same mis-rebuilt changes:
//!
//! - an operation whose id lies in no change's counters stays in the document but in no
//!   change, so no peer that syncs the changes ever sees it;
//! - a change whose counters have a hole (or end before its last counter), or hold one
//!   id twice (a deletion implied by two successor lists), is closed up or kept twice
//!   when it has many operations, and refused when it has few. `@automerge/automerge`
//!   refuses both whatever the size;
//! - two changes of one actor that claim the same counters share the operations by a
//!   binary search.
//!
//! No Automerge library saves any of these. [`check`] refuses them: one pass over the
//! operation columns, run after the load accepted the save, with memory of 8 bytes per
//! operation.

use automerge::ActorId;

use crate::doc_changes::{self, DocChange, Owners};
use crate::doc_ops::{corrupt, DocumentChunk, DocumentOps};
use crate::Error;

/// Refuses the save `save` (a document chunk that Automerge's load accepted) unless every
/// operation and every deletion its successor lists imply belongs to exactly one change,
/// and each change's counters are filled from its first operation up to its last counter.
pub fn check(save: &[u8]) -> Result<(), Error> {
    let chunk = DocumentChunk::split(save)?;
    let changes = doc_changes::changes(&chunk)?;
    let owners = Owners::new(&changes, &chunk.actors)?;
    let ops = DocumentOps::read(save)?;
    let mut owned: Vec<(u32, u32)> = Vec::new();
    doc_changes::placed(&ops, |id| {
        let change = owners.of(id)?;
        let counter = u32::try_from(id.0).map_err(|_| corrupt("a counter past 32 bits"))?;
        owned.push((change, counter));
        Ok(())
    })?;
    owned.sort_unstable();
    let mut at = 0;
    for (index, change) in changes.iter().enumerate() {
        let index = index as u32;
        let end = at + owned[at..].partition_point(|(owner, _)| *owner == index);
        let ids = &owned[at..end];
        at = end;
        if change.start > change.max_op {
            continue;
        }
        let actor = &chunk.actors[change.actor];
        if ids.is_empty() {
            return Err(unfilled(actor, change, "none of its operations is in the save"));
        }
        for pair in ids.windows(2) {
            if pair[0].1 == pair[1].1 {
                return Err(unfilled(actor, change, &format!("operation {} twice", pair[0].1)));
            }
            if pair[1].1 != pair[0].1 + 1 {
                let hole = pair[0].1 + 1;
                return Err(unfilled(actor, change, &format!("no operation {hole}")));
            }
        }
        let last = ids[ids.len() - 1].1;
        if u64::from(last) != change.max_op {
            return Err(unfilled(actor, change, &format!("no operation after {last}")));
        }
    }
    Ok(())
}

fn unfilled(actor: &ActorId, change: &DocChange, what: &str) -> Error {
    Error::SaveNotItsChanges(format!(
        "the change of actor {actor} with counters {} to {} is not filled: {what}",
        change.start, change.max_op
    ))
}
