//! Concurrent writers on the same rows, through real sessions: every change written is
//! present exactly once at the end, and each row's jsonb is the merge the automerge crate
//! computes from all of them.

use std::collections::BTreeSet;

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, AutoSerde, ChangeHash, ObjType, ReadDoc, ROOT};
use cluster_tests::connect;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

const ROWS: usize = 3;
const WRITERS: usize = 6;
const WRITES_PER_WRITER: usize = 12;

/// How a writer sends its edits.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `UPDATE … SET doc = doc || $1::bytea` with only the new changes, READ COMMITTED.
    IncrementalReadCommitted,
    /// The same in REPEATABLE READ, retrying serialization failures.
    IncrementalRepeatableRead,
    /// `INSERT … ON CONFLICT DO UPDATE SET doc = t.doc || EXCLUDED.doc` of a full save.
    UpsertFullSave,
}

const MODES: [Mode; 3] =
    [Mode::IncrementalReadCommitted, Mode::IncrementalRepeatableRead, Mode::UpsertFullSave];

fn base() -> AutoCommit {
    let mut doc = AutoCommit::new().with_actor(ActorId::from([0xb0; 16]));
    doc.put(ROOT, "title", "shared").unwrap();
    doc.put_object(ROOT, "log", ObjType::List).unwrap();
    doc
}

/// One writer: a replica of each row, edited and sent `WRITES_PER_WRITER` times. Returns
/// the replicas, to compute the expected merge.
async fn writer(table: &str, index: usize, mut base: AutoCommit) -> (Vec<AutoCommit>, usize) {
    let client = connect().await;
    let mode = MODES[index % MODES.len()];
    let mut replicas: Vec<AutoCommit> =
        (0..ROWS).map(|_| base.fork().with_actor(ActorId::from([index as u8 + 1; 16]))).collect();
    let mut sent_heads: Vec<Vec<ChangeHash>> = replicas.iter_mut().map(|r| r.get_heads()).collect();
    let mut retries = 0;
    for write in 0..WRITES_PER_WRITER {
        let row = write % ROWS;
        let replica = &mut replicas[row];
        replica.put(ROOT, format!("writer{index}"), write as i64).unwrap();
        let log = replica.get(ROOT, "log").unwrap().unwrap().1;
        let end = replica.length(&log);
        replica.insert(&log, end, format!("w{index}-{write}")).unwrap();
        let id = row as i32 + 1;
        match mode {
            Mode::IncrementalReadCommitted => {
                let changes = replica.save_after(&sent_heads[row]);
                let sql = format!("UPDATE {table} SET doc = doc || $1::bytea WHERE id = $2");
                client.execute(&sql, &[&changes, &id]).await.unwrap();
            }
            Mode::IncrementalRepeatableRead => {
                let changes = replica.save_after(&sent_heads[row]);
                retries += repeatable_read_update(&client, table, &changes, id).await;
            }
            Mode::UpsertFullSave => {
                let sql = format!(
                    "INSERT INTO {table} (id, doc) VALUES ($1, $2::bytea) \
                     ON CONFLICT (id) DO UPDATE SET doc = {table}.doc || EXCLUDED.doc"
                );
                client.execute(&sql, &[&id, &replica.save()]).await.unwrap();
            }
        }
        sent_heads[row] = replica.get_heads();
    }
    (replicas, retries)
}

