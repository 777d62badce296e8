//! Edits made from SQL: each is a change that appends without a load where the index
//! models what it touches, the stored value holds the invariant (it loads, its kept JSON
//! is the load's, its next save loads), and its JSON is what the edit promised: what the
//! same edit makes of the JSON. Clients that receive the change see the same JSON; edits
//! and clients' changes interleave; one backend's edits of one document share one actor,
//! and copies edited apart still merge.

use automerge::transaction::Transactable;
use automerge::{AutoCommit, Automerge, ReadDoc, ROOT};
use fixtures::wrong_changes::client_document;
use pg_automerge_core::edits::{self, ChangeMeta, Edit, Strings};
use pg_automerge_core::kept_json::TextJson;
use pg_automerge_core::load::load_stored;
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::writes::{self, stored_from_client_bytes};
use pg_automerge_core::{format, json, json_reads, ErrorKind};
use proptest::prelude::*;
use serde_json::{json, Value as Json};

mod support;
use support::{assert_loads, sample};

const FAST: WriteSettings = WriteSettings { append_limit: 1000, ..WriteSettings::UNLIMITED };

fn meta() -> ChangeMeta {
    ChangeMeta { message: Some("from SQL".into()), time: 1_767_225_600_000 }
}

fn appended(stored: &[u8]) -> u32 {
    format::decode(stored).unwrap().kept.unwrap().appended_changes
}

fn kept(stored: &[u8]) -> Json {
    json_reads::kept(stored, &TextJson).unwrap().unwrap()
}

fn loaded(stored: &[u8]) -> Automerge {
    load_stored(&format::decode(stored).unwrap()).unwrap()
}

fn path(steps: &[&str]) -> Vec<String> {
    steps.iter().map(|s| s.to_string()).collect()
}

/// The stored form of the JS-shaped client document.
fn client_stored() -> Vec<u8> {
    stored_from_client_bytes(&client_document(1).save(), FAST).unwrap()
}

/// The documents `@automerge/automerge` 3 made (fixtures/js/edits.json), stored.
fn js_stored() -> Vec<Vec<u8>> {
    let sessions: Json =
        serde_json::from_str(include_str!("../../../fixtures/js/edits.json")).unwrap();
    sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let save = hex::decode(s["save"].as_str().unwrap()).unwrap();
            stored_from_client_bytes(&save, FAST).unwrap()
        })
        .collect()
}

/// Makes `edit`, and checks that it appended, loads, and shows `expected`.
#[track_caller]
fn edited(stored: &[u8], edit: Edit, expected: &Json) -> Vec<u8> {
    let before = appended(stored);
    let result = edits::edit(stored, &edit, &meta(), FAST).unwrap();
    assert!(result.change.is_some(), "{edit:?} made no change");
    assert_eq!(appended(&result.stored), before + 1, "{edit:?} loaded the document");
    assert_loads(&result.stored);
    assert_eq!(&kept(&result.stored), expected, "{edit:?}");
    sample("sql-edit", &result.stored, 1, &mut 0);
    result.stored
}

