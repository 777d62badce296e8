//! The reads: each on pg_automerge (on both paths where the kept JSON answers it) and its
//! jsonb counterpart.

use benches::operations::{
    CHANGES_SINCE_ITS_HEADS, CHANGE_COUNT, CONTAINMENT, EQUALITY, HASH, HAS_ITS_HEADS, HEADS,
    HISTORY, MERGE_AGG, NESTED_PATH, READ_TITLE, SPANS, TO_JSONB,
};
use benches::{configure, record_memory, selected, Author, Fixture, JSONB};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion};
use fixtures::generated::Kind;
use tokio_postgres::types::ToSql;

use crate::session::{fail, Path, Session};

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

const READS: [Read; 13] = [
    Read {
        group: READ_TITLE,
        automerge: "SELECT doc->>'title' FROM {docs} WHERE name = $1",
        naive: true,
        jsonb: Some("SELECT j->>'title' FROM bench_jsonb WHERE name = $1"),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: TO_JSONB,
        automerge: "SELECT doc::jsonb FROM {docs} WHERE name = $1",
        naive: true,
        jsonb: Some("SELECT j FROM bench_jsonb WHERE name = $1"),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: CONTAINMENT,
        // The index finds the row; the recheck evaluates the cast on it.
        automerge: "SELECT name FROM {docs}_indexed WHERE doc::jsonb @> jsonb_build_object('title', $1::text)",
        naive: true,
        jsonb: Some("SELECT name FROM bench_jsonb_indexed WHERE j @> jsonb_build_object('title', $1::text)"),
        param: Param::Title,
        texts_only: false,
    },
    Read {
        group: NESTED_PATH,
        // A list item's field on the map list; on the texts the path is absent, and the
        // read costs the same fetch of the JSON.
        automerge: "SELECT doc->'items'->0->>'name' FROM {docs} WHERE name = $1",
        naive: true,
        jsonb: Some("SELECT j->'items'->0->>'name' FROM bench_jsonb WHERE name = $1"),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: HEADS,
        automerge: "SELECT automerge_heads(doc) FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: CHANGE_COUNT,
        automerge: "SELECT automerge_change_count(doc) FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: EQUALITY,
        automerge: "SELECT doc = doc FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: HASH,
        automerge: "SELECT automerge_hash(doc) FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: HAS_ITS_HEADS,
        // What a client that is up to date asks before sending what it has.
        automerge: "SELECT automerge_has_changes(doc, automerge_heads(doc)) FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: HISTORY,
        automerge: "SELECT count(*) FROM {docs}, automerge_changes(doc) WHERE name = $1",
        naive: false,
        jsonb: None,
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: CHANGES_SINCE_ITS_HEADS,
        // What a client that synced since the last save asks: read from the changes
        // appended after the save (none here), without a load.
        automerge: "SELECT count(*) FROM {docs}, automerge_changes(doc, automerge_heads(doc)) WHERE name = $1",
        naive: false,
        jsonb: Some(ROW_LOOKUP),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: SPANS,
        automerge: "SELECT automerge_spans(doc, '{content}') FROM {docs} WHERE name = $1",
        naive: false,
        jsonb: None,
        param: Param::Name,
        texts_only: true,
    },
    Read {
        group: MERGE_AGG,
        // The heads of the merge: the merged document itself need not cross the wire.
        automerge: "SELECT automerge_heads(merge_agg(doc)) FROM bench_forks WHERE name = $1",
        naive: false,
        jsonb: None,
        param: Param::Name,
        texts_only: false,
    },
];

/// Every read, on every fixture it applies to.
pub fn reads(c: &mut Criterion, session: &Session, fixtures: &[Fixture]) {
    for read in &READS {
        bench_read(c, session, fixtures, read);
    }
}

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

/// The header reads' baseline: the same one-row lookup by name, answered without a body,
/// so that what a header read adds to a client's round trip can be told from the round trip.
const ROW_LOOKUP: &str = "SELECT name FROM bench_jsonb WHERE name = $1";
