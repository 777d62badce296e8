//! The structure indexes of the documents this backend last wrote without a load, held
//! across statements and transactions. A client typing sends one change after another to
//! the same row, and each appending write would otherwise decode the stored index and
//! replay the changes appended since it was encoded: on the JS client's documents, most of
//! what the write computes.
//!
//! An index is held under the heads of the document it indexes, which name that document's
//! state: it is right for any stored value with those heads, whatever row or transaction
//! holds it. One that a rolled-back write left is never asked for, and ages out. Held
//! indexes are Rust heap, so `automerge_memory_usage()` counts them; the least recently
//! written go first once they pass the budget (`pg_automerge.index_cache`).

use std::cell::RefCell;
use std::collections::VecDeque;

use automerge::ChangeHash;

use crate::structure::Structure;

struct Entry {
    heads: Vec<ChangeHash>,
    index: Structure,
    heap_bytes: u64,
}

thread_local! {
    /// The most recently written first.
    static HELD: RefCell<VecDeque<Entry>> = const { RefCell::new(VecDeque::new()) };
}

/// Holds `index`, of the document whose heads are `heads`, within `budget` bytes in all:
/// those written least recently are dropped to make room, and an index larger than the
/// budget is not held. `heap_bytes` is the index's [`Structure::heap_bytes`] where the
/// caller knows it (as [`take`] handed it over, or as [`Structure::apply`] kept it since).
pub fn keep(heads: Vec<ChangeHash>, index: Structure, heap_bytes: Option<u64>, budget: u64) {
    let heap_bytes = heap_bytes.unwrap_or_else(|| index.heap_bytes());
    let bytes = held_bytes(&heads, heap_bytes);
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        held.retain(|entry| entry.heads != heads);
        if bytes > budget {
            return;
        }
        held.push_front(Entry { heads, index, heap_bytes });
    });
    fit(budget);
}

/// What holding an index of `heap_bytes` under `heads` takes from the heap.
fn held_bytes(heads: &Vec<ChangeHash>, heap_bytes: u64) -> u64 {
    heap_bytes + (heads.capacity() * std::mem::size_of::<ChangeHash>()) as u64
}

/// The held index of the document whose heads are `heads`, handed over with its
/// [`Structure::heap_bytes`]: the write changes it and holds it again under the heads it
/// makes.
pub fn take(heads: &[ChangeHash]) -> Option<(Structure, u64)> {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        let at = held.iter().position(|entry| entry.heads == heads)?;
        held.remove(at).map(|entry| (entry.index, entry.heap_bytes))
    })
}

/// Drops the least recently written indexes until those held fit `budget` (at the end of
/// each transaction, so that a lowered setting takes effect without a write).
pub fn fit(budget: u64) {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        let mut total = 0;
        held.retain(|entry| {
            total += held_bytes(&entry.heads, entry.heap_bytes);
            total <= budget
        });
        if held.is_empty() {
            // Its buffer too: between statements the Rust heap is back to its baseline.
            *held = VecDeque::new();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heads(byte: u8) -> Vec<ChangeHash> {
        vec![ChangeHash([byte; 32])]
    }

    fn index_of(keys: usize) -> Structure {
        let root = (0..keys).map(|key| (format!("k{key}"), Vec::new())).collect();
        Structure::of_root_table(&root)
    }

    #[test]
    fn hands_over_an_index_once_by_its_heads() {
        keep(heads(1), index_of(1), None, u64::MAX);
        assert!(take(&heads(2)).is_none(), "other heads");
        assert_eq!(take(&heads(1)), Some((index_of(1), index_of(1).heap_bytes())));
        assert!(take(&heads(1)).is_none(), "handed over once");
    }

    #[test]
    fn drops_the_least_recently_written_past_the_budget() {
        let bytes = held_bytes(&heads(1), index_of(100).heap_bytes());
        keep(heads(1), index_of(100), None, 2 * bytes);
        keep(heads(2), index_of(100), None, 2 * bytes);
        keep(heads(3), index_of(100), None, 2 * bytes);
        assert!(take(&heads(1)).is_none(), "dropped for the third");
        assert!(take(&heads(2)).is_some() && take(&heads(3)).is_some());
        keep(heads(4), index_of(100), None, bytes - 1);
        assert!(take(&heads(4)).is_none(), "larger than the budget");
        keep(heads(5), index_of(100), None, 0);
        assert!(take(&heads(5)).is_none(), "a budget of 0 holds none");
    }
}