#[test]
fn each_edit_appends_and_shows_what_it_promised() {
    let stored = client_stored();
    let mut expected = kept(&stored);

    expected["status"] = json!("done");
    let stored = edited(
        &stored,
        Edit::Set { path: path(&["status"]), value: json!("done"), strings: Strings::Plain },
        &expected,
    );

    let nested =
        json!({"name": "Ana", "tags": ["a", {"deep": [1, 2.5, null, true]}], "note": "hi"});
    expected["meta"]["owner"] = nested.clone();
    let stored = edited(
        &stored,
        Edit::Set { path: path(&["meta", "owner"]), value: nested, strings: Strings::Text },
        &expected,
    );

    expected["items"].as_array_mut().unwrap().insert(1, json!("eggs"));
    let stored = edited(
        &stored,
        Edit::Insert {
            path: path(&["items", "1"]),
            value: json!("eggs"),
            strings: Strings::Text,
            after: false,
        },
        &expected,
    );

    expected["items"].as_array_mut().unwrap().push(json!({"x": 1}));
    let stored = edited(
        &stored,
        Edit::Insert {
            path: path(&["items", "-1"]),
            value: json!({"x": 1}),
            strings: Strings::Text,
            after: true,
        },
        &expected,
    );

    expected["items"][0] = json!("rye");
    let stored = edited(
        &stored,
        Edit::Set { path: path(&["items", "0"]), value: json!("rye"), strings: Strings::Text },
        &expected,
    );

    expected["items"].as_array_mut().unwrap().remove(2);
    let stored = edited(&stored, Edit::Delete { path: path(&["items", "2"]) }, &expected);

    expected.as_object_mut().unwrap().remove("status");
    let stored = edited(&stored, Edit::Delete { path: path(&["status"]) }, &expected);

    expected["count"] = json!(13);
    let stored = edited(&stored, Edit::Increment { path: path(&["count"]), by: 10 }, &expected);

    expected["visits"] = json!(5);
    let stored = edited(&stored, Edit::SetCounter { path: path(&["visits"]), value: 5 }, &expected);
    expected["visits"] = json!(4);
    let stored = edited(&stored, Edit::Increment { path: path(&["visits"]), by: -1 }, &expected);

    // The content holds an emoji and a bold mark: positions are characters.
    let content: String = expected["content"].as_str().unwrap().to_string();
    let mut chars: Vec<char> = content.chars().collect();
    chars.splice(13..15, "a great".chars());
    expected["content"] = json!(chars.iter().collect::<String>());
    let stored = edited(
        &stored,
        Edit::Splice { path: path(&["content"]), pos: 13, delete: 2, text: "a great".into() },
        &expected,
    );

    expected["title"] = json!("Launch plan v2");
    let stored = edited(
        &stored,
        Edit::Splice { path: path(&["title"]), pos: 11, delete: 0, text: " v2".into() },
        &expected,
    );

    // The new texts are text objects, as the JS client makes them, and splice.
    expected["meta"]["owner"]["note"] = json!("oh hi");
    let stored = edited(
        &stored,
        Edit::Splice {
            path: path(&["meta", "owner", "note"]),
            pos: 0,
            delete: 0,
            text: "oh ".into(),
        },
        &expected,
    );

    // The change records the message and time, and the spans keep the mark.
    let doc = loaded(&stored);
    let last = doc.get_changes(&[]).last().unwrap().clone();
    assert_eq!(last.message(), Some("from SQL"));
    assert_eq!(last.timestamp(), meta().time);
}

#[test]
fn refusals_say_why_and_change_nothing() {
    let stored = client_stored();
    let refused = |edit: Edit| edits::edit(&stored, &edit, &meta(), FAST).err().map(|e| e.kind());
    let set =
        |steps: &[&str]| Edit::Set { path: path(steps), value: json!(1), strings: Strings::Text };
    assert_eq!(refused(set(&["nope", "deeper"])), Some(ErrorKind::InvalidParameter));
    assert_eq!(refused(set(&["items", "7"])), Some(ErrorKind::IndexOutOfRange));
    assert_eq!(refused(set(&["items", "x"])), Some(ErrorKind::InvalidText));
    assert_eq!(refused(set(&["title", "0"])), Some(ErrorKind::WrongObjectType));
    assert_eq!(refused(set(&[])), Some(ErrorKind::InvalidParameter));
    assert_eq!(refused(Edit::Delete { path: path(&["nope"]) }), Some(ErrorKind::InvalidParameter));
    assert_eq!(
        refused(Edit::Increment { path: path(&["status"]), by: 1 }),
        Some(ErrorKind::WrongObjectType)
    );
    assert_eq!(
        refused(Edit::Splice { path: path(&["title"]), pos: 12, delete: 0, text: "x".into() }),
        Some(ErrorKind::TextRangeOutOfBounds)
    );
    assert_eq!(
        refused(Edit::Splice { path: path(&["title"]), pos: 10, delete: 2, text: "x".into() }),
        Some(ErrorKind::TextRangeOutOfBounds)
    );
    assert_eq!(
        refused(Edit::Splice { path: path(&["items"]), pos: 0, delete: 0, text: "x".into() }),
        Some(ErrorKind::WrongObjectType)
    );
    assert_eq!(
        refused(Edit::Insert {
            path: path(&["status"]),
            value: json!(1),
            strings: Strings::Text,
            after: false
        }),
        Some(ErrorKind::InvalidParameter)
    );
    assert_eq!(
        refused(Edit::Update { json: json!([1]), strings: Strings::Text }),
        Some(ErrorKind::InvalidParameter)
    );
}

