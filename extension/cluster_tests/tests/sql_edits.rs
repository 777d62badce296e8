//! Edits from SQL through real sessions: writers editing one row at once under READ
//! COMMITTED lose nothing (each UPDATE waiting on another is evaluated again on the row
//! the other committed), the row loads in the automerge crate with the JSON SQL shows, a
//! backend's edits one after another add one actor, and the notification trigger fires
//! once per edit that changes the document.

use std::collections::BTreeSet;
use std::time::Duration;

use automerge::{AutoSerde, Automerge};
use cluster_tests::{connect, connect_listening};

const WRITERS: usize = 6;
const EDITS_PER_WRITER: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_editing_one_row_at_once_lose_nothing() {
    let table = "sql_edit_docs";
    let admin = connect().await;
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table};
             CREATE TABLE {table} (id int PRIMARY KEY, doc automerge NOT NULL);
             INSERT INTO {table} VALUES (1, automerge_set_counter(
                 automerge_update('\\x'::automerge, '{{\"title\": \"shared\", \"log\": []}}'), '{{count}}'));"
        ))
        .await
        .unwrap();
    let changes_before: i64 = admin
        .query_one(&format!("SELECT automerge_change_count(doc) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            tokio::spawn(async move {
                let client = connect().await;
                for edit in 0..EDITS_PER_WRITER {
                    let sql = match edit % 3 {
                        0 => format!(
                            "UPDATE {table} SET doc = automerge_set(doc, '{{w{w}}}', to_jsonb({edit})) WHERE id = 1"
                        ),
                        1 => format!("UPDATE {table} SET doc = automerge_increment(doc, '{{count}}') WHERE id = 1"),
                        _ => format!(
                            "UPDATE {table} SET doc = automerge_insert(doc, '{{log,0}}', to_jsonb('w{w}-{edit}'::text)) \
                             WHERE id = 1"
                        ),
                    };
                    assert_eq!(client.execute(&sql, &[]).await.unwrap(), 1);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let row = admin
        .query_one(
            &format!(
                "SELECT doc::jsonb::text, doc::bytea, automerge_loads(doc), automerge_change_count(doc), \
                 (SELECT count(DISTINCT actor) FROM automerge_changes(doc)) FROM {table}"
            ),
            &[],
        )
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(row.get(0)).unwrap();
    let bytes: Vec<u8> = row.get(1);
    assert!(row.get::<_, bool>(2), "the row does not keep what every stored value must");
    let total = (WRITERS * EDITS_PER_WRITER) as i64;
    assert_eq!(row.get::<_, i64>(3), changes_before + total, "an edit is missing");
    let per_kind = EDITS_PER_WRITER.div_ceil(3);
    assert_eq!(json["count"], (WRITERS * per_kind) as i64);
    let log: BTreeSet<String> =
        json["log"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    assert_eq!(log.len(), WRITERS * per_kind);
    for w in 0..WRITERS {
        let last = (0..EDITS_PER_WRITER).rfind(|e| e % 3 == 0).unwrap();
        assert_eq!(json[format!("w{w}")], last as i64);
    }
    // The automerge crate's load of the bytes shows the JSON SQL shows.
    let loaded = Automerge::load(&bytes).unwrap();
    assert_eq!(serde_json::to_value(AutoSerde::from(&loaded)).unwrap(), json);
    // An UPDATE that waited on another is evaluated again on the newer row, and an actor
    // whose last change that row does not hold is not continued: conflicts cost actors,
    // edits one after another do not (below).
    println!("{total} edits by {WRITERS} writers at once made {} actors", row.get::<_, i64>(4));

    // One backend's edits, one after another, add one actor.
    let actors = || async {
        admin
            .query_one(
                &format!("SELECT count(DISTINCT actor) FROM {table}, automerge_changes(doc)"),
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let before = actors().await;
    let client = connect().await;
    for n in 0..20 {
        let sql = format!(
            "UPDATE {table} SET doc = automerge_set(doc, '{{title}}', to_jsonb({n})) WHERE id = 1"
        );
        client.execute(&sql, &[]).await.unwrap();
    }
    assert_eq!(actors().await, before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_edit_that_changes_the_document_notifies_once() {
    let (table, channel) = ("sql_edit_notified", "sql_edit_notified_changed");
    let admin = connect().await;
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table};
             CREATE TABLE {table} (id int PRIMARY KEY, doc automerge NOT NULL);
             CREATE TRIGGER {table}_notify AFTER UPDATE ON {table}
                 FOR EACH ROW EXECUTE FUNCTION automerge_notify('{channel}', 'doc', 'id');
             INSERT INTO {table} VALUES (1, automerge_update('\\x'::automerge, '{{\"title\": \"Plan\"}}'));"
        ))
        .await
        .unwrap();
    let (listener, mut notifications) = connect_listening().await;
    listener.batch_execute(&format!("LISTEN {channel}")).await.unwrap();
    let edit = |sql: &str| format!("UPDATE {table} SET doc = {sql} WHERE id = 1");
    admin.execute(&edit("automerge_set(doc, '{status}', '\"open\"')"), &[]).await.unwrap();
    admin.execute(&edit("automerge_splice(doc, '{title}', 4, 0, ' B')"), &[]).await.unwrap();
    // Rolled back: no notification.
    admin.batch_execute("BEGIN").await.unwrap();
    admin.execute(&edit("automerge_delete(doc, '{status}')"), &[]).await.unwrap();
    admin.batch_execute("ROLLBACK").await.unwrap();
    // An update to the JSON the document has changes nothing: no notification.
    admin.execute(&edit("automerge_update(doc, doc::jsonb)"), &[]).await.unwrap();
    admin.execute(&edit("automerge_update(doc, '{\"title\": \"Plan C\"}')"), &[]).await.unwrap();

    let mut received = Vec::new();
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_secs(2), notifications.recv()).await
    {
        received.push(serde_json::from_str::<serde_json::Value>(n.payload()).unwrap());
    }
    assert_eq!(received.len(), 3, "{received:?}");
    let heads: BTreeSet<String> = received.iter().map(|p| p["heads"].to_string()).collect();
    assert_eq!(heads.len(), 3, "two notifications carry the same heads");
}
