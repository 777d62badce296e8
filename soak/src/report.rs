//! The run's report: report.md with the setup, the invariants and the figures that
//! docs/operations.md quotes, the samples as CSV, and SVG charts. Generated, never edited.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use fixtures::js_edits::EditKind;
use plotters::prelude::*;
use report_table::Table;
use tokio_postgres::Client;

use crate::load::{IncrementalLoads, Query, State, Timing, TABLE};
use crate::sampler::Sample;
use crate::verify::Verification;
use crate::Config;

/// Where and with what the run ran.
pub struct Environment {
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub server_version: String,
    pub extension_version: String,
    pub settings: Vec<(String, String)>,
    pub docker_version: String,
}

impl Environment {
    pub async fn collect(
        client: &Client,
        started_at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Environment> {
        let server_version: String = client.query_one("SELECT version()", &[]).await?.get(0);
        let extension_version: String = client
            .query_one("SELECT extversion FROM pg_extension WHERE extname = 'pg_automerge'", &[])
            .await?
            .get(0);
        let mut settings = Vec::new();
        for name in [
            "shared_preload_libraries",
            "default_toast_compression",
            "shared_buffers",
            "max_wal_size",
            "work_mem",
            "max_connections",
            "pg_automerge.trim_threshold",
            "pg_automerge.max_load_memory",
            "pg_automerge.append_limit",
            "pg_automerge.compactor_database",
            "pg_automerge.compactor_naptime",
            "pg_automerge.compact_after",
            "autovacuum_vacuum_scale_factor",
        ] {
            let value: String =
                client.query_one(&format!("SELECT current_setting('{name}')"), &[]).await?.get(0);
            settings.push((name.to_string(), value));
        }
        let docker_version = std::process::Command::new("docker")
            .args(["version", "--format", "{{.Server.Version}}"])
            .output()
            .ok()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .unwrap_or_default();
        Ok(Environment { started_at, server_version, extension_version, settings, docker_version })
    }
}

/// One document's load, measured with the Operations page's recipe before the mix starts.
pub struct LoadPeak {
    name: String,
    stored_bytes: i64,
    peak_bytes: i64,
    load_ms: f64,
}

/// Loads one row of each document, alone on the connection, and keeps the Rust heap's peak
/// and the load time: `automerge_to_jsonb` at the document's own heads loads it, where
/// `doc->>'title'` reads the kept JSON and would measure nothing.
pub async fn load_peaks(client: &Client, ids: &[i64]) -> Result<Vec<LoadPeak>> {
    let mut peaks = Vec::new();
    for id in ids {
        client.batch_execute("SELECT automerge_memory_reset()").await?;
        let row = client
            .query_one(&format!("SELECT kind, pg_column_size(doc)::bigint, automerge_to_jsonb(doc, automerge_heads(doc)) IS NOT NULL FROM {TABLE} WHERE id = $1"), &[id])
            .await?;
        let usage = client
            .query_one(
                "SELECT peak_allocated_bytes, load_time_ms FROM automerge_memory_usage()",
                &[],
            )
            .await?;
        peaks.push(LoadPeak {
            name: row.get(0),
            stored_bytes: row.get(1),
            peak_bytes: usage.get(0),
            load_ms: usage.get(1),
        });
    }
    peaks.sort_by_key(|peak| std::cmp::Reverse(peak.peak_bytes));
    Ok(peaks)
}

/// What the rows take at the end, by document.
struct StoredSize {
    kind: String,
    rows: i64,
    stored_doc: f64,
    stored_jsonb: f64,
}

async fn stored_sizes(client: &Client) -> Result<Vec<StoredSize>> {
    let rows = client
        .query(
            &format!(
                "SELECT kind, count(*), avg(pg_column_size(doc))::float8, avg(pg_column_size(body))::float8
                 FROM {TABLE} GROUP BY kind ORDER BY 3 DESC"
            ),
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| StoredSize {
            kind: row.get(0),
            rows: row.get(1),
            stored_doc: row.get(2),
            stored_jsonb: row.get(3),
        })
        .collect())
}

