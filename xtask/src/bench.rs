//! `cargo xtask bench`: runs the criterion benches (core level, SQL level against a cluster
//! it starts, and the allocator pair) on the fixtures, then writes a report of medians,
//! spreads, ratios to the baselines measured in the same run, and peak memory:
//! `results/bench-<date>-<scale>-<commit>/` for a full run, `target/bench-quick/` for `--quick`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use xshell::Shell;

use crate::flags::{BenchFlags, BenchScale, SetupFlags};
use crate::postgres::PgMajor;
use crate::project_root;
use crate::provenance::Provenance;
use crate::run::{install_extension, start_with_samples, Fresh, DATABASE};
use crate::setup;
use crate::step::{note, step};
use crate::{chart, fixtures};

/// The variant measured and its baselines, as the benches name them.
const OURS: &str = "pg_automerge";
const AUTOMERGE: &str = "automerge";
const JSONB: &str = "jsonb";
const SYSTEM_ALLOCATOR: &str = "system allocator";


pub fn run(sh: &Shell, flags: &BenchFlags) -> Result<()> {
    setup::run(sh, &SetupFlags { pg: flags.pg.into() })?;
    let scale = if flags.quick { BenchScale::Small } else { flags.scale };
    measure_and_report(sh, flags.pg, scale, flags.jobs)?;
    Ok(())
}

/// Runs the benches and writes their report; returns how many benchmarks ran.
pub fn measure_and_report(sh: &Shell, major: PgMajor, scale: BenchScale, jobs: usize) -> Result<usize> {
    let results = measure(sh, major, scale, jobs)?;
    let dir = if results.quick {
        project_root().join("target/bench-quick")
    } else {
        let provenance = &results.provenance;
        project_root().join(format!("results/bench-{}-{}-{}", provenance.date, results.scale, provenance.commit))
    };
    write_report(&dir, &results)?;
    note(format!("{} benchmarks; report in {}", results.rows.len(), dir.display()));
    Ok(results.rows.len())
}

/// Runs every bench and returns what they measured; `quick` uses the small fixtures, the
/// shortest measurement and debug builds, as a check that each bench still runs.
fn measure(sh: &Shell, major: PgMajor, scale: BenchScale, jobs: usize) -> Result<Results> {
    let quick = scale == BenchScale::Small;
    let fixtures_dir = fixtures::dir();
    let fixture_table = step(&format!("fixtures ({} scale)", scale.name()), || {
        fixtures::generate(sh, Some(scale))
    })?;
    // The extension as users run it; a quick run reuses the debug build the tests made.
    step(&format!("install the extension into {major}"), || {
        install_extension(sh, major, !quick)
    })?;
    let cluster = step(
        &format!("start a {major} cluster for the SQL benches"),
        || start_with_samples(sh, major, "bench", Fresh::Yes),
    )?;
    // Recorded before measuring: what was built and run, not what the tree became meanwhile.
    let server_version = cluster.psql(DATABASE, "\\pset tuples_only on\nSELECT version();")?;
    let mut command = match quick {
        true => "cargo xtask bench --quick".to_string(),
        false => format!("cargo xtask bench --pg {} --scale {}", major.number(), scale.name()),
    };
    if jobs > 1 {
        command += &format!(" --jobs {jobs}");
    }
    let provenance = Provenance::collect(sh, &command, &[("PostgreSQL", server_version.trim().to_string())])?;
    let criterion_dir = project_root().join("target/criterion");
    if criterion_dir.exists() {
        fs::remove_dir_all(&criterion_dir)?;
    }
    let peaks = criterion_dir.join("peaks.csv");
    let benches = step("criterion benches", || {
        let run = |bench: &str| -> Result<std::process::Child> {
            let mut cargo = Command::new("cargo");
            cargo.args(["bench", "--package", "benches", "--bench", bench]);
            if quick {
                // Reuses the tests' debug build of every dependency instead of a release build.
                cargo.args(["--profile", "dev"]);
            }
            cargo
                .env("PG_AUTOMERGE_BENCH_SCALE", scale.name())
                .env("PG_AUTOMERGE_FIXTURES", &fixtures_dir)
                .env("PG_AUTOMERGE_BENCH_PEAKS", &peaks)
                .env("PG_AUTOMERGE_CONNECTION", cluster.conninfo(DATABASE))
                .current_dir(project_root());
            cargo.spawn().with_context(|| format!("starting cargo bench --bench {bench}"))
        };
        // `core` and `sql` may run side by side (`--jobs`); the allocator pair runs one after
        // the other, alone, since its ratio compares two binaries.
        let batches: [&[&str]; 3] = [&["core", "sql"], &["load_counting_allocator"], &["load_system_allocator"]];
        for batch in batches {
            for chunk in batch.chunks(jobs.max(1)) {
                let children: Vec<_> =
                    chunk.iter().map(|bench| run(bench).map(|child| (bench, child))).collect::<Result<_>>()?;
                for (bench, mut child) in children {
                    let status = child.wait()?;
                    if !status.success() {
                        bail!("cargo bench --bench {bench} failed ({status})");
                    }
                }
            }
        }
        Ok(())
    });
    cluster.stop()?;
    benches?;
    let mut rows = read_estimates(&criterion_dir)?;
    add_peaks(&mut rows, &peaks)?;
    note(format!("{} benchmarks measured", rows.len()));
    Ok(Results {
        rows,
        fixture_table,
        provenance,
        quick,
        scale: scale.name(),
    })
}

