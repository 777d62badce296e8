//! SQL level, against the cluster `cargo xtask bench` starts (`PG_AUTOMERGE_CONNECTION`):
//! each read and write users make, on a table of documents, three ways in one run:
//! pg_automerge as it ships (values keep their document's JSON, small writes append their
//! changes), the naive path it replaces (`NAIVE`: values written without their JSON, so
//! every read loads the document, and writes that load, apply and save it), and the same
//! read or write on a plain `jsonb` column holding the same JSON. Peak Rust heap and loads
//! come from the server's `automerge_memory_usage()`; stored sizes and the WAL of writes
//! go to the storage file.

use std::cell::{Cell, RefCell, RefMut};

use benches::{
    configure, criterion, fixtures, forks, js_fixtures, record_memory, record_storage, selected,
    Author, ClientWrite, Fixture, Memory, JSONB, NAIVE, OURS,
};
use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, BenchmarkId, Criterion};
use fixtures::generated::Kind;
use tokio::runtime::Runtime;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row};

/// A connection and the runtime that drives it, used synchronously by criterion.
struct Session {
    runtime: Runtime,
    client: Client,
}

impl Session {
    fn connect() -> Session {
        let conninfo = std::env::var("PG_AUTOMERGE_CONNECTION").expect(
            "PG_AUTOMERGE_CONNECTION names the cluster to benchmark (cargo xtask bench sets it)",
        );
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (client, connection) =
            runtime.block_on(tokio_postgres::connect(&conninfo, NoTls)).unwrap();
        runtime.spawn(connection);
        Session { runtime, client }
    }

    fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> u64 {
        self.runtime.block_on(self.client.execute(sql, params)).unwrap_or_else(|e| fail(sql, e))
    }

    fn batch(&self, sql: &str) {
        self.runtime.block_on(self.client.batch_execute(sql)).unwrap_or_else(|e| fail(sql, e))
    }

    fn query_row(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Row {
        self.runtime.block_on(self.client.query_one(sql, params)).unwrap_or_else(|e| fail(sql, e))
    }

    fn query_one<T: for<'a> tokio_postgres::types::FromSql<'a>>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> T {
        self.query_row(sql, params).get(0)
    }

    /// Runs `work` once and returns the peak Rust heap it took in the backend, and how many
    /// documents it loaded.
    fn memory(&self, work: impl FnOnce()) -> Memory {
        let before: i64 = self.query_one(
            "SELECT allocated_bytes FROM automerge_memory_usage(), automerge_memory_reset()",
            &[],
        );
        work();
        let usage =
            self.query_row("SELECT peak_allocated_bytes, loads FROM automerge_memory_usage()", &[]);
        Memory {
            peak_bytes: (usage.get::<_, i64>(0) - before).max(0) as u64,
            loads: Some(usage.get::<_, i64>(1) as u64),
        }
    }

    /// The WAL one write inserts: the median over `WAL_SAMPLES` writes, each of a new
    /// `input`, since a checkpoint's full-page images or autovacuum can land in any one.
    fn wal_bytes<I>(&self, mut input: impl FnMut() -> I, mut write: impl FnMut(I)) -> i64 {
        let mut samples: Vec<i64> = (0..WAL_SAMPLES)
            .map(|_| {
                let input = input();
                let before: String =
                    self.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]);
                write(input);
                self.query_one(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::bigint",
                    &[&before],
                )
            })
            .collect();
        samples.sort_unstable();
        samples[samples.len() / 2]
    }

    /// Sets the session's pg_automerge settings to `path`'s: what it writes follows them.
    fn use_path(&self, path: Path) {
        self.batch(match path {
            Path::Fast => "RESET pg_automerge.keep_jsonb; RESET pg_automerge.append_limit",
            Path::Naive => "SET pg_automerge.keep_jsonb = off; SET pg_automerge.append_limit = 0",
        });
    }
}

const WAL_SAMPLES: usize = 5;

