//! Adversarial and edge-case inputs for the writes that skip the load. For each, the same
//! bytes are written twice to the same stored value, once with the fast paths and once the
//! naive way (every write loads, applies and saves, no JSON kept): both must fail, or both
//! succeed with the same heads and the same document; a value the fast path writes must
//! load, and the JSON it keeps must be its document's.

use automerge::legacy::{Key, ObjectId, OpId, SortedVec};
use automerge::transaction::Transactable;
use automerge::{
    ActorId, AutoCommit, Change, ChangeHash, ExpandedChange, ObjType, ScalarValue, ROOT,
};
use pg_automerge_core::load::load_stored;
use pg_automerge_core::save::to_stored;
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::{format, json, json_reads, kept_json, writes, Error, ErrorKind};

const FAST: WriteSettings = WriteSettings::UNLIMITED;
const NAIVE: WriteSettings =
    WriteSettings { keep_json: false, append_limit: 0, ..WriteSettings::UNLIMITED };

fn actor(n: u8) -> ActorId {
    ActorId::from([n; 16])
}

fn client(n: u8) -> AutoCommit {
    AutoCommit::new().with_actor(actor(n))
}

fn stored(doc: &mut AutoCommit) -> Vec<u8> {
    stored_from_client_bytes(&doc.save(), FAST).unwrap()
}

/// The raw bytes of the change `doc` committed last.
fn last_change(doc: &mut AutoCommit) -> Change {
    doc.commit();
    let head = doc.get_heads()[0];
    doc.get_change_by_hash(&head).unwrap().clone()
}

fn appended(stored: &[u8]) -> u32 {
    format::decode(stored).unwrap().kept.unwrap().appended_changes
}

fn kept_json(stored: &[u8]) -> Option<serde_json::Value> {
    json_reads::kept(stored, &kept_json::TextJson).unwrap()
}

/// A client that put `a` and stored the document, then put `key`: the client, the stored
/// value and that last change, for the crafted variations of it.
fn stored_then_put(key: &str, value: i64) -> (AutoCommit, Vec<u8>, Change) {
    let mut doc = client(1);
    doc.put(ROOT, "a", 1_i64).unwrap();
    let stored = stored(&mut doc);
    doc.put(ROOT, key, value).unwrap();
    let change = last_change(&mut doc);
    (doc, stored, change)
}

/// Heads and JSON of a stored value, from a load; checks that the header's heads and any
/// kept JSON agree with the loaded document.
fn state(stored: &[u8]) -> (Vec<ChangeHash>, serde_json::Value) {
    let doc = load_stored(&format::decode(stored).unwrap())
        .unwrap_or_else(|err| panic!("a written value does not load: {err}"));
    let loaded = json::document(&doc, None).unwrap();
    let value = format::decode(stored).unwrap();
    assert_eq!(value.summary.heads, doc.get_heads(), "header heads");
    assert_eq!(
        value.summary.change_count,
        doc.get_changes_meta(&[]).len() as u64,
        "header change count"
    );
    if let Some(kept) = kept_json(stored) {
        assert_eq!(kept, loaded, "kept JSON");
    }
    (doc.get_heads(), loaded)
}

/// Applies `changes` to `stored` both ways; both must agree. Returns the fast result.
fn agree(stored: &[u8], changes: &[u8]) -> Result<Vec<u8>, Error> {
    agree_with(stored, changes, FAST)
}

fn agree_with(stored: &[u8], changes: &[u8], fast: WriteSettings) -> Result<Vec<u8>, Error> {
    let (f, n) = (writes::apply(stored, changes, fast), writes::apply(stored, changes, NAIVE));
    match (&f, &n) {
        (Ok(f), Ok(n)) => assert_eq!(state(f), state(n)),
        (Err(f), Err(n)) => assert_eq!(f.kind(), n.kind(), "fast: {f}, naive: {n}"),
        (Ok(f), Err(n)) => {
            let loads = load_stored(&format::decode(f).unwrap())
                .map(|_| "loads")
                .unwrap_or_else(|_| "does NOT load");
            panic!("the naive write fails ({n}), the fast one succeeds with a value that {loads}")
        }
        (Err(f), Ok(_)) => panic!("the fast write fails ({f}), the naive one succeeds"),
    }
    f
}

