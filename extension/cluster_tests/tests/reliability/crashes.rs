//! Writers keep writing while a backend, and then the postmaster, are killed with SIGKILL:
//! no acknowledged write may be lost, and every document must load afterwards.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ReadDoc, ROOT};
use cluster_tests::server::{sigkill, Server};
use tokio_postgres::NoTls;

use crate::{note, primary, DATABASE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
async fn backend_killed_mid_write_loses_no_acknowledged_write() -> Result<()> {
    writes_survive(&primary()?, Crash::Backend).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
async fn postmaster_killed_mid_write_loses_no_acknowledged_write() -> Result<()> {
    writes_survive(&primary()?, Crash::Postmaster).await
}

const WRITERS: usize = 4;
/// Each writer's document carries this many pseudo-random letters: compressed, it is still
/// larger than a page, so every write goes through TOAST and so does the crash.
const PAYLOAD_LETTERS: usize = 32 * 1024;
/// Writes each writer gets acknowledged before the crash, and again after it.
const WRITES_AROUND_CRASH: usize = 25;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Crash {
    Backend,
    Postmaster,
}

/// Shared between the writers and the task that crashes the server.
#[derive(Default)]
struct Progress {
    acknowledged: AtomicUsize,
    /// Writes that failed with the crash and were sent again.
    resent: AtomicUsize,
    stop: AtomicBool,
    backend_pids: Mutex<Vec<i32>>,
}

/// Runs `WRITERS` writers, each applying one-change writes to its own row (a client's
/// incremental write: the changes since the heads the server last acknowledged), kills a
/// backend or the postmaster while they write, and checks afterwards that each row holds
/// exactly the changes its writer made: every acknowledged write, and the write in flight at
/// the crash, which the writer sent again after reconnecting.
async fn writes_survive(primary: &Server, crash: Crash) -> Result<()> {
    let conninfo = primary.conninfo(DATABASE);
    let first_id = if crash == Crash::Backend { 0 } else { WRITERS };
    let progress = Arc::new(Progress::default());
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (conninfo, progress) = (conninfo.clone(), progress.clone());
        writers.push(tokio::spawn(write_until_stopped(conninfo, (first_id + w) as i32, progress)));
    }
    let wait_for = |target: usize| {
        let progress = progress.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while progress.acknowledged.load(Ordering::SeqCst) < target {
                ensure!(
                    Instant::now() < deadline,
                    "writers stalled at {target} acknowledged writes"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(())
        }
    };
    wait_for(WRITERS * WRITES_AROUND_CRASH).await?;
    let before_crash = progress.acknowledged.load(Ordering::SeqCst);
    match crash {
        Crash::Backend => {
            let pid = progress.backend_pids.lock().unwrap()[0];
            sigkill(pid as u32)?;
        }
        Crash::Postmaster => {
            // Writers fail until the server is back: restart it the way an init system would.
            tokio::task::block_in_place(|| {
                primary.kill_postmaster()?;
                primary.start_after_crash()
            })
            .with_context(|| format!("killing and restarting {}", primary.data_dir.display()))?;
        }
    }
    wait_for(before_crash + WRITERS * WRITES_AROUND_CRASH).await?;
    progress.stop.store(true, Ordering::SeqCst);
    let mut expected = Vec::new();
    for writer in writers {
        expected.push(writer.await??);
    }

    let (client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
    tokio::spawn(connection);
    for (w, mut doc) in expected.into_iter().enumerate() {
        let id = (first_id + w) as i32;
        let row = client
            .query_one(
                "SELECT ARRAY(SELECT hash FROM automerge_changes(doc) ORDER BY hash), \
                 automerge_heads(doc), (doc->>'count')::bigint, pg_column_size(doc) \
                 FROM written WHERE id = $1",
                &[&id],
            )
            .await?;
        let stored: Vec<String> = row.get(0);
        let wanted: BTreeSet<String> =
            doc.get_changes(&[]).iter().map(|change| change.hash().to_string()).collect();
        ensure!(
            stored.iter().cloned().collect::<BTreeSet<_>>() == wanted,
            "row {id}: {} changes stored, the writer made {}",
            stored.len(),
            wanted.len()
        );
        let heads: Vec<String> = row.get(1);
        let mut wanted_heads: Vec<String> =
            doc.get_heads().iter().map(ToString::to_string).collect();
        wanted_heads.sort();
        ensure!(
            heads == wanted_heads,
            "row {id}: heads {heads:?}, the writer has {wanted_heads:?}"
        );
        let stored_size: i32 = row.get(3);
        ensure!(stored_size > 8192, "row {id} is stored in {stored_size} bytes, not out of line");
        let count: i64 = row.get(2);
        ensure!(
            Some(count) == counter(&doc),
            "row {id}: count {count}, the writer wrote {:?}",
            counter(&doc)
        );
    }
    note(format!(
        "{} writes acknowledged by {WRITERS} writers, {before_crash} of them before the crash; \
         {} cut off by the crash and sent again",
        progress.acknowledged.load(Ordering::SeqCst),
        progress.resent.load(Ordering::SeqCst)
    ));
    Ok(())
}

/// One writer: inserts its row, then sets `count` to 1, 2, 3… one change per write until
/// told to stop, reconnecting whenever the server goes away. Returns its document.
async fn write_until_stopped(
    conninfo: String,
    id: i32,
    progress: Arc<Progress>,
) -> Result<AutoCommit> {
    let mut doc = AutoCommit::new().with_actor(ActorId::from([id as u8 + 1; 16]));
    doc.put(ROOT, "payload", payload(id as u32))?;
    let mut acknowledged_heads = Vec::new();
    let mut client: Option<tokio_postgres::Client> = None;
    let mut count: i64 = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        ensure!(Instant::now() < deadline, "writer {id} ran out of time");
        let connected = match client.take() {
            Some(connected) if !connected.is_closed() => connected,
            _ => match connect_with_pid(&conninfo).await {
                Ok((connected, pid)) => {
                    progress.backend_pids.lock().unwrap().push(pid);
                    connected
                }
                Err(_) => {
                    // The server is restarting after a crash.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if acknowledged_heads.is_empty() {
            doc.put(ROOT, "count", count)?;
            doc.commit();
            let written = connected
                .execute(
                    "INSERT INTO written VALUES ($1, $2::bytea) \
                     ON CONFLICT (id) DO UPDATE SET doc = written.doc || EXCLUDED.doc",
                    &[&id, &doc.save()],
                )
                .await;
            if written.is_ok() {
                acknowledged_heads = doc.get_heads();
            }
            client = Some(connected);
            continue;
        }
        if doc.get_heads() == acknowledged_heads {
            if progress.stop.load(Ordering::SeqCst) {
                return Ok(doc);
            }
            count += 1;
            doc.put(ROOT, "count", count)?;
            doc.commit();
        }
        // Everything since the last acknowledged write: after a failed write this sends the
        // change again, which the server takes whether or not it committed the first time.
        let changes = doc.save_after(&acknowledged_heads);
        match connected
            .execute("UPDATE written SET doc = doc || $1::bytea WHERE id = $2", &[&changes, &id])
            .await
        {
            Ok(1) => {
                acknowledged_heads = doc.get_heads();
                progress.acknowledged.fetch_add(1, Ordering::SeqCst);
                client = Some(connected);
            }
            Ok(rows) => bail!("writer {id}: the UPDATE changed {rows} rows"),
            // The connection died with its backend: reconnect and send again.
            Err(_) => {
                progress.resent.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// Letters from a xorshift generator seeded by `seed`: the same on every run, and
/// incompressible enough to stay large.
fn payload(seed: u32) -> String {
    let mut state = seed.wrapping_mul(2_654_435_761) | 1;
    (0..PAYLOAD_LETTERS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            char::from(b'a' + (state % 26) as u8)
        })
        .collect()
}

/// A connection and its backend's process id.
async fn connect_with_pid(conninfo: &str) -> Result<(tokio_postgres::Client, i32)> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(connection);
    let pid = client.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
    Ok((client, pid))
}

fn counter(doc: &AutoCommit) -> Option<i64> {
    match doc.get(ROOT, "count").ok()?? {
        (automerge::Value::Scalar(scalar), _) => match scalar.as_ref() {
            automerge::ScalarValue::Int(count) => Some(*count),
            _ => None,
        },
        _ => None,
    }
}

/// Every document must load (reading it as of its own heads always does), and give the
/// same state as its jsonb cast, whatever the cast reads. Its name sorts after both crash
/// tests, whose rows it counts.
#[test]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
fn then_every_document_loads() -> Result<()> {
    let primary = primary()?;
    let output = primary.psql(
        DATABASE,
        "\\t on\n\\a\n\
         SELECT count(*) FILTER (WHERE automerge_to_jsonb(doc, automerge_heads(doc)) = doc::jsonb) || ' of ' || count(*) \
         FROM (SELECT doc FROM documents UNION ALL SELECT doc FROM written) d;",
    )?;
    let rows = fixtures::samples().len() + 2 * WRITERS;
    ensure!(
        output.trim() == format!("{rows} of {rows}"),
        "{} documents load and agree, of {rows}",
        output.trim()
    );
    Ok(())
}
