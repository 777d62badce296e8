//! SQL level, against the cluster `cargo xtask bench` starts (`PG_AUTOMERGE_CONNECTION`):
//! each read and write users make, on a table of documents, against the same read or write
//! on a plain `jsonb` column holding the same JSON. Peak Rust heap comes from the server's
//! `automerge_memory_usage()`.

use std::cell::RefCell;

use benches::{
    configure, criterion, fixtures, forks, record_peak_bytes, Fixture, Retitler, JSONB, OURS,
};
use criterion::{BatchSize, BenchmarkId, Criterion};
use fixtures::generated::Kind;
use tokio::runtime::Runtime;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

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
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (client, connection) = runtime
            .block_on(tokio_postgres::connect(&conninfo, NoTls))
            .unwrap();
        runtime.spawn(connection);
        Session { runtime, client }
    }

    fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> u64 {
        self.runtime
            .block_on(self.client.execute(sql, params))
            .unwrap_or_else(|e| fail(sql, e))
    }

    fn batch(&self, sql: &str) {
        self.runtime
            .block_on(self.client.batch_execute(sql))
            .unwrap_or_else(|e| fail(sql, e))
    }

    fn query_one<T: for<'a> tokio_postgres::types::FromSql<'a>>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> T {
        let row = self
            .runtime
            .block_on(self.client.query_one(sql, params))
            .unwrap_or_else(|e| fail(sql, e));
        row.get(0)
    }

    /// Runs `sql` once and returns the peak Rust heap it took in the backend.
    fn peak(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> u64 {
        let before: i64 = self.query_one(
            "SELECT allocated_bytes FROM automerge_memory_usage(), automerge_memory_reset()",
            &[],
        );
        self.execute(sql, params);
        let peak: i64 = self.query_one(
            "SELECT peak_allocated_bytes FROM automerge_memory_usage()",
            &[],
        );
        (peak - before).max(0) as u64
    }
}

fn fail(sql: &str, error: tokio_postgres::Error) -> ! {
    match error.as_db_error() {
        Some(db) => panic!("{sql}: {}: {}", db.code().code(), db.message()),
        None => panic!("{sql}: {error}"),
    }
}

const SCHEMA: &str = "
DROP TABLE IF EXISTS bench_docs, bench_jsonb, bench_docs_indexed, bench_jsonb_indexed, bench_forks;
CREATE TABLE bench_docs (name text PRIMARY KEY, doc automerge NOT NULL);
CREATE TABLE bench_jsonb (name text PRIMARY KEY, j jsonb NOT NULL);
CREATE TABLE bench_docs_indexed (name text PRIMARY KEY, doc automerge NOT NULL);
CREATE INDEX ON bench_docs_indexed USING gin ((doc::jsonb)) WITH (fastupdate = off);
CREATE TABLE bench_jsonb_indexed (name text PRIMARY KEY, j jsonb NOT NULL);
CREATE INDEX ON bench_jsonb_indexed USING gin (j) WITH (fastupdate = off);
CREATE TABLE bench_forks (name text, doc automerge NOT NULL);
";

/// Fills the tables with one row per fixture (and its two forks for `merge_agg`).
fn load_tables(session: &Session, fixtures: &[Fixture]) {
    session.batch(SCHEMA);
    for fixture in fixtures {
        let name = fixture.name();
        session.execute(
            "INSERT INTO bench_docs VALUES ($1, $2::bytea::automerge)",
            &[&name, &fixture.save],
        );
        let (left, right) = forks(&fixture.save);
        for fork in [left, right] {
            session.execute(
                "INSERT INTO bench_forks VALUES ($1, $2::bytea::automerge)",
                &[&name, &fork],
            );
        }
    }
    session.batch(
        "INSERT INTO bench_jsonb SELECT name, doc::jsonb FROM bench_docs;
         INSERT INTO bench_docs_indexed SELECT * FROM bench_docs;
         INSERT INTO bench_jsonb_indexed SELECT * FROM bench_jsonb;",
    );
    // VACUUM runs outside a transaction: a statement of its own.
    session.batch("VACUUM ANALYZE bench_docs, bench_jsonb, bench_docs_indexed, bench_jsonb_indexed, bench_forks");
    // One row per fixture: make the containment queries use their indexes, as they would on
    // a table of many documents.
    session.batch("SET enable_seqscan = off");
}

