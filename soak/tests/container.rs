//! The Docker images under testcontainers: each major's image serves that major with the
//! extension preloaded; the 17 image serves the extension on the base's own 17.x, with the
//! image's settings,
//! password logins from the bridge, writes, reads and notifications; a short soak keeps
//! every invariant; and the sync server's image syncs a client's document into the
//! extension's. `cargo xtask test` builds the images and names them in PG_AUTOMERGE_IMAGE
//! and PG_AUTOMERGE_SYNC_SERVER_IMAGE.

use std::time::Duration;

use automerge::transaction::Transactable;
use automerge::{AutoCommit, ReadDoc, ROOT};
use futures_util::StreamExt;
use soak::container::{
    image_named_in, test_run, Server, ServerOptions, HOST_GATEWAY, IMAGE_ENV, RUN_LABEL,
};
use testcontainers::core::{Host, IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{GenericImage, ImageExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::{AsyncMessage, NoTls};

const SYNC_SERVER_IMAGE_ENV: &str = "PG_AUTOMERGE_SYNC_SERVER_IMAGE";
/// Every major's image, as `major=image` pairs separated by commas.
const IMAGES_ENV: &str = "PG_AUTOMERGE_IMAGES";
const MEMORY_LIMIT: u64 = 1 << 30;

fn image() -> String {
    image_named_in(IMAGE_ENV)
}

async fn server() -> Server {
    Server::start(&ServerOptions {
        image: image(),
        memory_bytes: Some(MEMORY_LIMIT),
        settings: Vec::new(),
        run: test_run(),
    })
    .await
    .expect("the image starts")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_serves_the_extension_with_its_settings() {
    let server = server().await;
    let client = server.connect().await.unwrap();
    let version: String = client.query_one("SHOW server_version", &[]).await.unwrap().get(0);
    assert!(version.starts_with("17."), "the image runs PostgreSQL 17, not {version}");
    client.batch_execute("CREATE EXTENSION pg_automerge").await.unwrap();
    for (setting, expected) in [
        ("shared_preload_libraries", "pg_automerge"),
        ("default_toast_compression", "lz4"),
        ("shared_buffers", "256MB"),
        ("max_wal_size", "8GB"),
    ] {
        let value: String = client.query_one(&format!("SHOW {setting}"), &[]).await.unwrap().get(0);
        assert_eq!(value, expected, "{setting}");
    }
    // Only a preloaded library lists the backends.
    let listed: i64 = client
        .query_one(
            "SELECT count(*) FROM automerge_memory_backends() WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(listed, 1);
    let limit = server.memory_stat().await.unwrap()["hierarchical_memory_limit"];
    assert_eq!(limit, MEMORY_LIMIT, "the container runs under the memory limit given");

    let wrong = server.conninfo().replace("password=soak", "password=wrong");
    let refused =
        tokio_postgres::connect(&wrong, NoTls).await.err().expect("a wrong password is refused");
    assert_eq!(refused.as_db_error().map(|e| e.code().code()), Some("28P01"));
}

/// `15=pg_automerge:pg15-debug,17=…`: the image of every major, from PG_AUTOMERGE_IMAGES.
fn images_by_major() -> Vec<(String, String)> {
    image_named_in(IMAGES_ENV)
        .split(',')
        .map(|pair| {
            let (major, image) = pair.split_once('=').expect("major=image pairs");
            (major.to_string(), image.to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_majors_image_serves_its_major_with_the_extension_preloaded() {
    let samples = fixtures::samples();
    let project = samples.iter().find(|s| s.name == "project").unwrap();
    let title = project.doc.get(ROOT, "title").unwrap().unwrap().0.to_string();
    for (major, image) in images_by_major() {
        let server = Server::start(&ServerOptions {
            image: image.clone(),
            memory_bytes: Some(MEMORY_LIMIT),
            settings: Vec::new(),
            run: test_run(),
        })
        .await
        .unwrap_or_else(|err| panic!("{image} starts: {err:#}"));
        let client = server.connect().await.unwrap();
        let version: String = client.query_one("SHOW server_version", &[]).await.unwrap().get(0);
        assert!(version.starts_with(&format!("{major}.")), "{image} runs {version}");
        let preloaded: String =
            client.query_one("SHOW shared_preload_libraries", &[]).await.unwrap().get(0);
        assert_eq!(preloaded, "pg_automerge", "{image}");
        client
            .batch_execute(
                "CREATE EXTENSION pg_automerge;
                 CREATE TABLE notes (id int PRIMARY KEY, doc automerge NOT NULL);",
            )
            .await
            .unwrap();
        client
            .execute("INSERT INTO notes VALUES (1, $1::bytea::automerge)", &[&project.doc.save()])
            .await
            .unwrap();
        let stored: String = client
            .query_one("SELECT doc->>'title' FROM notes WHERE id = 1", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(format!("{stored:?}"), title, "{image} reads the title it stored");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_reads_and_notifications_through_the_mapped_port() {
    let server = server().await;
    let client = server.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE EXTENSION pg_automerge;
             CREATE TABLE notes (id int PRIMARY KEY, doc automerge NOT NULL);
             CREATE TRIGGER notes_notify AFTER INSERT OR UPDATE ON notes
                 FOR EACH ROW EXECUTE FUNCTION automerge_notify('notes_changed', 'doc', 'id');",
        )
        .await
        .unwrap();
    let (listening, mut connection) = server.connect_raw().await.unwrap();
    let (sender, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(notification) = message {
                sender.send(notification.payload().to_string()).unwrap();
            }
        }
    });
    listening.batch_execute("LISTEN notes_changed").await.unwrap();

    let samples = fixtures::samples();
    let project = samples.iter().find(|s| s.name == "project").unwrap();
    client
        .execute("INSERT INTO notes VALUES (1, $1::bytea::automerge)", &[&project.doc.save()])
        .await
        .unwrap();
    let mut replica = automerge::AutoCommit::load(&project.doc.save()).unwrap();
    automerge::transaction::Transactable::put(
        &mut replica,
        automerge::ROOT,
        "title",
        "Launch plan, revised",
    )
    .unwrap();
    replica.commit();
    let change = replica.get_last_local_change().unwrap();
    let updated = client
        .execute("UPDATE notes SET doc = doc || $1::bytea WHERE id = 1", &[&change.raw_bytes()])
        .await
        .unwrap();
    assert_eq!(updated, 1);
    let title: String =
        client.query_one("SELECT doc->>'title' FROM notes WHERE id = 1", &[]).await.unwrap().get(0);
    assert_eq!(title, "Launch plan, revised");

    let mut received = Vec::new();
    for _ in 0..2 {
        let payload = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
            .await
            .unwrap()
            .unwrap();
        received.push(serde_json::from_str::<serde_json::Value>(&payload).unwrap());
    }
    assert_eq!(received[0]["operation"], "INSERT");
    assert_eq!(received[1]["operation"], "UPDATE");
    assert_eq!(received[1]["key"]["id"], 1);
    assert_eq!(received[1]["heads"], serde_json::json!([change.hash().to_string()]));
}

/// Two and a half minutes of the soak's mix on small documents.
#[tokio::test(flavor = "multi_thread")]
async fn a_short_soak_keeps_every_invariant() {
    let results_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/soak-test");
    let outcome = soak::run(soak::Config {
        image: image(),
        run: test_run(),
        duration_secs: 150,
        memory_bytes: MEMORY_LIMIT,
        connections: 8,
        gin_fastupdate: true,
        compactor: true,
        trim_threshold: "64MB".into(),
        max_load_memory: "1GB".into(),
        initial_documents: 50,
        final_documents: 200,
        documents: soak::documents::DocumentSet::Small,
        sample_interval_secs: 5,
        results_dir: Some(results_dir.clone()),
        command: "cargo xtask test (a_short_soak_keeps_every_invariant)".into(),
        build: vec![("extension build".into(), "debug".into())],
        progress: false,
    })
    .await
    .unwrap();
    for invariant in &outcome.invariants {
        println!(
            "{} {}: {}",
            if invariant.holds { "ok" } else { "FAILED" },
            invariant.name,
            invariant.detail
        );
    }
    assert_eq!(outcome.invariants.len(), 7);
    assert!(outcome.failed().is_empty(), "invariants failed: {:?}", outcome.failed());
    let report = std::fs::read_to_string(results_dir.join("report.md")).unwrap();
    assert!(report.contains("**PASSED**: 7 of 7 invariants hold"), "{report}");
    assert!(report.contains("## Incremental writes that loaded"), "{report}");
    for chart in ["memory.svg", "latency.svg", "wal.svg", "growth.svg"] {
        let svg = std::fs::read_to_string(results_dir.join(chart)).unwrap();
        assert!(svg.contains("stroke-width=\"2\""), "{chart} draws its series");
    }
}

/// The sync server's image against the extension's, as docs/sync-server.md runs them: it
/// answers /health once it reached Postgres, a samod client's document lands in the
/// `documents` table, and a SQL write reaches the client by sync (through LISTEN).
#[tokio::test(flavor = "multi_thread")]
async fn the_sync_server_image_syncs_into_the_extension_image() {
    let postgres = server().await;
    let image = image_named_in(SYNC_SERVER_IMAGE_ENV);
    let (name, tag) = image.split_once(':').unwrap_or((&image, "latest"));
    let sync_server = GenericImage::new(name, tag)
        .with_exposed_port(3030.tcp())
        .with_wait_for(WaitFor::message_on_stdout("listening on"))
        .with_label(RUN_LABEL, test_run())
        .with_host(HOST_GATEWAY, Host::HostGateway)
        .with_env_var("DATABASE_URL", postgres.conninfo_from_a_container())
        // No tokens: this test is about storage through the image, not access control.
        .with_env_var("SYNC_SERVER_ALLOW_ANONYMOUS", "true")
        .with_startup_timeout(Duration::from_secs(60))
        .start()
        .await
        .expect("the sync server's image starts");
    let port = sync_server.get_host_port_ipv4(3030.tcp()).await.unwrap();

    let mut health = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    health
        .write_all(b"GET /health HTTP/1.1\r\nHost: sync\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    health.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok\n"), "/health: {answer}");

    let (repo, _) = sync_server::client::connect(&format!("ws://127.0.0.1:{port}")).await.unwrap();
    let mut created = AutoCommit::new();
    created.put(ROOT, "title", "From a client of the image").unwrap();
    let handle = repo.create(created.document().clone()).await.unwrap();
    let id = handle.document_id().to_string();
    let db = postgres.connect().await.unwrap();
    let mut title = None;
    for _ in 0..300 {
        let row = db
            .query_opt("SELECT doc->>'title' FROM documents WHERE id = $1", &[&id])
            .await
            .unwrap();
        title = row.and_then(|row| row.get::<_, Option<String>>(0));
        if title.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(title.as_deref(), Some("From a client of the image"), "the row of {id}");

    let mut fork = handle.with_document(|doc| doc.fork());
    let mut tx = fork.transaction();
    tx.put(ROOT, "from_sql", true).unwrap();
    tx.commit();
    let change = fork.get_last_local_change().unwrap().raw_bytes().to_vec();
    let mut changes = handle.changes();
    db.execute("UPDATE documents SET doc = doc || $1::bytea WHERE id = $2", &[&change, &id])
        .await
        .unwrap();
    let synced = tokio::time::timeout(Duration::from_secs(30), async {
        while !handle.with_document(|doc| doc.get(ROOT, "from_sql").unwrap().is_some()) {
            changes.next().await.expect("the client's document goes on");
        }
    })
    .await;
    assert!(synced.is_ok(), "the SQL write did not reach the client within 30s");
    repo.stop().await;
}