/// Writes the report into `dir`; returns report.md's path.
// Each argument is a different source the report draws on; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub async fn write(
    dir: &Path,
    client: &Client,
    environment: &Environment,
    config: &Config,
    state: &State,
    samples: &[Sample],
    verification: &Verification,
    load_peaks: &[LoadPeak],
) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let stored = stored_sizes(client).await?;
    let log = state.log.lock().unwrap();
    write_samples_csv(&dir.join("samples.csv"), samples)?;
    write_connections_csv(&dir.join("connections.csv"), &log.connection_memory)?;
    let latency = latency_table(&log.timings);
    write_latency_csv(&dir.join("latency.csv"), &latency)?;
    charts(dir, config, samples, &log.timings)?;

    let duration = samples.last().map_or(0.0, |s| s.at);
    let mut md = String::new();
    let date = environment.started_at.format("%Y-%m-%d");
    writeln!(md, "# Soak test ({date})\n")?;
    writeln!(md, "Generated by `{}`; do not edit.\n", config.command)?;
    let all_hold = verification.invariants.iter().all(|i| i.holds);
    writeln!(
        md,
        "**{}**: {} of {} invariants hold after {:.1} minutes.\n",
        if all_hold { "PASSED" } else { "FAILED" },
        verification.invariants.iter().filter(|i| i.holds).count(),
        verification.invariants.len(),
        duration / 60.0
    )?;

    writeln!(md, "## Setup\n")?;
    let mut setup = Table::pairs();
    setup.row(["started".into(), environment.started_at.format("%Y-%m-%d %H:%M UTC").to_string()]);
    setup.row(["command".into(), format!("`{}`", config.command)]);
    setup.row(["duration".into(), format!("{:.1} minutes", duration / 60.0)]);
    setup.row(["image".into(), format!("`{}`", config.image)]);
    setup.row(["server", &environment.server_version]);
    setup.row(["pg_automerge", &environment.extension_version]);
    setup.row(["Docker engine", &environment.docker_version]);
    for (name, value) in &config.build {
        setup.row([name, value]);
    }
    setup.row([
        "container memory limit".into(),
        format!("{} MB, no swap", config.memory_bytes >> 20),
    ]);
    setup.row([
        "connections".into(),
        format!("{} running the mix, 1 listening, 1 sampling", config.connections),
    ]);
    setup.row([
        "GIN index".into(),
        format!(
            "on `body jsonb GENERATED ALWAYS AS (doc::jsonb) STORED`, fastupdate = {}",
            on_off(config.gin_fastupdate)
        ),
    ]);
    setup.row([
        "documents".into(),
        format!(
            "{} at the start, {} at the end",
            config.initial_documents,
            samples.last().map_or(0, |s| s.rows)
        ),
    ]);
    for (name, value) in &environment.settings {
        setup.row([format!("`{name}`"), format!("`{value}`")]);
    }
    write!(md, "{setup}")?;
    writeln!(
        md,
        "\nThe machine is shared: other jobs compiled on the same {} cores during the run, so \
         latencies and rates are noisy and lower than on a dedicated server.\n",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    )?;
    writeln!(md, "Each connection loops over a random mix: incremental writes (`doc || $1::bytea`, one new change), upserts of a replica's full save (`INSERT … ON CONFLICT (id) DO UPDATE SET doc = t.doc || excluded.doc`), `doc->>'title'`, a GIN containment query (`body @> …`, matching at most one row), `automerge_spans`, history (`automerge_heads`, `automerge_changes`, `automerge_to_jsonb(doc, heads)`) and `merge_agg` of up to three rows made from the same small document (replicas with different writes); a quarter of the writes go to the same ten rows, so writers wait on each other there. Inserts follow a schedule that grows the table linearly. Of every ten rows, one is a large document and one a medium one. The trigger `automerge_notify` sends a notification per write to a LISTEN connection.\n")?;

    writeln!(md, "## Invariants\n")?;
    let mut invariants = Table::left(["invariant", "holds", "detail"]);
    for invariant in &verification.invariants {
        let holds = if invariant.holds { "yes" } else { "**NO**" };
        invariants.row([invariant.name, holds, invariant.detail.as_str()]);
    }
    write!(md, "{invariants}")?;
    writeln!(
        md,
        "\nThe last notifications arrived within {:.1} s of the load's end; the end checks (reading every row's changes back, `automerge_loads` of every row) took {:.0} s.\n",
        verification.notification_wait.as_secs_f64(),
        verification.check_duration.as_secs_f64()
    )?;

    writeln!(md, "## Memory\n")?;
    writeln!(md, "![container memory](memory.svg)\n")?;
    let anonymous: Vec<f64> = samples.iter().filter_map(|s| s.anonymous_bytes).map(mb).collect();
    let cache: Vec<f64> = samples.iter().filter_map(|s| s.page_cache_bytes).map(mb).collect();
    let heap_sum: Vec<f64> = samples.iter().map(|s| mb(s.heap_sum_bytes as u64)).collect();
    let contexts: Vec<f64> =
        log.connection_memory.iter().map(|c| mb(c.context_bytes as u64)).collect();
    let resident: Vec<f64> =
        log.connection_memory.iter().map(|c| mb(c.resident_bytes as u64)).collect();
    let idle_heaps: Vec<f64> = log.connection_memory.iter().map(|c| c.heap_bytes as f64).collect();
    let mut memory = Table::left(["measure (MB unless said)", "min", "median", "p95", "max"]);
    for (name, values) in [
        ("container anonymous memory (memory.stat `total_rss`)", &anonymous),
        ("container page cache (`total_cache`, shared_buffers included)", &cache),
        ("all backends' Rust heaps at their last transaction end, summed (automerge_memory_backends)", &heap_sum),
        ("a connection's memory contexts between statements (pg_backend_memory_contexts)", &contexts),
        ("a connection's resident size between statements", &resident),
        ("a connection's Rust heap between statements, in **bytes**", &idle_heaps),
    ] {
        memory.row([name.to_string(), summary(values)]);
    }
    write!(md, "{memory}")?;
    let peak = samples.iter().map(|s| s.heap_peak_max_bytes).max().unwrap_or(0);
    writeln!(
        md,
        "\nThe largest Rust heap peak of any backend during the run: {:.0} MB.\n",
        mb(peak as u64)
    )?;
    writeln!(md, "What loading each document takes, measured before the mix on an idle connection (`automerge_memory_reset()`, `automerge_to_jsonb(doc, automerge_heads(doc))`, `automerge_memory_usage()`):\n")?;
    let mut loads = Table::left(["document", "stored kB", "load peak MB", "load ms"]);
    for peak in load_peaks {
        loads.row([
            peak.name.to_string(),
            format!("{:.1}", peak.stored_bytes as f64 / 1e3),
            format!("{:.1}", mb(peak.peak_bytes as u64)),
            format!("{:.0}", peak.load_ms),
        ]);
    }
    write!(md, "{loads}")?;
    writeln!(md)?;

    writeln!(md, "## Latency and throughput\n")?;
    writeln!(md, "![latency percentiles](latency.svg)\n")?;
    let statements = log.timings.len();
    writeln!(
        md,
        "{statements} statements in {:.1} minutes: {:.1} per second.\n",
        duration / 60.0,
        statements as f64 / duration.max(1.0)
    )?;
    let mut latencies = Table::left([
        "query",
        "rows",
        "count",
        "per second",
        "mean ms",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
    ]);
    for row in &latency {
        latencies.row([
            row.query.name().to_string(),
            row.size.to_string(),
            row.count.to_string(),
            format!("{:.2}", row.count as f64 / duration.max(1.0)),
            format!("{:.1}", row.mean),
            format!("{:.1}", row.p50),
            format!("{:.1}", row.p95),
            format!("{:.1}", row.p99),
            format!("{:.1}", row.max),
        ]);
    }
    write!(md, "{latencies}")?;

    writeln!(md, "\n## Writes, WAL and TOAST\n")?;
    writeln!(md, "![WAL rate](wal.svg)\n\n![table growth](growth.svg)\n")?;
    let first = samples.first().cloned().unwrap_or_default();
    let last = samples.last().cloned().unwrap_or_default();
    let wal = (last.wal_bytes - first.wal_bytes) as f64;
    let writes = log.timings.iter().filter(|t| t.query.is_write()).count();
    let large_writes = log.timings.iter().filter(|t| t.query.is_write() && t.large).count();
    let mut writes_table = Table::left(["measure", "value"]);
    writes_table.row(["WAL written during the load", &format!("{:.2} GB", wal / 1e9)]);
    writes_table.row([
        "writes (inserts, incremental writes, upserts)",
        &format!("{writes}, {large_writes} of them to large documents"),
    ]);
    writes_table.row([
        "WAL per write, averaged over the mix",
        &format!("{:.0} kB", wal / writes.max(1) as f64 / 1e3),
    ]);
    writes_table.row(["WAL rate", &format!("{:.2} MB/s", wal / duration.max(1.0) / 1e6)]);
    let start_to_end =
        |start: i64, end: i64| format!("{:.0} → {:.0} MB", mb(start as u64), mb(end as u64));
    writes_table
        .row(["table with TOAST, start → end", &start_to_end(first.table_bytes, last.table_bytes)]);
    writes_table
        .row(["TOAST table, start → end", &start_to_end(first.toast_bytes, last.toast_bytes)]);
    writes_table.row(["GIN index, start → end", &start_to_end(first.gin_bytes, last.gin_bytes)]);
    let dead_share: Vec<f64> = samples
        .iter()
        .filter(|s| s.toast_live_tuples + s.toast_dead_tuples > 0)
        .map(|s| {
            100.0 * s.toast_dead_tuples as f64 / (s.toast_live_tuples + s.toast_dead_tuples) as f64
        })
        .collect();
    writes_table.row([
        "TOAST dead tuples, % of its tuples (min / median / p95 / max)",
        &summary(&dead_share).replace(" | ", " / "),
    ]);
    writes_table.row([
        "autovacuum runs on the TOAST table",
        &(last.toast_autovacuums - first.toast_autovacuums).to_string(),
    ]);
    let pending: Vec<f64> = samples.iter().map(|s| s.gin_pending_pages as f64).collect();
    writes_table.row([
        "GIN pending list, pages (min / median / p95 / max)",
        &summary(&pending).replace(" | ", " / "),
    ]);
    let holding: Vec<f64> = samples.iter().map(|s| s.rows_with_appended as f64).collect();
    writes_table.row([
        "rows holding appended changes (automerge_appended_changes > 0; min / median / p95 / max)",
        &summary(&holding).replace(" | ", " / "),
    ]);
    let most: Vec<f64> = samples.iter().map(|s| s.appended_max as f64).collect();
    writes_table.row([
        "the most appended changes a row holds (min / median / p95 / max)",
        &summary(&most).replace(" | ", " / "),
    ]);
    write!(md, "{writes_table}")?;
    writeln!(
        md,
        "\nStored size per row at the end, by document (`pg_column_size`, compressed with `{}`):\n",
        setting(environment, "default_toast_compression")
    )?;
    let mut sizes = Table::left(["document", "rows", "`doc` kB", "`body` (jsonb) kB"]);
    for size in &stored {
        sizes.row([
            size.kind.to_string(),
            size.rows.to_string(),
            format!("{:.1}", size.stored_doc / 1e3),
            format!("{:.1}", size.stored_jsonb / 1e3),
        ]);
    }
    write!(md, "{sizes}")?;

    writeln!(md, "\n## Incremental writes that loaded\n")?;
    writeln!(
        md,
        "Each incremental write is what a JS client sends (`@automerge/automerge` 3: strings are \
         text objects), made on the connection's fork of the row's document, which never sees \
         the other connections' changes: a write is *concurrent* when the row holds changes \
         of other actors than the fork's (its change does not depend on the row's heads). \
         Loads are the backend's `automerge_memory_usage().loads` before and after the \
         statement. A write that appends does not load; one that finds `{}` changes appended \
         since the last save loads, saves, and starts the count again. Latencies are the \
         statement's, as the client waited for it, on small and on large documents.\n",
        setting(environment, "pg_automerge.append_limit")
    )?;
    write!(md, "{}", loads_table(&log.incremental_loads))?;
    writeln!(md, "\n## Files\n")?;
    writeln!(
        md,
        "- `samples.csv`: every {} s, the container's memory, the Rust heaps, WAL, sizes, counts.",
        config.sample_interval_secs
    )?;
    writeln!(md, "- `connections.csv`: each connection's backend between statements, every 10 s.")?;
    writeln!(md, "- `latency.csv`: the latency table above.")?;
    writeln!(md, "- `memory.svg`, `latency.svg`, `wal.svg`, `growth.svg`: the charts.")?;
    let path = dir.join("report.md");
    fs::write(&path, md)?;
    Ok(path)
}

