//! `cargo xtask bench`: runs the criterion benches (core level, SQL level against a cluster
//! it starts, and the allocator pair) on the fixtures, then writes a report of medians,
//! spreads, ratios to the baselines measured in the same run, peak memory and loads, stored
//! sizes and WAL, and the performance goals those figures meet or miss:
//! `results/bench-<date>-<scale>-<commit>/` for a full run (`…-filtered` for a run limited
//! by `--filter`), `target/bench-quick/` for `--quick`.
//!
//! One file per job: `measure.rs` runs the benches, `criterion.rs` reads what they wrote
//! (criterion's estimates, the peaks and the stored sizes) and writes the CSV files,
//! `goals.rs` lists the performance goals and judges a run by them, `report.rs` writes the
//! report. This file holds what they share: the run's results and the variants' names.

mod criterion;
mod format;
mod goals;
mod measure;
mod report;
mod sync_server;

use anyhow::Result;
use xshell::Shell;

use crate::chart;
use crate::flags::{BenchFlags, BenchScale, SetupFlags};
use crate::postgres::PgMajor;
use crate::project_root;
use crate::provenance::Provenance;
use crate::util::{note, npm_dependencies};

/// The variant measured and its baselines, as the benches name them.
const OURS: &str = "pg_automerge";
const NAIVE: &str = "naive (always loads)";
const AUTOMERGE: &str = "automerge";
const JSONB: &str = "jsonb";
const SYSTEM_ALLOCATOR: &str = "system allocator";
/// The JS client, whose loads the `client` level times beside the crate's.
const JS_CLIENT: &str = "@automerge/automerge";

/// The `client` level's operation: a load of what a read returns after `appended` changes.
fn client_load(appended: u32) -> String {
    format!("load after {appended} appended")
}

/// The `client` level's operation: a load of what a read returns once the background
/// compactor has folded the most appended changes into a new save.
const CLIENT_LOAD_COMPACTED: &str = "load after compaction";

/// How many appended changes a `client` level operation loads, as [`client_load`] names it.
fn appended_of(operation: &str) -> Option<u32> {
    operation.strip_prefix("load after ")?.strip_suffix(" appended")?.parse().ok()
}

impl BenchFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        SetupFlags { pg: self.pg.into() }.run(sh)?;
        if self.sync {
            let repeats = self.repeats.unwrap_or(if self.quick { 1 } else { 5 });
            return sync_server::run(sh, self.pg, self.quick, repeats);
        }
        let scale = if self.quick { BenchScale::Small } else { self.scale };
        measure_and_report(sh, self.pg, scale, self.jobs, self.filter.as_deref())?;
        Ok(())
    }
}

/// Runs the benches (those `filter` selects, or all) and writes their report; returns how
/// many benchmarks ran.
pub fn measure_and_report(
    sh: &Shell,
    major: PgMajor,
    scale: BenchScale,
    jobs: usize,
    filter: Option<&str>,
) -> Result<usize> {
    // The benches measure documents that the JS client makes, with examples/node-client.
    npm_dependencies(sh, "node-client")?;
    let results = measure::measure(sh, major, scale, jobs, filter)?;
    let dir = if results.quick {
        project_root().join("target/bench-quick")
    } else {
        let provenance = &results.provenance;
        // A partial run never takes the place of the full report of the same day and commit.
        let filtered = if filter.is_some() { "-filtered" } else { "" };
        project_root().join(format!(
            "results/bench-{}-{}-{}{filtered}",
            provenance.date, results.scale, provenance.commit
        ))
    };
    report::write(&dir, &results)?;
    note(format!("{} benchmarks; report in {}", results.rows.len(), dir.display()));
    Ok(results.rows.len())
}

/// What a run measured, and what produced it.
struct Results {
    rows: Vec<Row>,
    /// What the SQL level measured without timing it.
    storage: Vec<StorageMeasure>,
    fixture_table: String,
    provenance: Provenance,
    quick: bool,
    /// The fixtures' scale.
    scale: &'static str,
}

/// One benchmark: an operation on a fixture by one variant.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    /// `core` or `sql`.
    level: String,
    operation: String,
    variant: String,
    fixture: String,
    median_ns: f64,
    /// Median absolute deviation.
    spread_ns: f64,
    peak_bytes: Option<u64>,
    /// How many documents the extension loaded in one run (SQL level).
    loads: Option<u64>,
}

/// A measurement that is not a time: a stored size or the WAL of a write, of one variant's
/// value of a fixture.
#[derive(Clone, Debug, PartialEq)]
struct StorageMeasure {
    fixture: String,
    variant: String,
    /// `column_bytes`, `wal_upsert_bytes`…: see `STORAGE_COLUMNS`.
    measure: String,
    /// None where the variant has no such thing (no JSON kept).
    value: Option<i64>,
}

impl Results {
    fn rows_at(&self, level: &str) -> Vec<chart::Bar> {
        self.rows
            .iter()
            .filter(|r| r.level == level)
            .map(|r| chart::Bar {
                label: format!("{} · {}", r.operation, r.fixture),
                series: r.variant.clone(),
                value_ms: r.median_ns / 1e6,
            })
            .collect()
    }

    fn find(&self, level: &str, operation: &str, variant: &str, fixture: &str) -> Option<&Row> {
        find(&self.rows, level, operation, variant, fixture)
    }

    fn storage_value(&self, fixture: &str, variant: &str, measure: &str) -> Option<i64> {
        self.storage
            .iter()
            .find(|m| m.fixture == fixture && m.variant == variant && m.measure == measure)
            .and_then(|m| m.value)
    }
}

fn find<'a>(
    rows: &'a [Row],
    level: &str,
    operation: &str,
    variant: &str,
    fixture: &str,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.level == level && r.operation == operation && r.variant == variant && r.fixture == fixture
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of `rich-text-small` whose spread is a tenth of its median.
    pub(super) fn row(level: &str, operation: &str, variant: &str, median_ns: f64) -> Row {
        Row {
            level: level.into(),
            operation: operation.into(),
            variant: variant.into(),
            fixture: "rich-text-small".into(),
            median_ns,
            spread_ns: median_ns / 10.0,
            peak_bytes: None,
            loads: None,
        }
    }

    #[test]
    fn client_load_operations_give_back_their_count() {
        assert_eq!(appended_of(&client_load(64)), Some(64));
        assert_eq!(appended_of("load, by allocator"), None);
    }
}
