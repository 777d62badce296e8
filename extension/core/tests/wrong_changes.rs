//! Issue 14, "every stored value loads": structurally valid but wrong changes
//! (`fixtures::wrong_changes`) written through every entry point, alone and between
//! honest JS-shaped edits of a few replicas. Every write must be refused as invalid binary
//! (22P03), the stored value staying as it was, or accepted with the invariant holding
//! (`support::check_loads`). A sample of the accepted payloads is written to
//! `target/accepted-samples/` for `examples/node-client/load-samples.mjs` to load with
//! `@automerge/automerge`.

mod support;

use automerge::legacy::{Key, OpId, SortedVec};
use automerge::transaction::Transactable;
use automerge::Automerge;
use automerge::{ActorId, AutoCommit, Change, ExpandedChange, ROOT};
use fixtures::wrong_changes::{
    altered_change, client_document, honest_edit, wrong_change, Choices, Wrong,
};
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::ErrorKind;
use proptest::prelude::*;
use support::{assert_loads, checked_write, honest_and_wrong_writes, sample, Entry, FAST};

/// `incoming` through every entry point: what broke, one line each.
fn through_every_entry(what: &str, server: &[u8], incoming: &[u8]) -> Vec<String> {
    Entry::ALL
        .iter()
        .filter_map(|&entry| checked_write(what, entry, server, incoming).err())
        .collect()
}

#[track_caller]
fn assert_none_broke(broken: Vec<String>) {
    if !broken.is_empty() {
        panic!("{} write(s) broke the invariant:\n{}", broken.len(), broken.join("\n"));
    }
}

/// One kind, crafted on the client document a server holds, through every entry point.
fn kind_through_every_entry(kind: Wrong) {
    let mut doc = client_document(1);
    let server = stored_from_client_bytes(&doc.save(), FAST).unwrap();
    assert_loads(&server);
    let bytes = wrong_change(&mut doc, kind, &mut Choices::new(&[]))
        .unwrap_or_else(|| panic!("{kind:?} is made from the client document"));
    let mut broken = Vec::new();
    let mut samples = 0;
    for entry in Entry::ALL {
        match checked_write(&format!("{kind:?}"), entry, &server, &bytes) {
            Ok(Some(written)) => sample(&format!("{kind:?}"), &written, 1, &mut samples),
            Ok(None) => {}
            Err(err) => broken.push(err),
        }
    }
    assert_none_broke(broken);
}

macro_rules! kind_tests {
    ($($name:ident: $kind:ident,)*) => {$(
        #[test]
        fn $name() {
            kind_through_every_entry(Wrong::$kind);
        }
    )*};
}

kind_tests! {
    reused_op_id: ReusedOpId,
    counters_below_deps: CountersBelowDeps,
    counter_at_max_op_of_other_actor: CounterAtMaxOpOfOtherActor,
    pred_on_another_key: PredOnAnotherKey,
    pred_unknown_counter: PredUnknownCounter,
    skips_previous_change: SkipsPreviousChange,
    skips_previous_change_deflated: SkipsPreviousChangeDeflated,
    unknown_column: UnknownColumn,
    unused_actor: UnusedActor,
    delete_absent_key: DeleteAbsentKey,
    empty_skips_counters: EmptySkipsCounters,
    max_start_op_one_op: MaxStartOpOneOp,
    max_start_op_two_ops: MaxStartOpTwoOps,
    duplicate_seq: DuplicateSeq,
    text_insert_after_missing_element: TextInsertAfterMissingElement,
    text_delete_empty_pred: TextDeleteEmptyPred,
    text_delete_other_element_pred: TextDeleteOtherElementPred,
    nested_put_pred_on_other_object: NestedPutPredOnOtherObject,
    list_insert_counters_below_deps: ListInsertCountersBelowDeps,
    mark_end_without_begin: MarkEndWithoutBegin,
    mark_end_before_begin: MarkEndBeforeBegin,
    mark_end_at_head: MarkEndAtHead,
    mark_on_map: MarkOnMap,
    mark_on_list: MarkOnList,
}

#[test]
fn every_kind_has_a_test() {
    // The macro above lists each kind once; a new kind must be added there.
    assert_eq!(Wrong::ALL.len(), 24);
}

/// The client document after `edits` honest edits, what a server holds of it, and a change
/// of `kind` crafted on it.
fn held_and_crafted(kind: Wrong, edits: u32) -> (AutoCommit, Vec<u8>, Vec<u8>) {
    let mut doc = client_document(1);
    for round in 0..edits {
        honest_edit(&mut doc, &mut Choices::new(&round.to_le_bytes()));
    }
    let server = stored_from_client_bytes(&doc.save(), FAST).unwrap();
    let bytes = wrong_change(&mut doc, kind, &mut Choices::new(&[1, 2, 3]))
        .unwrap_or_else(|| panic!("{kind:?} is made"));
    (doc, server, bytes)
}

