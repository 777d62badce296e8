//! What changed between two points of history, as `jsonb` patches in the shape the
//! JavaScript library's `diff(doc, before, after)` returns: `{"action": "put", "path":
//! ["title"], "value": …}` and the `insert`, `splice`, `del`, `inc`, `mark` and `conflict`
//! actions, each with the path from the root to what it changes.
//!
//! JS counts text positions in UTF-16 code units; Automerge counts them in the unit the
//! document was loaded with, so the document must be loaded with
//! [`load_stored_for_diff`] for the positions to be those a JS client applies.

use automerge::marks::MarkSet;
use automerge::{
    Automerge, ChangeHash, LoadOptions, ObjType, Patch, PatchAction, Prop, TextEncoding, Value,
};
use serde_json::{json, Map, Value as Json};

use crate::format::StoredValue;
use crate::guard::no_panic;
use crate::load::load_payload;
use crate::{heads, json as to_json, Error};

/// The stored document, loaded to count text positions as JS does.
pub fn load_stored_for_diff(value: &StoredValue<'_>) -> Result<Automerge, Error> {
    load_payload(value.payload, |bytes| {
        Automerge::load_with_options(
            bytes,
            LoadOptions::new().text_encoding(TextEncoding::Utf16CodeUnit),
        )
    })
}

/// The patches that turn the document as of `from` into the document as of `to` (its
/// current heads when `None`). Either may be earlier: a diff backwards undoes.
pub fn diff(
    doc: &Automerge,
    from: &[ChangeHash],
    to: Option<&[ChangeHash]>,
) -> Result<Json, Error> {
    heads::require_known(doc, from)?;
    let to = match to {
        Some(to) => {
            heads::require_known(doc, to)?;
            to.to_vec()
        }
        None => doc.get_heads(),
    };
    let patches = no_panic(|| doc.diff(from, &to)).map_err(Error::CorruptStoredValue)?;
    Ok(Json::Array(
        patches
            .iter()
            .map(|patch| {
                crate::interrupts::check();
                patch_json(patch)
            })
            .collect(),
    ))
}

fn patch_json(patch: &Patch) -> Json {
    let mut path: Vec<Json> = patch.path.iter().map(|(_, prop)| prop_json(prop)).collect();
    let mut object = Map::new();
    let action = match &patch.action {
        PatchAction::PutMap { key, value, conflict } => {
            path.push(json!(key));
            put(&mut object, &value.0, *conflict)
        }
        PatchAction::PutSeq { index, value, conflict } => {
            path.push(json!(index));
            put(&mut object, &value.0, *conflict)
        }
        PatchAction::Insert { index, values } => {
            path.push(json!(index));
            let values: Vec<_> = values.iter().collect();
            object.insert("values".into(), values.iter().map(|(v, _, _)| value_json(v)).collect());
            if values.iter().any(|(_, _, conflict)| *conflict) {
                let conflicts = values.iter().map(|(_, _, conflict)| json!(conflict)).collect();
                object.insert("conflicts".into(), conflicts);
            }
            "insert"
        }
        PatchAction::SpliceText { index, value, marks } => {
            path.push(json!(index));
            object.insert("value".into(), Json::String(value.make_string()));
            if let Some(marks) = marks.as_ref().and_then(marks_json) {
                object.insert("marks".into(), marks);
            }
            "splice"
        }
        PatchAction::Increment { prop, value } => {
            path.push(prop_json(prop));
            object.insert("value".into(), json!(value));
            "inc"
        }
        PatchAction::Conflict { prop } => {
            path.push(prop_json(prop));
            "conflict"
        }
        PatchAction::DeleteMap { key } => {
            path.push(json!(key));
            "del"
        }
        PatchAction::DeleteSeq { index, length } => {
            path.push(json!(index));
            if *length > 1 {
                object.insert("length".into(), json!(length));
            }
            "del"
        }
        PatchAction::Mark { marks } => {
            // A mark removed shows as a mark whose value is null, as in JS.
            let marks = marks.iter().map(|mark| {
                json!({
                    "name": mark.name(),
                    "value": to_json::scalar(mark.value()),
                    "start": mark.start,
                    "end": mark.end,
                })
            });
            object.insert("marks".into(), marks.collect());
            "mark"
        }
    };
    object.insert("action".into(), json!(action));
    object.insert("path".into(), Json::Array(path));
    Json::Object(object)
}

