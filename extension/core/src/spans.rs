//! Rich text as spans, in the shape the JavaScript library's `spans()` returns:
//! `{"type": "text", "value": "…", "marks": {"bold": true}}` for a run of text (no `marks`
//! key when the run has none) and `{"type": "block", "value": {…}}` for a block marker,
//! its value being the block's attributes.

use automerge::iter::Span;
use automerge::{Automerge, ChangeHash, ObjId, ObjType, ReadDoc, Value, ROOT};
use serde_json::{json, Map, Value as Json};

use crate::{json as to_json, Error};

/// The spans of the text object at `path` (map keys, and list indexes as decimal strings).
pub fn spans(
    doc: &Automerge,
    path: &[String],
    heads: Option<&[ChangeHash]>,
) -> Result<Json, Error> {
    Ok(Json::Array(read(doc, path, heads)?.into_iter().map(span_json).collect()))
}

/// The spans of the text object at `path`, as Automerge gives them; for [`spans`] and the
/// renderings of rich text.
pub(crate) fn read(
    doc: &Automerge,
    path: &[String],
    heads: Option<&[ChangeHash]>,
) -> Result<Vec<Span>, Error> {
    let text = text_object(doc, path, heads)?;
    check_blocks(doc, &text, heads, path.len())?;
    let spans = match heads {
        Some(heads) => doc.spans_at(&text, heads),
        None => doc.spans(&text),
    }
    .map_err(|err| Error::InvalidParameter(err.to_string()))?;
    Ok(spans
        .inspect(|_span| {
            crate::interrupts::check();
        })
        .collect())
}

fn span_json(span: Span) -> Json {
    match span {
        Span::Text { text, marks } => {
            let mut object = Map::new();
            object.insert("type".into(), json!("text"));
            object.insert("value".into(), Json::String(text));
            if let Some(marks) = marks.filter(|m| m.iter().next().is_some()) {
                let marks: Map<String, Json> = marks
                    .iter()
                    .map(|(name, value)| (name.to_string(), to_json::scalar(value)))
                    .collect();
                object.insert("marks".into(), Json::Object(marks));
            }
            Json::Object(object)
        }
        Span::Block(attributes) => {
            json!({ "type": "block", "value": to_json::map_object(&attributes) })
        }
    }
}

/// Automerge builds a block's attributes recursively, and so does turning them into JSON:
/// attributes nested deeply enough overflow the backend's stack. So the blocks of the text
/// (found `depth` levels below the root) are walked first, within the JSON view's bound.
fn check_blocks(
    doc: &Automerge,
    text: &ObjId,
    heads: Option<&[ChangeHash]>,
    depth: usize,
) -> Result<(), Error> {
    let object = |item: automerge::iter::ListRangeItem<'_>| match item.value {
        automerge::ValueRef::Object(object_type) => Some((item.id(), object_type)),
        automerge::ValueRef::Scalar(_) => None,
    };
    let blocks: Vec<(ObjId, ObjType)> = match heads {
        Some(heads) => doc.list_range_at(text, .., heads).filter_map(object).collect(),
        None => doc.list_range(text, ..).filter_map(object).collect(),
    };
    for (block, object_type) in blocks {
        to_json::object(doc, &block, object_type, heads, depth + 1)?;
    }
    Ok(())
}

/// Follows `path` from the root to an object that must be text.
fn text_object(
    doc: &Automerge,
    path: &[String],
    heads: Option<&[ChangeHash]>,
) -> Result<ObjId, Error> {
    let not_text = |found: String| Error::NotText { path: shown(path), found };
    match walk(doc, path, heads)? {
        (Value::Object(ObjType::Text), object) => Ok(object),
        (Value::Object(other), _) => Err(not_text(format!("a {other}"))),
        (Value::Scalar(_), _) => Err(not_text("a scalar value".into())),
    }
}

/// A path as messages show it: `{content,0}`.
pub(crate) fn shown(path: &[String]) -> String {
    format!("{{{}}}", path.join(","))
}

/// Follows `path` (map keys, and list indexes as decimal strings) from the root, as of
/// `heads` or now, to what it leads to: an object, or a scalar at its last segment.
pub(crate) fn walk<'a>(
    doc: &'a Automerge,
    path: &[String],
    heads: Option<&[ChangeHash]>,
) -> Result<(Value<'a>, ObjId), Error> {
    let mut found = (Value::Object(ObjType::Map), ROOT);
    for (depth, segment) in path.iter().enumerate() {
        let not_found = || Error::PathNotFound(shown(&path[..=depth]));
        let (Value::Object(object_type), object) = &found else { return Err(not_found()) };
        let prop = prop(*object_type, segment).ok_or_else(not_found)?;
        found = get(doc, object, prop, heads).ok_or_else(not_found)?;
    }
    Ok(found)
}

