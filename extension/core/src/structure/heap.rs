//! What an index holds on the heap, as the counting allocator counts it: what a held index
//! costs (see [`index_cache`](crate::index_cache)). An index of a long rich text has tens of
//! thousands of objects, and a walk over them all is a sixth of an edit's time, so a write
//! that holds the index it grew counts again only the objects its changes touch
//! ([`Structure::apply`]).

use std::mem::size_of;
use std::rc::Rc;

use rustc_hash::FxHashSet;

use super::{Body, ElemState, KeyName, Object, OpId, ParentKey, Run, Structure, ValueOp, Values};

impl Structure {
    /// The bytes of heap the index holds. A key string shared by several maps is counted
    /// once, a share at each use.
    pub fn heap_bytes(&self) -> u64 {
        let objects: usize = self.objects.values().map(object_heap_bytes).sum();
        (self.table_heap_bytes() + objects) as u64
    }

    /// The heap of the object table and the actors' tables, without the objects' own.
    pub(super) fn table_heap_bytes(&self) -> usize {
        // hashbrown allocates a power-of-two number of buckets, of which `capacity` is 7/8
        // (all but one below 8), each with a control byte, and a group of control bytes more.
        let buckets = match self.objects.capacity() {
            0 => 0,
            capacity if capacity < 8 => capacity + 1,
            capacity => capacity / 7 * 8,
        };
        let objects = match buckets {
            0 => 0,
            _ => (buckets * size_of::<(OpId, Object)>()).next_multiple_of(16) + buckets + 16,
        };
        let actors = self.actors.capacity() * size_of::<automerge::ActorId>()
            + self.latest_max_op.capacity() * size_of::<Option<u64>>();
        objects + actors
    }

    /// The heap of the objects `ids` names that the index has.
    pub(super) fn objects_heap_bytes(&self, ids: &FxHashSet<OpId>) -> usize {
        ids.iter().filter_map(|id| self.objects.get(id)).map(object_heap_bytes).sum()
    }
}

/// What one object's parent key and body hold.
fn object_heap_bytes(object: &Object) -> usize {
    let parent = match &object.parent {
        Some((_, ParentKey::Map(name))) => key_share(name),
        _ => 0,
    };
    let body = match &object.body {
        Body::Map(keys) => {
            keys.0.capacity() * size_of::<(KeyName, Values)>()
                + keys
                    .0
                    .iter()
                    .map(|(name, values)| key_share(name) + spilled(values))
                    .sum::<usize>()
        }
        Body::Seq(runs) => {
            runs.capacity() * size_of::<Run>()
                + runs
                    .iter()
                    .map(|run| match &run.state {
                        ElemState::Values { values, .. } => size_of::<Values>() + spilled(values),
                        _ => 0,
                    })
                    .sum::<usize>()
        }
        Body::Opaque => 0,
    };
    parent + body
}

/// A use's share of a key string: an `Rc<str>` allocates its two counts and the string,
/// padded to the counts' alignment.
fn key_share(name: &KeyName) -> usize {
    let allocation = (2 * size_of::<usize>() + name.len()).next_multiple_of(size_of::<usize>());
    allocation.div_ceil(Rc::strong_count(name))
}

/// What operations that do not fit inline take.
fn spilled(values: &Values) -> usize {
    match values.spilled() {
        true => values.capacity() * size_of::<ValueOp>(),
        false => 0,
    }
}
