//! The image's defaults for a new user: the background compactor works in POSTGRES_DB and
//! compacts what writes appended there; `PG_AUTOMERGE_COMPACTOR=off` initialises a cluster
//! with none; a `-c pg_automerge.compactor_database=…` wins over the default, an empty one
//! running none (as `cargo xtask soak --compactor off` passes it). `cargo xtask test` builds
//! the image and names it in PG_AUTOMERGE_IMAGE.

use std::time::{Duration, Instant};

use automerge::transaction::Transactable;
use automerge::{AutoCommit, ROOT};
use soak::container::{image_named_in, test_run, Server, ServerOptions, DATABASE, IMAGE_ENV};
use tokio_postgres::Client;

/// The compactor's background worker, as `pg_stat_activity.backend_type` names it.
const WORKER: &str = "pg_automerge compactor";
/// Long enough for a compactor with the default 1 s naptime to have compacted a quiet value
/// several times over: the default's test sees it done within about two seconds.
const QUIET: Duration = Duration::from_secs(5);

async fn start(settings: &[(&str, &str)], env: &[(&str, &str)]) -> Server {
    let options = ServerOptions {
        image: image_named_in(IMAGE_ENV),
        memory_bytes: Some(1 << 30),
        settings: settings
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
        run: test_run(),
    };
    Server::start_with_env(&options, env).await.expect("the image starts")
}

async fn compactor_database(client: &Client) -> String {
    client.query_one("SHOW pg_automerge.compactor_database", &[]).await.unwrap().get(0)
}

/// The databases the compactor's workers are connected to.
async fn workers(client: &Client) -> Vec<String> {
    client
        .query("SELECT datname::text FROM pg_stat_activity WHERE backend_type = $1", &[&WORKER])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Waits for the worker to have connected: it starts once recovery has finished, which
/// can be just after the server says it accepts connections.
async fn worker_in(client: &Client) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let workers = workers(client).await;
        if !workers.is_empty() || Instant::now() > deadline {
            return workers;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A table with a primary key (the compactor finds rows by it) and row 1, whose value holds
/// one appended change: counted in the writing transaction, before any compactor can see
/// it.
async fn appended_row(client: &mut Client) {
    client
        .batch_execute(
            "CREATE EXTENSION pg_automerge;
             CREATE TABLE notes (id int PRIMARY KEY, doc automerge NOT NULL);",
        )
        .await
        .unwrap();
    let mut doc = AutoCommit::new();
    doc.put(ROOT, "title", "Launch plan").unwrap();
    let saved = doc.save();
    let heads = doc.get_heads();
    doc.put(ROOT, "title", "Launch plan, revised").unwrap();
    let change = doc.save_after(&heads);
    let writing = client.transaction().await.unwrap();
    writing.execute("INSERT INTO notes VALUES (1, $1::bytea::automerge)", &[&saved]).await.unwrap();
    writing
        .execute("UPDATE notes SET doc = doc || $1::bytea WHERE id = 1", &[&change])
        .await
        .unwrap();
    assert_eq!(appended(&writing).await, 1, "the write appended its change");
    writing.commit().await.unwrap();
}

async fn appended(client: &impl tokio_postgres::GenericClient) -> i32 {
    client
        .query_one("SELECT automerge_appended_changes(doc) FROM notes WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0)
}

/// How many values the compactor saved anew since the server started.
async fn compacted(client: &Client) -> i64 {
    client
        .query_one("SELECT compacted FROM automerge_compactor_status()", &[])
        .await
        .unwrap()
        .get(0)
}

/// No worker runs, and a value with an appended change stays so while a compactor would
/// have saved it anew.
async fn assert_no_compactor(server: &Server) {
    let mut client = server.connect().await.unwrap();
    assert_eq!(compactor_database(&client).await, "");
    appended_row(&mut client).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(appended(&client).await, 1, "nothing compacted the value");
    assert_eq!(compacted(&client).await, 0);
    assert_eq!(workers(&client).await, Vec::<String>::new(), "no compactor runs");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_compactor_works_in_postgres_db_by_default() {
    let server = start(&[], &[]).await;
    let mut client = server.connect().await.unwrap();
    assert_eq!(compactor_database(&client).await, DATABASE);
    assert_eq!(worker_in(&client).await, [DATABASE]);
    appended_row(&mut client).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while appended(&client).await > 0 {
        assert!(Instant::now() < deadline, "the compactor saved the value anew within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(compacted(&client).await, 1);
    let title: String =
        client.query_one("SELECT doc->>'title' FROM notes WHERE id = 1", &[]).await.unwrap().get(0);
    assert_eq!(title, "Launch plan, revised", "the compacted value is the same document");
}

#[tokio::test(flavor = "multi_thread")]
async fn pg_automerge_compactor_off_initialises_a_cluster_with_none() {
    assert_no_compactor(&start(&[], &[("PG_AUTOMERGE_COMPACTOR", "off")]).await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_on_the_command_line_wins_over_the_default() {
    let server = start(&[("pg_automerge.compactor_database", "postgres")], &[]).await;
    let client = server.connect().await.unwrap();
    assert_eq!(compactor_database(&client).await, "postgres");
    assert_eq!(worker_in(&client).await, ["postgres"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_database_on_the_command_line_runs_no_compactor() {
    assert_no_compactor(&start(&[("pg_automerge.compactor_database", "")], &[]).await).await;
}
