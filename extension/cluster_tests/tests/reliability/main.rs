//! The reliability scenarios: scenarios that need more than one cluster, or a cluster that
//! dies. Writers keep writing while a backend and then the postmaster are killed with
//! SIGKILL; a hot standby made by pg_basebackup, and logical subscribers in text and binary
//! mode, must serve the primary's documents; a custom-format dump must restore
//! byte-identical; and the frozen install scripts of released versions must install and
//! upgrade to what a fresh install of the current version creates.
//!
//! `cargo xtask test --only reliability` provisions the clusters and hands them over as
//! `Server`s: a primary (`wal_level = logical`, started), a standby (its data directory
//! made here by pg_basebackup) and a subscriber (started); it also installs the frozen
//! scripts of older releases beside the current one. Each test is `#[ignore]`d, so that a
//! plain `cargo test` leaves them out; xtask runs them with `--ignored`. They share those
//! clusters, so xtask runs them with `--test-threads=1`, which runs them in the order of
//! their names:
//! `crashes::`, then `replicas::`, then `upgrades::`, and inside `crashes::` the load check
//! (`then_…`) after both crashes.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use cluster_tests::server::Server;
use cluster_tests::{line_differences, RELIABILITY_PRIMARY};

mod crashes;
mod replicas;
mod upgrades;

/// The database the scenarios write in, on the primary.
const DATABASE: &str = "reliability";

/// The primary, with `DATABASE` and its documents created by the first test that asks.
fn primary() -> Result<Server> {
    let primary = Server::from_env(RELIABILITY_PRIMARY);
    let exists = primary.psql(
        "postgres",
        &format!("\\t on\nSELECT 1 FROM pg_database WHERE datname = '{DATABASE}';"),
    )?;
    if exists.trim().is_empty() {
        primary.psql("postgres", &format!("CREATE DATABASE {DATABASE};"))?;
        primary.psql(DATABASE, &documents_script())?;
    }
    Ok(primary)
}

/// The sample documents, in a table with a generated jsonb column and GIN indexes, which
/// the standby, the dump and the upgrade check read too.
fn documents_script() -> String {
    let rows: Vec<String> = fixtures::samples()
        .iter()
        .enumerate()
        .map(|(i, sample)| {
            format!("({i}, '{}', '\\x{}')", sample.name, hex::encode(sample.doc.save()))
        })
        .collect();
    format!(
        "CREATE EXTENSION pg_automerge;\n\
         CREATE TABLE documents (\n\
             id int PRIMARY KEY, name text NOT NULL, doc automerge NOT NULL,\n\
             doc_json jsonb GENERATED ALWAYS AS (doc::jsonb) STORED);\n\
         CREATE INDEX documents_json ON documents USING gin (doc_json);\n\
         CREATE INDEX documents_paths ON documents USING gin ((doc::jsonb) jsonb_path_ops);\n\
         INSERT INTO documents (id, name, doc) VALUES\n  {};\n\
         CREATE TABLE written (id int PRIMARY KEY, doc automerge NOT NULL);\n",
        rows.join(",\n  ")
    )
}

/// What every reader of `documents` and `written` must see alike: per row, the heads, a
/// digest of the stored bytes, the jsonb and (for text) the spans.
const READS: &str = "\
SELECT id, automerge_heads(doc), encode(sha256(doc::bytea), 'hex') AS bytes, doc::jsonb,
       doc_json = doc::jsonb AS generated_agrees,
       CASE WHEN doc ? 'content' THEN automerge_spans(doc, '{content}') END AS spans
FROM documents ORDER BY id;
SELECT id, automerge_heads(doc), encode(sha256(doc::bytea), 'hex') AS bytes, doc::jsonb
FROM written ORDER BY id;
";

/// Prints a note beside libtest's lines: on stderr, so that xtask reads the results on
/// stdout whole.
fn note(text: impl std::fmt::Display) {
    eprintln!("    {text}");
}

fn same_output_between(
    left: &Server,
    left_db: &str,
    right: &Server,
    right_db: &str,
    sql: &str,
) -> Result<()> {
    let (a, b) = (left.psql(left_db, sql)?, right.psql(right_db, sql)?);
    ensure!(
        a == b,
        "the outputs differ (- {left_db}, + {right_db}):\n{}",
        line_differences(&a, &b)
    );
    Ok(())
}

/// Polls until `database` on a replica answers `sql` as the primary's database does.
fn wait_for_same_output(
    primary: &Server,
    replica: &Server,
    database: &str,
    sql: &str,
) -> Result<()> {
    let wanted = primary.psql(DATABASE, sql)?;
    let mut last = String::new();
    wait_until(Duration::from_secs(30), || {
        last = replica.psql(database, sql)?;
        Ok(last == wanted)
    })
    .with_context(|| {
        format!("the replica differs (- primary, + replica):\n{}", line_differences(&wanted, &last))
    })
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !done()? {
        ensure!(Instant::now() < deadline, "gave up after {}s", limit.as_secs());
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