/// The property `segment` names in an object of `object_type`: a key in a map, an index in
/// a list or text.
pub(crate) fn prop(object_type: ObjType, segment: &str) -> Option<automerge::Prop> {
    match object_type {
        ObjType::Map | ObjType::Table => Some(automerge::Prop::Map(segment.to_string())),
        ObjType::List | ObjType::Text => segment.parse::<usize>().ok().map(automerge::Prop::Seq),
    }
}

fn get<'a>(
    doc: &'a Automerge,
    object: &ObjId,
    prop: automerge::Prop,
    heads: Option<&[ChangeHash]>,
) -> Option<(Value<'a>, ObjId)> {
    match heads {
        Some(heads) => doc.get_at(object, prop, heads),
        None => doc.get(object, prop),
    }
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::marks::{ExpandMark, Mark};
    use automerge::transaction::Transactable;
    use automerge::AutoCommit;

    fn rich_text() -> (AutoCommit, ObjId) {
        let mut doc = AutoCommit::new();
        let text = doc.put_object(ROOT, "content", ObjType::Text).unwrap();
        doc.splice_text(&text, 0, 0, "Hello world").unwrap();
        doc.mark(&text, Mark::new("bold".into(), true, 6, 11), ExpandMark::After).unwrap();
        (doc, text)
    }

    #[test]
    fn text_runs_carry_their_marks() {
        let (mut doc, _) = rich_text();
        assert_eq!(
            spans(doc.document(), &["content".into()], None).unwrap(),
            json!([
                {"type": "text", "value": "Hello "},
                {"type": "text", "value": "world", "marks": {"bold": true}}
            ])
        );
    }

    #[test]
    fn blocks_carry_their_attributes() {
        let (mut doc, text) = rich_text();
        let block = doc.split_block(&text, 0).unwrap();
        doc.put(&block, "type", "heading").unwrap();
        let spans = spans(doc.document(), &["content".into()], None).unwrap();
        assert_eq!(spans[0], json!({"type": "block", "value": {"type": "heading"}}));
        assert_eq!(spans[1], json!({"type": "text", "value": "Hello "}));
    }

    #[test]
    fn reads_as_of_heads() {
        let (mut doc, text) = rich_text();
        let heads = doc.get_heads();
        doc.splice_text(&text, 0, 5, "Bye").unwrap();
        let then = spans(doc.document(), &["content".into()], Some(&heads)).unwrap();
        assert_eq!(then[0], json!({"type": "text", "value": "Hello "}));
    }

    #[test]
    fn block_attributes_nested_too_deeply_are_refused() {
        let (mut doc, text) = rich_text();
        let block = doc.split_block(&text, 0).unwrap();
        let mut object = block;
        // The text is level 1, the block level 2.
        for _ in 0..crate::json::MAX_DEPTH - 2 {
            object = doc.put_object(&object, "nested", ObjType::Map).unwrap();
        }
        let err = spans(doc.document(), &["content".into()], None).unwrap_err();
        assert!(matches!(err, Error::TooDeep { .. }), "{err}");
        let heads = doc.get_heads();
        assert!(matches!(
            spans(doc.document(), &["content".into()], Some(&heads)),
            Err(Error::TooDeep { .. })
        ));
    }

    #[test]
    fn paths_that_are_not_text_are_refused() {
        let (mut doc, _) = rich_text();
        doc.put(ROOT, "title", "x").unwrap();
        doc.put_object(ROOT, "meta", ObjType::Map).unwrap();
        let d = doc.document();
        assert!(matches!(spans(d, &["title".into()], None), Err(Error::NotText { .. })));
        assert!(matches!(spans(d, &["meta".into()], None), Err(Error::NotText { .. })));
        assert!(matches!(spans(d, &[], None), Err(Error::NotText { .. })));
        assert!(matches!(spans(d, &["nope".into()], None), Err(Error::PathNotFound(_))));
        assert!(matches!(
            spans(d, &["content".into(), "0".into()], None),
            Err(Error::NotText { .. })
        ));
        assert!(matches!(
            spans(d, &["content".into(), "x".into()], None),
            Err(Error::PathNotFound(_))
        ));
    }
}
