//! The writes: a client's incremental writes and full saves, on both paths and on the jsonb
//! column, and the writes a JS client sends, which append without a load.

use std::cell::RefMut;

use benches::operations::{
    GENERATED_COLUMN_WRITE, INCREMENTAL_WRITE, TEXT_EDIT_THEN_READ, UPSERT_FULL_SAVE,
};
use benches::{configure, record_memory, selected, Author, ClientWrite, JSONB};
use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, BenchmarkId, Criterion};
use fixtures::generated::Kind;

use crate::session::{Path, Session};
use crate::tables::FixtureRows;

/// What a jsonb column does for each [`ClientWrite`], of the `$2` text it is given: the same
/// change to its JSON (a mark changes none: the whole value is written again).
fn jsonb_client_write(write: ClientWrite) -> &'static str {
    match write {
        ClientWrite::TitleAsText => JSONB_SET_TITLE,
        ClientWrite::Splice => {
            "UPDATE bench_jsonb
             SET j = jsonb_set(j, '{content}', to_jsonb(overlay(j->>'content' placing $2::text
                                                     from length(j->>'content') / 2 + 1 for 3)))
             WHERE name = $1"
        }
        ClientWrite::Mark => "UPDATE bench_jsonb SET j = j || jsonb_build_object('marked', $2::text) - 'marked' WHERE name = $1",
        ClientWrite::BlockSplit => JSONB_TYPE,
        ClientWrite::NestedField => {
            "UPDATE bench_jsonb
             SET j = jsonb_set(j, ARRAY['items', (jsonb_array_length(j->'items') / 2)::text, 'done'],
                               to_jsonb($2::text))
             WHERE name = $1"
        }
        ClientWrite::ListInsert => {
            "UPDATE bench_jsonb
             SET j = jsonb_insert(j, ARRAY['items', (jsonb_array_length(j->'items') / 2)::text],
                                  jsonb_build_object('text', $2::text, 'done', false))
             WHERE name = $1"
        }
        // Both keep one item: a quick run on the small fixtures deletes more items than the
        // list holds, and a move in an empty list would write NULL.
        ClientWrite::ListDelete => {
            "UPDATE bench_jsonb SET j = j #- ARRAY['items', (jsonb_array_length(j->'items') / 2)::text]
             WHERE name = $1 AND $2::text IS NOT NULL AND jsonb_array_length(j->'items') > 1"
        }
        ClientWrite::ListMove => {
            "UPDATE bench_jsonb
             SET j = jsonb_insert(j #- ARRAY['items', (jsonb_array_length(j->'items') / 2)::text],
                                  ARRAY['items', (jsonb_array_length(j->'items') / 4)::text],
                                  j->'items'->(jsonb_array_length(j->'items') / 2))
             WHERE name = $1 AND $2::text IS NOT NULL AND jsonb_array_length(j->'items') > 1"
        }
        ClientWrite::CounterIncrement => {
            "UPDATE bench_jsonb SET j = jsonb_set(j, '{count}', to_jsonb(coalesce((j->>'count')::bigint, 0) + 1))
             WHERE name = $1 AND $2::text IS NOT NULL"
        }
    }
}

/// Each [`ClientWrite`] that fits the fixture, as `doc || change` on the fast path (a row
/// at `append_limit` saved anew first, untimed), and its jsonb counterpart; then the stored
/// JSON is the author's, so the writes were real.
pub fn client_writes(c: &mut Criterion, session: &Session, rows: &FixtureRows) {
    let name = &rows.name;
    for write in ClientWrite::ALL.into_iter().filter(|write| write.applies_to(rows.kind)) {
        let mut group = Writes::new(c, write.operation(), session, name);
        let apply = Path::Fast.sql(APPLY);
        let save_anew = Path::Fast.sql(SAVE_ANEW_AT_THE_LIMIT);
        if write == ClientWrite::CounterIncrement {
            // The first such write creates the counter: made here, untimed, so that the
            // write whose memory and loads are recorded is an increment.
            session.use_path(Path::Fast);
            session.execute(&apply, &[name, &rows.author(Path::Fast).client_write(write)]);
        }
        group.path(
            Path::Fast,
            || {
                session.execute(&save_anew, &[name]);
                rows.author(Path::Fast).client_write(write)
            },
            |change| session.execute(&apply, &[name, &change]),
        );
        let words = || match write {
            ClientWrite::BlockSplit => "\u{fffc}".to_string(),
            _ => rows.next_jsonb_edit(),
        };
        group.jsonb(words, |words| session.execute(jsonb_client_write(write), &[name, &words]));
        group.finish();
    }
    session.use_path(Path::Fast);
    let stored: serde_json::Value = session
        .query_one(&Path::Fast.sql("SELECT doc::jsonb FROM {docs} WHERE name = $1"), &[name]);
    assert!(
        stored == rows.author(Path::Fast).json(),
        "{name}: the stored JSON is not the author's"
    );
}