/// `bytes` refused through every entry point as invalid binary, the DETAIL naming `rule`.
#[track_caller]
fn refused_everywhere_naming(kind: Wrong, server: &[u8], bytes: &[u8], rule: &str) {
    for entry in Entry::ALL {
        let err = support::write(entry, server, bytes)
            .map(|_| ())
            .expect_err(&format!("{kind:?} via {entry:?} was accepted"));
        assert_eq!(err.kind(), ErrorKind::InvalidBinary, "{kind:?} via {entry:?}: {err}");
        let detail = err.detail().unwrap_or_default();
        assert!(
            detail.contains(rule),
            "{kind:?} via {entry:?}: the DETAIL names another rule: {detail}"
        );
    }
}

/// Issue 35: each mark kind is refused through every entry point, as invalid binary with
/// its rule named in the DETAIL (the mark order; for a mark on a map, marks belong to
/// texts), on a document made by the crate as the JS client makes it and on one after a
/// few honest edits; and Automerge itself applies each (so only our check stands between
/// it and a value whose next save does not load).
#[test]
fn mark_kinds_are_refused_through_every_entry_point_naming_the_mark_order() {
    for kind in Wrong::MARKS {
        for edits in [0u32, 5] {
            let (mut doc, server, bytes) = held_and_crafted(kind, edits);
            // In a debug build the crate's own op-order assertion may stop the apply.
            let before = doc.save();
            let saved_after_apply = std::panic::catch_unwind(|| {
                let mut applied = Automerge::load(&before).unwrap();
                applied.load_incremental(&bytes).unwrap();
                applied.save()
            });
            if let Ok(saved) = saved_after_apply {
                assert!(Automerge::load(&saved).is_err(), "{kind:?}: its save loads");
            } else {
                eprintln!("{kind:?}: the crate's debug assertions stop its apply");
            }
            let rule = match kind {
                Wrong::MarkOnMap => "a mark that is not inserted into a text",
                _ => "breaks the mark order of a save",
            };
            refused_everywhere_naming(kind, &server, &bytes, rule);
        }
    }
}

/// A mark inserted into a list, which no client's `mark` makes: the crate applies it, and
/// every entry point refuses it as invalid binary naming the rule (marks belong to texts),
/// on the client document and on one after a few honest edits.
#[test]
fn a_mark_in_a_list_is_refused_through_every_entry_point() {
    for edits in [0u32, 5] {
        let (mut doc, server, bytes) = held_and_crafted(Wrong::MarkOnList, edits);
        let mut applied = Automerge::load(&doc.save()).unwrap();
        applied.load_incremental(&bytes).expect("the crate applies a mark in a list");
        let rule = "a mark that is not inserted into a text";
        refused_everywhere_naming(Wrong::MarkOnList, &server, &bytes, rule);
    }
}

// The five cases adversarial.rs once skipped as known failures, through every entry point.

fn actor(n: u8) -> ActorId {
    ActorId::from([n; 16])
}

fn last_change(doc: &mut AutoCommit) -> Change {
    doc.commit();
    let head = doc.get_heads()[0];
    doc.get_change_by_hash(&head).unwrap().clone()
}

fn craft(change: &Change, edit: impl FnOnce(&mut ExpandedChange)) -> Change {
    let mut expanded = change.decode();
    expanded.hash = None;
    edit(&mut expanded);
    Change::from(expanded)
}

/// As adversarial.rs's `stored_then_put`.
fn stored_then_put(key: &str, value: i64) -> (AutoCommit, Vec<u8>, Change) {
    let mut doc = AutoCommit::new().with_actor(actor(1));
    doc.put(ROOT, "a", 1_i64).unwrap();
    let stored = stored_from_client_bytes(&doc.save(), FAST).unwrap();
    doc.put(ROOT, key, value).unwrap();
    let change = last_change(&mut doc);
    (doc, stored, change)
}

#[test]
fn adversarial_put_whose_predecessor_does_not_exist() {
    let (_, stored, change) = stored_then_put("a", 2);
    let mut broken = Vec::new();
    for pred in [OpId::new(1, &actor(5)), OpId::new(5, &actor(1))] {
        let crafted =
            craft(&change, |c| c.operations[0].pred = SortedVec::from(vec![pred.clone()]));
        broken.extend(through_every_entry(&format!("pred {pred:?}"), &stored, crafted.raw_bytes()));
    }
    assert_none_broke(broken);
}

#[test]
fn adversarial_put_whose_predecessor_is_on_another_key() {
    let (_, stored, change) = stored_then_put("a", 2);
    let crafted = craft(&change, |c| c.operations[0].key = Key::Map("b".into()));
    assert_none_broke(through_every_entry("pred on another key", &stored, crafted.raw_bytes()));
}

#[test]
fn adversarial_change_that_reuses_an_operation_id() {
    let (_, stored, change) = stored_then_put("b", 2);
    let crafted = craft(&change, |c| c.start_op = 1.try_into().unwrap());
    assert_none_broke(through_every_entry("op id reused", &stored, crafted.raw_bytes()));
}

#[test]
fn adversarial_change_with_counters_below_its_dependencies() {
    let (mut doc, stored, change) = stored_then_put("b", 2);
    let mut other = AutoCommit::new().with_actor(actor(2));
    other.put(ROOT, "b", 1_i64).unwrap();
    let low = craft(&last_change(&mut other), |c| c.deps = doc.get_heads());
    let bytes = [change.raw_bytes(), low.raw_bytes()].concat();
    assert_none_broke(through_every_entry("counters below the deps'", &stored, &bytes));
}

