//! The background compactor (`pg_automerge.compactor_database`): values that writes appended
//! changes to are saved anew in the background, with the same document and JSON, while
//! writers go on appending, and without firing the table's triggers. The test cluster runs
//! it in its own database, with a naptime of 100 ms.

use std::time::{Duration, Instant};

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, AutoSerde, Automerge, ObjType, ReadDoc, ROOT};
use cluster_tests::{connect_to, COMPACTOR_DATABASE};
use tokio_postgres::Client;

/// Waits for the compactor to leave `table`'s row 1 with no appended changes.
async fn compacted(client: &Client, table: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    let sql = format!("SELECT automerge_appended_changes(doc) FROM {table} WHERE id = 1");
    while Instant::now() < deadline {
        let appended: i32 = client.query_one(&sql, &[]).await.unwrap().get(0);
        if appended == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The row's document as clients get it, loaded by the automerge crate, and its JSON.
async fn stored(client: &Client, table: &str) -> (Automerge, serde_json::Value) {
    let row = client
        .query_one(&format!("SELECT doc::bytea, doc::jsonb::text FROM {table} WHERE id = 1"), &[])
        .await
        .unwrap();
    (Automerge::load(row.get(0)).unwrap(), serde_json::from_str(row.get(1)).unwrap())
}

fn json_of(doc: &Automerge) -> serde_json::Value {
    serde_json::to_value(AutoSerde::from(doc)).unwrap()
}

/// A table of documents as a JS client writes them (a string as a text object, a list of
/// items), with a trigger that logs each write, and row 1 inserted.
async fn documents(client: &Client, table: &str, key: &str) -> AutoCommit {
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}, {table}_log;
             CREATE TABLE {table} (id int {key}, doc automerge NOT NULL);
             CREATE TABLE {table}_log (op text);
             CREATE FUNCTION {table}_logged() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN INSERT INTO {table}_log VALUES (TG_OP); RETURN NULL; END $$;
             CREATE TRIGGER logged AFTER INSERT OR UPDATE ON {table}
                 FOR EACH ROW EXECUTE FUNCTION {table}_logged();"
        ))
        .await
        .unwrap();
    let mut client_doc = AutoCommit::new().with_actor(ActorId::from([0xa1; 16]));
    let title = client_doc.put_object(ROOT, "title", ObjType::Text).unwrap();
    client_doc.splice_text(&title, 0, 0, "Minutes").unwrap();
    let items = client_doc.put_object(ROOT, "items", ObjType::List).unwrap();
    for n in 0..3 {
        let item = client_doc.insert_object(&items, n, ObjType::Map).unwrap();
        client_doc.put(&item, "text", format!("item {n}")).unwrap();
    }
    client
        .execute(&format!("INSERT INTO {table} VALUES (1, $1::bytea)"), &[&client_doc.save()])
        .await
        .unwrap();
    client_doc
}

/// One write of a JS client's edits: a splice into the title and a nested field.
fn edit(doc: &mut AutoCommit, n: usize) -> Vec<u8> {
    let heads = doc.get_heads();
    let title = doc.get(ROOT, "title").unwrap().unwrap().1;
    doc.splice_text(&title, 0, 0, &format!("{n} ")).unwrap();
    let items = doc.get(ROOT, "items").unwrap().unwrap().1;
    let item = doc.get(&items, n % 3).unwrap().unwrap().1;
    doc.put(&item, "done", n as i64).unwrap();
    doc.save_after(&heads)
}

async fn write(client: &Client, table: &str, change: &[u8]) {
    let update = format!("UPDATE {table} SET doc = doc || $1::bytea WHERE id = 1");
    assert_eq!(client.execute(&update, &[&change]).await.unwrap(), 1);
}

