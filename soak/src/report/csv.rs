//! The run's samples, each connection's memory and the latency table, as CSV files beside
//! the report.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::Result;

use super::figures::LatencyRow;
use crate::load::ConnectionMemory;
use crate::sampler::Sample;

pub fn write_latency_csv(path: &Path, rows: &[LatencyRow]) -> Result<()> {
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

pub fn write_samples_csv(path: &Path, samples: &[Sample]) -> Result<()> {
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

pub fn write_connections_csv(path: &Path, memory: &[ConnectionMemory]) -> Result<()> {
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