/// What a run measured, and what produced it.
struct Results {
    rows: Vec<Row>,
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
}

#[derive(Deserialize)]
struct BenchmarkJson {
    group_id: String,
    function_id: Option<String>,
    value_str: Option<String>,
}

#[derive(Deserialize)]
struct Estimate {
    point_estimate: f64,
}

#[derive(Deserialize)]
struct EstimatesJson {
    median: Estimate,
    median_abs_dev: Estimate,
}

/// Reads criterion's `new/benchmark.json` and `new/estimates.json` of every benchmark.
fn read_estimates(criterion_dir: &Path) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for benchmark in find_files(criterion_dir, "benchmark.json")? {
        let dir = benchmark.parent().expect("a file has a directory");
        if dir.file_name().is_some_and(|name| name != "new") {
            continue;
        }
        let id: BenchmarkJson = serde_json::from_str(&fs::read_to_string(&benchmark)?)?;
        let estimates: EstimatesJson =
            serde_json::from_str(&fs::read_to_string(dir.join("estimates.json"))?)?;
        let (level, operation) = id
            .group_id
            .split_once('/')
            .unwrap_or(("core", &id.group_id));
        rows.push(Row {
            level: level.to_string(),
            operation: operation.to_string(),
            variant: id.function_id.unwrap_or_default(),
            fixture: id.value_str.unwrap_or_default(),
            median_ns: estimates.median.point_estimate,
            spread_ns: estimates.median_abs_dev.point_estimate,
            peak_bytes: None,
        });
    }
    rows.sort_by(|a, b| {
        (&a.level, &a.operation, &a.fixture, &a.variant).cmp(&(
            &b.level,
            &b.operation,
            &b.fixture,
            &b.variant,
        ))
    });
    Ok(rows)
}

fn find_files(dir: &Path, name: &str) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(find_files(&path, name)?);
        } else if path.file_name().is_some_and(|n| n == name) {
            found.push(path);
        }
    }
    Ok(found)
}

/// Adds the peaks the benches wrote (`group,variant,fixture,bytes`) to their rows.
fn add_peaks(rows: &mut [Row], peaks: &Path) -> Result<()> {
    let text = fs::read_to_string(peaks).with_context(|| format!("reading {}", peaks.display()))?;
    for line in text.lines() {
        let fields: Vec<&str> = line.split(',').collect();
        let [group, variant, fixture, bytes] = fields[..] else {
            bail!("bad peaks line: {line}")
        };
        let (level, operation) = group.split_once('/').unwrap_or(("core", group));
        if let Some(row) = rows.iter_mut().find(|r| {
            r.level == level
                && r.operation == operation
                && r.variant == variant
                && r.fixture == fixture
        }) {
            row.peak_bytes = Some(bytes.parse()?);
        }
    }
    Ok(())
}

