//! Every few seconds: the container's memory, every backend's Rust heap, WAL, the table's
//! and its TOAST table's size and dead tuples, the GIN index's pending list, and the changes
//! appended to the documents since their last save.

use std::time::{Duration, Instant};

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use tokio_postgres::Client;

use crate::container::Server;
use crate::listener::Listener;
use crate::load::{State, GIN_INDEX, TABLE};

/// Every how many samples a run without a terminal prints its progress.
const LOG_EVERY_SAMPLES: usize = 12;

#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Seconds since the load began.
    pub at: f64,
    pub rows: usize,
    /// cgroup v1 memory.stat: anonymous memory (`total_rss`), page cache (`total_cache`,
    /// which counts shared memory and so `shared_buffers`), and the shared memory alone.
    pub anonymous_bytes: Option<u64>,
    pub page_cache_bytes: Option<u64>,
    pub shared_memory_bytes: Option<u64>,
    pub wal_bytes: i64,
    pub table_bytes: i64,
    pub toast_bytes: i64,
    pub toast_live_tuples: i64,
    pub toast_dead_tuples: i64,
    pub toast_autovacuums: i64,
    pub gin_bytes: i64,
    pub gin_pending_pages: i64,
    /// automerge_appended_changes(doc) over the table: how many rows hold appended changes,
    /// and the most one holds.
    pub rows_with_appended: i64,
    pub appended_max: i64,
    /// automerge_memory_backends(): how many backends, and their Rust heaps.
    pub backends: i64,
    pub heap_max_bytes: i64,
    pub heap_sum_bytes: i64,
    pub heap_peak_max_bytes: i64,
    pub statements: usize,
    pub writes: usize,
    pub notifications: usize,
    pub failures: usize,
}

/// Samples every `sample_interval_secs` until `deadline`, and once more after it.
pub async fn sample_until(
    server: &Server,
    client: &Client,
    state: &State,
    listener: &Listener,
    begun: Instant,
    deadline: Instant,
) -> Result<Vec<Sample>> {
    let interval = Duration::from_secs(state.config.sample_interval_secs);
    let progress = if state.config.progress {
        let bar = ProgressBar::new(state.config.duration_secs);
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} s  {msg}")
                .expect("the template is valid")
                .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut samples = Vec::new();
    loop {
        let sample = take(server, client, state, listener).await?;
        progress.set_position(begun.elapsed().as_secs().min(state.config.duration_secs));
        let status = format!(
            "{} documents, {} statements, {} writes, {} notifications, anonymous {} MB, {} failures",
            sample.rows,
            sample.statements,
            sample.writes,
            sample.notifications,
            sample.anonymous_bytes.unwrap_or(0) >> 20,
            sample.failures
        );
        // Without a terminal (a run in the background with its output in a log), the bar
        // hides itself: print a line a minute instead.
        if state.config.progress && progress.is_hidden() && samples.len() % LOG_EVERY_SAMPLES == 0 {
            eprintln!("{:>5.0} s: {status}", sample.at);
        }
        progress.set_message(status);
        samples.push(sample);
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(interval.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
    progress.finish();
    Ok(samples)
}

async fn take(
    server: &Server,
    client: &Client,
    state: &State,
    listener: &Listener,
) -> Result<Sample> {
    let memory = server.memory_stat().await.ok();
    let stat = |name: &str| memory.as_ref().and_then(|m| m.get(name).copied());
    let storage = client
        .query_one(
            &format!(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
                        pg_table_size('{TABLE}'), pg_relation_size(c.reltoastrelid),
                        coalesce(t.n_live_tup, 0), coalesce(t.n_dead_tup, 0), coalesce(t.autovacuum_count, 0),
                        pg_relation_size('{GIN_INDEX}'),
                        (SELECT pending_pages::bigint FROM pgstatginindex('{GIN_INDEX}'))
                 FROM pg_class c LEFT JOIN pg_stat_all_tables t ON t.relid = c.reltoastrelid
                 WHERE c.oid = '{TABLE}'::regclass"
            ),
            &[],
        )
        .await?;
    let appended = client
        .query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE n > 0), coalesce(max(n), 0)::bigint
                 FROM (SELECT automerge_appended_changes(doc) AS n FROM {TABLE}) appended"
            ),
            &[],
        )
        .await?;
    let heaps = client
        .query_one(
            "SELECT count(*), coalesce(max(allocated_bytes), 0)::bigint, coalesce(sum(allocated_bytes), 0)::bigint,
                    coalesce(max(peak_allocated_bytes), 0)::bigint
             FROM automerge_memory_backends()",
            &[],
        )
        .await?;
    let (statements, writes, failures) = {
        let log = state.log.lock().unwrap();
        (log.timings.len(), log.writes.len(), log.failures.len())
    };
    Ok(Sample {
        at: state.seconds(),
        rows: state.row_count(),
        anonymous_bytes: stat("total_rss"),
        page_cache_bytes: stat("total_cache"),
        shared_memory_bytes: stat("total_shmem"),
        wal_bytes: storage.get(0),
        table_bytes: storage.get(1),
        toast_bytes: storage.get(2),
        toast_live_tuples: storage.get(3),
        toast_dead_tuples: storage.get(4),
        toast_autovacuums: storage.get(5),
        gin_bytes: storage.get(6),
        gin_pending_pages: storage.get(7),
        rows_with_appended: appended.get(0),
        appended_max: appended.get(1),
        backends: heaps.get(0),
        heap_max_bytes: heaps.get(1),
        heap_sum_bytes: heaps.get(2),
        heap_peak_max_bytes: heaps.get(3),
        statements,
        writes,
        notifications: listener.count(),
        failures,
    })
}