#[tokio::test]
async fn appended_changes_are_compacted_in_the_background() {
    let client = connect_to(COMPACTOR_DATABASE).await;
    let table = "compacted_docs";
    let mut doc = documents(&client, table, "PRIMARY KEY").await;
    for n in 0..5 {
        write(&client, table, &edit(&mut doc, n)).await;
    }
    assert!(compacted(&client, table).await, "the compactor saved the value anew");
    let (loaded, json) = stored(&client, table).await;
    assert_eq!(loaded.get_heads(), doc.get_heads());
    assert_eq!(json, json_of(doc.document()));
    assert_eq!(json_of(&loaded), json_of(doc.document()));
    Automerge::load(&loaded.save()).unwrap();
    let logged: i64 =
        client.query_one(&format!("SELECT count(*) FROM {table}_log"), &[]).await.unwrap().get(0);
    assert_eq!(logged, 6, "the insert and the five writes fired the trigger, the compaction not");

    // Later writes append to the compacted value.
    write(&client, table, &edit(&mut doc, 5)).await;
    assert!(compacted(&client, table).await);
    assert_eq!(stored(&client, table).await.1, json_of(doc.document()));
}

/// Writers that keep appending while the compactor works lose nothing: their changes
/// follow the new save, and the compactor gets to them in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_keep_every_change_through_compactions() {
    let setup = connect_to(COMPACTOR_DATABASE).await;
    let table = "compacted_hot_docs";
    let mut base = documents(&setup, table, "PRIMARY KEY").await;
    let writers: Vec<_> = (0..3u8)
        .map(|w| {
            let mut doc = base.fork().with_actor(ActorId::from([w + 1; 16]));
            tokio::spawn(async move {
                let client = connect_to(COMPACTOR_DATABASE).await;
                for n in 0..40 {
                    write(&client, table, &edit(&mut doc, n)).await;
                }
                doc
            })
        })
        .collect();
    let mut merged = base;
    for writer in writers {
        merged.merge(&mut writer.await.unwrap()).unwrap();
    }
    assert!(compacted(&setup, table).await);
    let (loaded, json) = stored(&setup, table).await;
    assert_eq!(loaded.get_heads(), merged.get_heads());
    assert_eq!(json, json_of(merged.document()));
}