/// Incremental writes by what they edited: how many, how many were concurrent, how many
/// loaded (in all, and of the concurrent ones), and their latency on small and on large
/// documents.
fn loads_table(writes: &[IncrementalLoads]) -> Table {
    let mut table = Table::left([
        "write",
        "count",
        "to large documents",
        "concurrent",
        "loaded",
        "concurrent that loaded",
        "small p50 / p99 ms",
        "large p50 / p99 ms",
    ]);
    let latency = |rows: &[&IncrementalLoads], large: bool| {
        let mut millis: Vec<f64> =
            rows.iter().filter(|w| w.large == large).map(|w| w.millis).collect();
        millis.sort_by(f64::total_cmp);
        match millis.is_empty() {
            true => "-".to_string(),
            false => format!("{:.0} / {:.0}", quantile(&millis, 0.5), quantile(&millis, 0.99)),
        }
    };
    let share = |part: usize, whole: usize| match whole {
        0 => "0".to_string(),
        _ => format!("{part} ({:.1}%)", 100.0 * part as f64 / whole as f64),
    };
    let kinds = EditKind::ALL.into_iter().map(Some).chain([None]);
    for kind in kinds {
        let rows: Vec<&IncrementalLoads> =
            writes.iter().filter(|w| kind.is_none_or(|kind| w.kind == kind)).collect();
        let concurrent: Vec<&&IncrementalLoads> = rows.iter().filter(|w| w.concurrent).collect();
        table.row([
            kind.map_or("all", EditKind::name).to_string(),
            rows.len().to_string(),
            rows.iter().filter(|w| w.large).count().to_string(),
            share(concurrent.len(), rows.len()),
            share(rows.iter().filter(|w| w.loads > 0).count(), rows.len()),
            share(concurrent.iter().filter(|w| w.loads > 0).count(), concurrent.len()),
            latency(&rows, false),
            latency(&rows, true),
        ]);
    }
    table
}

