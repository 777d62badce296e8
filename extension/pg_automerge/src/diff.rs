//! What changed between two points of history: `automerge_diff(doc, from_heads text[] [,
//! to_heads text[]])`, as `jsonb` patches in the shape of the JavaScript library's `diff()`
//! (see `pg_automerge_core::diff`).

use pg_automerge_core::{diff, format};
use pgrx::prelude::*;
use pgrx::JsonB;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::loading;

const FUNCTION: &str = "automerge_diff";

/// From `from_heads` to the document's current heads.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_diff(doc: StoredDoc<'_>, from_heads: Vec<String>) -> JsonB {
    patches(&doc, &from_heads, None)
}

/// From `from_heads` to `to_heads`, in either direction.
#[pg_extern(immutable, strict, parallel_safe, name = "automerge_diff")]
fn automerge_diff_to(doc: StoredDoc<'_>, from_heads: Vec<String>, to_heads: Vec<String>) -> JsonB {
    patches(&doc, &from_heads, Some(&to_heads))
}

fn patches(doc: &StoredDoc<'_>, from: &[String], to: Option<&[String]>) -> JsonB {
    let from = loading::parse_heads(from, FUNCTION);
    let to = to.map(|to| loading::parse_heads(to, FUNCTION));
    let value = format::decode(doc.stored()).or_raise(FUNCTION);
    let loaded = diff::load_stored_for_diff(&value).or_raise(FUNCTION);
    JsonB(diff::diff(&loaded, &from, to.as_deref()).or_raise(FUNCTION))
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::json;

    use crate::test_support::{sqlstate_of, with_samples};

    const FIRST: &str = "(SELECT array_agg(hash) FROM automerge_changes_meta(doc) WHERE seq = 1)";

    #[pg_test]
    fn the_patches_from_a_point_of_history_to_now() {
        with_samples();
        let patches = Spi::get_one::<JsonB>(&format!(
            "SELECT automerge_diff(doc, {FIRST}) FROM samples WHERE name = 'meeting-notes'"
        ));
        assert_eq!(
            patches.unwrap().unwrap().0,
            json!([{
                "action": "mark",
                "path": ["content"],
                "marks": [{"name": "bold", "value": true, "start": 8, "end": 21}]
            }])
        );
    }

    #[pg_test]
    fn backwards_undoes_and_forwards_again_redoes() {
        with_samples();
        let round_trip = Spi::get_one::<bool>(&format!(
            "SELECT automerge_diff(doc, automerge_heads(doc), {FIRST}) \
                    = jsonb_build_array(jsonb_build_object('action', 'mark', 'path', '[\"content\"]'::jsonb, \
                        'marks', jsonb_build_array(jsonb_build_object('name', 'bold', 'value', null, 'start', 8, 'end', 21)))) \
                AND automerge_diff(doc, {FIRST}, automerge_heads(doc)) = automerge_diff(doc, {FIRST}) \
                AND automerge_diff(doc, automerge_heads(doc)) = '[]' \
             FROM samples WHERE name = 'meeting-notes'"
        ));
        assert_eq!(round_trip.unwrap(), Some(true));
    }

    #[pg_test]
    fn a_diff_from_unknown_or_malformed_heads_is_refused() {
        with_samples();
        for heads in ["ARRAY[repeat('ab', 32)]", "ARRAY['xyz']"] {
            let sql =
                format!("SELECT automerge_diff(doc, {heads}) FROM samples WHERE name = 'project'");
            assert_eq!(sqlstate_of(&sql), "22023", "{sql}");
        }
    }
}
