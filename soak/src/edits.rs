//! The writes a JS client (`@automerge/automerge` 3) sends, made on a connection's fork of
//! a row's document: strings are text objects, edits are splices into existing text and
//! marks over it, fields of list items, list inserts and deletes. Each write is one change,
//! and also counts the connection's writes under a root key for the containment query.

use anyhow::Result;
use automerge::marks::{ExpandMark, Mark};
use automerge::transaction::Transactable;
use automerge::{AutoCommit, ObjId, ObjType, ReadDoc, ScalarValue, ROOT};

/// What a write did, for the report's count of writes that loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EditKind {
    /// A few words typed into the middle of a text, a few characters deleted.
    Splice,
    /// Bold set or cleared over a few characters of a text.
    Mark,
    /// `doc.note = "…"`: a root string, which the JS client makes a new text object.
    StringAsText,
    /// `item.note = "…"` on a list item: a nested field, a new text object.
    NestedField,
    /// A new list item: a map with a text and a boolean.
    ListInsert,
    ListDelete,
}

impl EditKind {
    pub const ALL: [EditKind; 6] = [
        EditKind::Splice,
        EditKind::Mark,
        EditKind::StringAsText,
        EditKind::NestedField,
        EditKind::ListInsert,
        EditKind::ListDelete,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EditKind::Splice => "splice into text",
            EditKind::Mark => "mark over text",
            EditKind::StringAsText => "root string (a new text object)",
            EditKind::NestedField => "field of a list item (a new text object)",
            EditKind::ListInsert => "list insert (a map with a text)",
            EditKind::ListDelete => "list delete",
        }
    }
}

/// Makes one JS-shaped edit on `doc` (not committed) and puts the connection's write
/// `count` under `soak_w<worker>`; returns what the edit was.
pub fn edit(
    doc: &mut AutoCommit,
    rng: &mut fastrand::Rng,
    worker: usize,
    count: u64,
) -> Result<EditKind> {
    doc.put(ROOT, format!("soak_w{worker}"), ScalarValue::Int(count as i64))?;
    let words = format!(" w{worker} typed {count}");
    let text = object_at(doc, "content", ObjType::Text);
    let items = object_at(doc, "items", ObjType::List);
    let pick = rng.u32(..100);
    let kind = match (text, items) {
        (Some(text), _) if pick < 15 && doc.length(&text) > 8 => {
            let start = rng.usize(..doc.length(&text) - 5);
            let mark = Mark::new("bold".into(), rng.bool(), start, start + 5);
            doc.mark(&text, mark, ExpandMark::After)?;
            EditKind::Mark
        }
        (Some(text), _) if pick < 75 => {
            let length = doc.length(&text);
            let at = rng.usize(..=length);
            let delete = rng.usize(..=3).min(length - at);
            doc.splice_text(&text, at, delete as isize, &words)?;
            EditKind::Splice
        }
        (_, Some(items)) if pick < 40 && doc.length(&items) > 0 => {
            let index = rng.usize(..doc.length(&items));
            match doc.get(&items, index)? {
                Some((_, item)) if doc.object_type(&item) == Ok(ObjType::Map) => {
                    let note = doc.put_object(&item, "note", ObjType::Text)?;
                    doc.splice_text(&note, 0, 0, words.trim())?;
                    EditKind::NestedField
                }
                _ => string_as_text(doc, worker, &words)?,
            }
        }
        (_, Some(items)) if pick < 60 => {
            let index = rng.usize(..=doc.length(&items));
            let item = doc.insert_object(&items, index, ObjType::Map)?;
            let text = doc.put_object(&item, "text", ObjType::Text)?;
            doc.splice_text(&text, 0, 0, words.trim())?;
            doc.put(&item, "done", false)?;
            EditKind::ListInsert
        }
        (_, Some(items)) if pick < 70 && doc.length(&items) > 1 => {
            doc.delete(&items, rng.usize(..doc.length(&items)))?;
            EditKind::ListDelete
        }
        _ => string_as_text(doc, worker, &words)?,
    };
    Ok(kind)
}

fn string_as_text(doc: &mut AutoCommit, worker: usize, words: &str) -> Result<EditKind> {
    let note = doc.put_object(ROOT, format!("soak_note_w{worker}"), ObjType::Text)?;
    doc.splice_text(&note, 0, 0, words.trim())?;
    Ok(EditKind::StringAsText)
}

/// The root's object at `key`, when it is one of `obj_type`.
fn object_at(doc: &AutoCommit, key: &str, obj_type: ObjType) -> Option<ObjId> {
    let (_, id) = doc.get(ROOT, key).ok()??;
    (doc.object_type(&id) == Ok(obj_type)).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::CommitOptions;

    /// Every kind is made on the documents the soak writes, and each write is one change
    /// that the document's JSON shows.
    #[test]
    fn each_kind_is_made_on_the_soak_documents() {
        let mut made = std::collections::BTreeSet::new();
        let mut rng = fastrand::Rng::with_seed(7);
        for sample in fixtures::samples() {
            let mut doc = AutoCommit::load(&sample.doc.save()).unwrap();
            for count in 1..=40 {
                let before = doc.get_changes(&[]).len();
                made.insert(edit(&mut doc, &mut rng, 3, count).unwrap());
                doc.commit_with(CommitOptions::default());
                assert_eq!(doc.get_changes(&[]).len(), before + 1, "{}", sample.name);
                let written = doc.get(ROOT, "soak_w3").unwrap().unwrap().0.as_i64();
                assert_eq!(written, Some(count as i64));
            }
        }
        let list = fixtures::generated::generate(fixtures::generated::Spec {
            kind: fixtures::generated::Kind::MapList,
            scale: fixtures::generated::Scale::Small,
            compacted: false,
        });
        let mut doc = AutoCommit::load(&list).unwrap();
        for count in 1..=40 {
            made.insert(edit(&mut doc, &mut rng, 3, count).unwrap());
            doc.commit_with(CommitOptions::default());
        }
        assert_eq!(made.into_iter().collect::<Vec<_>>(), EditKind::ALL.to_vec());
    }
}