fn fail(sql: &str, error: tokio_postgres::Error) -> ! {
    match error.as_db_error() {
        Some(db) => panic!("{sql}: {}: {}", db.code().code(), db.message()),
        None => panic!("{sql}: {error}"),
    }
}

/// How pg_automerge runs: as it ships, or on the naive path. Each path has tables of its
/// own, written under its settings, so that its values are stored as that path stores them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Fast,
    Naive,
}

impl Path {
    const BOTH: [Path; 2] = [Path::Fast, Path::Naive];

    fn variant(self) -> &'static str {
        match self {
            Path::Fast => OURS,
            Path::Naive => NAIVE,
        }
    }

    /// `sql` on this path's tables: `{docs}` is its table of documents, which the names of
    /// its other tables start with.
    fn sql(self, sql: &str) -> String {
        sql.replace(
            "{docs}",
            match self {
                Path::Fast => "bench_docs",
                Path::Naive => "naive_docs",
            },
        )
    }
}

const SCHEMA: &str = "
DROP TABLE IF EXISTS bench_jsonb, bench_jsonb_indexed, bench_forks;
CREATE TABLE bench_jsonb (name text PRIMARY KEY, j jsonb NOT NULL);
CREATE TABLE bench_jsonb_indexed (name text PRIMARY KEY, j jsonb NOT NULL);
CREATE INDEX ON bench_jsonb_indexed USING gin (j) WITH (fastupdate = off);
CREATE TABLE bench_forks (name text, doc automerge NOT NULL);
";

/// Each path's tables of documents.
const DOCS_SCHEMA: &str = "
DROP TABLE IF EXISTS {docs}, {docs}_indexed, {docs}_generated;
CREATE TABLE {docs} (name text PRIMARY KEY, doc automerge NOT NULL);
CREATE TABLE {docs}_indexed (name text PRIMARY KEY, doc automerge NOT NULL);
CREATE INDEX ON {docs}_indexed USING gin ((doc::jsonb)) WITH (fastupdate = off);
CREATE TABLE {docs}_generated (
    name text PRIMARY KEY,
    doc automerge NOT NULL,
    body jsonb GENERATED ALWAYS AS (doc::jsonb) STORED
);
";

/// Fills the tables with one row per fixture (and its two forks for `merge_agg`).
fn load_tables(session: &Session, fixtures: &[Fixture]) {
    session.batch(SCHEMA);
    for path in Path::BOTH {
        session.use_path(path);
        session.batch(&path.sql(DOCS_SCHEMA));
        let insert = path.sql("INSERT INTO {docs} VALUES ($1, $2::bytea::automerge)");
        for fixture in fixtures {
            session.execute(&insert, &[&fixture.name(), &fixture.save]);
        }
        session.batch(&path.sql(
            "INSERT INTO {docs}_indexed SELECT * FROM {docs};
             INSERT INTO {docs}_generated (name, doc) SELECT * FROM {docs};",
        ));
    }
    session.use_path(Path::Fast);
    for fixture in fixtures {
        let (left, right) = forks(&fixture.save);
        for fork in [left, right] {
            session.execute(
                "INSERT INTO bench_forks VALUES ($1, $2::bytea::automerge)",
                &[&fixture.name(), &fork],
            );
        }
        // The JSON a value keeps is the JSON its document loads to.
        let same: bool = session.query_one(
            "SELECT fast.doc::jsonb = naive.doc::jsonb
             FROM bench_docs fast JOIN naive_docs naive USING (name) WHERE name = $1",
            &[&fixture.name()],
        );
        assert!(same, "{}: the kept JSON differs from the loaded document's", fixture.name());
    }
    session.batch(
        "INSERT INTO bench_jsonb SELECT name, doc::jsonb FROM bench_docs;
         INSERT INTO bench_jsonb_indexed SELECT * FROM bench_jsonb;",
    );
    // VACUUM runs outside a transaction: a statement of its own.
    session.batch("VACUUM ANALYZE");
    // One row per fixture: make the containment queries use their indexes, as they would on
    // a table of many documents.
    session.batch("SET enable_seqscan = off");
}

