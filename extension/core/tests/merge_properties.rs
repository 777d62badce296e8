//! Properties of writes on random documents edited concurrently by three replicas that
//! sync now and then: merge is commutative, associative and idempotent; applying the
//! changes of one replica since the fork to another equals merging them; the JSON of a
//! merge is the JSON the automerge crate's own merge produces.

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, AutoSerde, Automerge, ObjType, ReadDoc, ROOT};
use pg_automerge_core::document::{load_stored, stored_from_client_bytes, LoadLimit};
use pg_automerge_core::{format, json, writes};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Edit {
    Put { replica: usize, key: u8, value: i64 },
    Insert { replica: usize, index: usize, value: String },
    Splice { replica: usize, at: usize, delete: usize, text: String },
    Sync { from: usize, to: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..3usize, 0..4u8, any::<i64>()).prop_map(|(replica, key, value)| Edit::Put { replica, key, value }),
        (0..3usize, 0..8usize, "[a-z]{0,4}").prop_map(|(replica, index, value)| Edit::Insert { replica, index, value }),
        (0..3usize, 0..16usize, 0..4usize, "[a-zé ]{0,6}")
            .prop_map(|(replica, at, delete, text)| Edit::Splice { replica, at, delete, text }),
        (0..3usize, 0..3usize).prop_map(|(from, to)| Edit::Sync { from, to }),
    ]
}

/// Three replicas forked from one base document, after the edits; and the base's heads.
fn replicas(edits: &[Edit]) -> ([AutoCommit; 3], Vec<automerge::ChangeHash>) {
    let mut base = AutoCommit::new().with_actor(ActorId::from([0; 16]));
    base.put_object(ROOT, "items", ObjType::List).unwrap();
    base.put_object(ROOT, "text", ObjType::Text).unwrap();
    let base_heads = base.get_heads();
    let mut docs = [0u8, 1, 2].map(|i| base.fork().with_actor(ActorId::from([i + 1; 16])));
    for edit in edits {
        match edit {
            Edit::Put { replica, key, value } => {
                docs[*replica].put(ROOT, format!("k{key}"), *value).unwrap();
            }
            Edit::Insert { replica, index, value } => {
                let doc = &mut docs[*replica];
                let items = doc.get(ROOT, "items").unwrap().unwrap().1;
                let index = (*index).min(doc.length(&items));
                doc.insert(&items, index, value.as_str()).unwrap();
            }
            Edit::Splice { replica, at, delete, text } => {
                let doc = &mut docs[*replica];
                let obj = doc.get(ROOT, "text").unwrap().unwrap().1;
                let len = doc.length(&obj);
                let at = (*at).min(len);
                let delete = (*delete).min(len - at) as isize;
                doc.splice_text(&obj, at, delete, text).unwrap();
            }
            Edit::Sync { from, to } if from != to => {
                let mut source = docs[*from].fork();
                docs[*to].merge(&mut source).unwrap();
            }
            Edit::Sync { .. } => {}
        }
        for doc in docs.iter_mut() {
            doc.commit();
        }
    }
    (docs, base_heads)
}

fn stored(doc: &mut AutoCommit) -> Vec<u8> {
    stored_from_client_bytes(&doc.save(), LoadLimit::NONE).unwrap()
}

/// What a stored value shows: heads and JSON.
fn state(stored: &[u8]) -> (Vec<automerge::ChangeHash>, serde_json::Value) {
    let heads = format::decode(stored).unwrap().summary.heads;
    (heads, json::document(&load_stored(stored).unwrap(), None).unwrap())
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    proptest::collection::vec(edit(), 0..24)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn merge_is_commutative(edits in edits()) {
        let ([mut a, mut b, _], _) = replicas(&edits);
        let (a, b) = (stored(&mut a), stored(&mut b));
        let merge = |x: &[u8], y: &[u8]| writes::merge(x, y, LoadLimit::NONE).unwrap();
        prop_assert_eq!(state(&merge(&a, &b)), state(&merge(&b, &a)));
    }

    #[test]
    fn merge_is_associative(edits in edits()) {
        let ([mut a, mut b, mut c], _) = replicas(&edits);
        let (a, b, c) = (stored(&mut a), stored(&mut b), stored(&mut c));
        let merge = |x: &[u8], y: &[u8]| writes::merge(x, y, LoadLimit::NONE).unwrap();
        let left = merge(&merge(&a, &b), &c);
        let right = merge(&a, &merge(&b, &c));
        prop_assert_eq!(state(&left), state(&right));
    }

    #[test]
    fn merge_is_idempotent(edits in edits()) {
        let ([mut a, mut b, _], _) = replicas(&edits);
        let (a, b) = (stored(&mut a), stored(&mut b));
        prop_assert_eq!(writes::merge(&a, &a, LoadLimit::NONE).unwrap(), a.clone());
        let ab = writes::merge(&a, &b, LoadLimit::NONE).unwrap();
        prop_assert_eq!(state(&writes::merge(&ab, &b, LoadLimit::NONE).unwrap()), state(&ab));
        prop_assert_eq!(state(&writes::merge(&a, &ab, LoadLimit::NONE).unwrap()), state(&ab));
    }

    #[test]
    fn applying_changes_since_the_fork_equals_merging(edits in edits()) {
        let ([mut a, mut b, _], base) = replicas(&edits);
        let changes_of_b = b.save_after(&base);
        let (a, b) = (stored(&mut a), stored(&mut b));
        let applied = writes::apply(&a, &changes_of_b, LoadLimit::NONE).unwrap();
        prop_assert_eq!(state(&applied), state(&writes::merge(&a, &b, LoadLimit::NONE).unwrap()));
    }

    #[test]
    fn json_of_a_merge_is_the_crates_own(edits in edits()) {
        let ([mut a, mut b, _], _) = replicas(&edits);
        let mut crate_merge: Automerge = a.document().clone();
        crate_merge.merge(&mut b.document().clone()).unwrap();
        let expected = serde_json::to_value(AutoSerde::from(&crate_merge)).unwrap();
        let ours = writes::merge(&stored(&mut a), &stored(&mut b), LoadLimit::NONE).unwrap();
        prop_assert_eq!(state(&ours).1, expected);
        prop_assert_eq!(state(&ours).0, crate_merge.get_heads());
    }

    #[test]
    fn stored_values_round_trip(edits in edits()) {
        let ([mut a, _, _], _) = replicas(&edits);
        let saved = a.save();
        let stored = stored_from_client_bytes(&saved, LoadLimit::NONE).unwrap();
        prop_assert_eq!(pg_automerge_core::document::client_bytes(&stored).unwrap(), &saved[..]);
        prop_assert_eq!(state(&stored).0, a.get_heads());
    }
}