fn setting<'a>(environment: &'a Environment, name: &str) -> &'a str {
    environment.settings.iter().find(|(n, _)| n == name).map_or("", |(_, v)| v.as_str())
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The value at quantile `q` of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `min | median | p95 | max`, with one decimal.
fn summary(values: &[f64]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    [0.0, 0.5, 0.95, 1.0]
        .iter()
        .map(|q| format!("{:.1}", quantile(&sorted, *q)))
        .collect::<Vec<_>>()
        .join(" | ")
}

struct LatencyRow {
    query: Query,
    size: &'static str,
    count: usize,
    mean: f64,
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
}

/// Per query kind, and for statements on one row, per small or large document.
fn latency_table(timings: &[Timing]) -> Vec<LatencyRow> {
    let mut rows = Vec::new();
    for query in Query::ALL {
        let on_one_row = !matches!(query, Query::Containment | Query::MergeAgg);
        let groups: Vec<(&'static str, Option<bool>)> = if on_one_row {
            vec![("small", Some(false)), ("large", Some(true))]
        } else {
            vec![("several", None)]
        };
        for (size, large) in groups {
            let mut millis: Vec<f64> = timings
                .iter()
                .filter(|t| t.query == query && large.is_none_or(|large| t.large == large))
                .map(|t| t.millis)
                .collect();
            if millis.is_empty() {
                continue;
            }
            millis.sort_by(f64::total_cmp);
            rows.push(LatencyRow {
                query,
                size,
                count: millis.len(),
                mean: millis.iter().sum::<f64>() / millis.len() as f64,
                p50: quantile(&millis, 0.5),
                p95: quantile(&millis, 0.95),
                p99: quantile(&millis, 0.99),
                max: quantile(&millis, 1.0),
            });
        }
    }
    rows
}