/// A read, for each variant that has it, recorded with its memory for pg_automerge's.
struct Read {
    group: &'static str,
    /// On `{docs}` (see `Path::sql`).
    automerge: &'static str,
    /// Whether the naive path is measured beside the fast one: for the reads the kept JSON
    /// answers. The others read the same on both paths.
    naive: bool,
    jsonb: Option<&'static str>,
    /// What `$1` is.
    param: Param,
    /// Only on the fixtures with a `content` text.
    texts_only: bool,
}

enum Param {
    /// The fixture's row name.
    Name,
    /// The fixture's title, which the containment queries look for.
    Title,
}

const READS: [Read; 12] = [
    Read {
        group: "read title",
        automerge: "SELECT doc->>'title' FROM {docs} WHERE name = $1",
        naive: true,
        jsonb: Some("SELECT j->>'title' FROM bench_jsonb WHERE name = $1"),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "to jsonb",
        automerge: "SELECT doc::jsonb FROM {docs} WHERE name = $1",
        naive: true,
        jsonb: Some("SELECT j FROM bench_jsonb WHERE name = $1"),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "containment",
        // The index finds the row; the recheck evaluates the cast on it.
        automerge: "SELECT name FROM {docs}_indexed WHERE doc::jsonb @> jsonb_build_object('title', $1::text)",
        naive: true,
        jsonb: Some("SELECT name FROM bench_jsonb_indexed WHERE j @> jsonb_build_object('title', $1::text)"),
        param: Param::Title,
        texts_only: false,
    },
    Read {
        group: "nested path",
        // A list item's field on the map list; on the texts the path is absent, and the
        // read costs the same fetch of the JSON.
        automerge: "SELECT doc->'items'->0->>'name' FROM {docs} WHERE name = $1",
        naive: true,
        jsonb: Some("SELECT j->'items'->0->>'name' FROM bench_jsonb WHERE name = $1"),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "heads",
        automerge: "SELECT automerge_heads(doc) FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "change count",
        automerge: "SELECT automerge_change_count(doc) FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "equality",
        automerge: "SELECT doc = doc FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "hash",
        automerge: "SELECT automerge_hash(doc) FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "has its heads",
        // What a client that is up to date asks before sending what it has.
        automerge: "SELECT automerge_has_changes(doc, automerge_heads(doc)) FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "history",
        automerge: "SELECT count(*) FROM {docs}, automerge_changes(doc) WHERE name = $1",
        naive: false,
        jsonb: None,
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "spans",
        automerge: "SELECT automerge_spans(doc, '{content}') FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: None,
        param: Param::Name,
        texts_only: true,
    },
    Read {
        group: "merge_agg",
        // The heads of the merge: the merged document itself need not cross the wire.
        automerge: "SELECT automerge_heads(merge_agg(doc)) FROM bench_forks WHERE name = $1",
        naive: false,
        jsonb: None,
        param: Param::Name,
        texts_only: false,
    },
];

fn bench_read(c: &mut Criterion, session: &Session, fixtures: &[Fixture], read: &Read) {
    let group_name = format!("sql/{}", read.group);
    let mut group = c.benchmark_group(&group_name);
    configure(&mut group);
    let paths: &[Path] = if read.naive { &Path::BOTH } else { &[Path::Fast] };
    for fixture in fixtures.iter().filter(|f| !read.texts_only || f.spec.kind != Kind::MapList) {
        let name = fixture.name();
        let param = match read.param {
            Param::Name => name.clone(),
            Param::Title => Author::new(&fixture.save).title(),
        };
        let params: [&(dyn ToSql + Sync); 1] = [&param];
        for &path in paths {
            session.use_path(path);
            let sql = path.sql(read.automerge);
            if selected(&format!("{group_name}/{}/{name}", path.variant())) {
                let memory = session.memory(|| {
                    session.execute(&sql, &params);
                });
                record_memory(&group_name, path.variant(), &name, memory);
            }
            bench_query(&mut group, session, path.variant(), &name, &sql, &params);
        }
        if let Some(sql) = read.jsonb {
            bench_query(&mut group, session, JSONB, &name, sql, &params);
        }
    }
    group.finish();
}