/// Both ways refuse the bytes as invalid input (22P03), naming the loader rule they break.
fn refused(stored: &[u8], changes: &[u8]) {
    match agree(stored, changes) {
        Err(err) => assert_eq!(err.kind(), ErrorKind::InvalidBinary, "{err}"),
        Ok(written) => panic!("accepted: {:?}", state(&written)),
    }
}

fn concat(changes: &[&Change]) -> Vec<u8> {
    changes.iter().flat_map(|change| change.raw_bytes().to_vec()).collect()
}

/// `change` rebuilt with `edit` applied to its expanded form (a new hash).
fn craft(change: &Change, edit: impl FnOnce(&mut ExpandedChange)) -> Change {
    let mut expanded = change.decode();
    expanded.hash = None;
    edit(&mut expanded);
    Change::from(expanded)
}

#[test]
fn a_reused_actor_with_the_same_seq_is_refused_both_ways() {
    let mut base = client(9);
    base.put(ROOT, "base", 1_i64).unwrap();
    let mut x = base.fork().with_actor(actor(1));
    let mut y = base.fork().with_actor(actor(1));
    x.put(ROOT, "who", "x").unwrap();
    x.commit();
    let stored = stored(&mut x);
    y.put(ROOT, "who", "y").unwrap();
    let y1 = last_change(&mut y);
    assert!(agree(&stored, y1.raw_bytes()).is_err());
    // The next seq of the reused actor, depending on the other client's change.
    y.put(ROOT, "who", "y2").unwrap();
    let y2 = last_change(&mut y);
    assert!(agree(&stored, y2.raw_bytes()).is_err());
    // Both of one client's changes in one batch.
    assert!(agree(&stored, &concat(&[&y1, &y2])).is_err());
}

#[test]
fn a_reused_actor_twice_in_one_batch_is_refused_both_ways() {
    let mut base = client(9);
    base.put(ROOT, "base", 1_i64).unwrap();
    let stored = stored(&mut base);
    let mut x = base.fork().with_actor(actor(1));
    let mut y = base.fork().with_actor(actor(1));
    x.put(ROOT, "who", "x").unwrap();
    y.put(ROOT, "who", "y").unwrap();
    let (x1, y1) = (last_change(&mut x), last_change(&mut y));
    assert!(agree(&stored, &concat(&[&x1, &y1])).is_err());
    // One at a time: the first is appended, the second refused.
    let written = agree(&stored, x1.raw_bytes()).unwrap();
    assert_eq!(appended(&written), 1);
    assert!(agree(&written, y1.raw_bytes()).is_err());
}

#[test]
fn a_batch_out_of_causal_order_is_loaded_and_applied() {
    let mut doc = client(1);
    doc.put(ROOT, "a", 1_i64).unwrap();
    let stored = stored(&mut doc);
    doc.put(ROOT, "b", 2_i64).unwrap();
    let c1 = last_change(&mut doc);
    doc.put(ROOT, "c", 3_i64).unwrap();
    let c2 = last_change(&mut doc);
    let written = agree(&stored, &concat(&[&c2, &c1])).unwrap();
    assert_eq!(appended(&written), 0, "loaded and saved");
    assert_eq!(state(&written).0, doc.get_heads());
    let written = agree(&stored, &concat(&[&c1, &c2])).unwrap();
    assert_eq!(appended(&written), 2);
}

