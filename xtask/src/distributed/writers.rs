//! The citus step's writers: many on many shards at once, and some while a worker is
//! killed; each row must end with every change its writers made.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ROOT};
use tokio_postgres::NoTls;

use super::{Nodes, DATABASE, DOCUMENTS};
use crate::cluster::Cluster;
use crate::util::note;

pub async fn connect(cluster: &Cluster) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(&cluster.conninfo(DATABASE), NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

const WRITERS: usize = 8;
const WRITES_EACH: usize = 15;

/// Eight writers, two to a row, on four rows of different shards: each applies its own
/// changes, one at a time, to the row's document; every row ends with every change both of
/// its writers made.
pub async fn concurrent_writers(coordinator: &Cluster) -> Result<()> {
    let client = connect(coordinator).await?;
    let rows: Vec<i64> = client
        .query(
            "SELECT min(id) FROM docs GROUP BY get_shard_id_for_distribution_column('docs', id) \
             ORDER BY 1 LIMIT 4",
            &[],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    ensure!(rows.len() == 4, "the rows fall on {} shards", rows.len());
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let id = rows[w % rows.len()];
        let writer = connect(coordinator).await?;
        let saved: Vec<u8> =
            writer.query_one("SELECT doc::bytea FROM docs WHERE id = $1", &[&id]).await?.get(0);
        tasks.push(tokio::spawn(async move {
            let mut actor = [0xee; 16];
            actor[0] = w as u8;
            let mut doc = AutoCommit::load(&saved)?.with_actor(ActorId::from(actor));
            for i in 0..WRITES_EACH {
                let heads = doc.get_heads();
                doc.put(ROOT, format!("writer {w}"), i as i64)?;
                doc.commit();
                let changes = doc.save_after(&heads);
                let updated = writer
                    .execute(
                        "UPDATE docs SET doc = doc || $1::bytea WHERE id = $2",
                        &[&changes, &id],
                    )
                    .await?;
                ensure!(updated == 1, "writer {w}: {updated} rows updated");
            }
            Ok::<_, anyhow::Error>((id, doc))
        }));
    }
    let mut wanted: std::collections::BTreeMap<i64, BTreeSet<String>> = Default::default();
    for task in tasks {
        let (id, mut doc) = task.await??;
        let hashes = doc.get_changes(&[]).iter().map(|c| c.hash().to_string()).collect::<Vec<_>>();
        wanted.entry(id).or_default().extend(hashes);
    }
    for (id, wanted) in wanted {
        let stored = stored_hashes(&client, id).await?;
        ensure!(
            stored == wanted,
            "row {id}: {} changes stored, {} written",
            stored.len(),
            wanted.len()
        );
    }
    Ok(())
}

/// Writers send one change at a time through the coordinator to rows on the first worker,
/// which is killed with SIGKILL and started again meanwhile; a write that fails is sent
/// again with every change since the last acknowledged one. Each row must end with every
/// change: nothing committed is lost, nothing is applied twice.
pub async fn worker_crash(nodes: &Nodes) -> Result<()> {
    let (coordinator, victim) = (&nodes.coordinator, &nodes.workers[0]);
    let client = connect(coordinator).await?;
    let rows: Vec<i64> = client
        .query(
            // On the coordinator alone: which rows the worker's shards hold.
            "SELECT id FROM generate_series(1::bigint, $2) id WHERE EXISTS (SELECT FROM citus_shards s \
             WHERE s.table_name = 'docs'::regclass AND s.nodeport = $1 \
             AND s.shardid = get_shard_id_for_distribution_column('docs', id)) ORDER BY id LIMIT 3",
            &[&i32::from(victim.port), &DOCUMENTS],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    ensure!(!rows.is_empty(), "no rows on the worker at port {}", victim.port);
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (w, &id) in rows.iter().enumerate() {
        let conninfo = coordinator.conninfo(DATABASE);
        let saved: Vec<u8> =
            client.query_one("SELECT doc::bytea FROM docs WHERE id = $1", &[&id]).await?.get(0);
        let acknowledged = acknowledged.clone();
        tasks.push(tokio::spawn(async move {
            let mut actor = [0xcc; 16];
            actor[0] = w as u8;
            let mut doc = AutoCommit::load(&saved)?.with_actor(ActorId::from(actor));
            let mut acked_heads = doc.get_heads();
            let mut writer: Option<tokio_postgres::Client> = None;
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut written = 0;
            while written < 40 {
                ensure!(Instant::now() < deadline, "writer {w} ran out of time");
                if doc.get_heads() == acked_heads {
                    doc.put(ROOT, "crash count", written as i64)?;
                    doc.commit();
                }
                let connected = match writer.take() {
                    Some(c) if !c.is_closed() => c,
                    _ => match tokio_postgres::connect(&conninfo, NoTls).await {
                        Ok((c, connection)) => {
                            tokio::spawn(connection);
                            c
                        }
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                let changes = doc.save_after(&acked_heads);
                match connected
                    .execute(
                        "UPDATE docs SET doc = doc || $1::bytea WHERE id = $2",
                        &[&changes, &id],
                    )
                    .await
                {
                    Ok(1) => {
                        acked_heads = doc.get_heads();
                        written += 1;
                        acknowledged.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(n) => bail!("writer {w}: {n} rows updated"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
                writer = Some(connected);
            }
            Ok::<_, anyhow::Error>((id, doc))
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while acknowledged.load(Ordering::SeqCst) < 10 * rows.len() {
        ensure!(Instant::now() < deadline, "the writers stalled before the crash");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = acknowledged.load(Ordering::SeqCst);
    tokio::task::block_in_place(|| -> Result<()> {
        victim.kill_postmaster()?;
        victim.start_after_crash()
    })?;
    let mut docs = Vec::new();
    for task in tasks {
        docs.push(task.await??);
    }
    for (id, mut doc) in docs {
        let stored = stored_hashes(&client, id).await?;
        let wanted: BTreeSet<String> =
            doc.get_changes(&[]).iter().map(|c| c.hash().to_string()).collect();
        ensure!(
            stored == wanted,
            "row {id}: {} changes stored, {} written",
            stored.len(),
            wanted.len()
        );
    }
    note(format!(
        "{} writes acknowledged on {} rows, {before} before the worker was killed",
        acknowledged.load(Ordering::SeqCst),
        rows.len()
    ));
    Ok(())
}

/// The hashes of every change row `id` of `docs` holds.
async fn stored_hashes(client: &tokio_postgres::Client, id: i64) -> Result<BTreeSet<String>> {
    let stored: Vec<String> = client
        .query_one(
            "SELECT ARRAY(SELECT hash FROM automerge_changes(doc)) FROM docs WHERE id = $1",
            &[&id],
        )
        .await?
        .get(0);
    Ok(stored.into_iter().collect())
}
