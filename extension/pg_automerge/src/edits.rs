//! Edits from SQL, named after the jsonb functions they mirror, each returning the edited
//! document: `automerge_set` (`jsonb_set`), `automerge_insert` (`jsonb_insert`),
//! `automerge_delete` (`#-`), `automerge_increment`, `automerge_set_counter`,
//! `automerge_splice`, `automerge_mark`, `automerge_unmark`, `automerge_split_block` and
//! `automerge_update`. Each is one Automerge change by this backend's actor, stamped with
//! the transaction's start time (or a given `change_time`) and an optional message. Volatile: two calls on one
//! document make two changes. `edit_changes.rs` defines the variants that return the
//! change instead; both build their edit with the functions here.

// Each function takes its SQL function's arguments one by one, as pgrx maps them.
#![allow(clippy::too_many_arguments)]

use automerge::marks::ExpandMark;
use pg_automerge_core::edits::{self, ChangeMeta, Edit, Edited, Strings};
use pg_automerge_core::Error;
use pgrx::prelude::*;
use pgrx::JsonB;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::gucs;

/// Milliseconds between the Unix epoch and PostgreSQL's (2000-01-01).
const POSTGRES_EPOCH_MS: i64 = 946_684_800_000;

/// A change's message and time: `change_time` when given, else the transaction's start,
/// as `now()` stamps a row.
fn meta(
    message: Option<&str>,
    change_time: Option<TimestampWithTimeZone>,
) -> Result<ChangeMeta, Error> {
    let micros = match change_time {
        Some(time) if time.is_infinity() || time.is_neg_infinity() => {
            return Err(Error::InvalidParameter("change_time must be a finite timestamp".into()))
        }
        Some(time) => time.into_inner(),
        // SAFETY: reads the current transaction's start time, which every backend has.
        None => unsafe { pg_sys::GetCurrentTransactionStartTimestamp() },
    };
    Ok(ChangeMeta {
        message: message.map(str::to_string),
        time: micros.div_euclid(1000) + POSTGRES_EPOCH_MS,
    })
}

pub(crate) fn strings(plain: bool) -> Strings {
    if plain {
        Strings::Plain
    } else {
        Strings::Text
    }
}

/// The edit made; `None` (the function returns NULL) when the document, or an argument
/// the edit needs, is NULL, as `jsonb_set` is strict in them.
pub(crate) fn edited(
    doc: Option<StoredDoc<'_>>,
    edit: Option<Edit>,
    message: Option<&str>,
    change_time: Option<TimestampWithTimeZone>,
    function: &'static str,
) -> Option<Edited> {
    let (doc, edit) = (doc?, edit?);
    let meta = meta(message, change_time).or_raise(function);
    Some(edits::edit(doc.stored(), &edit, &meta, gucs::write_settings()).or_raise(function))
}

fn document(edited: Option<Edited>) -> Option<StoredDoc<'static>> {
    edited.map(|edited| StoredDoc::owned(edited.stored))
}

pub(crate) fn set(path: Option<Vec<String>>, value: Option<JsonB>, plain: bool) -> Option<Edit> {
    Some(Edit::Set { path: path?, value: value?.0, strings: strings(plain) })
}

pub(crate) fn insert(
    path: Option<Vec<String>>,
    value: Option<JsonB>,
    after: bool,
    plain: bool,
) -> Option<Edit> {
    Some(Edit::Insert { path: path?, value: value?.0, strings: strings(plain), after })
}

pub(crate) fn splice(
    path: Option<Vec<String>>,
    pos: Option<i64>,
    delete: Option<i64>,
    text: &str,
) -> Option<Edit> {
    Some(Edit::Splice { path: path?, pos: pos?, delete: delete?, text: text.to_string() })
}