#[test]
fn a_change_with_no_dependencies_on_a_document_with_changes() {
    let mut doc = client(1);
    doc.put(ROOT, "a", 1_i64).unwrap();
    doc.put(ROOT, "shared", "one").unwrap();
    let stored = stored(&mut doc);
    let mut other = client(2);
    other.put(ROOT, "shared", "two").unwrap();
    other.put(ROOT, "b", 2_i64).unwrap();
    let change = last_change(&mut other);
    assert!(change.deps().is_empty());
    let written = agree(&stored, change.raw_bytes()).unwrap();
    // Its put on "shared" replaces nothing: the key shows both, and the index keeps the
    // conflict (the stored put, with the larger counter, wins), so the change appends.
    assert_eq!(appended(&written), 1);
    assert_eq!(kept_json(&written).unwrap()["shared"], "one");
    assert_eq!(state(&written).0.len(), 2, "two heads");
    assert!(kept_json(&written).is_some());
    // A change that merges both heads, on exactly them, puts at the root again.
    let mut merged = client(3);
    merged.merge(&mut doc.clone()).unwrap();
    merged.merge(&mut other.clone()).unwrap();
    merged.put(ROOT, "shared", "three").unwrap();
    let merging = last_change(&mut merged);
    assert_eq!(merging.deps().len(), 2);
    let again = agree(&written, merging.raw_bytes()).unwrap();
    assert_eq!(appended(&again), 2, "replaces both conflicting values: appended");
    assert_eq!(kept_json(&again).unwrap()["shared"], "three");
    assert_eq!(state(&again).0, merged.get_heads());
}

#[test]
fn concurrent_puts_on_a_root_key_are_loaded_and_the_merging_put_appended() {
    let mut doc = client(1);
    doc.put(ROOT, "k", 0_i64).unwrap();
    let mut stored = stored(&mut doc);
    let mut other = doc.fork().with_actor(actor(2));
    doc.put(ROOT, "k", 1_i64).unwrap();
    let a = last_change(&mut doc);
    other.put(ROOT, "k", 2_i64).unwrap();
    let b = last_change(&mut other);
    stored = agree(&stored, a.raw_bytes()).unwrap();
    assert_eq!((appended(&stored), kept_json(&stored)), (1, Some(serde_json::json!({"k": 1}))));
    // b's put does not replace a's, which it did not see: a load, and the key shows both.
    stored = agree(&stored, b.raw_bytes()).unwrap();
    assert_eq!((appended(&stored), kept_json(&stored)), (0, Some(serde_json::json!({"k": 2}))));
    // Two concurrent puts that each replace both values: the first in a write is appended,
    // the second then does not replace what the key shows, so the write loads.
    doc.merge(&mut other).unwrap();
    let mut third = doc.fork().with_actor(actor(3));
    doc.put(ROOT, "k", 4_i64).unwrap();
    let d = last_change(&mut doc);
    third.put(ROOT, "k", 5_i64).unwrap();
    let e = last_change(&mut third);
    stored = agree(&stored, &concat(&[&e, &d])).unwrap();
    assert_eq!(appended(&stored), 0);
    assert_eq!(kept_json(&stored), Some(state(&stored).1));
    // A change on both heads that replaces both values follows: appended.
    doc.merge(&mut third).unwrap();
    doc.put(ROOT, "k", 6_i64).unwrap();
    let f = last_change(&mut doc);
    assert_eq!(f.deps().len(), 2);
    stored = agree(&stored, f.raw_bytes()).unwrap();
    assert_eq!((appended(&stored), kept_json(&stored)), (1, Some(serde_json::json!({"k": 6}))));
}

#[test]
fn a_compressed_change_is_appended_and_loads() {
    let mut doc = client(1);
    doc.put(ROOT, "title", "t").unwrap();
    let stored = stored(&mut doc);
    doc.put(ROOT, "long", "automerge ".repeat(2000)).unwrap();
    let mut change = last_change(&mut doc);
    let compressed = change.bytes().into_owned();
    assert_eq!(compressed[8], 2, "a compressed change chunk");
    assert!(compressed.len() < change.raw_bytes().len());
    let written = agree(&stored, &compressed).unwrap();
    assert_eq!(appended(&written), 1);
    assert_eq!(kept_json(&written).unwrap()["long"], "automerge ".repeat(2000));
    assert_eq!(state(&written).0, doc.get_heads());
    // The client bytes load in the crate as they are, and the same change again is known.
    AutoCommit::load(format::decode(&written).unwrap().payload).unwrap();
    assert_eq!(agree(&written, &compressed).unwrap(), written);
}

