//! Edits from SQL (`automerge_set` and the rest, [`SqlEdit`]) on each fixture's row of
//! `bench_docs_edits`, against the `jsonb` write each mirrors on its row of
//! `bench_jsonb_edits`: rows of their own, since the other writes' authors must know every
//! change of theirs. An edit the structure index places appends, with no load.

use benches::sql_edits::SqlEdit;
use criterion::Criterion;
use tokio_postgres::types::ToSql;

use crate::session::{Path, Session};
use crate::tables::FixtureRows;
use crate::writes::{Writes, SAVE_ANEW_AT_THE_LIMIT};

/// What an edit writes, made before it (untimed): words, or a whole JSON for an update.
enum Input {
    Words(String),
    Json(serde_json::Value),
}

impl Input {
    fn param(&self) -> &(dyn ToSql + Sync) {
        match self {
            Input::Words(words) => words,
            Input::Json(json) => json,
        }
    }
}

/// The SQL of one edit on both columns (`$1` the row's name, `$2` the input), what is done
/// untimed before each, and whether the document shows the last edit (`$2` its input).
struct EditSql {
    ours: &'static str,
    jsonb: &'static str,
    before_each: Option<(&'static str, &'static str)>,
    shows: Option<&'static str>,
}

fn edit_sql(edit: SqlEdit) -> EditSql {
    let plain = |ours, jsonb, shows| EditSql { ours, jsonb, before_each: None, shows: Some(shows) };
    match edit {
        SqlEdit::Set => plain(
            "UPDATE bench_docs_edits SET doc = automerge_set(doc, '{status}', to_jsonb($2::text))
             WHERE name = $1",
            "UPDATE bench_jsonb_edits SET j = jsonb_set(j, '{status}', to_jsonb($2::text))
             WHERE name = $1",
            "SELECT doc->>'status' = $2 FROM bench_docs_edits WHERE name = $1",
        ),
        SqlEdit::Insert => plain(
            "UPDATE bench_docs_edits
             SET doc = automerge_insert(doc, '{items,0}', jsonb_build_object('text', $2::text, 'done', false))
             WHERE name = $1",
            "UPDATE bench_jsonb_edits
             SET j = jsonb_insert(j, '{items,0}', jsonb_build_object('text', $2::text, 'done', false))
             WHERE name = $1",
            "SELECT doc->'items'->0->>'text' = $2 FROM bench_docs_edits WHERE name = $1",
        ),
        SqlEdit::Delete => EditSql {
            ours: "UPDATE bench_docs_edits SET doc = automerge_delete(doc, '{scratch}')
                   WHERE name = $1 AND $2::text IS NOT NULL",
            jsonb: "UPDATE bench_jsonb_edits SET j = j #- '{scratch}'
                    WHERE name = $1 AND $2::text IS NOT NULL",
            before_each: Some((
                "UPDATE bench_docs_edits SET doc = automerge_set(doc, '{scratch}', '1') WHERE name = $1",
                "UPDATE bench_jsonb_edits SET j = jsonb_set(j, '{scratch}', '1') WHERE name = $1",
            )),
            shows: Some(
                "SELECT NOT doc::jsonb ? 'scratch' AND $2::text IS NOT NULL
                 FROM bench_docs_edits WHERE name = $1",
            ),
        },
        SqlEdit::Splice => plain(
            "UPDATE bench_docs_edits
             SET doc = automerge_splice(doc, '{content}', length(doc->>'content') / 2, 0, $2::text)
             WHERE name = $1",
            JSONB_TYPE,
            "SELECT strpos(doc->>'content', $2) > 0 FROM bench_docs_edits WHERE name = $1",
        ),
        SqlEdit::Increment => plain(
            "UPDATE bench_docs_edits SET doc = automerge_increment(doc, '{count}')
             WHERE name = $1 AND $2::text IS NOT NULL",
            "UPDATE bench_jsonb_edits
             SET j = jsonb_set(j, '{count}', to_jsonb(coalesce((j->>'count')::bigint, 0) + 1))
             WHERE name = $1 AND $2::text IS NOT NULL",
            "SELECT (doc->>'count')::bigint > 0 AND $2::text IS NOT NULL
             FROM bench_docs_edits WHERE name = $1",
        ),
        SqlEdit::Mark => plain(
            "UPDATE bench_docs_edits
             SET doc = automerge_mark(doc, '{content}', 0, 5, 'bench', to_jsonb($2::text))
             WHERE name = $1",
            "UPDATE bench_jsonb_edits SET j = j || jsonb_build_object('marked', $2::text) - 'marked'
             WHERE name = $1",
            "SELECT strpos(automerge_spans(doc, '{content}')::text, $2) > 0
             FROM bench_docs_edits WHERE name = $1",
        ),
        // A rich text holds block markers already: the change count alone says the splits
        // were made.
        SqlEdit::SplitBlock => EditSql {
            ours: "UPDATE bench_docs_edits
                   SET doc = automerge_split_block(doc, '{content}', length(doc->>'content') / 2)
                   WHERE name = $1 AND $2::text IS NOT NULL",
            jsonb: JSONB_TYPE,
            before_each: None,
            shows: None,
        },
        SqlEdit::Update => plain(
            "UPDATE bench_docs_edits SET doc = automerge_update(doc, $2::jsonb) WHERE name = $1",
            "UPDATE bench_jsonb_edits SET j = $2::jsonb WHERE name = $1",
            "SELECT doc::jsonb = $2::jsonb FROM bench_docs_edits WHERE name = $1",
        ),
    }
}

