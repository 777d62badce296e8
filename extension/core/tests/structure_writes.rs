//! The writes real clients send append without a load, and exactly: a client makes its
//! edits the JS way (strings as text objects, splices, marks, block splits, nested map
//! fields, list inserts, deletes and moves, lists of maps with text, counters), and a
//! server copy takes each change through the structure index while another takes it the
//! naive way (load, apply, save). After every write both show the same heads, JSON and
//! spans; the index the fast copy kept equals the index built from a fresh save of its
//! document; and every change of one client on the stored heads was appended, not loaded.
//! A third copy takes each change through the index the write before it held
//! (`index_cache`), and stores the same bytes as the copy that decodes the stored index
//! each time.

use automerge::marks::{ExpandMark, Mark};
use automerge::transaction::Transactable;
use automerge::{AutoCommit, ObjType, ReadDoc, ROOT};
use fixtures::js_edits;
use fixtures::wrong_changes::{client_document, honest_edit, Choices};
use pg_automerge_core::kept_json::TextJson;
use pg_automerge_core::load::load_stored;
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::structure::{self, Structure};
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::{format, index_cache, json, json_edit, json_reads, spans, writes};
use proptest::prelude::*;

mod support;
use support::assert_loads;

const FAST: WriteSettings = WriteSettings { append_limit: 1000, ..WriteSettings::UNLIMITED };
const NAIVE: WriteSettings =
    WriteSettings { keep_json: false, append_limit: 0, ..WriteSettings::UNLIMITED };
/// Each write starts from the index the write before left, not from the stored one.
const HELD: WriteSettings = WriteSettings { index_cache_budget: u64::MAX, ..FAST };

fn appended(stored: &[u8]) -> u32 {
    format::decode(stored).unwrap().kept.unwrap().appended_changes
}

fn kept_index(stored: &[u8]) -> Structure {
    writes::current_index(&format::decode(stored).unwrap()).expect("the index reads")
}

/// Whether the write of `stored` left an index held for its heads that equals the stored
/// one, with the replayed changes; it stays held for the next write.
fn holds_its_index(stored: &[u8]) -> bool {
    let heads = format::decode(stored).unwrap().summary.heads;
    let Some((held, heap_bytes)) = index_cache::take(&heads) else { return false };
    let same = objects(&held) == objects(&kept_index(stored));
    index_cache::keep(heads, held, Some(heap_bytes), HELD.index_cache_budget);
    same
}

/// The objects an index holds, with its actors in one order (a save's index does not
/// know the actors' latest changes: the write that keeps it adds them).
fn objects(structure: &Structure) -> (Vec<automerge::ActorId>, Vec<String>) {
    let canonical = structure.canonical();
    let mut objects: Vec<String> =
        canonical.objects.iter().map(|entry| format!("{entry:?}")).collect();
    objects.sort();
    (canonical.actors, objects)
}

/// Heads, JSON and the spans of every text object, from a load.
fn loaded_state(stored: &[u8]) -> (Vec<automerge::ChangeHash>, serde_json::Value, Vec<String>) {
    let doc = load_stored(&format::decode(stored).unwrap()).unwrap();
    let json = json::document(&doc, None).unwrap();
    let mut texts = Vec::new();
    for key in ["title", "content", "note", "status"] {
        if let Ok(spans) = spans::spans(&doc, &[key.into()], None) {
            texts.push(spans.to_string());
        }
    }
    (doc.get_heads(), json, texts)
}

/// Edits the JS client makes that the shared honest edits do not: a block split in the
/// content, a splice into a list item's text, a nested field of a list item, an emoji, a
/// list item moved (deleted and a copy inserted, in one change).
fn more_edit(doc: &mut AutoCommit, choices: &mut Choices<'_>) -> Option<automerge::ChangeHash> {
    match choices.below(4) {
        0 => {
            let content = doc.get(ROOT, "content").ok()??.1;
            let at = choices.below(doc.length(&content) + 1);
            doc.split_block(&content, at).ok()?;
            let block = doc.get(&content, at).ok()??.1;
            doc.put(&block, "type", "paragraph").ok()?;
        }
        1 => {
            let items = doc.get(ROOT, "items").ok()??.1;
            let len = doc.length(&items);
            let item = doc.get(&items, choices.below(len.max(1))).ok()??.1;
            match doc.get(&item, "text").ok()? {
                Some((_, text)) => {
                    let len = doc.length(&text);
                    doc.splice_text(&text, choices.below(len + 1), 0, "👍 x").ok()?;
                }
                None => return None,
            }
            doc.put(&item, "done", true).ok()?;
        }
        2 => {
            let items = doc.get(ROOT, "items").ok()??.1;
            let len = doc.length(&items);
            if len < 2 {
                return None;
            }
            js_edits::move_item(doc, &items, choices.below(len), choices.below(len)).ok()?;
        }
        _ => {
            let content = doc.get(ROOT, "content").ok()??.1;
            let len = doc.length(&content);
            if len > 2 {
                let start = choices.below(len - 1);
                let mark = Mark::new("italic".into(), true, start, start + 1);
                doc.mark(&content, mark, ExpandMark::Both).ok()?;
            }
            doc.put_object(ROOT, "tags", ObjType::List).ok()?;
        }
    }
    doc.commit()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn a_clients_edits_append_and_match_load_apply_save(
        bytes in proptest::collection::vec(any::<u8>(), 64..400),
    ) {
        let mut client = client_document(1);
        let mut fast = stored_from_client_bytes(&client.save(), FAST).unwrap();
        let mut naive = stored_from_client_bytes(&client.save(), NAIVE).unwrap();
        let mut held = fast.clone();
        let mut choices = Choices::new(&bytes);
        let mut made_changes = 0;
        for round in 0..24 {
            let heads = client.get_heads();
            let made = match choices.below(4) {
                0 => more_edit(&mut client, &mut choices),
                _ => honest_edit(&mut client, &mut choices),
            };
            if made.is_none() {
                continue;
            }
            made_changes += 1;
            let change = client.save_after(&heads);
            let before = appended(&fast);
            fast = writes::apply(&fast, &change, FAST).unwrap();
            naive = writes::apply(&naive, &change, NAIVE).unwrap();
            held = writes::apply(&held, &change, HELD).unwrap();
            prop_assert_eq!(appended(&fast), before + 1, "round {}: the change was loaded", round);
            prop_assert!(held == fast, "round {}: the held index stored another value", round);
            prop_assert!(holds_its_index(&held), "round {}: no index held", round);
            prop_assert_eq!(loaded_state(&fast), loaded_state(&naive));
            let kept = json_reads::kept(&fast, &TextJson).unwrap().unwrap();
            prop_assert_eq!(&kept, &json::document(&load_stored(&format::decode(&fast).unwrap()).unwrap(), None).unwrap());
            let rebuilt = Structure::of_save(&load_stored(&format::decode(&fast).unwrap()).unwrap().save()).unwrap().0;
            prop_assert_eq!(objects(&kept_index(&fast)), objects(&rebuilt));
            assert_loads(&fast);
        }
        prop_assert_eq!(appended(&fast), made_changes);
    }
}

