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

use automerge::{hydrate, Automerge, ChangeHash, ScalarValue};
use base64::Engine;
use serde_json::{Map, Number, Value as Json};

/// The document (as of `heads`, or now) as JSON.
pub fn document(doc: &Automerge, heads: Option<&[ChangeHash]>) -> Json {
    value(&doc.hydrate(heads))
}

pub fn value(value: &hydrate::Value) -> Json {
    match value {
        hydrate::Value::Scalar(scalar) => self::scalar(scalar),
        hydrate::Value::Map(map) => map_object(map),
        hydrate::Value::List(list) => Json::Array(list.iter().map(|item| self::value(&item.value)).collect()),
        hydrate::Value::Text(text) => Json::String(text.to_string()),
    }
}

pub fn map_object(map: &hydrate::Map) -> Json {
    Json::Object(map.iter().map(|(key, entry)| (key.clone(), value(&entry.value))).collect::<Map<_, _>>())
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
            document(doc.document(), None),
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
        assert_eq!(document(ab.document(), None), json!({ "k": winner }));
        assert_eq!(document(ab.document(), None), document(ba.document(), None));
    }

    #[test]
    fn reads_as_of_heads() {
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "v", 1_i64).unwrap();
        let first = doc.get_heads();
        doc.put(ROOT, "v", 2_i64).unwrap();
        assert_eq!(document(doc.document(), Some(&first)), json!({ "v": 1 }));
        assert_eq!(document(doc.document(), None), json!({ "v": 2 }));
    }
}