#[test]
fn a_scalar_put_over_root_objects_text_and_counters_patches_the_json() {
    let mut doc = client(1);
    let map = doc.put_object(ROOT, "map", ObjType::Map).unwrap();
    doc.put(&map, "inner", 1_i64).unwrap();
    let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
    doc.splice_text(&text, 0, 0, "hello").unwrap();
    doc.put_object(ROOT, "list", ObjType::List).unwrap();
    doc.put(ROOT, "count", ScalarValue::counter(5)).unwrap();
    let mut stored = stored(&mut doc);
    for (key, value) in
        [("map", ScalarValue::Int(1)), ("text", "plain".into()), ("list", ScalarValue::Null)]
    {
        doc.put(ROOT, key, value).unwrap();
        stored = agree(&stored, last_change(&mut doc).raw_bytes()).unwrap();
        assert!(kept_json(&stored).is_some(), "{key}");
    }
    // An increment of a counter the index knows is appended too, and adds to the JSON.
    doc.increment(ROOT, "count", 2).unwrap();
    stored = agree(&stored, last_change(&mut doc).raw_bytes()).unwrap();
    assert_eq!(appended(&stored), 4);
    assert_eq!(kept_json(&stored).unwrap()["count"], 7);
    // After a save, a counter put at the root, then a plain value over the counter.
    stored = to_stored(
        &load_stored(&format::decode(&stored).unwrap()).unwrap(),
        WriteSettings::UNLIMITED,
    )
    .unwrap();
    doc.put(ROOT, "fresh", ScalarValue::counter(3)).unwrap();
    stored = agree(&stored, last_change(&mut doc).raw_bytes()).unwrap();
    assert_eq!(kept_json(&stored).unwrap()["fresh"], 3);
    doc.put(ROOT, "count", "no longer a counter").unwrap();
    stored = agree(&stored, last_change(&mut doc).raw_bytes()).unwrap();
    assert_eq!(kept_json(&stored).unwrap()["count"], "no longer a counter");
    // Every scalar type, and two puts on one key and a delete in one change.
    let mut heads = doc.get_heads();
    for value in [
        ScalarValue::F64(f64::NAN),
        ScalarValue::F64(1.5),
        ScalarValue::Uint(u64::MAX),
        ScalarValue::Timestamp(1_700_000_000_123),
        ScalarValue::Timestamp(i64::MAX),
        ScalarValue::Bytes(vec![0, 255, 7]),
        ScalarValue::Boolean(false),
        ScalarValue::Str("é\u{0}\"".into()),
    ] {
        doc.put(ROOT, "scalar", value).unwrap();
        doc.put(ROOT, "twice", 1_i64).unwrap();
        doc.put(ROOT, "twice", 2_i64).unwrap();
        stored = agree(&stored, &doc.save_after(&heads)).unwrap();
        assert!(kept_json(&stored).is_some());
        heads = doc.get_heads();
    }
    // A delete of a root key is appended too, and the key leaves the JSON.
    let before = appended(&stored);
    doc.delete(ROOT, "twice").unwrap();
    stored = agree(&stored, &doc.save_after(&heads)).unwrap();
    assert_eq!(appended(&stored), before + 1);
    assert!(kept_json(&stored).unwrap().get("twice").is_none());
}

#[test]
fn many_patched_puts_keep_the_json_of_the_loaded_document() {
    let mut doc = client(1);
    doc.put(ROOT, "start", 0_i64).unwrap();
    let settings = WriteSettings { append_limit: 1000, ..FAST };
    let mut stored = stored(&mut doc);
    for round in 0..300_i64 {
        let key = format!("k{}", round % 17);
        doc.put(ROOT, key.as_str(), round).unwrap();
        if round % 5 == 0 {
            doc.put(ROOT, format!("s{round}"), format!("v{round}")).unwrap();
        }
        stored = agree_with(&stored, last_change(&mut doc).raw_bytes(), settings).unwrap();
    }
    assert_eq!(appended(&stored), 300);
    assert_eq!(kept_json(&stored).unwrap(), state(&stored).1);
}

