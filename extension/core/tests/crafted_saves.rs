//! Saves whose operations are not those of their changes (`fixtures::crafted_saves`): the
//! automerge crate loads each, and every entry point refuses it or stores what holds the
//! invariant; a full save of one is refused as such. Each is written to
//! `target/crafted-saves/` for `examples/node-client/crafted-saves.mjs`, which checks that
//! `@automerge/automerge` refuses it or shows a document its changes do not make.

mod support;

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

use automerge::{ActorId, Automerge, Change};
use fixtures::crafted_saves::{crafted_save, honest_save, mutated, Crafted, Mutation};
use fixtures::wrong_changes::{client_document, honest_edit, Choices};
use pg_automerge_core::doc_ops::{DocumentOps, RawOpId};
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::{op_owners, Error};
use proptest::prelude::*;
use support::{assert_loads, checked_write, Entry, FAST};

#[test]
fn the_honest_save_they_start_from_is_accepted() {
    let save = honest_save();
    op_owners::check(&save).unwrap();
    assert_loads(&stored_from_client_bytes(&save, FAST).unwrap());
}

#[test]
fn the_crate_loads_every_crafted_save_and_a_full_save_of_one_is_refused() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/crafted-saves");
    std::fs::create_dir_all(&dir).unwrap();
    for kind in Crafted::ALL {
        let save = crafted_save(kind);
        if let Err(err) = Automerge::load(&save) {
            panic!("{kind:?}: the crate refuses it ({err}), no rule of ours needed");
        }
        std::fs::write(dir.join(format!("{}.automerge", kind.name())), &save).unwrap();
        match stored_from_client_bytes(&save, FAST) {
            Err(Error::SaveNotItsChanges(why)) => println!("{kind:?}: {why}"),
            other => panic!("{kind:?}: a full save was not refused as not its changes: {other:?}"),
        }
    }
}

#[test]
fn every_entry_point_refuses_a_crafted_save_or_keeps_the_invariant() {
    let server = stored_from_client_bytes(&honest_save(), FAST).unwrap();
    let empty = stored_from_client_bytes(&[], FAST).unwrap();
    for kind in Crafted::ALL {
        let save = crafted_save(kind);
        for stored in [&server, &empty] {
            for entry in Entry::ALL {
                checked_write(kind.name(), entry, stored, &save).unwrap();
            }
        }
    }
}

/// Whether `loaded` is what its changes make: the crate rebuilds each change without a
/// hole in its counters (nor trips its own check of two rebuilds), and applying them all
/// to an empty document gives the same heads and the same operations, hidden ones too.
/// (Not necessarily the same successors: a save may list a successor that is not causally
/// after its operation, which the crate's load does not check and no partition shows.)
fn is_its_changes(loaded: &Automerge) -> bool {
    let Ok(changes) = catch_unwind(AssertUnwindSafe(|| loaded.get_changes(&[]))) else {
        return false;
    };
    let filled = |c: &Change| c.len() as u64 == (c.max_op() + 1).saturating_sub(c.start_op().get());
    if !changes.iter().all(filled) {
        return false;
    }
    let mut replayed = Automerge::new();
    let applied = catch_unwind(AssertUnwindSafe(|| replayed.apply_changes(changes).is_ok()));
    applied.unwrap_or(false)
        && replayed.get_heads() == loaded.get_heads()
        && operations(&replayed.save()) == operations(&loaded.save())
}

/// The ids of a save's operations and of the deletions its successor lists name, with
/// actors' ids in place of their indexes (which two saves of one document may number
/// differently).
fn operations(save: &[u8]) -> BTreeSet<String> {
    let ops = DocumentOps::read(save).unwrap();
    let id = |(counter, actor): RawOpId| format!("{counter}@{}", ops.actors[actor]);
    let mut ids = BTreeSet::new();
    for op in ops.iter() {
        let op = op.unwrap();
        ids.insert(id(op.id));
        ids.extend(op.succ.iter().map(|succ| id(*succ)));
    }
    ids
}

/// Two clients' honest edits, merged, saved.
fn honest_two_client_save(bytes: &[u8]) -> Vec<u8> {
    let mut choices = Choices::new(bytes);
    let mut a = client_document(1);
    let mut b = a.fork().with_actor(ActorId::from([2; 16]));
    while !choices.is_exhausted() {
        let doc = if choices.one_in(2) { &mut a } else { &mut b };
        let _ = honest_edit(doc, &mut choices);
        if choices.one_in(4) {
            a.merge(&mut b).unwrap();
        }
    }
    a.merge(&mut b).unwrap();
    a.save()
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), -3..=3i64).prop_map(|(change, by)| Mutation::MaxOp { change, by }),
        any::<usize>().prop_map(|change| Mutation::NoDeps { change }),
        any::<usize>().prop_map(|nth| Mutation::DropSuccs { nth }),
        (any::<usize>(), any::<usize>()).prop_map(|(from, to)| Mutation::CopySuccs { from, to }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Differential against the crate's own rebuild: of the mutated saves that the crate
    /// loads, `op_owners` refuses exactly those that are not what their changes make, and
    /// accepts every honest one.
    #[test]
    fn op_owners_refuses_exactly_the_saves_that_are_not_their_changes(
        bytes in proptest::collection::vec(any::<u8>(), 0..48),
        mutation in mutation(),
    ) {
        let honest = honest_two_client_save(&bytes);
        prop_assert!(op_owners::check(&honest).is_ok());
        let Some(save) = mutated(&honest, mutation) else { return Ok(()) };
        let Ok(Ok(loaded)) = catch_unwind(|| Automerge::load(&save)) else { return Ok(()) };
        let verdict = op_owners::check(&save);
        prop_assert_eq!(verdict.is_ok(), is_its_changes(&loaded), "{:?}: {:?}", mutation, verdict);
    }
}
