//! The mark rule of Automerge's document loader (automerge 0.12, `MarkOrderValidator` in
//! `op_set2/op_set/index.rs`): reading a save's operations in document order, each mark end
//! (a mark operation without a name, whose begin is the operation one counter before it,
//! of its actor) must come after its begin, in the same object. The loader checks it only
//! for a document chunk: changes applied to a loaded document, or appended after a save,
//! are taken without it, so a change whose marks break it sits in a document (and loads
//! as a save with the change appended) until the next save, which no load accepts.
//!
//! This reads the rule off a save's columns ([`doc_ops`]) without a load: the action
//! column first (a save with no mark operation is done there), then the rows in order.

use std::collections::HashMap;

use automerge::ActorId;

use crate::doc_ops::{action, corrupt, DocumentOps, RawOpId};
use crate::rules::Misplaced;
use crate::Error;

/// A mark end that the loader refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MisplacedMarkEnd {
    /// The mark end's operation counter and actor.
    pub counter: u64,
    pub actor: ActorId,
    /// Its row: how many operations come before it in the save.
    pub row: usize,
    pub cause: Misplaced,
}

/// The first mark end of the save `save` that Automerge's loader refuses, if any.
pub fn misplaced_mark_end(save: &[u8]) -> Result<Option<MisplacedMarkEnd>, Error> {
    let ops = DocumentOps::read(save)?;
    if !ops.has_action(action::MARK)? {
        return Ok(None);
    }
    // Each mark begin seen so far, with its object (`None`: the root map).
    let mut begins: HashMap<RawOpId, Option<RawOpId>> = HashMap::new();
    for (row, op) in ops.iter().enumerate() {
        let op = op?;
        if op.action != action::MARK {
            continue;
        }
        if op.mark_name.is_some() {
            begins.insert(op.id, op.obj);
            continue;
        }
        let begin = op.id.0.checked_sub(1).map(|counter| (counter, op.id.1));
        let cause = match begin.and_then(|begin| begins.get(&begin)) {
            Some(obj) if *obj == op.obj => continue,
            Some(_) => Misplaced::BeginInOtherObject,
            None => Misplaced::BeginNotBefore,
        };
        let (counter, actor) = op.id;
        let actor = ops.actors.get(actor).cloned().ok_or_else(|| corrupt("no such actor"))?;
        return Ok(Some(MisplacedMarkEnd { counter, actor, row, cause }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::marks::{ExpandMark, Mark};
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, Automerge, ObjType, ReadDoc, ROOT};

    fn text_with_a_mark() -> AutoCommit {
        let mut doc = AutoCommit::new();
        let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
        doc.splice_text(&text, 0, 0, "hello world").unwrap();
        doc.mark(&text, Mark::new("bold".into(), true, 0, 5), ExpandMark::After).unwrap();
        doc.mark(&text, Mark::new("link".into(), "x", 6, 11), ExpandMark::None).unwrap();
        doc
    }

    #[test]
    fn honest_marks_and_saves_without_marks_pass() {
        assert_eq!(misplaced_mark_end(&text_with_a_mark().save()).unwrap(), None);
        let mut plain = AutoCommit::new();
        plain.put(ROOT, "a", 1_i64).unwrap();
        assert_eq!(misplaced_mark_end(&plain.save()).unwrap(), None);
        assert_eq!(misplaced_mark_end(&AutoCommit::new().save()).unwrap(), None);
    }

    /// A mark whose end the crate's own API places before its begin (an empty range: both
    /// boundaries after the same element, the end's later id first) is what the loader
    /// refuses; the pass finds it where the load fails, and only there.
    #[test]
    fn agrees_with_the_loader_on_an_empty_mark() {
        let mut doc = text_with_a_mark();
        let text = doc.get(ROOT, "text").unwrap().unwrap().1;
        let _ = doc.mark(&text, Mark::new("em".into(), true, 3, 3), ExpandMark::None);
        let save = doc.save();
        let found = misplaced_mark_end(&save).unwrap();
        assert_eq!(found.is_some(), Automerge::load(&save).is_err(), "{found:?}");
    }

    #[test]
    fn refuses_what_is_not_a_save() {
        assert!(misplaced_mark_end(b"junk").is_err());
    }
}