fn bench_query(
    group: &mut BenchmarkGroup<'_, WallTime>,
    session: &Session,
    variant: &str,
    fixture: &str,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) {
    let statement =
        session.runtime.block_on(session.client.prepare(sql)).unwrap_or_else(|e| fail(sql, e));
    group.bench_function(BenchmarkId::new(variant, fixture), |b| {
        b.iter(|| session.runtime.block_on(session.client.query(&statement, params)).unwrap())
    });
}

fn benches(c: &mut Criterion) {
    let session = Session::connect();
    // Merges of the plain text are estimated above the default cap of 2GB: the benches
    // measure what loads cost, not where an operator would cap them.
    session.batch("SET pg_automerge.max_load_memory = -1");
    // Reads and storage also on documents made by the JavaScript client; the timed writes
    // on our generated fixtures alone, which keeps the run within an hour.
    let mut fixtures = fixtures(false);
    let generated = fixtures.len();
    fixtures.extend(js_fixtures());
    load_tables(&session, &fixtures);
    let rows: Vec<FixtureRows> = fixtures.iter().map(|f| FixtureRows::new(&session, f)).collect();
    // First, while every value is as inserted: what is measured here does not depend on
    // how many writes the timed benches happened to make.
    for rows in &rows {
        storage(&session, rows);
    }
    for read in &READS {
        bench_read(c, &session, &fixtures, read);
    }
    for rows in &rows[..generated] {
        writes(c, &session, rows);
    }
    // The writes a JS client sends append without a load: on every fixture, the JS
    // client's documents included, against their counterparts on the jsonb column.
    for rows in &rows {
        client_writes(c, &session, rows);
    }
}

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
fn client_writes(c: &mut Criterion, session: &Session, rows: &FixtureRows) {
    let name = &rows.name;
    for write in ClientWrite::ALL.into_iter().filter(|write| write.applies_to(rows.kind)) {
        let mut group = Writes::new(c, write.group(), session, name);
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

/// One fixture's rows, and the authors of the changes written to them: one author per
/// table, since each change depends on the one before it.
struct FixtureRows {
    name: String,
    kind: Kind,
    /// Of `{docs}`, by `Path` (in `Path::BOTH`'s order).
    authors: [RefCell<Author>; 2],
    /// Of `{docs}_generated`, by `Path`.
    generated_authors: [RefCell<Author>; 2],
    /// The fixture's JSON, which the jsonb upsert writes with a new title.
    json: serde_json::Value,
    /// How many jsonb writes were made: each writes a title or words of its own.
    jsonb_writes: Cell<u64>,
}

impl FixtureRows {
    fn new(session: &Session, fixture: &Fixture) -> FixtureRows {
        let authors = || [(); 2].map(|_| RefCell::new(Author::new(&fixture.save)));
        let name = fixture.name();
        let json = session.query_one("SELECT j FROM bench_jsonb WHERE name = $1", &[&name]);
        FixtureRows {
            name,
            kind: fixture.spec.kind,
            authors: authors(),
            generated_authors: authors(),
            json,
            jsonb_writes: Cell::new(0),
        }
    }

    fn author(&self, path: Path) -> RefMut<'_, Author> {
        self.authors[path as usize].borrow_mut()
    }

    fn generated_author(&self, path: Path) -> RefMut<'_, Author> {
        self.generated_authors[path as usize].borrow_mut()
    }

    /// The next title, or words, a jsonb write writes.
    fn next_jsonb_edit(&self) -> String {
        self.jsonb_writes.set(self.jsonb_writes.get() + 1);
        format!("Set {}", self.jsonb_writes.get())
    }

    /// The next full save a client upserts: the document with one more change.
    fn next_save(&self, path: Path) -> Vec<u8> {
        let mut author = self.author(path);
        author.retitle();
        author.save()
    }
}

