//! The edits of `edits.rs` returning the change each makes (`bytea`, as
//! `automerge_changes` shows changes) instead of the document, for callers that forward
//! changes to clients themselves: `automerge_set_change`, `automerge_insert_change`, and so
//! on for every edit. The document is not stored; NULL when the edit changes nothing (an
//! update to the JSON the document has).

// Each function takes its SQL function's arguments one by one, as pgrx maps them.
#![allow(clippy::too_many_arguments)]

use pg_automerge_core::edits::{Edit, Edited};
use pgrx::prelude::*;
use pgrx::JsonB;

use crate::datum::StoredDoc;
use crate::edits::{edited, insert, mark, set, splice, split_block, update};

fn change(edited: Option<Edited>) -> Option<Vec<u8>> {
    edited?.change
}

#[pg_extern(volatile)]
fn automerge_set_change(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    value: Option<JsonB>,
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
    plain_strings: default!(bool, false),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        set(path, value, plain_strings),
        message,
        change_time,
        "automerge_set_change",
    ))
}

#[pg_extern(volatile)]
fn automerge_insert_change(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    value: Option<JsonB>,
    insert_after: default!(bool, false),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
    plain_strings: default!(bool, false),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        insert(path, value, insert_after, plain_strings),
        message,
        change_time,
        "automerge_insert_change",
    ))
}

#[pg_extern(volatile)]
fn automerge_delete_change(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        path.map(|path| Edit::Delete { path }),
        message,
        change_time,
        "automerge_delete_change",
    ))
}

#[pg_extern(volatile)]
fn automerge_set_counter_change(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    value: default!(i64, 0),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        path.map(|path| Edit::SetCounter { path, value }),
        message,
        change_time,
        "automerge_set_counter_change",
    ))
}

#[pg_extern(volatile)]
fn automerge_increment_change(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    by: default!(i64, 1),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        path.map(|path| Edit::Increment { path, by }),
        message,
        change_time,
        "automerge_increment_change",
    ))
}

#[pg_extern(volatile)]
fn automerge_splice_change(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    pos: Option<i64>,
    delete_count: Option<i64>,
    text: default!(&str, "''"),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        splice(path, pos, delete_count, text),
        message,
        change_time,
        "automerge_splice_change",
    ))
}

#[pg_extern(volatile)]
fn automerge_mark_change(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    start_pos: Option<i64>,
    end_pos: Option<i64>,
    name: Option<&str>,
    value: default!(Option<JsonB>, "'true'"),
    expand: default!(&str, "'after'"),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        mark(path, (start_pos, end_pos), name, value, expand, "automerge_mark_change"),
        message,
        change_time,
        "automerge_mark_change",
    ))
}

#[pg_extern(volatile)]
fn automerge_unmark_change(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    start_pos: Option<i64>,
    end_pos: Option<i64>,
    name: Option<&str>,
    expand: default!(&str, "'after'"),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        mark(path, (start_pos, end_pos), name, None, expand, "automerge_unmark_change"),
        message,
        change_time,
        "automerge_unmark_change",
    ))
}

#[pg_extern(volatile)]
fn automerge_split_block_change(
    doc: Option<StoredDoc<'_>>,
    path: Option<Vec<String>>,
    pos: Option<i64>,
    block: default!(Option<JsonB>, "'{\"type\": \"paragraph\", \"parents\": [], \"attrs\": {}}'"),
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        split_block(path, pos, block),
        message,
        change_time,
        "automerge_split_block_change",
    ))
}

#[pg_extern(volatile)]
fn automerge_update_change(
    doc: Option<StoredDoc<'_>>,
    value: Option<JsonB>,
    message: default!(Option<&str>, "NULL"),
    change_time: default!(Option<TimestampWithTimeZone>, "NULL"),
    plain_strings: default!(bool, false),
) -> Option<Vec<u8>> {
    change(edited(
        doc,
        update(value, plain_strings),
        message,
        change_time,
        "automerge_update_change",
    ))
}
