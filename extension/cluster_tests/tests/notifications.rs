//! A LISTEN client receives exactly one notification per committed write that changes a
//! document, and none for rolled-back writes or writes that change nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ROOT};
use cluster_tests::{connect, connect_listening};

const WRITERS: usize = 4;
const WRITES_PER_WRITER: usize = 10;
const CHANNEL: &str = "notify_docs_changed";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_notification_per_committed_write() {
    let table = "notify_docs";
    let admin = connect().await;
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; \
             CREATE TABLE {table} (id int PRIMARY KEY, doc automerge NOT NULL); \
             CREATE TRIGGER {table}_notify AFTER INSERT OR UPDATE OR DELETE ON {table} \
                 FOR EACH ROW EXECUTE FUNCTION automerge_notify('{CHANNEL}', 'doc', 'id');"
        ))
        .await
        .unwrap();
    let (listener, mut notifications) = connect_listening().await;
    listener.batch_execute(&format!("LISTEN {CHANNEL}")).await.unwrap();

    let mut base = AutoCommit::new().with_actor(ActorId::from([0xc0; 16]));
    base.put(ROOT, "title", "watched").unwrap();
    admin
        .execute(&format!("INSERT INTO {table} VALUES (1, $1::bytea)"), &[&base.save()])
        .await
        .unwrap();
    let mut committed = 1;

    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut replica = base.fork().with_actor(ActorId::from([w as u8 + 1; 16]));
            tokio::spawn(async move {
                let client = connect().await;
                let update = format!("UPDATE {table} SET doc = doc || $1::bytea WHERE id = 1");
                let (mut committed, mut rolled_back, mut unchanged) = (0, 0, 0);
                for write in 0..WRITES_PER_WRITER {
                    let before = replica.get_heads();
                    replica.put(ROOT, format!("w{w}"), write as i64).unwrap();
                    let change = replica.save_after(&before);
                    if write % 3 == 2 {
                        // A write that is rolled back must not notify ...
                        client.batch_execute("BEGIN").await.unwrap();
                        client.execute(&update, &[&change]).await.unwrap();
                        client.batch_execute("ROLLBACK").await.unwrap();
                        rolled_back += 1;
                    }
                    client.execute(&update, &[&change]).await.unwrap();
                    committed += 1;
                    // ... and neither must sending the same change again.
                    client.execute(&update, &[&change]).await.unwrap();
                    unchanged += 1;
                }
                (committed, rolled_back, unchanged)
            })
        })
        .collect();
    let (mut rolled_back, mut unchanged) = (0, 0);
    for task in tasks {
        let (c, r, u) = task.await.unwrap();
        committed += c;
        rolled_back += r;
        unchanged += u;
    }
    admin.execute(&format!("DELETE FROM {table} WHERE id = 1"), &[]).await.unwrap();
    committed += 1;

    let mut received = Vec::new();
    // Wait for every expected notification, then a little longer for any extra one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while received.len() < committed && tokio::time::Instant::now() < deadline {
        if let Ok(Some(n)) =
            tokio::time::timeout(Duration::from_millis(200), notifications.recv()).await
        {
            received.push(n);
        }
    }
    while let Ok(Some(n)) =
        tokio::time::timeout(Duration::from_millis(500), notifications.recv()).await
    {
        received.push(n);
    }
    println!(
        "notifications: {committed} committed writes, {rolled_back} rolled back, {unchanged} that changed \
         nothing; {} notifications received",
        received.len()
    );
    assert_eq!(received.len(), committed);

    let payloads: Vec<serde_json::Value> =
        received.iter().map(|n| serde_json::from_str(n.payload()).unwrap()).collect();
    let operations: Vec<&str> = payloads.iter().map(|p| p["operation"].as_str().unwrap()).collect();
    assert_eq!(operations.first(), Some(&"INSERT"));
    assert_eq!(operations.last(), Some(&"DELETE"));
    assert!(payloads
        .iter()
        .all(|p| p["table"] == format!("public.{table}") && p["key"]["id"] == 1));
    let new_heads: BTreeSet<String> =
        payloads.iter().filter_map(|p| p.get("heads")).map(|h| h.to_string()).collect();
    assert_eq!(new_heads.len(), committed - 1, "two notifications carry the same heads");
}