/// The header reads' baseline: the same one-row lookup by name, answered without a body,
/// so that what a header read adds to a client's round trip can be told from the round trip.
const ROW_LOOKUP: &str = "SELECT name FROM bench_jsonb WHERE name = $1";
/// An incremental write: change bytes applied to the stored document.
const APPLY: &str = "UPDATE {docs} SET doc = doc || $2::bytea WHERE name = $1";
/// Untimed before each client write: a row holding `append_limit` appended changes is saved
/// anew, as the compactor does off the write path, so that the timed write is the one the
/// goal names, an appending write with no load. The write past the limit, which saves anew
/// itself, is the retitle stream's (`sql/incremental write`).
const SAVE_ANEW_AT_THE_LIMIT: &str = "UPDATE {docs} SET doc = automerge_compact(doc)
    WHERE name = $1
      AND automerge_appended_changes(doc) >= current_setting('pg_automerge.append_limit')::int";
const APPLY_GENERATED: &str = "UPDATE {docs}_generated SET doc = doc || $2::bytea WHERE name = $1";
/// A client's full save, merged into the stored document.
const UPSERT: &str = "INSERT INTO {docs} VALUES ($1, $2::bytea::automerge)
                      ON CONFLICT (name) DO UPDATE SET doc = {docs}.doc || excluded.doc";
const READ_CONTENT: &str = "SELECT length(doc->>'content') FROM {docs} WHERE name = $1";
const JSONB_SET_TITLE: &str =
    "UPDATE bench_jsonb SET j = jsonb_set(j, '{title}', to_jsonb($2::text)) WHERE name = $1";
const JSONB_UPSERT: &str =
    "INSERT INTO bench_jsonb VALUES ($1, jsonb_set($3, '{title}', to_jsonb($2::text)))
                            ON CONFLICT (name) DO UPDATE SET j = excluded.j";
/// The jsonb counterpart of typing into the middle of the content.
const JSONB_TYPE: &str = "UPDATE bench_jsonb
                          SET j = jsonb_set(j, '{content}', to_jsonb(overlay(j->>'content' placing $2::text
                                                                     from length(j->>'content') / 2 + 1 for 0)))
                          WHERE name = $1";
const JSONB_READ_CONTENT: &str = "SELECT length(j->>'content') FROM bench_jsonb WHERE name = $1";

/// Untimed: what each variant stores for the fixture, and the WAL one write inserts.
fn storage(session: &Session, rows: &FixtureRows) {
    let name = &rows.name;
    if !selected(&format!("sql/storage/{name}")) {
        return;
    }
    for path in Path::BOTH {
        session.use_path(path);
        let variant = path.variant();
        let stored = session.query_row(
            &path.sql(
                "SELECT pg_column_size(doc)::bigint, s.format_version::bigint, s.stored_bytes, s.payload_bytes,
                        s.jsonb_bytes, s.structure_bytes
                 FROM {docs}, automerge_storage(doc) s WHERE name = $1",
            ),
            &[name],
        );
        let measures = [
            "column_bytes",
            "format_version",
            "stored_bytes",
            "payload_bytes",
            "jsonb_bytes",
            "structure_bytes",
        ];
        for (column, measure) in measures.into_iter().enumerate() {
            record_storage(name, variant, measure, stored.get(column));
        }
        let apply = path.sql(APPLY);
        let wal = session.wal_bytes(
            || rows.author(path).retitle().1,
            |change| {
                session.execute(&apply, &[name, &change]);
            },
        );
        record_storage(name, variant, "wal_incremental_write_bytes", Some(wal));
        let appended = path
            .sql("SELECT s.appended_changes FROM {docs}, automerge_storage(doc) s WHERE name = $1");
        record_storage(name, variant, "appended_changes", session.query_one(&appended, &[name]));
        let upsert = path.sql(UPSERT);
        let wal = session.wal_bytes(
            || rows.next_save(path),
            |save| {
                session.execute(&upsert, &[name, &save]);
            },
        );
        record_storage(name, variant, "wal_upsert_bytes", Some(wal));
    }
    session.use_path(Path::Fast);
    let column = session
        .query_one("SELECT pg_column_size(j)::bigint FROM bench_jsonb WHERE name = $1", &[name]);
    record_storage(name, JSONB, "column_bytes", Some(column));
    let wal = session.wal_bytes(
        || rows.next_jsonb_edit(),
        |title| {
            session.execute(JSONB_SET_TITLE, &[name, &title]);
        },
    );
    record_storage(name, JSONB, "wal_incremental_write_bytes", Some(wal));
    let wal = session.wal_bytes(
        || rows.next_jsonb_edit(),
        |title| {
            session.execute(JSONB_UPSERT, &[name, &title, &rows.json]);
        },
    );
    record_storage(name, JSONB, "wal_upsert_bytes", Some(wal));
}

