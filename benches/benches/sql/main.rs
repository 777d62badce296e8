//! SQL level, against the cluster `cargo xtask bench` starts (`PG_AUTOMERGE_CONNECTION`):
//! each read and write users make, on a table of documents, three ways in one run:
//! pg_automerge as it ships (values keep their document's JSON, small writes append their
//! changes), the naive path it replaces (`NAIVE`: values written without their JSON, so
//! every read loads the document, and writes that load, apply and save it), and the same
//! read or write on a plain `jsonb` column holding the same JSON. Peak Rust heap and loads
//! come from the server's `automerge_memory_usage()`; stored sizes and the WAL of writes
//! go to the storage file.

mod edits;
mod reads;
mod session;
mod storage;
mod tables;
mod writes;

use benches::{criterion, fixtures, js_fixtures};
use criterion::Criterion;

use session::Session;
use tables::{load_tables, FixtureRows};

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
        storage::storage(&session, rows);
    }
    reads::reads(c, &session, &fixtures);
    for rows in &rows[..generated] {
        writes::writes(c, &session, rows);
    }
    // The writes a JS client sends append without a load: on every fixture, the JS
    // client's documents included, against their counterparts on the jsonb column.
    for rows in &rows {
        writes::client_writes(c, &session, rows);
    }
    // Edits from SQL append as cheaply as jsonb_set: on every fixture too.
    for rows in &rows {
        edits::sql_edits(c, &session, rows);
    }
}

criterion::criterion_group! {
    name = sql;
    config = criterion();
    targets = benches
}
criterion::criterion_main!(sql);
