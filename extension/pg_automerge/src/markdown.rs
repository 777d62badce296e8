//! Rich text as CommonMark: `automerge_markdown(doc, path text[] [, heads text[]])` (see
//! `pg_automerge_core::markdown`).

use pg_automerge_core::markdown;
use pgrx::prelude::*;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::loading;

const FUNCTION: &str = "automerge_markdown";

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_markdown(doc: StoredDoc<'_>, path: Vec<String>) -> String {
    render(&doc, &path, None)
}

/// The Markdown as it was when the document's heads were `heads`.
#[pg_extern(immutable, strict, parallel_safe, name = "automerge_markdown")]
fn automerge_markdown_at(doc: StoredDoc<'_>, path: Vec<String>, heads: Vec<String>) -> String {
    render(&doc, &path, Some(&heads))
}

fn render(doc: &StoredDoc<'_>, path: &[String], heads: Option<&[String]>) -> String {
    let (loaded, heads) = loading::load_at(doc, heads, FUNCTION);
    markdown::markdown(&loaded, path, heads.as_deref()).or_raise(FUNCTION)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_support::{sqlstate_of, with_samples};

    #[pg_test]
    fn rich_text_as_markdown_now_and_then() {
        with_samples();
        let now = Spi::get_one::<String>(
            "SELECT automerge_markdown(doc, '{content}') FROM samples WHERE name = 'meeting-notes'",
        );
        assert_eq!(now.unwrap().unwrap(), "Agenda: **ship the beta**. Owner: Ana.\n");
        let then = Spi::get_one::<String>(
            "SELECT automerge_markdown(doc, '{content}', ARRAY[(SELECT hash FROM automerge_changes_meta(doc) WHERE seq = 1)]) \
             FROM samples WHERE name = 'meeting-notes'",
        );
        assert_eq!(then.unwrap().unwrap(), "Agenda: ship the beta. Owner: Ana.\n");
    }

    #[pg_test]
    fn markdown_of_what_is_not_text_is_refused() {
        with_samples();
        let of = |path: &str| {
            sqlstate_of(&format!(
                "SELECT automerge_markdown(doc, '{path}') FROM samples WHERE name = 'meeting-notes'"
            ))
        };
        assert_eq!(of("{title}"), "42809");
        assert_eq!(of("{missing}"), "22023");
    }
}