/// One group of writes to one fixture's rows: each variant makes one write per iteration,
/// of an input made before it (untimed).
struct Writes<'a> {
    group: BenchmarkGroup<'a, WallTime>,
    name: &'static str,
    session: &'a Session,
    fixture: &'a str,
}

impl<'a> Writes<'a> {
    fn new(
        c: &'a mut Criterion,
        name: &'static str,
        session: &'a Session,
        fixture: &'a str,
    ) -> Writes<'a> {
        let mut group = c.benchmark_group(name);
        configure(&mut group);
        Writes { group, name, session, fixture }
    }

    /// pg_automerge's writes on `path`, under its settings; one write's memory is recorded
    /// first.
    fn path<I, O>(
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
            record_memory(self.name, path.variant(), self.fixture, memory);
        }
        self.bench(path.variant(), input, write);
    }

    fn jsonb<I, O>(&mut self, input: impl FnMut() -> I, write: impl FnMut(I) -> O) {
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

    fn finish(self) {
        self.group.finish();
    }
}

/// The writes, each bringing a change the stored document lacks, on both paths and on the
/// jsonb column: a retitle (`doc || change`; `jsonb_set` of the title), the same to a table
/// that regenerates `doc::jsonb` into a column, an upsert of a full save (of the whole JSON),
/// and, on the texts, typing into the content followed by a read of it: a change the fast
/// path appends but cannot patch into the kept JSON, so the read after it loads.
fn writes(c: &mut Criterion, session: &Session, rows: &FixtureRows) {
    let name = &rows.name;
    let mut group = Writes::new(c, "sql/incremental write", session, name);
    for path in Path::BOTH {
        let apply = path.sql(APPLY);
        group.path(
            path,
            || rows.author(path).retitle().1,
            |change| session.execute(&apply, &[name, &change]),
        );
    }
    group.jsonb(
        || rows.next_jsonb_edit(),
        |title| session.execute(JSONB_SET_TITLE, &[name, &title]),
    );
    group.finish();

    let mut group = Writes::new(c, "sql/generated column write", session, name);
    for path in Path::BOTH {
        let apply = path.sql(APPLY_GENERATED);
        group.path(
            path,
            || rows.generated_author(path).retitle().1,
            |change| session.execute(&apply, &[name, &change]),
        );
    }
    group.jsonb(
        || rows.next_jsonb_edit(),
        |title| session.execute(JSONB_SET_TITLE, &[name, &title]),
    );
    group.finish();

    let mut group = Writes::new(c, "sql/upsert full save", session, name);
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
        let mut group = Writes::new(c, "sql/text edit then read", session, name);
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

criterion::criterion_group! {
    name = sql;
    config = criterion();
    targets = benches
}
criterion::criterion_main!(sql);
