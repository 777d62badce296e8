//! pg_automerge on Citus: a coordinator and two workers on loopback, each a cluster of its
//! own. An older release is created first and `ALTER EXTENSION … UPDATE` must reach every
//! node; then a distributed table and a reference table of documents, beside a plain table
//! of the same documents on the coordinator, which stands for a single node.
//!
//! `cargo xtask test --only citus` provisions the nodes (Citus created in
//! `CITUS_DATABASE` on each, the workers added to the coordinator, the older release's
//! install script beside the current one) and hands them over as `Server`s. Each test is
//! `#[ignore]`d, so that a plain `cargo test` leaves them out; xtask runs them with
//! `--ignored`. They share the nodes and the tables, so xtask runs them with
//! `--test-threads=1`, which runs them in the order of their names: `extension::` (which
//! creates the extension), then `one_node::` and `pushdown::`, which compare the
//! distributed table with its twin while both hold the same rows, then `shards::` and
//! `triggers::`, which write to the distributed table alone.

use anyhow::{ensure, Result};
use cluster_tests::server::Server;
use cluster_tests::{line_differences, CITUS_COORDINATOR, CITUS_DATABASE, CITUS_WORKERS};
use fixtures::row_documents::document;

mod extension;
mod one_node;
mod pushdown;
mod shards;
mod triggers;

/// Fewer shards than Citus's 32: as many writers' rows still land on different shards, and
/// creating, moving and rebalancing them is quicker.
const SHARDS: usize = 8;
/// Documents in the distributed table and in its single-node twin.
const DOCUMENTS: i64 = 48;

/// The coordinator and its two workers, as xtask handed them over.
struct Nodes {
    coordinator: Server,
    workers: [Server; 2],
}

impl Nodes {
    fn all(&self) -> [&Server; 3] {
        [&self.coordinator, &self.workers[0], &self.workers[1]]
    }
}

fn nodes() -> Nodes {
    Nodes {
        coordinator: Server::from_env(CITUS_COORDINATOR),
        workers: CITUS_WORKERS.map(Server::from_env),
    }
}

/// The coordinator, with the tables created by the first test that asks (after
/// `extension::` created the extension).
fn coordinator() -> Result<Server> {
    let coordinator = nodes().coordinator;
    let exists =
        coordinator.psql(CITUS_DATABASE, "\\t on\nSELECT to_regclass('docs') IS NOT NULL;")?;
    if exists.trim() != "t" {
        coordinator.psql(CITUS_DATABASE, &tables_script())?;
    }
    Ok(coordinator)
}

/// The distributed table `docs`, its single-node twin `local_docs` (a plain table on the
/// coordinator) with the same rows, and the reference table `templates`.
fn tables_script() -> String {
    let rows: Vec<String> = (1..=DOCUMENTS)
        .map(|id| format!("({id}, '\\x{}')", hex::encode(document(id).save())))
        .collect();
    let templates: Vec<String> = fixtures::samples()
        .iter()
        .map(|sample| format!("('{}', '\\x{}')", sample.name, hex::encode(sample.doc.save())))
        .collect();
    format!(
        "SET citus.shard_count = {SHARDS};\n\
         CREATE TABLE docs (id bigint PRIMARY KEY, doc automerge NOT NULL);\n\
         SELECT create_distributed_table('docs', 'id');\n\
         CREATE INDEX docs_paths ON docs USING gin ((doc::jsonb) jsonb_path_ops);\n\
         CREATE TABLE local_docs (id bigint PRIMARY KEY, doc automerge NOT NULL);\n\
         CREATE INDEX local_docs_paths ON local_docs USING gin ((doc::jsonb) jsonb_path_ops);\n\
         INSERT INTO docs VALUES {rows};\n\
         INSERT INTO local_docs SELECT * FROM docs;\n\
         CREATE TABLE templates (name text PRIMARY KEY, doc automerge NOT NULL);\n\
         SELECT create_reference_table('templates');\n\
         INSERT INTO templates VALUES {templates};\n\
         ANALYZE docs; ANALYZE local_docs;\n",
        rows = rows.join(", "),
        templates = templates.join(", ")
    )
}

/// Runs `sql` with `{table}` as the distributed table and as its single-node twin: the
/// outputs must be the same.
fn same_as_one_node(coordinator: &Server, sql: &str) -> Result<()> {
    let distributed = coordinator.psql(CITUS_DATABASE, &sql.replace("{table}", "docs"))?;
    let local = coordinator.psql(CITUS_DATABASE, &sql.replace("{table}", "local_docs"))?;
    ensure!(
        distributed == local,
        "the distributed table answers otherwise (- distributed, + one node):\n{}",
        line_differences(&distributed, &local)
    );
    Ok(())
}

/// A connection to the node's database, its driver on a task of its own.
async fn connect(node: &Server) -> Result<tokio_postgres::Client> {
    let (client, connection) =
        tokio_postgres::connect(&node.conninfo(CITUS_DATABASE), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Prints a note beside libtest's lines: on stderr, so that xtask reads the results on
/// stdout whole.
fn note(text: impl std::fmt::Display) {
    eprintln!("    {text}");
}
