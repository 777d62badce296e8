//! `cargo xtask bench`: runs the criterion benches (core level, SQL level against a cluster
//! it starts, and the allocator pair) on the fixtures, then writes a report of medians,
//! spreads, ratios to the baselines measured in the same run, peak memory and loads, stored
//! sizes and WAL, and the performance goals those figures meet or miss:
//! `results/bench-<date>-<scale>-<commit>/` for a full run (`…-filtered` for a run limited
//! by `--filter`), `target/bench-quick/` for `--quick`.
//!
//! One file per job: `measure.rs` runs the benches, `criterion.rs` reads what they wrote
//! (criterion's estimates, the peaks and the stored sizes) into the benches crate's
//! `measurements` and writes the CSV files, `report.rs` writes the report, with the
//! performance goals that the benches crate's `goals` judges the run by; `load_breakdown.rs`
//! runs and reports `--load-breakdown`, a run of its own,
//! with `load_profile.rs`'s profile of the load. This file holds the run's results.

mod criterion;
pub mod load_breakdown;
mod load_profile;
mod measure;
mod report;
mod sync_js;
mod sync_server;

use anyhow::Result;
use benches::measurements::{find, Row, StorageMeasure};
use xshell::Shell;

use crate::chart;
use crate::flags::{BenchFlags, BenchScale, SetupFlags};
use crate::postgres::PgMajor;
use crate::project_root;
use crate::provenance::Provenance;
use crate::util::{note, npm_dependencies};

impl BenchFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        let scale = if self.quick { BenchScale::Small } else { self.scale };
        if self.load_breakdown {
            // The automerge crate and the core alone: no PostgreSQL to set up.
            load_breakdown::run(sh, scale)?;
            return Ok(());
        }
        SetupFlags { pg: self.pg.into() }.run(sh)?;
        if self.sync {
            let repeats = self.repeats.unwrap_or(if self.quick { 1 } else { 5 });
            return sync_server::run(sh, self.pg, self.quick, repeats, self.profile);
        }
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
    npm_dependencies(sh, "examples/node-client")?;
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