#[test]
fn edits_of_js_made_documents_append() {
    for stored in js_stored() {
        let mut expected = kept(&stored);
        expected["from_sql"] = json!({"ok": true, "text": "made in SQL"});
        let value = expected["from_sql"].clone();
        let stored = edited(
            &stored,
            Edit::Set { path: path(&["from_sql"]), value, strings: Strings::Text },
            &expected,
        );
        expected["from_sql"]["text"] = json!("made in SQL, edited");
        let edit = Edit::Splice {
            path: path(&["from_sql", "text"]),
            pos: 11,
            delete: 0,
            text: ", edited".into(),
        };
        let stored = edited(&stored, edit, &expected);
        // Every root text the client made splices.
        let texts: Vec<String> = expected
            .as_object()
            .unwrap()
            .iter()
            .filter(|(key, value)| value.is_string() && key.as_str() != "from_sql")
            .map(|(key, _)| key.clone())
            .collect();
        let mut stored = stored;
        for key in texts {
            let doc = loaded(&stored);
            let (value, _) = doc.get(ROOT, key.as_str()).unwrap().unwrap();
            if !value.is_object() {
                continue;
            }
            let text = expected[&key].as_str().unwrap().to_string();
            expected[&key] = json!(format!("SQL: {text}"));
            let edit =
                Edit::Splice { path: path(&[&key]), pos: 0, delete: 0, text: "SQL: ".into() };
            stored = edited(&stored, edit, &expected);
        }
    }
}

#[test]
fn a_client_that_receives_the_change_sees_the_same_json() {
    let mut client = client_document(1);
    let mut stored = stored_from_client_bytes(&client.save(), FAST).unwrap();
    let edits = [
        Edit::Set { path: path(&["meta", "done"]), value: json!(true), strings: Strings::Text },
        Edit::Splice { path: path(&["content"]), pos: 0, delete: 6, text: "Plan".into() },
        Edit::Update {
            json: json!({"title": "Launch", "items": ["milk", "tea"], "count": 7, "meta": {"owner": "bo"}}),
            strings: Strings::Text,
        },
    ];
    for edit in edits {
        let result = edits::edit(&stored, &edit, &meta(), FAST).unwrap();
        stored = result.stored;
        client.load_incremental(&result.change.unwrap()).unwrap();
        assert_eq!(json::document(client.document(), None).unwrap(), kept(&stored), "{edit:?}");
        assert_loads(&stored);
    }
}

#[test]
fn one_backend_edits_one_document_with_one_actor_and_copies_still_merge() {
    let stored = client_stored();
    let actors = |stored: &[u8]| format::decode(stored).unwrap().kept.unwrap().clock.len();
    let actors_before = actors(&stored);
    let mut row = stored.clone();
    for n in 0..20 {
        let edit = Edit::Set { path: path(&["n"]), value: json!(n), strings: Strings::Text };
        row = edits::edit(&row, &edit, &meta(), FAST).unwrap().stored;
    }
    assert_eq!(actors(&row), actors_before + 1);
    // The same document in two rows, edited in both: the edits have different actors, and
    // the rows merge.
    let copy = row.clone();
    let set =
        |value: i64| Edit::Set { path: path(&["n"]), value: json!(value), strings: Strings::Text };
    let first = edits::edit(&row, &set(100), &meta(), FAST).unwrap().stored;
    let second = edits::edit(&copy, &set(200), &meta(), FAST).unwrap().stored;
    let merged = writes::merge(&first, &second, FAST).unwrap();
    assert_loads(&merged);
    assert_eq!(loaded(&merged).get_heads().len(), 2);
    // A rolled-back edit (its value dropped) is not continued either.
    let dropped = edits::edit(&row, &set(1), &meta(), FAST).unwrap();
    drop(dropped);
    let after = edits::edit(&row, &set(2), &meta(), FAST).unwrap().stored;
    let merged = writes::merge(&merged, &after, FAST).unwrap();
    assert_loads(&merged);
}

/// `json` as a document shows it: integral numbers are integers, as in JavaScript.
fn js_numbers(json: &Json) -> Json {
    match json {
        Json::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => json!(f as i64),
            _ => json.clone(),
        },
        Json::Array(items) => Json::Array(items.iter().map(js_numbers).collect()),
        Json::Object(map) => {
            Json::Object(map.iter().map(|(k, v)| (k.clone(), js_numbers(v))).collect())
        }
        other => other.clone(),
    }
}