#[test]
fn adversarial_change_that_skips_its_actors_previous_change() {
    let mut doc = AutoCommit::new().with_actor(actor(9));
    doc.put(ROOT, "base", 1_i64).unwrap();
    let mut a = doc.fork().with_actor(actor(1));
    a.put(ROOT, "a", 1_i64).unwrap();
    a.commit();
    let stored = stored_from_client_bytes(&a.save(), FAST).unwrap();
    a.put(ROOT, "a", 2_i64).unwrap();
    let a2 = craft(&last_change(&mut a), |c| c.deps = doc.get_heads());
    assert_none_broke(through_every_entry("skips its previous change", &stored, a2.raw_bytes()));
}

// The property: replicas edit honestly, wrong changes come in between.

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        // Today most runs fail; a long shrink would not say more than the first failure.
        max_shrink_iters: 16,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn honest_and_wrong_writes_through_every_entry_point_keep_every_value_loadable(
        input in proptest::collection::vec(any::<u8>(), 16..160)
    ) {
        let mut samples = 0;
        if let Err(broken) = honest_and_wrong_writes(&input, |written| sample("run", written, 3, &mut samples)) {
            prop_assert!(false, "{}", broken);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Issue 35's random mode: an honest JS-shaped change with one field altered, through
    /// an entry point the input picks, on a client document after a few honest edits: every
    /// write is refused as invalid binary, or leaves a value whose save loads.
    #[test]
    fn altered_honest_changes_leave_every_value_loadable(
        input in proptest::collection::vec(any::<u8>(), 8..64)
    ) {
        let mut choices = Choices::new(&input);
        let mut doc = client_document(1);
        for _ in 0..choices.below(4) {
            honest_edit(&mut doc, &mut choices);
        }
        let server = stored_from_client_bytes(&doc.save(), FAST).unwrap();
        let entry = Entry::ALL[choices.below(Entry::ALL.len())];
        if let Some(bytes) = altered_change(&mut doc, &mut choices) {
            match checked_write("altered change", entry, &server, &bytes) {
                Err(broken) => prop_assert!(false, "{}", broken),
                Ok(Some(written)) => sample("altered", &written, 1, &mut 0),
                Ok(None) => {}
            }
        }
    }
}

/// A run the property once failed on: the automerge crate's own debug assertion tripped
/// while the run crafted a wrong change on what the server held (an insert into a text
/// with concurrent marks), not in our writes. The run goes on past the step; while the
/// crate has the bug, a debug build records the step as skipped.
#[test]
fn a_step_the_crate_panics_making_is_skipped_and_the_run_goes_on() {
    let input = [
        34, 148, 223, 91, 11, 233, 231, 165, 161, 215, 247, 33, 187, 151, 123, 129, 180, 201, 21,
        121, 168, 14, 175, 177, 114, 87, 71, 83, 51, 43, 28, 194, 171, 41, 128, 40, 81, 173, 2, 28,
        106, 147, 32, 34, 222, 7, 19, 24, 94, 15, 209, 55, 242, 82, 95, 113, 55, 72, 91, 45, 131,
        82, 76, 119, 217, 166, 5, 214, 207, 17, 235, 209, 197, 239, 168, 82, 55, 24, 250, 186, 38,
        167, 207, 100, 234,
    ];
    let outcomes =
        honest_and_wrong_writes(&input, |_| {}).unwrap_or_else(|broken| panic!("{broken}"));
    if cfg!(debug_assertions) {
        assert!(
            outcomes.iter().any(|outcome| outcome.starts_with("skipped")),
            "the crate no longer panics on this run: {outcomes:?}"
        );
    }
}

/// Honest edits alone, through every entry point: all accepted, all loadable; and the
/// samples the Node.js check loads, written even while wrong changes still break values.
#[test]
fn honest_writes_alone_are_accepted_and_load() {
    let mut base = client_document(9);
    let mut server = stored_from_client_bytes(&base.save(), FAST).unwrap();
    let mut replica = base.fork().with_actor(actor(1));
    let mut samples = 0;
    for round in 0..21u32 {
        let bytes = round.wrapping_mul(2_654_435_761).to_le_bytes();
        honest_edit(&mut replica, &mut Choices::new(&bytes));
        let heads = pg_automerge_core::format::decode(&server).unwrap().summary.heads;
        let incoming = replica.save_after(&heads);
        if incoming.is_empty() {
            continue;
        }
        let entry = Entry::ALL[round as usize % Entry::ALL.len()];
        let written = checked_write(&format!("round {round}"), entry, &server, &incoming)
            .unwrap_or_else(|broken| panic!("{broken}"))
            .unwrap_or_else(|| panic!("round {round}: an honest write via {entry:?} was refused"));
        sample("honest", &written, 1, &mut samples);
        server = written;
    }
    assert_eq!(
        pg_automerge_core::format::decode(&server).unwrap().summary.heads,
        replica.get_heads()
    );
}