/// Words typed into the middle of the jsonb column's content.
const JSONB_TYPE: &str = "UPDATE bench_jsonb_edits
    SET j = jsonb_set(j, '{content}', to_jsonb(overlay(j->>'content' placing $2::text
                                                       from length(j->>'content') / 2 + 1 for 0)))
    WHERE name = $1";
const CHANGE_COUNT: &str =
    "SELECT automerge_change_count(doc) FROM bench_docs_edits WHERE name = $1";

/// Each [`SqlEdit`] that fits the fixture, timed on pg_automerge as it ships and on the
/// jsonb column; then the document shows the last edit, holds a change for every edit
/// made, and loads (`automerge_loads`): the edits were real and kept every value loadable.
pub fn sql_edits(c: &mut Criterion, session: &Session, rows: &FixtureRows) {
    let name = &rows.name;
    let save_anew = Path::Fast.sql(&SAVE_ANEW_AT_THE_LIMIT.replace("{docs}", "{docs}_edits"));
    session.use_path(Path::Fast);
    for edit in SqlEdit::ALL.into_iter().filter(|edit| edit.applies_to(rows.kind)) {
        let sql = edit_sql(edit);
        if edit == SqlEdit::Increment {
            session.execute(
                "UPDATE bench_docs_edits SET doc = automerge_set_counter(doc, '{count}')
                 WHERE name = $1",
                &[name],
            );
        }
        let changes_before: i64 = session.query_one(CHANGE_COUNT, &[name]);
        let words = || match edit {
            SqlEdit::SplitBlock => "\u{fffc}".to_string(),
            _ => rows.next_jsonb_edit(),
        };
        let input = |table: &str, before_each: Option<&str>| {
            if let Some(before_each) = before_each {
                session.execute(before_each, &[name]);
            }
            if table == "docs" {
                session.execute(&save_anew, &[name]);
            }
            match edit {
                SqlEdit::Update => {
                    let read = format!(
                        "SELECT {} FROM bench_{table}_edits WHERE name = $1",
                        if table == "docs" { "doc::jsonb" } else { "j" }
                    );
                    let mut json: serde_json::Value = session.query_one(&read, &[name]);
                    json["title"] = serde_json::Value::String(words());
                    Input::Json(json)
                }
                _ => Input::Words(words()),
            }
        };
        let mut group = Writes::new(c, &edit.operation(), session, name);
        let (mut edits, mut last) = (0, None);
        group.path(
            Path::Fast,
            || input("docs", sql.before_each.map(|(ours, _)| ours)),
            |made| {
                session.execute(sql.ours, &[name, made.param()]);
                edits += 1;
                last = Some(made);
            },
        );
        group.jsonb(
            || input("jsonb", sql.before_each.map(|(_, jsonb)| jsonb)),
            |made| session.execute(sql.jsonb, &[name, made.param()]),
        );
        group.finish();

        // A --filter that leaves this edit out ran nothing to check.
        let Some(last) = last else { continue };
        let function = edit.function();
        if let Some(shows) = sql.shows {
            assert!(session.query_one::<bool>(shows, &[name, last.param()]), "{name}: {function}");
        }
        let changes: i64 = session.query_one(CHANGE_COUNT, &[name]);
        assert!(changes - changes_before >= edits, "{name}: {function} made {edits} edits");
    }
    let loads: bool = session
        .query_one("SELECT automerge_loads(doc) FROM bench_docs_edits WHERE name = $1", &[name]);
    assert!(loads, "{name}: the edited document does not load");
}