/// JSON values of a few shapes, strings among them.
fn json_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        (-1000i64..1000).prop_map(|n| json!(n)),
        (-100.0f64..100.0).prop_map(|f| json!(f)),
        "[a-c🙂 ]{0,8}".prop_map(Json::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::btree_map("[a-d]", inner, 0..4)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

/// A target near the document's own JSON: some keys kept, some changed, some new.
fn target() -> impl Strategy<Value = Json> {
    (
        prop::collection::btree_map("[a-d]|title|content|items|meta", json_value(), 0..5),
        prop::collection::vec(any::<bool>(), 6),
        "[a-z ]{0,12}",
        prop::collection::vec("[a-z]{0,5}", 0..4),
    )
        .prop_map(|(extra, keep, title, items)| {
            let base = json!({
                "title": "Launch plan",
                "status": "draft",
                "content": "Agenda: ship 🙂 beta",
                "meta": {"owner": "ana", "done": false},
                "items": ["bread", "milk"],
                "count": 3,
            });
            let mut target = serde_json::Map::new();
            for (n, (key, value)) in base.as_object().unwrap().iter().enumerate() {
                if keep[n] {
                    target.insert(key.clone(), value.clone());
                }
            }
            if keep[0] {
                target.insert("title".into(), json!(title));
            }
            if keep[4] {
                target.insert("items".into(), json!(items));
            }
            target.extend(extra);
            Json::Object(target)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// An update makes the document's JSON the target, appended without a load, and a
    /// client that receives the change agrees.
    #[test]
    fn an_update_makes_the_json_it_was_given(target in target(), plain in any::<bool>()) {
        let mut client = client_document(1);
        let stored = stored_from_client_bytes(&client.save(), FAST).unwrap();
        let strings = if plain { Strings::Plain } else { Strings::Text };
        let result = edits::edit(&stored, &Edit::Update { json: target.clone(), strings }, &meta(), FAST).unwrap();
        assert_loads(&result.stored);
        prop_assert_eq!(&kept(&result.stored), &js_numbers(&target));
        sample("sql-update", &result.stored, 1, &mut 0);
        if let Some(change) = &result.change {
            prop_assert_eq!(appended(&result.stored), appended(&stored) + 1);
            client.load_incremental(change).unwrap();
            prop_assert_eq!(json::document(client.document(), None).unwrap(), js_numbers(&target));
        }
        // The same update again changes nothing.
        let again = edits::edit(&result.stored, &Edit::Update { json: target, strings }, &meta(), FAST).unwrap();
        prop_assert!(again.change.is_none());
    }

    /// SQL edits interleaved with a client's own changes on the same row: after each step
    /// the row, the client (which receives every SQL change) and a fresh load agree.
    #[test]
    fn sql_edits_and_client_changes_interleave(
        steps in prop::collection::vec((any::<bool>(), 0usize..6, "[a-z]{1,4}"), 1..12)
    ) {
        let mut client: AutoCommit = client_document(2);
        let mut stored = stored_from_client_bytes(&client.save(), FAST).unwrap();
        for (by_sql, kind, word) in steps {
            if by_sql {
                let edit = match kind {
                    0 => Edit::Set { path: path(&["meta", "owner"]), value: json!(word), strings: Strings::Text },
                    1 => Edit::Insert { path: path(&["items", "0"]), value: json!(word), strings: Strings::Text, after: false },
                    2 => Edit::Splice { path: path(&["title"]), pos: 0, delete: 0, text: word.clone() },
                    3 => Edit::Increment { path: path(&["count"]), by: 2 },
                    4 => Edit::Mark {
                        path: path(&["title"]),
                        start: 0,
                        end: 2,
                        name: "em".into(),
                        value: json!(word.len() % 2 == 0),
                        expand: automerge::marks::ExpandMark::After,
                    },
                    _ => Edit::SplitBlock { path: path(&["content"]), pos: 1, block: json!({"type": word}) },
                };
                let result = edits::edit(&stored, &edit, &meta(), FAST).unwrap();
                stored = result.stored;
                client.load_incremental(&result.change.unwrap()).unwrap();
            } else {
                let heads = client.get_heads();
                match kind {
                    0 => { client.put(ROOT, "status", word.as_str()).unwrap(); }
                    1 => {
                        let items = client.get(ROOT, "items").unwrap().unwrap().1;
                        client.insert(&items, 0, word.as_str()).unwrap();
                    }
                    2 => {
                        let title = client.get(ROOT, "title").unwrap().unwrap().1;
                        client.splice_text(&title, 0, 0, &word).unwrap();
                    }
                    _ => { client.increment(ROOT, "count", 1).unwrap(); }
                }
                stored = writes::apply(&stored, &client.save_after(&heads), FAST).unwrap();
            }
            assert_loads(&stored);
            prop_assert_eq!(json::document(client.document(), None).unwrap(), kept(&stored));
            sample("sql-and-client", &stored, 1, &mut 0);
        }
    }
}

#[test]
fn marks_unmarks_and_block_splits_append_and_show() {
    use automerge::marks::ExpandMark;
    let stored = client_stored();
    let mut expected = kept(&stored);
    let mark = |start, end, value: Json| Edit::Mark {
        path: path(&["title"]),
        start,
        end,
        name: "link".into(),
        value,
        expand: ExpandMark::None,
    };
    // Marks change no JSON: the spans show them.
    let stored = edited(&stored, mark(0, 6, json!("https://example.com")), &expected);
    let marks_of = |stored: &[u8]| {
        let doc = loaded(stored);
        let title = doc.get(ROOT, "title").unwrap().unwrap().1;
        doc.marks(&title)
            .unwrap()
            .into_iter()
            .map(|m| (m.start, m.end, m.name().to_string(), m.value().to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        marks_of(&stored),
        vec![(0, 6, "link".to_string(), "\"https://example.com\"".to_string())]
    );
    let stored = edited(&stored, mark(2, 4, Json::Null), &expected);
    assert_eq!(marks_of(&stored).len(), 2, "the unmark splits the link in two");
    // A block marker shows in the text's JSON as U+FFFC.
    let mut chars: Vec<char> = expected["content"].as_str().unwrap().chars().collect();
    chars.insert(7, '\u{fffc}');
    expected["content"] = json!(chars.iter().collect::<String>());
    let block = json!({"type": "paragraph", "parents": [], "attrs": {}});
    let split = Edit::SplitBlock { path: path(&["content"]), pos: 7, block };
    let stored = edited(&stored, split, &expected);
    // The content's bold mark, made by the client, is still there.
    let doc = loaded(&stored);
    let content = doc.get(ROOT, "content").unwrap().unwrap().1;
    assert!(doc.marks(&content).unwrap().iter().any(|m| m.name() == "bold"));
    let refused = |edit: Edit| edits::edit(&stored, &edit, &meta(), FAST).err().map(|e| e.kind());
    assert_eq!(refused(mark(4, 4, json!(true))), Some(ErrorKind::TextRangeOutOfBounds));
    assert_eq!(refused(mark(0, 99, json!(true))), Some(ErrorKind::TextRangeOutOfBounds));
    assert_eq!(refused(mark(0, 2, json!({"a": 1}))), Some(ErrorKind::InvalidParameter));
}

/// The changes `@automerge/automerge` 3 made, applied to a row that SQL edits in between:
/// each JS change is concurrent with the SQL edits before it, and every value loads, shows
/// the JSON a fresh load shows, and appends (no load) as a client's change would.
#[test]
fn js_changes_and_sql_edits_interleave_on_one_row() {
    let sessions: Json =
        serde_json::from_str(include_str!("../../../fixtures/js/edits.json")).unwrap();
    for session in sessions.as_array().unwrap() {
        let save = hex::decode(session["save"].as_str().unwrap()).unwrap();
        let mut stored = stored_from_client_bytes(&save, FAST).unwrap();
        for (n, change) in session["changes"].as_array().unwrap().iter().enumerate() {
            let edit = Edit::Set {
                path: path(&[&format!("sql_{}", n % 3)]),
                value: json!({"n": n, "note": format!("edit {n}")}),
                strings: Strings::Text,
            };
            let before = appended(&stored);
            stored = edits::edit(&stored, &edit, &meta(), FAST).unwrap().stored;
            stored = writes::apply(&stored, &hex::decode(change.as_str().unwrap()).unwrap(), FAST)
                .unwrap();
            assert_eq!(appended(&stored), before + 2, "change {n} or the edit before it loaded");
            assert_loads(&stored);
            let json = json::document(&loaded(&stored), None).unwrap();
            assert_eq!(kept(&stored), json, "after change {n}");
            assert_eq!(kept(&stored)[format!("sql_{}", n % 3)]["n"], json!(n));
            sample("sql-and-js", &stored, 1, &mut 0);
        }
    }
}