#[test]
fn many_actors_writing_in_turn() {
    let mut base = client(0);
    base.put(ROOT, "base", 0_i64).unwrap();
    let mut stored = stored(&mut base);
    let mut server = base.fork();
    let mut clients: Vec<AutoCommit> = (1..=40).map(|n| base.fork().with_actor(actor(n))).collect();
    for round in 0..4 {
        for (n, client) in clients.iter_mut().enumerate() {
            // Each client syncs with the server now and then, else edits concurrently.
            if (n + round) % 3 == 0 {
                client.merge(&mut server.clone()).unwrap();
            }
            client.put(ROOT, format!("c{}", n % 7), (round * 100 + n) as i64).unwrap();
            let change = last_change(client);
            let before = appended(&stored);
            stored =
                agree_with(&stored, change.raw_bytes(), WriteSettings { append_limit: 50, ..FAST })
                    .unwrap();
            assert!(appended(&stored) == before + 1 || appended(&stored) == 0);
            server.apply_changes([change]).unwrap();
        }
    }
    assert_eq!(state(&stored).0, server.get_heads());
    assert_eq!(format::decode(&stored).unwrap().kept.unwrap().clock.len(), 41);
}

#[test]
fn garbage_after_good_changes_and_bad_checksums_are_refused() {
    let (_, stored, change) = stored_then_put("b", 2);
    for tail in
        [&b"junk"[..], &[0x85, 0x6f, 0x4a, 0x83], &[0x85, 0x6f, 0x4a, 0x83, 0, 0, 0, 0, 1, 0]]
    {
        let bytes = [change.raw_bytes(), tail].concat();
        assert!(agree(&stored, &bytes).is_err(), "{tail:?}");
    }
    // A wrong checksum, then a flipped byte in the body (the checksum then does not match).
    let mut bad = change.raw_bytes().to_vec();
    bad[4] ^= 1;
    assert!(agree(&stored, &bad).is_err(), "checksum");
    let mut bad = change.raw_bytes().to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(agree(&stored, &bad).is_err(), "body");
}

#[test]
fn a_document_chunk_among_change_chunks_is_loaded_and_applied() {
    let mut doc = client(1);
    doc.put(ROOT, "a", 1_i64).unwrap();
    let stored = stored(&mut doc);
    doc.put(ROOT, "b", 2_i64).unwrap();
    let c1 = last_change(&mut doc);
    let mut other = client(2);
    other.put(ROOT, "o", 1_i64).unwrap();
    let bytes = [c1.raw_bytes(), &other.save()].concat();
    let written = agree(&stored, &bytes).unwrap();
    assert_eq!(appended(&written), 0);
    assert_eq!(state(&written).1, serde_json::json!({"a": 1, "b": 2, "o": 1}));
}

#[test]
fn the_append_limit_boundary() {
    let mut doc = client(1);
    doc.put(ROOT, "a", 0_i64).unwrap();
    let settings = WriteSettings { append_limit: 3, ..FAST };
    let mut stored = stored(&mut doc);
    for round in 1..=3_i64 {
        doc.put(ROOT, "a", round).unwrap();
        stored = agree_with(&stored, last_change(&mut doc).raw_bytes(), settings).unwrap();
        assert_eq!(appended(&stored), round as u32);
    }
    // One more, or a batch of two from two appended, passes the limit: a save.
    let two = appended(&stored) - 1;
    let heads = doc.get_heads();
    doc.put(ROOT, "a", 10_i64).unwrap();
    doc.commit();
    doc.put(ROOT, "a", 11_i64).unwrap();
    let batch = doc.save_after(&heads);
    let saved = agree_with(&stored, &batch, settings).unwrap();
    assert_eq!(appended(&saved), 0);
    assert_eq!(kept_json(&saved).unwrap()["a"], 11);
    let _ = two;
    // A batch that exactly reaches the limit is appended.
    let mut fresh = client(2);
    fresh.put(ROOT, "a", 0_i64).unwrap();
    let start = stored_from_client_bytes(&fresh.save(), settings).unwrap();
    let heads = fresh.get_heads();
    for n in 1..=3_i64 {
        fresh.put(ROOT, "a", n).unwrap();
        fresh.commit();
    }
    let written = agree_with(&start, &fresh.save_after(&heads), settings).unwrap();
    assert_eq!(appended(&written), 3);
    fresh.put(ROOT, "a", 4_i64).unwrap();
    let written = agree_with(&written, last_change(&mut fresh).raw_bytes(), settings).unwrap();
    assert_eq!(appended(&written), 0);
}