/// Returns how many times a serialization failure made it retry.
async fn repeatable_read_update(client: &Client, table: &str, changes: &[u8], id: i32) -> usize {
    let sql = format!("UPDATE {table} SET doc = doc || $1::bytea WHERE id = $2");
    for attempt in 0.. {
        client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await.unwrap();
        let result = client.execute(&sql, &[&changes, &id]).await;
        match result {
            Ok(_) => {
                client.batch_execute("COMMIT").await.unwrap();
                return attempt;
            }
            Err(err) if err.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {
                client.batch_execute("ROLLBACK").await.unwrap();
            }
            Err(err) => panic!("update failed: {err}"),
        }
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_lose_and_duplicate_nothing() {
    let table = "concurrent_docs";
    let admin = connect().await;
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int PRIMARY KEY, doc automerge NOT NULL)"
        ))
        .await
        .unwrap();
    let mut base = base();
    for id in 1..=ROWS as i32 {
        admin
            .execute(&format!("INSERT INTO {table} VALUES ($1, $2::bytea)"), &[&id, &base.save()])
            .await
            .unwrap();
    }
    let tasks: Vec<_> = (0..WRITERS).map(|w| tokio::spawn(writer(table, w, base.fork()))).collect();
    let mut all_replicas: Vec<Vec<AutoCommit>> = Vec::new();
    let mut retries = 0;
    for task in tasks {
        let (replicas, writer_retries) = task.await.unwrap();
        all_replicas.push(replicas);
        retries += writer_retries;
    }

    let mut changes_checked = 0;
    for row in 0..ROWS {
        let mut expected = base.fork();
        for replicas in &mut all_replicas {
            expected.merge(&mut replicas[row]).unwrap();
        }
        let expected_hashes: BTreeSet<String> =
            expected.get_changes(&[]).iter().map(|c| c.hash().to_string()).collect();
        let id = row as i32 + 1;
        let stored = admin
            .query(
                &format!("SELECT hash FROM {table}, automerge_changes(doc) WHERE id = $1"),
                &[&id],
            )
            .await
            .unwrap();
        let stored_hashes: Vec<String> = stored.iter().map(|r| r.get(0)).collect();
        let distinct: BTreeSet<String> = stored_hashes.iter().cloned().collect();
        assert_eq!(stored_hashes.len(), distinct.len(), "row {id}: a change is stored twice");
        assert_eq!(distinct, expected_hashes, "row {id}: changes differ from every writer's");
        changes_checked += stored_hashes.len();

        let json: String = admin
            .query_one(&format!("SELECT doc::jsonb::text FROM {table} WHERE id = $1"), &[&id])
            .await
            .unwrap()
            .get(0);
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        let crate_json = serde_json::to_value(AutoSerde::from(expected.document())).unwrap();
        assert_eq!(json, crate_json, "row {id}: jsonb differs from the crate's merge");
    }
    println!(
        "concurrent writers: {WRITERS} writers x {WRITES_PER_WRITER} writes on {ROWS} rows \
         ({retries} serialization retries); {changes_checked} changes each present exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_update_is_re_evaluated_on_the_new_row() {
    let table = "epq_docs";
    let first = connect().await;
    let second = connect().await;
    let mut base = base();
    first
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int PRIMARY KEY, doc automerge NOT NULL)"
        ))
        .await
        .unwrap();
    first
        .execute(&format!("INSERT INTO {table} VALUES (1, $1::bytea)"), &[&base.save()])
        .await
        .unwrap();

    let mut edit = |actor: u8, key: &str| {
        let mut replica = base.fork().with_actor(ActorId::from([actor; 16]));
        replica.put(ROOT, key, 1_i64).unwrap();
        (replica.save_after(&base.get_heads()), replica)
    };
    let (change_a, mut replica_a) = edit(0xa1, "a");
    let (change_b, mut replica_b) = edit(0xa2, "b");
    let update = format!("UPDATE {table} SET doc = doc || $1::bytea WHERE id = 1");

    first.batch_execute("BEGIN").await.unwrap();
    first.execute(&update, &[&change_a]).await.unwrap();
    let second_pid: i32 = second.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let blocked = tokio::spawn(async move {
        second.execute(&update, &[&change_b]).await.unwrap();
        second
    });
    // Commit only once the second session waits on the row lock, so that it must re-read.
    let mut waited = false;
    for _ in 0..200 {
        let row = first
            .query_one(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
                &[&second_pid],
            )
            .await
            .unwrap();
        if row.get::<_, Option<bool>>(0) == Some(true) {
            waited = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(waited, "the second UPDATE never waited for the first");
    first.batch_execute("COMMIT").await.unwrap();
    blocked.await.unwrap();

    let mut expected = replica_a.fork();
    expected.merge(&mut replica_b).unwrap();
    let heads: Vec<String> = first
        .query_one(&format!("SELECT automerge_heads(doc) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    let expected_heads: Vec<String> =
        expected.get_heads().iter().map(ChangeHash::to_string).collect();
    assert_eq!(heads, expected_heads, "one writer's change was lost");
    println!("EvalPlanQual: both writers' changes kept after a lock wait");
}
