//! Edits from SQL, named after the jsonb functions they mirror, each returning the edited
//! document: `automerge_set` (`jsonb_set`), `automerge_insert` (`jsonb_insert`),
//! `automerge_delete` (`#-`), `automerge_increment`, `automerge_set_counter`,
//! `automerge_splice` and `automerge_update`. Each is one Automerge change by this
//! backend's actor, stamped with the transaction's start time and an optional message.
//! Volatile: two calls on one document make two changes.

use pg_automerge_core::edits::{self, ChangeMeta, Edit, Strings};
use pgrx::prelude::*;
use pgrx::JsonB;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::gucs;

/// Milliseconds between the Unix epoch and PostgreSQL's (2000-01-01).
const POSTGRES_EPOCH_MS: i64 = 946_684_800_000;

fn meta(message: Option<&str>) -> ChangeMeta {
    // SAFETY: reads the current transaction's start time, which every backend has.
    let started = unsafe { pg_sys::GetCurrentTransactionStartTimestamp() };
    ChangeMeta { message: message.map(str::to_string), time: started / 1000 + POSTGRES_EPOCH_MS }
}

fn strings(plain: bool) -> Strings {
    if plain {
        Strings::Plain
    } else {
        Strings::Text
    }
}

/// The edited document; NULL when the document is (as `jsonb_set` is strict in it).
fn edited(
    doc: Option<StoredDoc<'_>>,
    edit: Option<Edit>,
    message: Option<&str>,
    function: &'static str,
) -> Option<StoredDoc<'static>> {
    let (doc, edit) = (doc?, edit?);
    let edited =
        edits::edit(doc.stored(), &edit, &meta(message), gucs::write_settings()).or_raise(function);
    Some(StoredDoc::owned(edited.stored))
}

#[pg_extern(volatile)]
fn automerge_set(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    value: Option<JsonB>,
    message: default!(Option<&str>, "NULL"),
    plain_strings: default!(bool, false),
) -> Option<StoredDoc<'static>> {
    let edit =
        (|| Some(Edit::Set { path: path?, value: value?.0, strings: strings(plain_strings) }))();
    edited(doc, edit, message, "automerge_set")
}

#[pg_extern(volatile)]
fn automerge_insert(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    value: Option<JsonB>,
    insert_after: default!(bool, false),
    message: default!(Option<&str>, "NULL"),
    plain_strings: default!(bool, false),
) -> Option<StoredDoc<'static>> {
    let edit = (|| {
        let (path, value) = (path?, value?.0);
        Some(Edit::Insert { path, value, strings: strings(plain_strings), after: insert_after })
    })();
    edited(doc, edit, message, "automerge_insert")
}

#[pg_extern(volatile)]
fn automerge_delete(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    message: default!(Option<&str>, "NULL"),
) -> Option<StoredDoc<'static>> {
    edited(doc, path.map(|path| Edit::Delete { path }), message, "automerge_delete")
}

#[pg_extern(volatile)]
fn automerge_set_counter(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    value: default!(i64, 0),
    message: default!(Option<&str>, "NULL"),
) -> Option<StoredDoc<'static>> {
    let edit = path.map(|path| Edit::SetCounter { path, value });
    edited(doc, edit, message, "automerge_set_counter")
}

#[pg_extern(volatile)]
fn automerge_increment(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    by: default!(i64, 1),
    message: default!(Option<&str>, "NULL"),
) -> Option<StoredDoc<'static>> {
    edited(doc, path.map(|path| Edit::Increment { path, by }), message, "automerge_increment")
}

#[pg_extern(volatile)]
fn automerge_splice(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    pos: Option<i64>,
    delete_count: Option<i64>,
    text: default!(&str, "''"),
    message: default!(Option<&str>, "NULL"),
) -> Option<StoredDoc<'static>> {
    let edit = (|| {
        let (path, pos, delete) = (path?, pos?, delete_count?);
        Some(Edit::Splice { path, pos, delete, text: text.to_string() })
    })();
    edited(doc, edit, message, "automerge_splice")
}

#[pg_extern(volatile)]
fn automerge_update(
    doc: Option<StoredDoc<'_>>,
    value: Option<JsonB>,
    message: default!(Option<&str>, "NULL"),
    plain_strings: default!(bool, false),
) -> Option<StoredDoc<'static>> {
    let edit = value.map(|value| Edit::Update { json: value.0, strings: strings(plain_strings) });
    edited(doc, edit, message, "automerge_update")
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_support::sqlstate_of;

    fn json_of(sql: &str) -> String {
        Spi::get_one::<String>(&format!("SELECT ({sql})::jsonb::text")).unwrap().unwrap()
    }

    #[pg_test]
    fn each_edit_shows_in_the_jsonb_cast() {
        Spi::run(
            "CREATE TEMP TABLE docs (id int PRIMARY KEY, doc automerge);
             INSERT INTO docs VALUES (1, automerge_update('\\x'::automerge, '{\"title\": \"Plan\", \"items\": [1, 2], \"n\": 0}'));
             UPDATE docs SET doc = automerge_set(doc, '{status}', '\"done\"');
             UPDATE docs SET doc = automerge_insert(doc, '{items,0}', '0');
             UPDATE docs SET doc = automerge_delete(doc, '{items,-1}');
             UPDATE docs SET doc = automerge_set_counter(doc, '{views}', 10);
             UPDATE docs SET doc = automerge_increment(doc, '{views}', 5);
             UPDATE docs SET doc = automerge_splice(doc, '{status}', 4, 0, '!', message => 'excited');",
        )
        .unwrap();
        assert_eq!(
            json_of("SELECT doc FROM docs"),
            r#"{"n": 0, "items": [0, 1], "title": "Plan", "views": 15, "status": "done!"}"#
        );
        Spi::run("UPDATE docs SET doc = automerge_update(doc, '{\"title\": \"Plan B\", \"items\": [0, 1, 2]}')")
            .unwrap();
        assert_eq!(json_of("SELECT doc FROM docs"), r#"{"items": [0, 1, 2], "title": "Plan B"}"#);
        let message = Spi::get_one::<String>(
            "SELECT message FROM docs, automerge_changes(doc) WHERE message IS NOT NULL",
        )
        .unwrap();
        assert_eq!(message.as_deref(), Some("excited"));
    }

    #[pg_test]
    fn refusals_have_their_sqlstates() {
        let doc = "automerge_update('\\x'::automerge, '{\"title\": \"Plan\", \"items\": [1]}')";
        let cases = [
            (format!("automerge_set({doc}, '{{items,5}}', '1')"), "2202E"),
            (format!("automerge_set({doc}, '{{items,x}}', '1')"), "22P02"),
            (format!("automerge_delete({doc}, '{{nope}}')"), "22023"),
            (format!("automerge_increment({doc}, '{{title}}')"), "42809"),
            (format!("automerge_splice({doc}, '{{title}}', 9, 0, 'x')"), "22011"),
        ];
        for (sql, sqlstate) in cases {
            assert_eq!(sqlstate_of(&format!("SELECT {sql}")), sqlstate, "{sql}");
        }
    }
}