#[test]
fn appended_values_merged_compacted_and_appended_again() {
    let mut a = client(1);
    a.put(ROOT, "a", 0_i64).unwrap();
    let start = stored(&mut a);
    let mut b = a.fork().with_actor(actor(2));
    let (mut left, mut right) = (start.clone(), start.clone());
    for round in 0..5_i64 {
        a.put(ROOT, "a", round).unwrap();
        left = agree(&left, last_change(&mut a).raw_bytes()).unwrap();
        b.put(ROOT, "b", round).unwrap();
        right = agree(&right, last_change(&mut b).raw_bytes()).unwrap();
    }
    let merged = writes::merge(&left, &right, FAST).unwrap();
    let naive = writes::merge(&left, &right, NAIVE).unwrap();
    assert_eq!(state(&merged), state(&naive));
    // Merging an appended value with an older one gives it; with the older one on the right
    // the header cannot tell (the older head is no latest change), and both are loaded.
    assert_eq!(writes::merge(&start, &left, FAST).unwrap(), left);
    assert_eq!(state(&writes::merge(&left, &start, FAST).unwrap()), state(&left));
    assert_eq!(writes::merge(&left, &left, FAST).unwrap(), left);
    // Compacted, then appended again by each client after syncing.
    let mut stored = to_stored(
        &load_stored(&format::decode(&merged).unwrap()).unwrap(),
        WriteSettings::UNLIMITED,
    )
    .unwrap();
    a.merge(&mut b.clone()).unwrap();
    a.put(ROOT, "after", 1_i64).unwrap();
    stored = agree(&stored, last_change(&mut a).raw_bytes()).unwrap();
    assert_eq!(appended(&stored), 1);
    assert!(kept_json(&stored).is_some());
    b.merge(&mut a.clone()).unwrap();
    b.put(ROOT, "after", 2_i64).unwrap();
    stored = agree(&stored, last_change(&mut b).raw_bytes()).unwrap();
    assert_eq!(appended(&stored), 2);
    assert_eq!(state(&stored).1["after"], 2);
    // A merge of two appended values from different histories.
    let mut c = client(3);
    c.put(ROOT, "c", 1_i64).unwrap();
    let mut other = stored_from_client_bytes(&c.save(), FAST).unwrap();
    c.put(ROOT, "c", 2_i64).unwrap();
    other = agree(&other, last_change(&mut c).raw_bytes()).unwrap();
    let merged = writes::merge(&stored, &other, FAST).unwrap();
    assert_eq!(state(&merged), state(&writes::merge(&stored, &other, NAIVE).unwrap()));
    assert_eq!(state(&writes::merge(&other, &stored, FAST).unwrap()), state(&merged));
}

#[test]
fn an_empty_change_is_appended() {
    let mut doc = client(1);
    doc.put(ROOT, "a", 1_i64).unwrap();
    let stored = stored(&mut doc);
    doc.empty_change(Default::default());
    let change = last_change(&mut doc);
    assert!(change.is_empty());
    let written = agree(&stored, change.raw_bytes()).unwrap();
    assert_eq!(appended(&written), 1);
    assert!(kept_json(&written).is_some());
}

// Crafted changes: what no Automerge client writes, but bytes anyone can send.