fn write_latency_csv(path: &Path, rows: &[LatencyRow]) -> Result<()> {
    let mut csv = String::from("query,rows,count,mean_ms,p50_ms,p95_ms,p99_ms,max_ms\n");
    for r in rows {
        writeln!(
            csv,
            "{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3}",
            r.query.name(),
            r.size,
            r.count,
            r.mean,
            r.p50,
            r.p95,
            r.p99,
            r.max
        )?;
    }
    Ok(fs::write(path, csv)?)
}

fn write_samples_csv(path: &Path, samples: &[Sample]) -> Result<()> {
    let mut csv = String::from(
        "seconds,documents,anonymous_bytes,page_cache_bytes,shared_memory_bytes,wal_bytes,table_bytes,toast_bytes,\
         toast_live_tuples,toast_dead_tuples,toast_autovacuums,gin_bytes,gin_pending_pages,rows_with_appended,\
         appended_max,backends,heap_max_bytes,heap_sum_bytes,heap_peak_max_bytes,statements,writes,notifications,failures\n",
    );
    let optional = |value: Option<u64>| value.map(|v| v.to_string()).unwrap_or_default();
    for s in samples {
        writeln!(
            csv,
            "{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            s.at,
            s.rows,
            optional(s.anonymous_bytes),
            optional(s.page_cache_bytes),
            optional(s.shared_memory_bytes),
            s.wal_bytes,
            s.table_bytes,
            s.toast_bytes,
            s.toast_live_tuples,
            s.toast_dead_tuples,
            s.toast_autovacuums,
            s.gin_bytes,
            s.gin_pending_pages,
            s.rows_with_appended,
            s.appended_max,
            s.backends,
            s.heap_max_bytes,
            s.heap_sum_bytes,
            s.heap_peak_max_bytes,
            s.statements,
            s.writes,
            s.notifications,
            s.failures
        )?;
    }
    Ok(fs::write(path, csv)?)
}