/// A mark of `start..end`; a NULL `value` unmarks.
pub(crate) fn mark(
    path: Option<Vec<String>>,
    (start, end): (Option<i64>, Option<i64>),
    name: Option<&str>,
    value: Option<JsonB>,
    expand: &str,
    function: &'static str,
) -> Option<Edit> {
    let expand = expand_of(expand).or_raise(function);
    let value = value.map_or(serde_json::Value::Null, |value| value.0);
    Some(Edit::Mark {
        path: path?,
        start: start?,
        end: end?,
        name: name?.to_string(),
        value,
        expand,
    })
}

/// How a mark grows when text is typed at its ends, named as `@automerge/automerge` names it.
fn expand_of(expand: &str) -> Result<ExpandMark, Error> {
    match expand {
        "before" => Ok(ExpandMark::Before),
        "after" => Ok(ExpandMark::After),
        "both" => Ok(ExpandMark::Both),
        "none" => Ok(ExpandMark::None),
        other => Err(Error::InvalidParameter(format!(
            "expand is 'before', 'after', 'both' or 'none', not '{other}'"
        ))),
    }
}

pub(crate) fn split_block(
    path: Option<Vec<String>>,
    pos: Option<i64>,
    block: Option<JsonB>,
) -> Option<Edit> {
    Some(Edit::SplitBlock { path: path?, pos: pos?, block: block?.0 })
}

pub(crate) fn update(value: Option<JsonB>, plain: bool) -> Option<Edit> {
    Some(Edit::Update { json: value?.0, strings: strings(plain) })
}

#[pg_extern(volatile)]
fn automerge_set(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    value: Option<JsonB>,
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
    plain_strings: default!(bool, false),
) -> Option<StoredDoc<'static>> {
    document(edited(doc, set(path, value, plain_strings), message, change_time, "automerge_set"))
}

#[pg_extern(volatile)]
fn automerge_insert(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    value: Option<JsonB>,
    insert_after: default!(bool, false),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
    plain_strings: default!(bool, false),
) -> Option<StoredDoc<'static>> {
    document(edited(
        doc,
        insert(path, value, insert_after, plain_strings),
        message,
        change_time,
        "automerge_insert",
    ))
}

#[pg_extern(volatile)]
fn automerge_delete(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<StoredDoc<'static>> {
    document(edited(
        doc,
        path.map(|path| Edit::Delete { path }),
        message,
        change_time,
        "automerge_delete",
    ))
}

#[pg_extern(volatile)]
fn automerge_set_counter(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    value: default!(i64, 0),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<StoredDoc<'static>> {
    document(edited(
        doc,
        path.map(|path| Edit::SetCounter { path, value }),
        message,
        change_time,
        "automerge_set_counter",
    ))
}

#[pg_extern(volatile)]
fn automerge_increment(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    by: default!(i64, 1),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<StoredDoc<'static>> {
    document(edited(
        doc,
        path.map(|path| Edit::Increment { path, by }),
        message,
        change_time,
        "automerge_increment",
    ))
}

#[pg_extern(volatile)]
fn automerge_splice(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    pos: Option<i64>,
    delete_count: Option<i64>,
    text: default!(&str, "''"),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<StoredDoc<'static>> {
    document(edited(
        doc,
        splice(path, pos, delete_count, text),
        message,
        change_time,
        "automerge_splice",
    ))
}

#[pg_extern(volatile)]
fn automerge_mark(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    start_pos: Option<i64>,
    end_pos: Option<i64>,
    name: Option<&str>,
    value: default!(Option<JsonB>, "'true'"),
    expand: default!(&str, "'after'"),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<StoredDoc<'static>> {
    document(edited(
        doc,
        mark(path, (start_pos, end_pos), name, value, expand, "automerge_mark"),
        message,
        change_time,
        "automerge_mark",
    ))
}

