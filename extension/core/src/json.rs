//! The JSON view of a document, as the `automerge → jsonb` cast returns it.
//!
//! | Automerge value | JSON |
//! |---|---|
//! | map, table | object |
//! | list | array |
//! | text | string of its characters (marks dropped; a block marker is U+FFFC) |
//! | string | string |
//! | int, uint | number |
//! | f64 | number; NaN and ±infinity, which JSON lacks, are null |
//! | counter | number: its current value |
//! | timestamp | string: ISO 8601 in UTC with milliseconds, as `JSON.stringify` writes a `Date` |
//! | bytes | string: standard base64 |
//! | boolean | true / false |
//! | null, a value type from a future Automerge | null |
//!
//! Where concurrent writes conflict on a key, the JSON shows the value Automerge picks as
//! the winner (the one its `get` returns), the same on every replica.

use automerge::{
    hydrate, Automerge, ChangeHash, ObjId, ObjType, ReadDoc, ScalarValue, Value, ROOT,
};
use base64::Engine;
use serde_json::{Map, Number, Value as Json};

use crate::Error;

/// How deeply objects may nest for the JSON view. Building JSON, printing it and freeing
/// it each recurse once per level, on the backend's stack; Automerge's own `hydrate`
/// recurses too, without a bound, which is why the document is walked here instead. Ten
/// thousand levels overflow an 8 MB stack; a thousand leave room to spare, and are
/// more than any document written for people has.
pub const MAX_DEPTH: usize = 1000;

/// The document (as of `heads`, or now) as JSON. Refuses documents nested deeper than
/// [`MAX_DEPTH`].
pub fn document(doc: &Automerge, heads: Option<&[ChangeHash]>) -> Result<Json, Error> {
    Walk { doc, heads }.object(&ROOT, ObjType::Map, 0)
}

/// The object `object`, found `depth` levels below the root, as JSON: refused if anything
/// in it is nested deeper than [`MAX_DEPTH`] from the root.
pub(crate) fn object(
    doc: &Automerge,
    object: &ObjId,
    object_type: ObjType,
    heads: Option<&[ChangeHash]>,
    depth: usize,
) -> Result<Json, Error> {
    Walk { doc, heads }.object(object, object_type, depth)
}

/// Reads objects as of `heads` (or now), one level at a time.
struct Walk<'a> {
    doc: &'a Automerge,
    heads: Option<&'a [ChangeHash]>,
}

impl Walk<'_> {
    /// Recurses once per level of nesting: what the iterators need lives in the frames
    /// of `map_items` and `list_items`, which end before the recursion, so that this frame
    /// stays small.
    fn object(&self, object: &ObjId, object_type: ObjType, depth: usize) -> Result<Json, Error> {
        if depth >= MAX_DEPTH {
            return Err(Error::TooDeep { limit: MAX_DEPTH });
        }
        crate::interrupts::check();
        Ok(match object_type {
            ObjType::Map | ObjType::Table => {
                let mut map = Map::new();
                for (key, value, id) in self.map_items(object) {
                    map.insert(key, self.value(value, &id, depth)?);
                }
                Json::Object(map)
            }
            ObjType::List => {
                let items = self.list_items(object);
                let mut list = Vec::with_capacity(items.len());
                for (value, id) in items {
                    list.push(self.value(value, &id, depth)?);
                }
                Json::Array(list)
            }
            ObjType::Text => Json::String(self.text(object)?),
        })
    }

    fn value(&self, value: Value<'_>, id: &ObjId, depth: usize) -> Result<Json, Error> {
        match value {
            Value::Object(object_type) => self.object(id, object_type, depth + 1),
            Value::Scalar(scalar) => Ok(self::scalar(&scalar)),
        }
    }

    #[inline(never)]
    fn map_items(&self, object: &ObjId) -> Vec<(String, Value<'static>, ObjId)> {
        let item = |item: automerge::iter::MapRangeItem<'_>| {
            let id = item.id();
            (item.key.into_owned(), item.value.into_value(), id)
        };
        match self.heads {
            Some(heads) => self.doc.map_range_at(object, .., heads).map(item).collect(),
            None => self.doc.map_range(object, ..).map(item).collect(),
        }
    }

    #[inline(never)]
    fn list_items(&self, object: &ObjId) -> Vec<(Value<'static>, ObjId)> {
        let item = |item: automerge::iter::ListRangeItem<'_>| {
            let id = item.id();
            (item.value.into_value(), id)
        };
        match self.heads {
            Some(heads) => self.doc.list_range_at(object, .., heads).map(item).collect(),
            None => self.doc.list_range(object, ..).map(item).collect(),
        }
    }

    #[inline(never)]
    fn text(&self, object: &ObjId) -> Result<String, Error> {
        match self.heads {
            Some(heads) => self.doc.text_at(object, heads),
            None => self.doc.text(object),
        }
        .map_err(|err| Error::InvalidParameter(err.to_string()))
    }
}

/// A hydrated value (block attributes, as Automerge's spans give them) as JSON.
pub fn value(value: &hydrate::Value) -> Json {
    match value {
        hydrate::Value::Scalar(scalar) => self::scalar(scalar),
        hydrate::Value::Map(map) => map_object(map),
        hydrate::Value::List(list) => {
            Json::Array(list.iter().map(|item| self::value(&item.value)).collect())
        }
        hydrate::Value::Text(text) => Json::String(text.to_string()),
    }
}

