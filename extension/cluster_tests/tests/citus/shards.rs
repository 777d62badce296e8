//! Documents on many shards: concurrent writers, shard moves and a rebalance, and writers
//! while a worker is killed; each row must end with every change its writers made, and
//! every document with its bytes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ROOT};
use cluster_tests::{line_differences, CITUS_DATABASE};
use tokio_postgres::NoTls;

use super::{connect, coordinator, nodes, note, DOCUMENTS};

const WRITERS: usize = 8;
const WRITES_EACH: usize = 15;

/// Eight writers, two to a row, on four rows of different shards: each applies its own
/// changes, one at a time, to the row's document; every row ends with every change both of
/// its writers made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
async fn concurrent_writers_on_many_shards_lose_no_change() -> Result<()> {
    let coordinator = coordinator()?;
    let client = connect(&coordinator).await?;
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
        let writer = connect(&coordinator).await?;
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
async fn a_worker_killed_with_sigkill_mid_write_loses_no_committed_write() -> Result<()> {
    let (coordinator, victim) = (coordinator()?, nodes().workers[0].clone());
    let client = connect(&coordinator).await?;
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
        let conninfo = coordinator.conninfo(CITUS_DATABASE);
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

/// Moves a shard to the other worker by logical replication, then lets the rebalancer even
/// the placements out again: every document's bytes, JSON and heads stay as they were.
#[test]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
fn citus_move_shard_placement_and_rebalance_table_shards_carry_documents_byte_for_byte(
) -> Result<()> {
    let coordinator = coordinator()?;
    let fingerprint = "SELECT id, md5(doc::bytea), md5(doc::jsonb::text), automerge_heads(doc) FROM docs ORDER BY id;";
    let before = coordinator.psql(CITUS_DATABASE, fingerprint)?;
    let placements = "SELECT nodeport, count(*) FROM citus_shards WHERE table_name = 'docs'::regclass GROUP BY 1 ORDER BY 1;";
    let moved = coordinator.psql(
        CITUS_DATABASE,
        "\\t on\n\\a\n\
         SELECT count(citus_move_shard_placement(s.shardid, '127.0.0.1', s.nodeport, '127.0.0.1', \
                o.nodeport, shard_transfer_mode := 'force_logical')::text) \
         FROM (SELECT shardid, nodeport FROM citus_shards WHERE table_name = 'docs'::regclass ORDER BY shardid LIMIT 1) s, \
              (SELECT DISTINCT nodeport FROM citus_shards WHERE table_name = 'docs'::regclass) o \
         WHERE o.nodeport <> s.nodeport;",
    )?;
    ensure!(moved.trim() == "1", "{} shards moved", moved.trim());
    let after_move = coordinator.psql(CITUS_DATABASE, fingerprint)?;
    ensure!(
        after_move == before,
        "after the move (- before, + after):\n{}",
        line_differences(&before, &after_move)
    );
    let uneven = coordinator.psql(CITUS_DATABASE, placements)?;
    coordinator.psql(
        CITUS_DATABASE,
        "SELECT rebalance_table_shards('docs', shard_transfer_mode := 'force_logical');",
    )?;
    let even = coordinator.psql(CITUS_DATABASE, placements)?;
    ensure!(uneven != even, "the rebalancer moved nothing:\n{even}");
    let after_rebalance = coordinator.psql(CITUS_DATABASE, fingerprint)?;
    ensure!(
        after_rebalance == before,
        "after the rebalance (- before, + after):\n{}",
        line_differences(&before, &after_rebalance)
    );
    Ok(())
}