#[tokio::test]
async fn a_table_without_a_primary_key_is_left_alone() {
    let client = connect_to(COMPACTOR_DATABASE).await;
    let table = "uncompacted_docs";
    let mut doc = documents(&client, table, "").await;
    write(&client, table, &edit(&mut doc, 0)).await;
    // A keyed table written after it is compacted: the compactor has been round since.
    let keyed = "compacted_after_docs";
    let mut other = documents(&client, keyed, "PRIMARY KEY").await;
    write(&client, keyed, &edit(&mut other, 0)).await;
    assert!(compacted(&client, keyed).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let appended: i32 = client
        .query_one(&format!("SELECT automerge_appended_changes(doc) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(appended, 1);
}

/// Issue 35: a value 0.5.0 stored from a mark change whose end comes before its begin,
/// appended after the save (clients load it; no save of it loads), written here past the
/// checks as 0.5.0 wrote it. The compactor leaves it as it is, loadable, with one WARNING
/// naming the table and key, and counts it; once repaired it compacts as any other.
#[tokio::test]
async fn a_value_no_save_of_which_loads_is_left_warned_about_and_counted() {
    use fixtures::wrong_changes::{client_document, wrong_change, Choices, Wrong};
    use pg_automerge_core::format::{self, client_bytes, Kept, Summary};
    use pg_automerge_core::settings::WriteSettings;
    use pg_automerge_core::writes::stored_from_client_bytes;

    let client = connect_to(COMPACTOR_DATABASE).await;
    let table = "compacted_marks_0_5_0";
    // The server log may hold an earlier run's lines: this test reads what comes after.
    let log_path =
        std::env::var(cluster_tests::SERVER_LOG_ENV).expect("run through cargo xtask test");
    let log_start = std::fs::metadata(&log_path).map_or(0, |meta| meta.len() as usize);
    let mut doc = client_document(7);
    let wrong = wrong_change(&mut doc, Wrong::MarkEndBeforeBegin, &mut Choices::new(&[]))
        .expect("the client document has a text to mark");
    let good = stored_from_client_bytes(&doc.save(), WriteSettings::UNLIMITED).unwrap();
    let value = format::decode(&good).unwrap();
    let change = automerge::Change::try_from(&wrong[..]).unwrap();
    let summary = Summary {
        change_count: value.summary.change_count + 1,
        op_count: value.summary.op_count + change.len() as u64,
        heads: vec![change.hash()],
    };
    let kept = Kept { appended_changes: 1, ..value.kept.clone().unwrap() };
    let stored_by_0_5_0 = format::encode(&summary, &kept, &[value.payload, &wrong[..]].concat());
    assert!(Automerge::load(client_bytes(&stored_by_0_5_0).unwrap()).is_ok());

    // A type with bytea's I/O, binary-coercible to `automerge`: the value is stored as it
    // is, past every check, as only a superuser can.
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table};
             CREATE TABLE {table} (id int PRIMARY KEY, doc automerge NOT NULL);
             DO $$ BEGIN
                 CREATE TYPE raw_automerge;
                 CREATE FUNCTION raw_automerge_in(cstring) RETURNS raw_automerge
                     AS 'byteain' LANGUAGE internal IMMUTABLE STRICT;
                 CREATE FUNCTION raw_automerge_out(raw_automerge) RETURNS cstring
                     AS 'byteaout' LANGUAGE internal IMMUTABLE STRICT;
                 CREATE TYPE raw_automerge (INPUT = raw_automerge_in,
                     OUTPUT = raw_automerge_out, INTERNALLENGTH = VARIABLE);
                 CREATE CAST (raw_automerge AS automerge) WITHOUT FUNCTION;
             EXCEPTION WHEN duplicate_object THEN NULL; END $$;"
        ))
        .await
        .unwrap();
    let hex = format!("\\x{}", hex::encode(&stored_by_0_5_0));
    client
        .execute(
            &format!("INSERT INTO {table} VALUES (1, $1::text::raw_automerge::automerge)"),
            &[&hex],
        )
        .await
        .unwrap();
    let left_before: i64 = client
        .query_one("SELECT rows_left_unsafe FROM automerge_compactor_status()", &[])
        .await
        .unwrap()
        .get(0);
    // A write to the row brings it to the compactor's attention (it looks at rows written
    // since its last round); an honest empty write of its heads changes nothing.
    client.execute(&format!("UPDATE {table} SET doc = doc WHERE id = 1"), &[]).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let left = loop {
        let left: i64 = client
            .query_one("SELECT rows_left_unsafe FROM automerge_compactor_status()", &[])
            .await
            .unwrap()
            .get(0);
        if left > left_before || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(left, left_before + 1, "the compactor counts the row it left");
    let bytes: Vec<u8> = client
        .query_one(&format!("SELECT doc::bytea FROM {table} WHERE id = 1"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(bytes, client_bytes(&stored_by_0_5_0).unwrap(), "left as it is");
    assert!(Automerge::load(&bytes).is_ok(), "and still loads in clients");
    // automerge_compact leaves it too, with a WARNING, rather than fail the statement.
    let compacted: Vec<u8> = client
        .query_one(&format!("SELECT automerge_compact(doc)::bytea FROM {table} WHERE id = 1"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(compacted, bytes);
    let log = std::fs::read(&log_path).unwrap();
    let log = String::from_utf8_lossy(&log[log_start.min(log.len())..]);
    let warnings = |needle: &str| {
        log.lines().filter(|line| line.contains("WARNING") && line.contains(needle)).count()
    };
    let row = format!("{table} [\"1\"] left as it is");
    assert_eq!(warnings(&row), 1, "one WARNING of the compactor names the table and the key");
    assert!(warnings("automerge_compact left the value as it is") >= 1);

    // Repaired, it loads again, its next save included.
    client
        .execute(&format!("UPDATE {table} SET doc = automerge_repair(doc) WHERE id = 1"), &[])
        .await
        .unwrap();
    let loads: bool = client
        .query_one(&format!("SELECT automerge_loads(doc) FROM {table} WHERE id = 1"), &[])
        .await
        .unwrap()
        .get(0);
    assert!(loads);
}
