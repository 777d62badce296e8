//! Every value that concurrent writers left at one map key or list index. The JSON view
//! shows one of them, the winner Automerge picks the same way on every replica; the others
//! stay in the document until a writer replaces them all.

use automerge::{Automerge, ObjId, ReadDoc, Value};
use serde_json::Value as Json;

use crate::guard::no_panic;
use crate::spans::{prop, shown, walk};
use crate::{json, Error};

/// One of the values at a key or index.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// As the JSON view shows it (an object with everything in it).
    pub value: Json,
    /// The id of the operation that wrote it, `counter@actor`, as the JS library's
    /// `getConflicts` keys its values.
    pub op_id: String,
    /// Whether this is the value the JSON view shows.
    pub winner: bool,
}

/// The values at the map key or list index `path` ends with, in Automerge's order, the
/// winner last. The object holding it must exist; a key or index with no value has none.
pub fn conflicts(doc: &Automerge, path: &[String]) -> Result<Vec<Conflict>, Error> {
    let Some((last, parent)) = path.split_last() else {
        return Err(Error::InvalidParameter(
            "the path must end with a map key or a list index".into(),
        ));
    };
    let (Value::Object(parent_type), object) = walk(doc, parent, None)? else {
        return Err(Error::PathNotFound(shown(path)));
    };
    let prop = prop(parent_type, last).ok_or_else(|| Error::PathNotFound(shown(path)))?;
    let (values, winner) =
        no_panic(|| (doc.get_all(&object, prop.clone()), doc.get(&object, prop)))
            .map_err(Error::CorruptStoredValue)?;
    let values = values.map_err(|err| Error::InvalidParameter(err.to_string()))?;
    let winner: Option<ObjId> = winner.ok().flatten().map(|(_, id)| id);
    values
        .into_iter()
        .map(|(value, id)| {
            let value = match value {
                Value::Object(object_type) => {
                    json::object(doc, &id, object_type, None, path.len())?
                }
                Value::Scalar(scalar) => json::scalar(&scalar),
            };
            let winner = winner.as_ref() == Some(&id);
            Ok(Conflict { value, op_id: id.to_string(), winner })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::Transactable;
    use automerge::{ActorId, AutoCommit, ObjType, ROOT};
    use serde_json::json;

    /// Two authors who wrote the title, and the first list item, at once.
    fn concurrent() -> AutoCommit {
        let mut a = AutoCommit::new().with_actor(ActorId::from([0xaa; 16]));
        a.put(ROOT, "title", "base").unwrap();
        let items = a.put_object(ROOT, "items", ObjType::List).unwrap();
        a.insert(&items, 0, 1_i64).unwrap();
        let mut b = a.fork().with_actor(ActorId::from([0xbb; 16]));
        a.put(ROOT, "title", "from a").unwrap();
        a.put(&items, 0, 2_i64).unwrap();
        let nested = b.put_object(ROOT, "title", ObjType::Map).unwrap();
        b.put(&nested, "text", "from b").unwrap();
        b.put(&items, 0, 3_i64).unwrap();
        a.merge(&mut b).unwrap();
        a
    }

    #[test]
    fn every_concurrent_value_with_its_op_id() {
        let mut doc = concurrent();
        let (doc, aa, bb) = (doc.document(), "aa".repeat(16), "bb".repeat(16));
        let title = conflicts(doc, &["title".into()]).unwrap();
        assert_eq!(
            title,
            vec![
                Conflict { value: json!("from a"), op_id: format!("4@{aa}"), winner: false },
                Conflict {
                    value: json!({"text": "from b"}),
                    op_id: format!("4@{bb}"),
                    winner: true
                },
            ]
        );
        let shown = json::document(doc, None).unwrap();
        assert_eq!(shown["title"], json!({"text": "from b"}), "the winner is what jsonb shows");
        let item = conflicts(doc, &["items".into(), "0".into()]).unwrap();
        let values: Vec<_> = item.iter().map(|c| (c.value.clone(), c.winner)).collect();
        assert_eq!(values, vec![(json!(2), false), (json!(3), true)]);
    }

    #[test]
    fn one_value_is_no_conflict_and_no_value_is_none() {
        let mut doc = AutoCommit::new().with_actor(ActorId::from([1; 16]));
        doc.put(ROOT, "a", 1_i64).unwrap();
        let doc = doc.document();
        let one = conflicts(doc, &["a".into()]).unwrap();
        assert_eq!(
            one,
            vec![Conflict {
                value: json!(1),
                op_id: format!("1@{}", "01".repeat(16)),
                winner: true
            }]
        );
        assert!(conflicts(doc, &["missing".into()]).unwrap().is_empty());
    }

    #[test]
    fn paths_to_nothing_are_refused() {
        let mut doc = concurrent();
        let doc = doc.document();
        assert!(matches!(conflicts(doc, &[]), Err(Error::InvalidParameter(_))));
        for path in
            [&["nope", "x"][..], &["items", "x"], &["title", "text", "x"], &["items", "0", "x"]]
        {
            let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
            let err = conflicts(doc, &path).unwrap_err();
            assert!(matches!(err, Error::PathNotFound(_)), "{path:?}: {err}");
        }
    }
}