/// The SQL operation's counterpart in the core benches, whose `automerge` variant is the
/// raw crate doing the same work.
fn core_counterpart(operation: &str) -> Option<&str> {
    match operation {
        "merge_agg" => Some("upsert full save"),
        "containment" | "heads" => None,
        same => Some(same),
    }
}

fn write_report(dir: &Path, results: &Results) -> Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join("results.csv"), csv(&results.rows))?;
    chart::write_svg(
        &dir.join("sql.svg"),
        "SQL level: median time per operation (log scale)",
        &results.rows_at("sql"),
    )?;
    chart::write_svg(
        &dir.join("core.svg"),
        "Core level: median time per operation (log scale)",
        &results.rows_at("core"),
    )?;
    fs::write(dir.join("README.md"), markdown(results))?;
    Ok(())
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
        self.rows.iter().find(|r| {
            r.level == level
                && r.operation == operation
                && r.variant == variant
                && r.fixture == fixture
        })
    }
}

fn csv(rows: &[Row]) -> String {
    let mut out =
        String::from("level,operation,variant,fixture,median_ns,median_abs_dev_ns,peak_bytes\n");
    for r in rows {
        let peak = r.peak_bytes.map(|p| p.to_string()).unwrap_or_default();
        writeln!(
            out,
            "{},{},{},{},{:.0},{:.0},{peak}",
            r.level, r.operation, r.variant, r.fixture, r.median_ns, r.spread_ns
        )
        .unwrap();
    }
    out
}

fn markdown(results: &Results) -> String {
    let p = &results.provenance;
    let mut out = String::new();
    let kind = if results.quick {
        "quick check (small fixtures, debug builds: not a measurement)".to_string()
    } else {
        format!("{} scale", results.scale)
    };
    writeln!(out, "# Benchmarks, {}: {kind}\n", p.date).unwrap();
    writeln!(out, "{}\n", p.markdown()).unwrap();
    out.push_str(
        "Each figure is criterion's median over 10 samples of equal size (flat sampling); the \
         spread is the median absolute deviation as a percentage of the median. A ratio is \
         pg_automerge's median divided by the baseline's, measured in the same run: below 1 is \
         faster than the baseline. Peak heap is the most Rust heap the operation held above \
         what was allocated before it (the counting allocator; at SQL level, the backend's \
         `automerge_memory_usage()`). The machine is shared: compare ratios, not absolute times, \
         across runs. Files: `results.csv` (every benchmark), `core.svg` and `sql.svg` (charts).\n\n",
    );
    writeln!(out, "## Fixtures\n\n```\n{}```\n", results.fixture_table).unwrap();

    out.push_str("## SQL level\n\n");
    out.push_str(
        "pg_automerge against a plain `jsonb` column holding the same JSON (`->>`, the value \
         itself, GIN containment, `jsonb_set`, an upsert of the whole JSON), and against the \
         automerge crate doing the same work from the same bytes (the core benches' `automerge` \
         variant).\n\n",
    );
    out.push_str("| operation | fixture | pg_automerge | spread | peak heap | jsonb | ratio to jsonb | automerge crate | ratio to automerge |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for ours in results
        .rows
        .iter()
        .filter(|r| r.level == "sql" && r.variant == OURS)
    {
        let jsonb = results.find("sql", &ours.operation, JSONB, &ours.fixture);
        let automerge = core_counterpart(&ours.operation)
            .and_then(|op| results.find("core", op, AUTOMERGE, &ours.fixture));
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ours.operation,
            ours.fixture,
            duration(ours.median_ns),
            spread(ours),
            bytes(ours.peak_bytes),
            jsonb.map_or("—".into(), |b| duration(b.median_ns)),
            ratio(ours, jsonb),
            automerge.map_or("—".into(), |b| duration(b.median_ns)),
            ratio(ours, automerge),
        )
        .unwrap();
    }

    out.push_str("\n## Core level (no Postgres)\n\n");
    out.push_str(
        "`pg_automerge_core` (what each SQL function does, from the stored value) against the \
         automerge crate doing the same work from the same bytes.\n\n",
    );
    out.push_str("| operation | fixture | pg_automerge | spread | peak heap | automerge crate | spread | peak heap | ratio |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    let core_rows = results
        .rows
        .iter()
        .filter(|r| r.level == "core" && r.variant == OURS);
    for ours in core_rows.filter(|r| r.operation != "load, by allocator") {
        let automerge = results.find("core", &ours.operation, AUTOMERGE, &ours.fixture);
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ours.operation,
            ours.fixture,
            duration(ours.median_ns),
            spread(ours),
            bytes(ours.peak_bytes),
            automerge.map_or("—".into(), |b| duration(b.median_ns)),
            automerge.map_or("—".into(), spread),
            bytes(automerge.and_then(|b| b.peak_bytes)),
            ratio(ours, automerge),
        )
        .unwrap();
    }

    out.push_str("\n## The counting allocator's cost\n\n");
    out.push_str("Loads with the extension's counting `#[global_allocator]` against the system allocator.\n\n");
    out.push_str("| fixture | counting | spread | system | spread | ratio |\n|---|---:|---:|---:|---:|---:|\n");
    let allocator_rows = results
        .rows
        .iter()
        .filter(|r| r.operation == "load, by allocator" && r.variant == OURS);
    for ours in allocator_rows {
        let system = results.find(
            &ours.level,
            &ours.operation,
            SYSTEM_ALLOCATOR,
            &ours.fixture,
        );
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            ours.fixture,
            duration(ours.median_ns),
            spread(ours),
            system.map_or("—".into(), |b| duration(b.median_ns)),
            system.map_or("—".into(), spread),
            ratio(ours, system),
        )
        .unwrap();
    }
    let by_variant: BTreeMap<&str, usize> =
        results.rows.iter().fold(BTreeMap::new(), |mut counts, r| {
            *counts.entry(r.variant.as_str()).or_default() += 1;
            counts
        });
    writeln!(out, "\nBenchmarks per variant: {by_variant:?}.").unwrap();
    out
}