fn write_connections_csv(path: &Path, memory: &[crate::load::ConnectionMemory]) -> Result<()> {
    let mut csv =
        String::from("seconds,connection,rust_heap_bytes,resident_bytes,memory_context_bytes\n");
    for m in memory {
        writeln!(
            csv,
            "{:.1},{},{},{},{}",
            m.at, m.worker, m.heap_bytes, m.resident_bytes, m.context_bytes
        )?;
    }
    Ok(fs::write(path, csv)?)
}

type Series = (String, Vec<(f64, f64)>);

fn charts(dir: &Path, config: &Config, samples: &[Sample], timings: &[Timing]) -> Result<()> {
    let minutes = |s: &Sample| s.at / 60.0;
    let memory: Vec<Series> = vec![
        (
            "anonymous".into(),
            samples.iter().filter_map(|s| Some((minutes(s), mb(s.anonymous_bytes?)))).collect(),
        ),
        (
            "page cache (shared_buffers included)".into(),
            samples.iter().filter_map(|s| Some((minutes(s), mb(s.page_cache_bytes?)))).collect(),
        ),
        (
            "Rust heaps of all backends".into(),
            samples.iter().map(|s| (minutes(s), mb(s.heap_sum_bytes as u64))).collect(),
        ),
        (
            "memory limit".into(),
            samples.iter().map(|s| (minutes(s), mb(config.memory_bytes))).collect(),
        ),
    ];
    line_chart(&dir.join("memory.svg"), "Container memory", "MB", &memory, false)?;

    let window = 60.0;
    let mut latency: Vec<Series> = Vec::new();
    for query in Query::ALL {
        for (name, q) in [("p50", 0.5), ("p95", 0.95)] {
            let mut points = Vec::new();
            let end = timings.iter().map(|t| t.at).fold(0.0, f64::max);
            let mut start = 0.0;
            while start < end {
                let mut millis: Vec<f64> = timings
                    .iter()
                    .filter(|t| t.query == query && t.at >= start && t.at < start + window)
                    .map(|t| t.millis)
                    .collect();
                if !millis.is_empty() {
                    millis.sort_by(f64::total_cmp);
                    points.push(((start + window / 2.0) / 60.0, quantile(&millis, q).max(0.1)));
                }
                start += window;
            }
            if !points.is_empty() {
                latency.push((format!("{} {name}", query.name()), points));
            }
        }
    }
    line_chart(
        &dir.join("latency.svg"),
        "Latency per query kind, per minute (log scale)",
        "ms",
        &latency,
        true,
    )?;

    let rates: Vec<(f64, f64)> = samples
        .windows(2)
        .map(|pair| {
            let seconds = (pair[1].at - pair[0].at).max(0.001);
            (minutes(&pair[1]), (pair[1].wal_bytes - pair[0].wal_bytes) as f64 / seconds / 1e6)
        })
        .collect();
    line_chart(&dir.join("wal.svg"), "WAL rate", "MB/s", &[("WAL".into(), rates)], false)?;

    let growth: Vec<Series> = vec![
        (
            "documents / 10".into(),
            samples.iter().map(|s| (minutes(s), s.rows as f64 / 10.0)).collect(),
        ),
        (
            "table with TOAST, MB".into(),
            samples.iter().map(|s| (minutes(s), mb(s.table_bytes as u64))).collect(),
        ),
        (
            "TOAST, MB".into(),
            samples.iter().map(|s| (minutes(s), mb(s.toast_bytes as u64))).collect(),
        ),
        (
            "GIN index, MB".into(),
            samples.iter().map(|s| (minutes(s), mb(s.gin_bytes as u64))).collect(),
        ),
    ];
    line_chart(&dir.join("growth.svg"), "Table growth", "documents / 10; MB", &growth, false)?;
    Ok(())
}