/// An incremental write: change bytes applied to the stored document.
pub const APPLY: &str = "UPDATE {docs} SET doc = doc || $2::bytea WHERE name = $1";
/// Untimed before each client write: a row holding `append_limit` appended changes is saved
/// anew, as the compactor does off the write path, so that the timed write is the one the
/// goal names, an appending write with no load. The write past the limit, which saves anew
/// itself, is the retitle stream's (`sql/incremental write`).
pub const SAVE_ANEW_AT_THE_LIMIT: &str = "UPDATE {docs} SET doc = automerge_compact(doc)
    WHERE name = $1
      AND automerge_appended_changes(doc) >= current_setting('pg_automerge.append_limit')::int";
const APPLY_GENERATED: &str = "UPDATE {docs}_generated SET doc = doc || $2::bytea WHERE name = $1";
/// A client's full save, merged into the stored document.
pub const UPSERT: &str = "INSERT INTO {docs} VALUES ($1, $2::bytea::automerge)
                      ON CONFLICT (name) DO UPDATE SET doc = {docs}.doc || excluded.doc";
const READ_CONTENT: &str = "SELECT length(doc->>'content') FROM {docs} WHERE name = $1";
pub const JSONB_SET_TITLE: &str =
    "UPDATE bench_jsonb SET j = jsonb_set(j, '{title}', to_jsonb($2::text)) WHERE name = $1";
pub const JSONB_UPSERT: &str =
    "INSERT INTO bench_jsonb VALUES ($1, jsonb_set($3, '{title}', to_jsonb($2::text)))
                            ON CONFLICT (name) DO UPDATE SET j = excluded.j";
/// The jsonb counterpart of typing into the middle of the content.
const JSONB_TYPE: &str = "UPDATE bench_jsonb
                          SET j = jsonb_set(j, '{content}', to_jsonb(overlay(j->>'content' placing $2::text
                                                                     from length(j->>'content') / 2 + 1 for 0)))
                          WHERE name = $1";
const JSONB_READ_CONTENT: &str = "SELECT length(j->>'content') FROM bench_jsonb WHERE name = $1";

/// One group of writes to one fixture's rows: each variant makes one write per iteration,
/// of an input made before it (untimed).
pub struct Writes<'a> {
    group: BenchmarkGroup<'a, WallTime>,
    name: String,
    session: &'a Session,
    fixture: &'a str,
}

impl<'a> Writes<'a> {
    pub fn new(
        c: &'a mut Criterion,
        operation: &str,
        session: &'a Session,
        fixture: &'a str,
    ) -> Writes<'a> {
        let name = format!("sql/{operation}");
        let mut group = c.benchmark_group(&name);
        configure(&mut group);
        Writes { group, name, session, fixture }
    }

    /// pg_automerge's writes on `path`, under its settings; one write's memory is recorded
    /// first.
    pub fn path<I, O>(
        &mut self,
        path: Path,
        mut input: impl FnMut() -> I,
        mut write: impl FnMut(I) -> O,
    ) {
        self.session.use_path(path);
        if selected(&format!("{}/{}/{}", self.name, path.variant(), self.fixture)) {
            let input = input();
            let memory = self.session.memory(|| {
                write(input);
            });
            record_memory(&self.name, path.variant(), self.fixture, memory);
        }
        self.bench(path.variant(), input, write);
    }

    pub fn jsonb<I, O>(&mut self, input: impl FnMut() -> I, write: impl FnMut(I) -> O) {
        self.bench(JSONB, input, write);
    }

    fn bench<I, O>(
        &mut self,
        variant: &str,
        mut input: impl FnMut() -> I,
        mut write: impl FnMut(I) -> O,
    ) {
        self.group.bench_function(BenchmarkId::new(variant, self.fixture), |b| {
            b.iter_batched(&mut input, &mut write, BatchSize::PerIteration)
        });
    }

    pub fn finish(self) {
        self.group.finish();
    }
}

