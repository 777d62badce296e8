//! Rich text as spans: `automerge_spans(doc, path text[] [, heads text[]])`, in the shape
//! of the JavaScript library's `spans()` (see `pg_automerge_core::spans`).

use pg_automerge_core::spans;
use pgrx::prelude::*;
use pgrx::JsonB;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::loading;

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_spans(doc: StoredDoc<'_>, path: Vec<String>) -> JsonB {
    spans_of(&doc, &path, None)
}

/// The spans as they were when the document's heads were `heads`.
#[pg_extern(immutable, strict, parallel_safe, name = "automerge_spans")]
fn automerge_spans_at(doc: StoredDoc<'_>, path: Vec<String>, heads: Vec<String>) -> JsonB {
    spans_of(&doc, &path, Some(&heads))
}

fn spans_of(doc: &StoredDoc<'_>, path: &[String], heads: Option<&[String]>) -> JsonB {
    let (loaded, heads) = loading::load_at(doc, heads, "automerge_spans");
    JsonB(spans::spans(&loaded, path, heads.as_deref()).or_raise("automerge_spans"))
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::json;

    use crate::test_support::{sqlstate_of, with_samples};

    #[pg_test]
    fn returns_text_runs_with_marks() {
        with_samples();
        let spans = Spi::get_one::<JsonB>(
            "SELECT automerge_spans(doc, '{content}') FROM samples WHERE name = 'meeting-notes'",
        );
        assert_eq!(
            spans.unwrap().unwrap().0,
            json!([
                {"type": "text", "value": "Agenda: "},
                {"type": "text", "value": "ship the beta", "marks": {"bold": true}},
                {"type": "text", "value": ". Owner: Ana."}
            ])
        );
    }

    #[pg_test]
    fn reads_spans_as_of_heads() {
        with_samples();
        let before_the_mark = Spi::get_one::<JsonB>(
            "SELECT automerge_spans(doc, '{content}', ARRAY[(SELECT hash FROM automerge_changes(doc) WHERE seq = 1)]) \
             FROM samples WHERE name = 'meeting-notes'",
        );
        assert_eq!(
            before_the_mark.unwrap().unwrap().0,
            json!([{"type": "text", "value": "Agenda: ship the beta. Owner: Ana."}])
        );
    }

    #[pg_test]
    fn a_path_that_is_not_text_is_refused() {
        with_samples();
        let spans_of = |path: &str| {
            sqlstate_of(&format!(
                "SELECT automerge_spans(doc, '{path}') FROM samples WHERE name = 'meeting-notes'"
            ))
        };
        assert_eq!(spans_of("{title}"), "42809");
        assert_eq!(spans_of("{}"), "42809");
        assert_eq!(spans_of("{missing}"), "22023");
    }
}