/// A read, for each variant that has it, recorded with its peak for ours.
struct Read {
    group: &'static str,
    ours: &'static str,
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

const READS: [Read; 7] = [
    Read {
        group: "read title",
        ours: "SELECT doc->>'title' FROM bench_docs WHERE name = $1",
        jsonb: Some("SELECT j->>'title' FROM bench_jsonb WHERE name = $1"),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "to jsonb",
        ours: "SELECT doc::jsonb FROM bench_docs WHERE name = $1",
        jsonb: Some("SELECT j FROM bench_jsonb WHERE name = $1"),
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "containment",
        ours: "SELECT name FROM bench_docs_indexed WHERE doc::jsonb @> jsonb_build_object('title', $1::text)",
        jsonb: Some("SELECT name FROM bench_jsonb_indexed WHERE j @> jsonb_build_object('title', $1::text)"),
        param: Param::Title,
        texts_only: false,
    },
    Read {
        group: "heads",
        ours: "SELECT automerge_heads(doc) FROM bench_docs WHERE name = $1",
        jsonb: None,
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "history",
        ours: "SELECT count(*) FROM bench_docs, automerge_changes(doc) WHERE name = $1",
        jsonb: None,
        param: Param::Name,
        texts_only: false,
    },
    Read {
        group: "spans",
        ours: "SELECT automerge_spans(doc, '{content}') FROM bench_docs WHERE name = $1",
        jsonb: None,
        param: Param::Name,
        texts_only: true,
    },
    Read {
        group: "merge_agg",
        // The heads of the merge: the merged document itself need not cross the wire.
        ours: "SELECT automerge_heads(merge_agg(doc)) FROM bench_forks WHERE name = $1",
        jsonb: None,
        param: Param::Name,
        texts_only: false,
    },
];

fn bench_read(c: &mut Criterion, session: &Session, fixtures: &[Fixture], read: &Read) {
    let group_name = format!("sql/{}", read.group);
    let mut group = c.benchmark_group(&group_name);
    configure(&mut group);
    for fixture in fixtures.iter().filter(|f| !read.texts_only || f.spec.kind != Kind::MapList) {
        let name = fixture.name();
        let param = match read.param {
            Param::Name => name.clone(),
            Param::Title => Retitler::new(&fixture.save).title(),
        };
        let params: [&(dyn ToSql + Sync); 1] = [&param];
        record_peak_bytes(&group_name, OURS, &name, session.peak(read.ours, &params));
        let variants = [(OURS, Some(read.ours)), (JSONB, read.jsonb)];
        for (variant, sql) in variants.into_iter().filter_map(|(v, sql)| sql.map(|sql| (v, sql))) {
            let statement = session.runtime.block_on(session.client.prepare(sql)).unwrap();
            group.bench_function(BenchmarkId::new(variant, &name), |b| {
                b.iter(|| session.runtime.block_on(session.client.query(&statement, &params)).unwrap())
            });
        }
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    let session = Session::connect();
    // The plain text's load is estimated above the default cap of 1GB: the benches measure
    // what loads cost, not where an operator would cap them.
    session.batch("SET pg_automerge.max_load_memory = -1");
    let fixtures = fixtures(false);
    load_tables(&session, &fixtures);
    for read in &READS {
        bench_read(c, &session, &fixtures, read);
    }
    writes(c, &session, &fixtures);
}

/// An incremental write and an upsert of a full save per iteration, each bringing a change
/// the stored document lacks; the jsonb baseline writes the same title with `jsonb_set`,
/// or upserts the whole JSON.
fn writes(c: &mut Criterion, session: &Session, fixtures: &[Fixture]) {
    let apply = "UPDATE bench_docs SET doc = doc || $2::bytea WHERE name = $1";
    let set =
        "UPDATE bench_jsonb SET j = jsonb_set(j, '{title}', to_jsonb($2::text)) WHERE name = $1";
    let upsert = "INSERT INTO bench_docs VALUES ($1, $2::bytea::automerge)
                  ON CONFLICT (name) DO UPDATE SET doc = bench_docs.doc || excluded.doc";
    let upsert_jsonb =
        "INSERT INTO bench_jsonb VALUES ($1, jsonb_set($3, '{title}', to_jsonb($2::text)))
                        ON CONFLICT (name) DO UPDATE SET j = excluded.j";
    for fixture in fixtures {
        let name = fixture.name();
        // Changes chain: each depends on the one applied before it.
        let retitler = RefCell::new(Retitler::new(&fixture.save));
        let json: serde_json::Value =
            session.query_one("SELECT j FROM bench_jsonb WHERE name = $1", &[&name]);
        let jsonb_titles = RefCell::new((1..).map(|n| format!("Set {n}")));
        let next_jsonb_title = || jsonb_titles.borrow_mut().next().unwrap();

        let group_name = "sql/incremental write";
        let mut group = c.benchmark_group(group_name);
        configure(&mut group);
        let (_, change) = retitler.borrow_mut().next_change();
        record_peak_bytes(
            group_name,
            OURS,
            &name,
            session.peak(apply, &[&name, &change]),
        );
        group.bench_function(BenchmarkId::new(OURS, &name), |b| {
            b.iter_batched(
                || retitler.borrow_mut().next_change().1,
                |change| session.execute(apply, &[&name, &change]),
                BatchSize::PerIteration,
            )
        });
        group.bench_function(BenchmarkId::new(JSONB, &name), |b| {
            b.iter_batched(
                next_jsonb_title,
                |title| session.execute(set, &[&name, &title]),
                BatchSize::PerIteration,
            )
        });
        group.finish();

        let group_name = "sql/upsert full save";
        let mut group = c.benchmark_group(group_name);
        configure(&mut group);
        let next_save = || {
            let mut retitler = retitler.borrow_mut();
            retitler.next_change();
            retitler.save()
        };
        let save = next_save();
        record_peak_bytes(
            group_name,
            OURS,
            &name,
            session.peak(upsert, &[&name, &save]),
        );
        group.bench_function(BenchmarkId::new(OURS, &name), |b| {
            b.iter_batched(
                next_save,
                |save| session.execute(upsert, &[&name, &save]),
                BatchSize::PerIteration,
            )
        });
        group.bench_function(BenchmarkId::new(JSONB, &name), |b| {
            b.iter_batched(
                next_jsonb_title,
                |title| session.execute(upsert_jsonb, &[&name, &title, &json]),
                BatchSize::PerIteration,
            )
        });
        group.finish();

        // Every change the writes made is in the stored document: the benches measured
        // real writes, not refusals or no-ops.
        let stored_title: String = session.query_one(
            "SELECT doc->>'title' FROM bench_docs WHERE name = $1",
            &[&name],
        );
        assert_eq!(stored_title, retitler.borrow().title(), "{name}");
    }
}

criterion::criterion_group! {
    name = sql;
    config = criterion();
    targets = benches
}
criterion::criterion_main!(sql);
