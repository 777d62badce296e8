//! Memory accounting through real sessions: the Rust heap returns to its baseline between
//! statements, the structure indexes held for the next write count and can be let go, the
//! trim gives memory back to the OS, only superusers change the memory
//! settings, and the shared view lists every backend.

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ObjType, ROOT};
use cluster_tests::connect;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

async fn allocated(client: &Client) -> i64 {
    client
        .query_one("SELECT allocated_bytes FROM automerge_memory_usage()", &[])
        .await
        .unwrap()
        .get(0)
}

async fn resident(client: &Client) -> i64 {
    client
        .query_one("SELECT resident_bytes FROM automerge_memory_usage()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Statements of every kind, including one that fails.
const MIX: &[&str] = &[
    "SELECT doc->>'title' FROM sample_documents",
    "SELECT doc::jsonb FROM sample_documents",
    "SELECT a.doc || b.doc FROM sample_documents a, sample_documents b",
    "SELECT automerge_spans(doc, '{content}') FROM sample_documents WHERE name = 'meeting-notes'",
    "SELECT count(*) FROM sample_documents, automerge_changes(doc)",
    "SELECT merge_agg(doc) FROM sample_documents",
    "SELECT automerge_heads(doc), doc = doc FROM sample_documents",
    "SELECT doc || doc::bytea FROM sample_documents",
    "SELECT count(DISTINCT doc) FROM sample_documents",
    "SELECT '\\xdeadbeef'::automerge",
];

#[tokio::test]
async fn the_heap_returns_to_its_baseline_between_statements() {
    let client = connect().await;
    let run_mix = || async {
        for sql in MIX {
            let _ = client.simple_query(sql).await;
        }
    };
    run_mix().await;
    let baseline = allocated(&client).await;
    const ROUNDS: usize = 40;
    for _ in 0..ROUNDS {
        run_mix().await;
    }
    let after = allocated(&client).await;
    println!(
        "memory: {} statements; Rust heap {baseline} bytes before, {after} bytes after",
        ROUNDS * MIX.len()
    );
    assert_eq!(after, baseline, "the Rust heap grew between statements");
}

/// An appending write leaves its document's structure index held for the next write
/// (`pg_automerge.index_cache`), counted in the Rust heap; the next write hands it on, and a
/// setting of 0 lets it go when the transaction ends.
#[tokio::test]
async fn an_appending_write_holds_its_index_within_index_cache() {
    let client = connect().await;
    client
        .batch_execute(
            "DROP TABLE IF EXISTS held_index;
             CREATE TABLE held_index (id int PRIMARY KEY, doc automerge NOT NULL)",
        )
        .await
        .unwrap();
    let mut doc = AutoCommit::new().with_actor(ActorId::from([0x4e; 16]));
    let title = doc.put_object(ROOT, "title", ObjType::Text).unwrap();
    // Words typed each before the last: an index of as many runs.
    for word in 0..200 {
        doc.splice_text(&title, 0, 0, &format!("word {word} ")).unwrap();
    }
    let insert = "INSERT INTO held_index VALUES (1, $1::bytea)";
    client.execute(insert, &[&doc.save()]).await.unwrap();
    let baseline = allocated(&client).await;
    let mut write = |n: usize| {
        let heads = doc.get_heads();
        doc.splice_text(&title, n, 0, "x").unwrap();
        doc.save_after(&heads)
    };
    let update = "UPDATE held_index SET doc = doc || $1::bytea WHERE id = 1";
    let appended = "SELECT automerge_appended_changes(doc) FROM held_index";
    client.execute(update, &[&write(0)]).await.unwrap();
    let holding = allocated(&client).await;
    client.execute(update, &[&write(1)]).await.unwrap();
    let handed_on = allocated(&client).await;
    let count: i32 = client.query_one(appended, &[]).await.unwrap().get(0);
    client.batch_execute("SET pg_automerge.index_cache = 0").await.unwrap();
    let released = allocated(&client).await;
    println!("index cache: {baseline} bytes, {holding} held, {handed_on} after the next write, {released} with the setting at 0");
    assert_eq!(count, 2, "both writes appended");
    assert!(holding > baseline + 1000, "nothing held after an appending write");
    assert!(handed_on.abs_diff(holding) < 1000, "the next write did not hand the index on");
    assert_eq!(released, baseline, "a setting of 0 did not let the held index go");
    client.batch_execute("RESET pg_automerge.index_cache; DROP TABLE held_index").await.unwrap();
}

/// A plain text of 400,000 characters: loading it peaks at tens of megabytes.
fn large_text() -> Vec<u8> {
    let mut doc = AutoCommit::new().with_actor(ActorId::from([0x7e; 16]));
    let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
    let line = "the quick brown fox jumps over the lazy dog, again and again. ".repeat(4);
    for _ in 0..1600 {
        doc.splice_text(&text, 0, 0, &line).unwrap();
        doc.commit();
    }
    doc.save()
}

#[tokio::test]
async fn the_trim_gives_freed_memory_back() {
    let client = connect().await;
    let large = large_text();
    client.batch_execute("SET pg_automerge.trim_threshold = -1").await.unwrap();
    client.query_one("SELECT length($1::bytea::automerge->>'text')", &[&large]).await.unwrap();
    let untrimmed = resident(&client).await;
    client.batch_execute("SET pg_automerge.trim_threshold = 0").await.unwrap();
    // This statement frees a little Rust memory, so its transaction's end trims.
    resident(&client).await;
    let trimmed = resident(&client).await;
    println!(
        "trim: resident {} MB after a large load, {} MB after the trim",
        untrimmed >> 20,
        trimmed >> 20
    );
    assert!(trimmed < untrimmed - (4 << 20), "the trim gave back less than 4 MB");
}

#[tokio::test]
async fn only_superusers_change_the_memory_settings() {
    let client = connect().await;
    client
        .batch_execute(
            "DROP ROLE IF EXISTS automerge_app; CREATE ROLE automerge_app; SET ROLE automerge_app",
        )
        .await
        .unwrap();
    for setting in ["pg_automerge.trim_threshold", "pg_automerge.max_load_memory"] {
        let err = client.batch_execute(&format!("SET {setting} = 1")).await.unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{setting}: {err}");
    }
    client.batch_execute("RESET ROLE; DROP ROLE automerge_app").await.unwrap();
}

#[tokio::test]
async fn the_shared_view_lists_every_backend() {
    let mut clients = Vec::new();
    let mut pids = Vec::new();
    for _ in 0..3 {
        let client = connect().await;
        // A transaction's end publishes the backend's counters.
        let pid: i32 = client
            .query_one(
                "SELECT pg_backend_pid() FROM (SELECT doc::jsonb FROM sample_documents LIMIT 1) d",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        pids.push(pid);
        clients.push(client);
    }
    let listed: Vec<i32> = clients[0]
        .query("SELECT pid FROM automerge_memory_backends() WHERE allocated_bytes >= 0", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    for pid in &pids {
        assert!(
            listed.contains(pid),
            "backend {pid} is not in automerge_memory_backends(): {listed:?}"
        );
    }
    println!(
        "shared view: {} backends listed, including the {} test sessions",
        listed.len(),
        pids.len()
    );
}

/// The Operations page's recipe, exactly as written there, with `$1` bound.
#[tokio::test]
async fn the_operations_recipe_works_as_written() {
    let client = connect().await;
    client
        .batch_execute(
            "DROP TABLE IF EXISTS docs; CREATE TABLE docs (id int PRIMARY KEY, doc automerge NOT NULL); \
             INSERT INTO docs SELECT 1, doc FROM sample_documents WHERE name = 'meeting-notes'",
        )
        .await
        .unwrap();
    client.query("SELECT automerge_memory_reset();", &[]).await.unwrap();
    let bytes: i32 = client
        .query_one(
            "SELECT octet_length(automerge_compact(doc)::bytea) FROM docs WHERE id = $1;",
            &[&1i32],
        )
        .await
        .unwrap()
        .get(0);
    let peak: String = client
        .query_one(
            "SELECT pg_size_pretty(peak_allocated_bytes) FROM automerge_memory_usage();",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    client.batch_execute("DROP TABLE docs").await.unwrap();
    assert_eq!(bytes, 282, "the meeting notes' save");
    assert!(peak.ends_with("kB") || peak.ends_with("MB"), "peak {peak}");
    println!("recipe: loading the meeting notes peaked at {peak}");
}
