//! Properties of writes on random documents edited concurrently by three replicas that
//! sync now and then: merge is commutative, associative and idempotent; applying the
//! changes of one replica since the fork to another equals merging them; the JSON of a
//! merge is the JSON the automerge crate's own merge produces.

use automerge::{AutoCommit, AutoSerde, Automerge};
use pg_automerge_core::load::load_stored;
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::{format, json, writes};
use proptest::prelude::*;

mod support;
use support::{edits, replicas};

fn stored(doc: &mut AutoCommit) -> Vec<u8> {
    stored_from_client_bytes(&doc.save(), WriteSettings::UNLIMITED).unwrap()
}

/// What a stored value shows: heads and JSON.
fn state(stored: &[u8]) -> (Vec<automerge::ChangeHash>, serde_json::Value) {
    let heads = format::decode(stored).unwrap().summary.heads;
    (heads, json::document(&load_stored(&format::decode(stored).unwrap()).unwrap(), None).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn merge_is_commutative(edits in edits()) {
        let ([mut a, mut b, _], _) = replicas(&edits);
        let (a, b) = (stored(&mut a), stored(&mut b));
        let merge = |x: &[u8], y: &[u8]| writes::merge(x, y, WriteSettings::UNLIMITED).unwrap();
        prop_assert_eq!(state(&merge(&a, &b)), state(&merge(&b, &a)));
    }

    #[test]
    fn merge_is_associative(edits in edits()) {
        let ([mut a, mut b, mut c], _) = replicas(&edits);
        let (a, b, c) = (stored(&mut a), stored(&mut b), stored(&mut c));
        let merge = |x: &[u8], y: &[u8]| writes::merge(x, y, WriteSettings::UNLIMITED).unwrap();
        let left = merge(&merge(&a, &b), &c);
        let right = merge(&a, &merge(&b, &c));
        prop_assert_eq!(state(&left), state(&right));
    }

    #[test]
    fn merge_is_idempotent(edits in edits()) {
        let ([mut a, mut b, _], _) = replicas(&edits);
        let (a, b) = (stored(&mut a), stored(&mut b));
        prop_assert_eq!(writes::merge(&a, &a, WriteSettings::UNLIMITED).unwrap(), a.clone());
        let ab = writes::merge(&a, &b, WriteSettings::UNLIMITED).unwrap();
        prop_assert_eq!(state(&writes::merge(&ab, &b, WriteSettings::UNLIMITED).unwrap()), state(&ab));
        prop_assert_eq!(state(&writes::merge(&a, &ab, WriteSettings::UNLIMITED).unwrap()), state(&ab));
    }

    #[test]
    fn applying_changes_since_the_fork_equals_merging(edits in edits()) {
        let ([mut a, mut b, _], base) = replicas(&edits);
        let changes_of_b = b.save_after(&base);
        let (a, b) = (stored(&mut a), stored(&mut b));
        let applied = writes::apply(&a, &changes_of_b, WriteSettings::UNLIMITED).unwrap();
        prop_assert_eq!(state(&applied), state(&writes::merge(&a, &b, WriteSettings::UNLIMITED).unwrap()));
    }

    #[test]
    fn json_of_a_merge_is_the_crates_own(edits in edits()) {
        let ([mut a, mut b, _], _) = replicas(&edits);
        let mut crate_merge: Automerge = a.document().clone();
        crate_merge.merge(&mut b.document().clone()).unwrap();
        let expected = serde_json::to_value(AutoSerde::from(&crate_merge)).unwrap();
        let ours = writes::merge(&stored(&mut a), &stored(&mut b), WriteSettings::UNLIMITED).unwrap();
        prop_assert_eq!(state(&ours).1, expected);
        prop_assert_eq!(state(&ours).0, crate_merge.get_heads());
    }

    #[test]
    fn stored_values_round_trip(edits in edits()) {
        let ([mut a, _, _], _) = replicas(&edits);
        let saved = a.save();
        let stored = stored_from_client_bytes(&saved, WriteSettings::UNLIMITED).unwrap();
        prop_assert_eq!(pg_automerge_core::format::client_bytes(&stored).unwrap(), &saved[..]);
        prop_assert_eq!(state(&stored).0, a.get_heads());
    }
}
