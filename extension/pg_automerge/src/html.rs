//! Rich text as HTML that is safe to embed: `automerge_html(doc, path text[] [, heads
//! text[]])` (see `pg_automerge_core::html`).

use pg_automerge_core::html;
use pgrx::prelude::*;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::loading;

const FUNCTION: &str = "automerge_html";

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_html(doc: StoredDoc<'_>, path: Vec<String>) -> String {
    render(&doc, &path, None)
}

/// The HTML as it was when the document's heads were `heads`.
#[pg_extern(immutable, strict, parallel_safe, name = "automerge_html")]
fn automerge_html_at(doc: StoredDoc<'_>, path: Vec<String>, heads: Vec<String>) -> String {
    render(&doc, &path, Some(&heads))
}

fn render(doc: &StoredDoc<'_>, path: &[String], heads: Option<&[String]>) -> String {
    let (loaded, heads) = loading::load_at(doc, heads, FUNCTION);
    html::html(&loaded, path, heads.as_deref()).or_raise(FUNCTION)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_support::{sqlstate_of, with_samples};

    #[pg_test]
    fn rich_text_as_html_now_and_then() {
        with_samples();
        let now = Spi::get_one::<String>(
            "SELECT automerge_html(doc, '{content}') FROM samples WHERE name = 'meeting-notes'",
        );
        assert_eq!(
            now.unwrap().unwrap(),
            "<p>Agenda: <strong>ship the beta</strong>. Owner: Ana.</p>\n"
        );
        let then = Spi::get_one::<String>(
            "SELECT automerge_html(doc, '{content}', ARRAY[(SELECT hash FROM automerge_changes_meta(doc) WHERE seq = 1)]) \
             FROM samples WHERE name = 'meeting-notes'",
        );
        assert_eq!(then.unwrap().unwrap(), "<p>Agenda: ship the beta. Owner: Ana.</p>\n");
    }

    #[pg_test]
    fn html_of_what_is_not_text_is_refused() {
        with_samples();
        let of = |path: &str| {
            sqlstate_of(&format!(
                "SELECT automerge_html(doc, '{path}') FROM samples WHERE name = 'meeting-notes'"
            ))
        };
        assert_eq!(of("{title}"), "42809");
        assert_eq!(of("{missing}"), "22023");
        let unknown =
            "SELECT automerge_html(doc, '{content}', ARRAY[repeat('ab', 32)]) FROM samples";
        assert_eq!(sqlstate_of(unknown), "22023");
    }
}