fn line_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> Result<()> {
    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let x_max = points.clone().map(|p| p.0).fold(1.0, f64::max);
    let y_max = points.clone().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    let palette = |i: usize| Palette99::pick(i).to_rgba();
    if log_y {
        let y_min = points.map(|p| p.1).fold(f64::MAX, f64::min).max(0.1);
        let mut chart = builder
            .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
            .map_err(plot_error)?;
        chart.configure_mesh().x_desc("minutes").y_desc(y_label).draw().map_err(plot_error)?;
        for (i, (name, data)) in series.iter().enumerate() {
            let color = palette(i);
            chart
                .draw_series(LineSeries::new(data.iter().copied(), color.stroke_width(2)))
                .map_err(plot_error)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
    } else {
        let mut chart = builder.build_cartesian_2d(0.0..x_max, 0.0..y_max).map_err(plot_error)?;
        chart.configure_mesh().x_desc("minutes").y_desc(y_label).draw().map_err(plot_error)?;
        for (i, (name, data)) in series.iter().enumerate() {
            let color = palette(i);
            chart
                .draw_series(LineSeries::new(data.iter().copied(), color.stroke_width(2)))
                .map_err(plot_error)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
    }
    root.present().map_err(plot_error)?;
    Ok(())
}

fn plot_error<E: std::fmt::Display>(error: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_are_counted_by_edit_and_among_concurrent_writes() {
        let write = |kind, concurrent, loads, millis| IncrementalLoads {
            kind,
            large: false,
            concurrent,
            loads,
            millis,
        };
        let writes = [
            write(EditKind::Splice, true, 0, 4.0),
            write(EditKind::Splice, true, 1, 40.0),
            write(EditKind::Splice, false, 0, 2.0),
            write(EditKind::Mark, false, 2, 7.0),
        ];
        let table = loads_table(&writes).to_string();
        let row = |name: &str| {
            table.lines().find(|line| line.starts_with(&format!("| {name} "))).unwrap().to_string()
        };
        assert!(row("splice into text")
            .contains("| 3 | 0 | 2 (66.7%) | 1 (33.3%) | 1 (50.0%) | 4 / 40 | - |"));
        assert!(row("mark over text").contains("| 1 | 0 | 0 (0.0%) | 1 (100.0%) | 0 | 7 / 7 | - |"));
        assert!(row("all").contains("| 4 | 0 | 2 (50.0%) | 2 (50.0%) | 1 (50.0%) | 4 / 40 | - |"));
    }

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let sorted = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(quantile(&sorted, 0.5), 5.0);
        assert_eq!(quantile(&sorted, 0.95), 10.0);
        assert_eq!(quantile(&sorted, 0.0), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
        assert_eq!(summary(&[3.0, 1.0, 2.0]), "1.0 | 2.0 | 3.0 | 3.0");
    }

    #[test]
    fn latency_rows_split_small_and_large_documents() {
        let timing = |query, large, millis| Timing { query, large, at: 1.0, millis };
        let rows = latency_table(&[
            timing(Query::Incremental, false, 10.0),
            timing(Query::Incremental, false, 30.0),
            timing(Query::Incremental, true, 3000.0),
            timing(Query::Containment, false, 2.0),
        ]);
        let shown: Vec<(Query, &str, usize, f64)> =
            rows.iter().map(|r| (r.query, r.size, r.count, r.mean)).collect();
        assert_eq!(
            shown,
            vec![
                (Query::Incremental, "small", 2, 20.0),
                (Query::Incremental, "large", 1, 3000.0),
                (Query::Containment, "several", 1, 2.0),
            ]
        );
    }
}
