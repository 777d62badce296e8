//! Hostile input through real sessions: damaged bytes, deep nesting, small inputs that
//! describe millions of operations or inflate to gigabytes, many overlapping marks, a huge
//! change. Each gives a clear ERROR with its SQLSTATE, or finishes, and honours
//! `statement_timeout` and `pg_cancel_backend`; the backend survives every one, and the
//! server log records no backend that died. `cargo xtask test` runs these as their own
//! step, one at a time (the log check comes last), on a cluster of their own.

use std::time::Duration;

use automerge::transaction::{CommitOptions, Transactable};
use automerge::{ActorId, AutoCommit, Automerge, Change};
use cluster_tests::{connect, project_root, SERVER_LOG_ENV};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

/// The SQLSTATE a statement fails with, or `None` if it succeeds.
async fn sqlstate(client: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Option<SqlState> {
    match client.execute(sql, params).await {
        Ok(_) => None,
        Err(err) => Some(err.code().unwrap_or_else(|| panic!("{sql}: no SQLSTATE: {err}")).clone()),
    }
}

/// The JSON that `sql` returns as text for `bytes`.
async fn json_of(client: &Client, sql: &str, bytes: &Vec<u8>) -> serde_json::Value {
    let row = client.query_one(sql, &[bytes]).await.unwrap_or_else(|err| panic!("{sql}: {err}"));
    serde_json::from_str(row.get(0)).unwrap()
}

/// Fails unless the session still answers: the backend survived what came before.
async fn still_alive(client: &Client) {
    let one: i32 = client.query_one("SELECT 1", &[]).await.expect("the backend survived").get(0);
    assert_eq!(one, 1);
}

fn sample_save() -> Vec<u8> {
    let mut doc = AutoCommit::new().with_actor(ActorId::from([7; 16]));
    doc.put(automerge::ROOT, "title", "hostile").unwrap();
    doc.commit_with(CommitOptions::default().with_time(0));
    doc.save()
}

/// Client bytes every input path must refuse as not a document (22P03).
fn damaged_inputs() -> Vec<(String, Vec<u8>)> {
    let saved = sample_save();
    let mut cases = vec![
        ("truncated save".to_string(), saved[..saved.len() - 5].to_vec()),
        ("only the magic bytes".to_string(), saved[..4].to_vec()),
        ("not Automerge".to_string(), b"hello, world".to_vec()),
    ];
    let mut wrong_checksum = saved.clone();
    wrong_checksum[5] ^= 0x55;
    cases.push(("wrong checksum".into(), wrong_checksum));
    let mut flipped = saved.clone();
    let last = flipped.len() - 2;
    flipped[last] ^= 0xff;
    cases.push(("a flipped byte".into(), flipped));
    // Inputs the fuzzer found: valid checksums around columns that made Automerge panic,
    // loop for ever or allocate what a length claimed.
    let dir = project_root().join("fuzz/regressions");
    let mut found: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    found.sort();
    for path in found {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        cases.push((format!("fuzz regression {name}"), std::fs::read(&path).unwrap()));
    }
    cases
}

#[tokio::test]
async fn hostile_damaged_bytes_are_invalid_binary_on_every_path() {
    let client = connect().await;
    client.batch_execute("CREATE TEMP TABLE target (doc automerge)").await.unwrap();
    client.execute("INSERT INTO target VALUES ($1::bytea)", &[&sample_save()]).await.unwrap();
    let cases = damaged_inputs();
    assert!(cases.len() > 15, "the fuzz regression inputs are there");
    for (what, bytes) in &cases {
        let text = format!("\\x{}", hex::encode(bytes));
        for sql in [
            "SELECT $1::bytea::automerge",
            "UPDATE target SET doc = doc || $1::bytea",
            "SELECT automerge_merge(doc, $1::bytea::automerge) FROM target",
        ] {
            let code = sqlstate(&client, sql, &[bytes]).await;
            assert_eq!(code, Some(SqlState::INVALID_BINARY_REPRESENTATION), "{what}: {sql}");
        }
        let code = sqlstate(&client, "SELECT $1::text::automerge", &[&text]).await;
        assert_eq!(code, Some(SqlState::INVALID_BINARY_REPRESENTATION), "{what} as text");
        still_alive(&client).await;
    }
    let code = sqlstate(&client, "SELECT '\\x85zz'::automerge", &[]).await;
    assert_eq!(code, Some(SqlState::INVALID_TEXT_REPRESENTATION));
    // Nothing was written by the failed updates.
    let changes: i64 = client
        .query_one("SELECT automerge_change_count(doc) FROM target", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(changes, 1);
}

#[tokio::test]
async fn hostile_deep_nesting_is_refused_as_json_not_a_crash() {
    let client = connect().await;
    // Ten thousand levels: a recursive reader overflows the backend's stack here.
    let deep = fixtures::hostile::deeply_nested(10_000).save();
    assert!(deep.len() < 200_000, "a small input: {} bytes", deep.len());
    let count: i64 = client
        .query_one("SELECT automerge_change_count($1::bytea::automerge)", &[&deep])
        .await
        .expect("storing a deeply nested document works")
        .get(0);
    assert_eq!(count, 1);
    for sql in ["SELECT $1::bytea::automerge::jsonb", "SELECT ($1::bytea::automerge)->'next'"] {
        let code = sqlstate(&client, sql, &[&deep]).await;
        assert_eq!(code, Some(SqlState::STATEMENT_TOO_COMPLEX), "{sql}");
    }
    // Automerge builds a block's attributes recursively for spans.
    let deep_block = fixtures::hostile::deep_block(10_000).save();
    let code = sqlstate(
        &client,
        "SELECT automerge_spans($1::bytea::automerge, '{content}')",
        &[&deep_block],
    )
    .await;
    assert_eq!(code, Some(SqlState::STATEMENT_TOO_COMPLEX), "spans of a deeply nested block");
    still_alive(&client).await;
    let shallow = fixtures::hostile::deeply_nested(500).save();
    // Read in SQL: 500 levels are past what serde_json here parses.
    let depth: i32 = client
        .query_one(
            "WITH RECURSIVE down(level, value) AS ( \
               SELECT 0, $1::bytea::automerge::jsonb \
               UNION ALL SELECT level + 1, coalesce(value -> 'next', value -> 0) FROM down \
               WHERE jsonb_typeof(value) IN ('object', 'array') \
                 AND coalesce(value -> 'next', value -> 0) IS NOT NULL) \
             SELECT max(level) FROM down",
            &[&shallow],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(depth, 501, "500 levels and the string at the bottom read as JSON");
}

#[tokio::test]
async fn hostile_millions_of_operations_in_a_small_input_are_refused_by_the_limit() {
    let client = connect().await;
    let doc = fixtures::hostile::repeated_text(2_000_000);
    let saved = doc.save();
    let change = doc.get_changes(&[])[0].raw_bytes().to_vec();
    assert!(saved.len() < 10_000, "{} bytes describe two million operations", saved.len());
    client.batch_execute("SET pg_automerge.max_load_memory = '64MB'").await.unwrap();
    client.batch_execute("CREATE TEMP TABLE small (doc automerge)").await.unwrap();
    client.execute("INSERT INTO small VALUES ($1::bytea)", &[&sample_save()]).await.unwrap();
    for bytes in [&saved, &change] {
        for sql in ["SELECT $1::bytea::automerge", "UPDATE small SET doc = doc || $1::bytea"] {
            let code = sqlstate(&client, sql, &[bytes]).await;
            assert_eq!(code, Some(SqlState::CONFIGURATION_LIMIT_EXCEEDED), "{sql}");
        }
    }
    still_alive(&client).await;
}

/// Change chunks that Automerge stores deflated, each inflating to `inflated` bytes of
/// message, repeated `copies` times: a few kilobytes per copy.
fn deflate_bomb(inflated: usize, copies: usize) -> Vec<u8> {
    let mut doc = AutoCommit::new().with_actor(ActorId::from([9; 16]));
    doc.put(automerge::ROOT, "k", 1_i64).unwrap();
    doc.commit_with(CommitOptions::default().with_time(0).with_message("m".repeat(inflated)));
    let mut change: Change = doc.get_changes(&[])[0].clone();
    let one = change.bytes().into_owned();
    assert!(one.len() < inflated / 100, "the change is deflated: {} bytes", one.len());
    one.repeat(copies)
}

#[tokio::test]
async fn hostile_input_inflating_to_gigabytes_honours_statement_timeout_and_cancel() {
    // 8 MiB of message per copy, 800 copies: 6.4 GB to inflate just to estimate the load.
    let bomb = deflate_bomb(8 << 20, 800);
    assert!(bomb.len() < 20 << 20, "{} bytes", bomb.len());
    let client = connect().await;
    // With no limit on time the estimate finishes and refuses the load; with one, the
    // estimate is what the timeout stops.
    client.batch_execute("SET statement_timeout = '300ms'").await.unwrap();
    let code = sqlstate(&client, "SELECT $1::bytea::automerge", &[&bomb]).await;
    assert_eq!(code, Some(SqlState::QUERY_CANCELED), "statement_timeout stops the estimate");
    still_alive(&client).await;
    client.batch_execute("RESET statement_timeout").await.unwrap();

    let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let canceller = connect().await;
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let cancelled: bool =
            canceller.query_one("SELECT pg_cancel_backend($1)", &[&pid]).await.unwrap().get(0);
        assert!(cancelled);
    });
    let code = sqlstate(&client, "SELECT $1::bytea::automerge", &[&bomb]).await;
    cancel.await.unwrap();
    assert_eq!(code, Some(SqlState::QUERY_CANCELED), "pg_cancel_backend stops the estimate");
    still_alive(&client).await;
}

#[tokio::test]
async fn hostile_overlapping_marks_finish_with_every_span() {
    let client = connect().await;
    let (chars, marks) = (400, 150);
    let saved = fixtures::hostile::overlapping_marks(chars, marks).save();
    client.batch_execute("SET statement_timeout = '60s'").await.unwrap();
    let spans =
        json_of(&client, "SELECT automerge_spans($1::bytea::automerge, '{content}')::text", &saved)
            .await;
    let spans = spans.as_array().unwrap();
    // Every mark starts and ends at its own boundary: one span between each two.
    let text: String = spans.iter().map(|s| s["value"].as_str().unwrap()).collect();
    assert_eq!(text.len(), chars);
    let widest = spans.iter().map(|s| s["marks"].as_object().map_or(0, |m| m.len())).max().unwrap();
    assert_eq!(widest, marks, "the middle span carries every mark");
    still_alive(&client).await;
}

#[tokio::test]
async fn hostile_huge_single_change_is_stored_or_refused_by_the_limit() {
    let client = connect().await;
    let doc: Automerge = fixtures::hostile::huge_change(100_000);
    let change = doc.get_changes(&[])[0].raw_bytes().to_vec();
    assert!(change.len() > 1 << 20, "{} bytes in one change", change.len());
    let count: i64 = client
        .query_one("SELECT automerge_change_count($1::bytea::automerge)", &[&change])
        .await
        .expect("a huge change within the default limit is stored")
        .get(0);
    assert_eq!(count, 1);
    client.batch_execute("SET pg_automerge.max_load_memory = '16MB'").await.unwrap();
    let code = sqlstate(&client, "SELECT $1::bytea::automerge", &[&change]).await;
    assert_eq!(code, Some(SqlState::CONFIGURATION_LIMIT_EXCEEDED));
    still_alive(&client).await;
}

/// Runs last (tests run one at a time, in name order): after every hostile case above,
/// the server log must not record a backend killed by a signal or a crash restart.
#[tokio::test]
async fn hostile_zz_no_backend_died_on_any_of_them() {
    let path = std::env::var(SERVER_LOG_ENV)
        .unwrap_or_else(|_| panic!("{SERVER_LOG_ENV} is not set: run through `cargo xtask test`"));
    let log = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
    assert!(
        log.contains("database system is ready to accept connections"),
        "{path} is the server log"
    );
    for sign in
        ["terminated by signal", "was terminated", "terminating any other active server processes"]
    {
        let line = log.lines().find(|line| line.contains(sign));
        assert!(line.is_none(), "the server log records a dead backend: {}", line.unwrap());
    }
}