fn put(object: &mut Map<String, Json>, value: &Value<'_>, conflict: bool) -> &'static str {
    object.insert("value".into(), value_json(value));
    if conflict {
        object.insert("conflict".into(), json!(true));
    }
    "put"
}

/// A patch's value as JS shows it: a new object empty (its contents follow in later
/// patches), text as `""`, and a scalar as the `jsonb` view shows it.
fn value_json(value: &Value<'_>) -> Json {
    match value {
        Value::Object(ObjType::Map | ObjType::Table) => json!({}),
        Value::Object(ObjType::List) => json!([]),
        Value::Object(ObjType::Text) => json!(""),
        Value::Scalar(scalar) => to_json::scalar(scalar),
    }
}

fn prop_json(prop: &Prop) -> Json {
    match prop {
        Prop::Map(key) => json!(key),
        Prop::Seq(index) => json!(index),
    }
}

/// The marks of a splice, when it has any.
fn marks_json(marks: &MarkSet) -> Option<Json> {
    let marks: Map<String, Json> =
        marks.iter().map(|(name, value)| (name.to_string(), to_json::scalar(value))).collect();
    (!marks.is_empty()).then_some(Json::Object(marks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ROOT};

    use crate::save::to_stored;
    use crate::settings::WriteSettings;

    /// The cases `examples/node-client/diff-fixtures.mjs` recorded from the JS library.
    fn js_cases() -> Vec<Json> {
        let text = include_str!("../../../fixtures/js/diffs.json");
        serde_json::from_str::<Json>(text).unwrap().as_array().unwrap().clone()
    }

    fn hashes(heads: &Json) -> Vec<ChangeHash> {
        let texts: Vec<String> =
            heads.as_array().unwrap().iter().map(|h| h.as_str().unwrap().to_string()).collect();
        heads::parse(&texts).unwrap()
    }

    #[test]
    fn the_patches_are_those_of_the_js_library() {
        let cases = js_cases();
        assert!(cases.len() >= 9, "the fixture lost cases");
        for case in cases {
            let save = hex::decode(case["save"].as_str().unwrap()).unwrap();
            let stored =
                crate::writes::stored_from_client_bytes(&save, WriteSettings::UNLIMITED).unwrap();
            let doc = load_stored_for_diff(&crate::format::decode(&stored).unwrap()).unwrap();
            let (from, to) = (hashes(&case["from"]), hashes(&case["to"]));
            let ours = diff(&doc, &from, Some(&to)).unwrap();
            assert_eq!(ours, case["patches"], "{}", case["name"]);
        }
    }

    #[test]
    fn text_positions_count_utf16_code_units() {
        let mut doc = AutoCommit::new();
        let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
        doc.splice_text(&text, 0, 0, "👋👋").unwrap();
        let before = doc.get_heads();
        doc.splice_text(&text, 2, 0, "!").unwrap();
        let stored = to_stored(doc.document(), WriteSettings::UNLIMITED).unwrap();
        let loaded = load_stored_for_diff(&crate::format::decode(&stored).unwrap()).unwrap();
        let patches = diff(&loaded, &before, None).unwrap();
        // Two code points in, but four UTF-16 code units.
        assert_eq!(patches, json!([{"action": "splice", "path": ["text", 4], "value": "!"}]));
    }

    #[test]
    fn no_change_is_no_patch_and_unknown_heads_are_refused() {
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "a", 1_i64).unwrap();
        let heads = doc.get_heads();
        assert_eq!(diff(doc.document(), &heads, None).unwrap(), json!([]));
        let unknown = [ChangeHash([3; 32])];
        assert!(matches!(diff(doc.document(), &unknown, None), Err(Error::UnknownHeads(_))));
        assert!(matches!(
            diff(doc.document(), &heads, Some(&unknown)),
            Err(Error::UnknownHeads(_))
        ));
    }
}