fn duration(ns: f64) -> String {
    match ns {
        ns if ns >= 1e9 => format!("{:.2} s", ns / 1e9),
        ns if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        ns => format!("{:.1} µs", ns / 1e3),
    }
}

fn spread(row: &Row) -> String {
    format!("±{:.0}%", 100.0 * row.spread_ns / row.median_ns)
}

fn bytes(bytes: Option<u64>) -> String {
    match bytes {
        None => "—".into(),
        Some(b) if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        Some(b) => format!("{:.0} kB", b as f64 / 1024.0),
    }
}

fn ratio(ours: &Row, baseline: Option<&Row>) -> String {
    match baseline {
        Some(b) if b.median_ns > 0.0 => format!("{:.2}×", ours.median_ns / b.median_ns),
        _ => "—".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(level: &str, operation: &str, variant: &str, median_ns: f64) -> Row {
        Row {
            level: level.into(),
            operation: operation.into(),
            variant: variant.into(),
            fixture: "rich-text-small".into(),
            median_ns,
            spread_ns: median_ns / 10.0,
            peak_bytes: None,
        }
    }

    #[test]
    fn ratios_divide_ours_by_the_baseline() {
        let ours = row("sql", "read title", OURS, 3e6);
        assert_eq!(
            ratio(&ours, Some(&row("sql", "read title", JSONB, 1e6))),
            "3.00×"
        );
        assert_eq!(ratio(&ours, None), "—");
    }

    #[test]
    fn sql_rows_find_the_raw_crate_doing_the_same_work() {
        assert_eq!(core_counterpart("merge_agg"), Some("upsert full save"));
        assert_eq!(core_counterpart("read title"), Some("read title"));
        assert_eq!(core_counterpart("containment"), None);
    }

    #[test]
    fn peaks_attach_to_their_rows() {
        let dir = std::env::temp_dir().join(format!("xtask-peaks-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let peaks = dir.join("peaks.csv");
        fs::write(&peaks, "sql/read title,pg_automerge,rich-text-small,4096\n").unwrap();
        let mut rows = vec![
            row("sql", "read title", OURS, 1.0),
            row("sql", "read title", JSONB, 1.0),
        ];
        add_peaks(&mut rows, &peaks).unwrap();
        assert_eq!(rows[0].peak_bytes, Some(4096));
        assert_eq!(rows[1].peak_bytes, None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