/// A document with a list of one element, stored; and the change inserting a second.
fn list_and_next_insert() -> (AutoCommit, Vec<u8>, Change) {
    let mut doc = client(1);
    let list = doc.put_object(ROOT, "list", ObjType::List).unwrap();
    doc.insert(&list, 0, 1_i64).unwrap();
    let stored = stored(&mut doc);
    doc.insert(&list, 1, 2_i64).unwrap();
    let change = last_change(&mut doc);
    (doc, stored, change)
}

#[test]
fn a_crafted_change_on_an_object_of_an_unknown_actor() {
    let (_, stored, change) = list_and_next_insert();
    let crafted = craft(&change, |c| c.operations[0].obj = ObjectId::Id(OpId::new(1, &actor(7))));
    assert!(agree(&stored, crafted.raw_bytes()).is_err());
}

/// Not fixed: the header cannot tell which objects and elements exist, so an append takes
/// a change on one that does not, which Automerge refuses (panics on) on every load.
#[test]
fn a_crafted_change_on_an_object_that_does_not_exist() {
    let (_, stored, change) = list_and_next_insert();
    // 2@actor1 is the list's element, not an object.
    let crafted = craft(&change, |c| c.operations[0].obj = ObjectId::Id(OpId::new(2, &actor(1))));
    assert!(agree(&stored, crafted.raw_bytes()).is_err());
}

#[test]
fn a_crafted_insert_after_an_element_that_does_not_exist() {
    let (_, stored, change) = list_and_next_insert();
    // 1@actor1 is the list itself, not one of its elements.
    let crafted = craft(&change, |c| {
        c.operations[0].key = Key::Seq(automerge::legacy::ElementId::Id(OpId::new(1, &actor(1))))
    });
    assert!(agree(&stored, crafted.raw_bytes()).is_err());
}

/// With a predecessor the document lacks, the document Automerge holds after applying the
/// change shows the put, the one it loads from its save does not: refused, since Automerge
/// does not record the change as it came.
#[test]
fn a_crafted_put_whose_predecessor_does_not_exist() {
    let (_, stored, change) = stored_then_put("a", 2);
    // Of an actor the document does not have; of one it has, with a counter it does not.
    for pred in [OpId::new(1, &actor(5)), OpId::new(5, &actor(1))] {
        let crafted =
            craft(&change, |c| c.operations[0].pred = SortedVec::from(vec![pred.clone()]));
        refused(&stored, crafted.raw_bytes());
    }
}

/// Automerge applies a put whose predecessor is on another key and saves a document it
/// cannot load: refused.
#[test]
fn a_crafted_put_whose_predecessor_is_on_another_key() {
    let (_, stored, change) = stored_then_put("a", 2);
    let crafted = craft(&change, |c| c.operations[0].key = Key::Map("b".into()));
    refused(&stored, crafted.raw_bytes());
}

/// Automerge applies a change whose operation ids are its actor's earlier ones, and saves a
/// document it cannot load: refused.
#[test]
fn a_crafted_change_that_reuses_an_operation_id() {
    let (_, stored, change) = stored_then_put("b", 2);
    // seq 2, on the heads, but its operation counter is seq 1's: two ops 1@actor.
    let crafted = craft(&change, |c| c.start_op = 1.try_into().unwrap());
    refused(&stored, crafted.raw_bytes());
}

/// A change whose counters are not above those of its dependencies (Automerge writes none)
/// is applied, and the document saved after it does not load ("max_op is lower than
/// start_op"): refused.
#[test]
fn a_crafted_change_with_counters_below_its_dependencies() {
    let (mut doc, stored, change) = stored_then_put("b", 2);
    let mut other = client(2);
    other.put(ROOT, "b", 1_i64).unwrap();
    let low = craft(&last_change(&mut other), |c| c.deps = doc.get_heads());
    refused(&stored, &concat(&[&change, &low]));
}