/// Sessions of changes that `@automerge/automerge` 3 made (examples/node-client/
/// edit-fixtures.mjs; the Node.js test step checks they are current): one client's edits
/// of every kind on the stored heads; two clients typing at once, at either end of one
/// text, merging now and then. Every change appends, and the result is
/// load-apply-save's.
#[test]
fn changes_made_by_the_js_client_append_and_match_load_apply_save() {
    let sessions: serde_json::Value =
        serde_json::from_str(include_str!("../../../fixtures/js/edits.json")).unwrap();
    let unhex = |value: &serde_json::Value| hex::decode(value.as_str().unwrap()).unwrap();
    for session in sessions.as_array().unwrap() {
        let name = session["name"].as_str().unwrap();
        let save = unhex(&session["save"]);
        let mut fast = stored_from_client_bytes(&save, FAST).unwrap();
        let mut naive = stored_from_client_bytes(&save, NAIVE).unwrap();
        let mut held = fast.clone();
        let changes = session["changes"].as_array().unwrap();
        assert!(changes.len() > 4, "{name}");
        for (n, change) in changes.iter().map(unhex).enumerate() {
            let before = appended(&fast);
            fast = writes::apply(&fast, &change, FAST).unwrap();
            naive = writes::apply(&naive, &change, NAIVE).unwrap();
            held = writes::apply(&held, &change, HELD).unwrap();
            assert_eq!(appended(&fast), before + 1, "{name}: change {n} was loaded");
            assert!(held == fast, "{name}: change {n}: the held index stored another value");
            assert!(holds_its_index(&held), "{name}: change {n}: no index held");
            assert_eq!(loaded_state(&fast), loaded_state(&naive), "{name}: change {n}");
            let kept = json_reads::kept(&fast, &TextJson).unwrap().unwrap();
            assert_eq!(
                kept,
                json::document(&load_stored(&format::decode(&fast).unwrap()).unwrap(), None)
                    .unwrap()
            );
            if appended(&fast) > 0 {
                let rebuilt = Structure::of_save(
                    &load_stored(&format::decode(&fast).unwrap()).unwrap().save(),
                )
                .unwrap()
                .0;
                assert_eq!(objects(&kept_index(&fast)), objects(&rebuilt), "{name}: {n}");
            }
            assert_loads(&fast);
        }
    }
}

#[test]
fn the_index_of_a_save_shows_its_texts_lists_and_maps() {
    let mut doc = client_document(1);
    let content = doc.get(ROOT, "content").unwrap().unwrap().1;
    doc.split_block(&content, 3).unwrap();
    doc.splice_text(&content, 0, 2, "").unwrap();
    let structure = Structure::of_save(&doc.save()).unwrap().0;
    for key in ["title", "content", "meta", "items"] {
        let id = doc.get(ROOT, key).unwrap().unwrap().1;
        let automerge::ObjId::Id(counter, actor, _) = id.clone() else {
            panic!("{key} is an object")
        };
        let actor = structure.actors.iter().position(|known| *known == actor).unwrap() as u32;
        let obj = structure::OpId { counter, actor };
        assert_eq!(
            structure.path(obj),
            Some(vec![json_edit::Step::Key(key.into())]),
            "{key} shows at its key"
        );
        let shown: u64 = match &structure.objects[&obj].body {
            structure::Body::Seq(runs) => runs.iter().map(|run| run.len * run.width()).sum(),
            structure::Body::Map(keys) => keys.len() as u64,
            structure::Body::Opaque => panic!("{key} is indexed"),
        };
        let expected = match doc.object_type(&id).unwrap() {
            ObjType::Text => doc.text(&id).unwrap().chars().count(),
            ObjType::List => doc.length(&id),
            _ => doc.keys(&id).count(),
        };
        assert_eq!(shown, expected as u64, "{key}");
    }
}