#[pg_extern(volatile)]
fn automerge_unmark(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    start_pos: Option<i64>,
    end_pos: Option<i64>,
    name: Option<&str>,
    expand: default!(&str, "'after'"),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<StoredDoc<'static>> {
    document(edited(
        doc,
        mark(path, (start_pos, end_pos), name, None, expand, "automerge_unmark"),
        message,
        change_time,
        "automerge_unmark",
    ))
}

#[pg_extern(volatile)]
fn automerge_split_block(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    pos: Option<i64>,
    block: default!(Option<JsonB>, "'{\"type\": \"paragraph\", \"parents\": [], \"attrs\": {}}'"),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<StoredDoc<'static>> {
    document(edited(
        doc,
        split_block(path, pos, block),
        message,
        change_time,
        "automerge_split_block",
    ))
}

#[pg_extern(volatile)]
fn automerge_update(
    doc: Option<StoredDoc<'_>>,
    value: Option<JsonB>,
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
    plain_strings: default!(bool, false),
) -> Option<StoredDoc<'static>> {
    document(edited(doc, update(value, plain_strings), message, change_time, "automerge_update"))
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
    fn marks_blocks_and_changes() {
        let text = |sql: &str| Spi::get_one::<String>(sql).unwrap().unwrap();
        let with_doc = "WITH d AS (SELECT automerge_update('\\x'::automerge, '{\"body\": \"Hello world\"}') AS doc)";
        let marked = text(&format!(
            "{with_doc} SELECT automerge_spans(automerge_mark(doc, '{{body}}', 0, 5, 'bold'), '{{body}}')::text FROM d"
        ));
        assert_eq!(
            marked,
            r#"[{"type": "text", "marks": {"bold": true}, "value": "Hello"}, {"type": "text", "value": " world"}]"#
        );
        let unmarked = text(&format!(
            "{with_doc} SELECT automerge_spans(automerge_unmark(automerge_mark(doc, '{{body}}', 0, 5, 'bold'), \
             '{{body}}', 0, 5, 'bold'), '{{body}}')::text FROM d"
        ));
        assert!(!unmarked.contains("bold"), "{unmarked}");
        let split = text(&format!(
            "{with_doc} SELECT automerge_split_block(doc, '{{body}}', 5)->>'body' FROM d"
        ));
        assert_eq!(split, "Hello\u{fffc} world");
        // A change variant's bytes, applied to the document, make the same edit.
        let applied = text(&format!(
            "{with_doc} SELECT (doc || automerge_set_change(doc, '{{x}}', '\"y\"'))->>'x' FROM d"
        ));
        assert_eq!(applied, "y");
        let nothing = Spi::get_one::<Vec<u8>>(&format!(
            "{with_doc} SELECT automerge_update_change(doc, doc::jsonb) FROM d"
        ))
        .unwrap();
        assert!(nothing.is_none(), "an update to the same JSON makes no change");
    }

    #[pg_test]
    fn a_change_time_stamps_the_change_else_the_transaction_start() {
        let times = Spi::get_one::<String>(
            "WITH d AS (SELECT automerge_set(automerge_set('\\x'::automerge, '{a}', '1'), '{b}', '2', \
             change_time => '2001-02-03 04:05:06.789+00') AS doc) \
             SELECT string_agg(CASE WHEN time = date_trunc('milliseconds', now()) THEN 'now' \
             ELSE (time AT TIME ZONE 'UTC')::text END, ', ' \
             ORDER BY seq) FROM d, automerge_changes(doc)",
        )
        .unwrap();
        assert_eq!(times.as_deref(), Some("now, 2001-02-03 04:05:06.789"));
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
            (
                format!("automerge_mark({doc}, '{{title}}', 0, 2, 'b', expand => 'sideways')"),
                "22023",
            ),
            (format!("automerge_set({doc}, '{{x}}', '1', change_time => 'infinity')"), "22023"),
        ];
        for (sql, sqlstate) in cases {
            assert_eq!(sqlstate_of(&format!("SELECT {sql}")), sqlstate, "{sql}");
        }
    }
}