#[test]
fn a_crafted_change_with_duplicate_dependencies() {
    let mut doc = client(1);
    doc.put(ROOT, "a", 1_i64).unwrap();
    let mut other = doc.fork().with_actor(actor(2));
    other.put(ROOT, "o", 1_i64).unwrap();
    doc.merge(&mut other).unwrap();
    let heads = doc.get_heads();
    assert_eq!(heads.len(), 1);
    let mut concurrent = client(3);
    concurrent.put(ROOT, "c", 1_i64).unwrap();
    doc.merge(&mut concurrent).unwrap();
    let stored = stored(&mut doc);
    assert_eq!(format::decode(&stored).unwrap().summary.heads.len(), 2);
    doc.put(ROOT, "a", 2_i64).unwrap();
    let change = last_change(&mut doc);
    // Listing one head twice looks like being on both heads to a count.
    let crafted = craft(&change, |c| c.deps = vec![heads[0], heads[0]]);
    let written = agree(&stored, crafted.raw_bytes()).unwrap();
    assert_eq!(state(&written).0.len(), 2);
}

#[test]
fn a_crafted_change_that_skips_its_actors_previous_change_in_one_batch() {
    // Both changes of actor 1 in one write, the later not depending on the earlier:
    // Automerge orders a load by dependencies, and needs each actor's changes in sequence.
    let mut doc = client(9);
    doc.put(ROOT, "base", 1_i64).unwrap();
    let stored = stored(&mut doc);
    let mut b = doc.fork().with_actor(actor(2));
    b.put(ROOT, "b", 1_i64).unwrap();
    let b1 = last_change(&mut b);
    let mut a = b.fork().with_actor(actor(1));
    a.put(ROOT, "a", 1_i64).unwrap();
    let a1 = last_change(&mut a);
    a.put(ROOT, "a", 2_i64).unwrap();
    let a2 = craft(&last_change(&mut a), |c| c.deps = vec![]);
    assert!(agree(&stored, &concat(&[&b1, &a1, &a2])).is_err());
}

#[test]
fn a_crafted_change_that_skips_its_actors_previous_appended_change_is_not_appended() {
    let mut doc = client(9);
    doc.put(ROOT, "base", 1_i64).unwrap();
    let stored = stored(&mut doc);
    let mut b = doc.fork().with_actor(actor(2));
    b.put(ROOT, "b", 1_i64).unwrap();
    let b1 = last_change(&mut b);
    let mut a = b.fork().with_actor(actor(1));
    a.put(ROOT, "a", 1_i64).unwrap();
    let a1 = last_change(&mut a);
    let written = agree(&stored, &concat(&[&b1, &a1])).unwrap();
    assert_eq!(appended(&written), 2);
    a.put(ROOT, "a", 2_i64).unwrap();
    let a2 = craft(&last_change(&mut a), |c| c.deps = doc.get_heads());
    // Appended, it would come before a1 in a load, which then fails.
    let fast = writes::apply(&written, a2.raw_bytes(), FAST);
    assert!(fast.as_ref().map_or(true, |fast| appended(fast) == 0));
}

/// Automerge applies a change that does not descend from its actor's previous change when
/// that one is already in the document, and saves a document it cannot load ("missing
/// ops"): refused.
#[test]
fn a_crafted_change_that_skips_its_actors_previous_change() {
    let mut doc = client(9);
    doc.put(ROOT, "base", 1_i64).unwrap();
    let mut a = doc.fork().with_actor(actor(1));
    a.put(ROOT, "a", 1_i64).unwrap();
    a.commit();
    let stored = stored(&mut a);
    a.put(ROOT, "a", 2_i64).unwrap();
    let a2 = craft(&last_change(&mut a), |c| c.deps = doc.get_heads());
    refused(&stored, a2.raw_bytes());
}

#[test]
fn a_crafted_author_on_a_later_change() {
    let mut doc = client(1);
    doc.put(ROOT, "a", 1_i64).unwrap();
    let stored = stored(&mut doc);
    doc.put(ROOT, "a", 2_i64).unwrap();
    // An author footer (1, length, bytes), which Automerge only allows on seq 1.
    let crafted = craft(&last_change(&mut doc), |c| c.extra_bytes = vec![1, 3, b'b', b'o', b'b']);
    assert!(crafted.author().is_some());
    assert!(agree(&stored, crafted.raw_bytes()).is_err());
}
