//! The last document that client input loaded, kept until the end of the transaction for
//! the write that usually follows: an upsert of a full save checks the save (a load) and
//! then merges it into the stored document, which would otherwise load it a second time.
//! It is Rust heap like any loaded document, so `automerge_memory_usage()` counts it, and
//! only a document that kept at most the budget's bytes after its load is held.

use std::cell::RefCell;

use automerge::{Automerge, ChangeHash};

struct Entry {
    heads: Vec<ChangeHash>,
    doc: Automerge,
}

thread_local! {
    static LAST_LOADED: RefCell<Option<Entry>> = const { RefCell::new(None) };
}

/// Holds `doc`, whose heads are `heads`, if it keeps at most `budget` bytes; either way
/// drops what was held before.
pub fn keep(heads: Vec<ChangeHash>, doc: Automerge, kept_bytes: u64, budget: u64) {
    let entry = (kept_bytes <= budget).then_some(Entry { heads, doc });
    LAST_LOADED.with(|slot| *slot.borrow_mut() = entry);
}

/// The held document if its heads are `heads` (the same document), handed over.
pub fn take(heads: &[ChangeHash]) -> Option<Automerge> {
    LAST_LOADED.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.as_ref() {
            Some(entry) if entry.heads == heads => slot.take().map(|entry| entry.doc),
            _ => None,
        }
    })
}

/// Drops the held document (at the end of each transaction).
pub fn clear() {
    LAST_LOADED.with(|slot| *slot.borrow_mut() = None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ROOT};

    #[test]
    fn hands_over_the_same_document_once_and_within_budget() {
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "a", 1_i64).unwrap();
        let heads = doc.get_heads();
        keep(heads.clone(), doc.document().clone(), 100, 1000);
        assert!(take(&[]).is_none(), "other heads");
        assert_eq!(take(&heads).unwrap().get_heads(), heads);
        assert!(take(&heads).is_none(), "handed over once");
        keep(heads.clone(), doc.document().clone(), 2000, 1000);
        assert!(take(&heads).is_none(), "over the budget");
        keep(heads.clone(), doc.document().clone(), 100, 1000);
        clear();
        assert!(take(&heads).is_none());
    }
}