pub fn map_object(map: &hydrate::Map) -> Json {
    Json::Object(
        map.iter().map(|(key, entry)| (key.clone(), value(&entry.value))).collect::<Map<_, _>>(),
    )
}

pub fn scalar(scalar: &ScalarValue) -> Json {
    match scalar {
        ScalarValue::Str(s) => Json::String(s.to_string()),
        ScalarValue::Int(i) => Json::Number((*i).into()),
        ScalarValue::Uint(u) => Json::Number((*u).into()),
        ScalarValue::F64(f) => Number::from_f64(*f).map_or(Json::Null, Json::Number),
        ScalarValue::Counter(counter) => Json::Number(i64::from(counter).into()),
        ScalarValue::Timestamp(ms) => timestamp(*ms),
        ScalarValue::Bytes(bytes) => {
            Json::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        ScalarValue::Boolean(b) => Json::Bool(*b),
        ScalarValue::Null | ScalarValue::Unknown { .. } => Json::Null,
    }
}

/// Milliseconds since the Unix epoch as `2026-01-01T00:00:00.000Z`; out of chrono's range, null.
fn timestamp(ms: i64) -> Json {
    chrono::DateTime::from_timestamp_millis(ms).map_or(Json::Null, |t| {
        Json::String(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ObjType, ROOT};
    use serde_json::json;

    #[test]
    fn maps_every_value_type() {
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "str", "hi").unwrap();
        doc.put(ROOT, "int", -3_i64).unwrap();
        doc.put(ROOT, "uint", ScalarValue::Uint(u64::MAX)).unwrap();
        doc.put(ROOT, "f64", 1.5_f64).unwrap();
        doc.put(ROOT, "nan", f64::NAN).unwrap();
        doc.put(ROOT, "counter", ScalarValue::counter(10)).unwrap();
        doc.increment(ROOT, "counter", 5).unwrap();
        doc.put(ROOT, "time", ScalarValue::Timestamp(1_767_225_600_123)).unwrap();
        doc.put(ROOT, "bytes", ScalarValue::Bytes(vec![1, 2, 255])).unwrap();
        doc.put(ROOT, "bool", true).unwrap();
        doc.put(ROOT, "null", ScalarValue::Null).unwrap();
        let list = doc.put_object(ROOT, "list", ObjType::List).unwrap();
        doc.insert(&list, 0, 1_i64).unwrap();
        let nested = doc.insert_object(&list, 1, ObjType::Map).unwrap();
        doc.put(&nested, "k", "v").unwrap();
        let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
        doc.splice_text(&text, 0, 0, "héllo").unwrap();

        assert_eq!(
            document(doc.document(), None).unwrap(),
            json!({
                "str": "hi", "int": -3, "uint": u64::MAX, "f64": 1.5, "nan": null,
                "counter": 15, "time": "2026-01-01T00:00:00.123Z", "bytes": "AQL/",
                "bool": true, "null": null,
                "list": [1, {"k": "v"}], "text": "héllo"
            })
        );
    }

    #[test]
    fn conflicts_show_the_winner_on_every_replica() {
        let mut a = AutoCommit::new().with_actor(automerge::ActorId::from([1; 16]));
        let mut b = AutoCommit::new().with_actor(automerge::ActorId::from([2; 16]));
        a.put(ROOT, "k", "from a").unwrap();
        b.put(ROOT, "k", "from b").unwrap();
        let mut ab = a.fork();
        ab.merge(&mut b.clone()).unwrap();
        let mut ba = b.fork();
        ba.merge(&mut a.clone()).unwrap();
        let (winner, _) = automerge::ReadDoc::get(&ab, ROOT, "k").unwrap().unwrap();
        let winner = winner.into_scalar().unwrap().as_str().unwrap().to_string();
        assert_eq!(document(ab.document(), None).unwrap(), json!({ "k": winner }));
        assert_eq!(document(ab.document(), None).unwrap(), document(ba.document(), None).unwrap());
    }

    #[test]
    fn nesting_is_read_up_to_a_bound() {
        // The root is level 0: MAX_DEPTH - 1 levels below it are read...
        let within = fixtures::hostile::deeply_nested(MAX_DEPTH - 1);
        let mut json = document(&within, None).unwrap();
        let mut levels = 0;
        while let Some(next) = json.get("next").or_else(|| json.get(0)).filter(|v| !v.is_string()) {
            json = next.clone();
            levels += 1;
        }
        assert_eq!(levels, MAX_DEPTH - 1);

        // ...one more is refused. Ten times deeper overflows the stack of a recursive
        // reader, such as Automerge's hydrate.
        for depth in [MAX_DEPTH, MAX_DEPTH * 10] {
            let beyond = fixtures::hostile::deeply_nested(depth);
            let err = document(&beyond, None).unwrap_err();
            assert!(matches!(err, Error::TooDeep { limit: MAX_DEPTH }), "{err}");
            assert_eq!(err.kind(), crate::ErrorKind::TooComplex);
            let heads = beyond.get_heads();
            assert!(matches!(document(&beyond, Some(&heads)), Err(Error::TooDeep { .. })));
        }
    }

    #[test]
    fn reads_as_of_heads() {
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "v", 1_i64).unwrap();
        let first = doc.get_heads();
        doc.put(ROOT, "v", 2_i64).unwrap();
        assert_eq!(document(doc.document(), Some(&first)).unwrap(), json!({ "v": 1 }));
        assert_eq!(document(doc.document(), None).unwrap(), json!({ "v": 2 }));
    }
}