/// One group of retitles: on both paths, a change applied by `apply` (on `{docs}`, or a
/// table named after it) to the row whose author `author` gives; on the jsonb column,
/// `jsonb_set` of the title.
fn retitles<'r>(
    c: &mut Criterion,
    session: &Session,
    rows: &'r FixtureRows,
    operation: &str,
    apply: &str,
    author: impl Fn(Path) -> RefMut<'r, Author>,
) {
    let name = &rows.name;
    let mut group = Writes::new(c, operation, session, name);
    for path in Path::BOTH {
        let apply = path.sql(apply);
        group.path(
            path,
            || author(path).retitle().1,
            |change| session.execute(&apply, &[name, &change]),
        );
    }
    group.jsonb(
        || rows.next_jsonb_edit(),
        |title| session.execute(JSONB_SET_TITLE, &[name, &title]),
    );
    group.finish();
}

/// The writes, each bringing a change the stored document lacks, on both paths and on the
/// jsonb column: a retitle (`doc || change`; `jsonb_set` of the title), the same to a table
/// that regenerates `doc::jsonb` into a column, an upsert of a full save (of the whole JSON),
/// and, on the texts, typing into the content followed by a read of it: a change the fast
/// path appends but cannot patch into the kept JSON, so the read after it loads.
pub fn writes(c: &mut Criterion, session: &Session, rows: &FixtureRows) {
    let name = &rows.name;
    retitles(c, session, rows, INCREMENTAL_WRITE, APPLY, |path| rows.author(path));
    retitles(c, session, rows, GENERATED_COLUMN_WRITE, APPLY_GENERATED, |path| {
        rows.generated_author(path)
    });

    let mut group = Writes::new(c, UPSERT_FULL_SAVE, session, name);
    for path in Path::BOTH {
        let upsert = path.sql(UPSERT);
        group.path(path, || rows.next_save(path), |save| session.execute(&upsert, &[name, &save]));
    }
    group.jsonb(
        || rows.next_jsonb_edit(),
        |title| session.execute(JSONB_UPSERT, &[name, &title, &rows.json]),
    );
    group.finish();

    if rows.kind != Kind::MapList {
        let mut group = Writes::new(c, TEXT_EDIT_THEN_READ, session, name);
        for path in Path::BOTH {
            let (apply, read) = (path.sql(APPLY), path.sql(READ_CONTENT));
            group.path(
                path,
                || rows.author(path).type_into_content(),
                |change| {
                    session.execute(&apply, &[name, &change]);
                    session.query_one::<i32>(&read, &[name])
                },
            );
        }
        group.jsonb(
            || rows.next_jsonb_edit(),
            |words| {
                session.execute(JSONB_TYPE, &[name, &words]);
                session.query_one::<i32>(JSONB_READ_CONTENT, &[name])
            },
        );
        group.finish();
    }

    // Every change the writes made is in the stored documents, and in what reads of them
    // return: the benches measured real writes, not refusals or no-ops.
    for path in Path::BOTH {
        session.use_path(path);
        let (author, generated_author) = (rows.author(path), rows.generated_author(path));
        let stored = session.query_row(
            &path.sql("SELECT doc->>'title', doc->>'content' FROM {docs} WHERE name = $1"),
            &[name],
        );
        assert_eq!(stored.get::<_, String>(0), author.title(), "{name}: {}", path.variant());
        if rows.kind != Kind::MapList {
            let content: String = stored.get(1);
            assert!(content == author.content(), "{name}: {}: the content differs", path.variant());
        }
        let generated = session.query_row(
            &path.sql("SELECT doc->>'title', body->>'title' FROM {docs}_generated WHERE name = $1"),
            &[name],
        );
        let title = generated_author.title();
        assert_eq!(
            (generated.get::<_, String>(0), generated.get::<_, String>(1)),
            (title.clone(), title),
            "{name}"
        );
    }
}
