//! `cargo xtask bench`: runs the criterion benches (core level, SQL level against a cluster
//! it starts, and the allocator pair) on the fixtures, then writes a report of medians,
//! spreads, ratios to the baselines measured in the same run, peak memory and loads, stored
//! sizes and WAL, and the performance goals those figures meet or miss:
//! `results/bench-<date>-<scale>-<commit>/` for a full run (`…-filtered` for a run limited
//! by `--filter`), `target/bench-quick/` for `--quick`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use xshell::Shell;

use crate::cluster::Cluster;
use crate::flags::{BenchFlags, BenchScale, SetupFlags};
use crate::install::PgInstall;
use crate::postgres::PgMajor;
use crate::project_root;
use crate::provenance::Provenance;
use crate::run::{start_with_samples, Fresh, DATABASE};
use crate::util::{note, step};
use crate::{chart, fixtures};
use ::fixtures::generated::{Kind, Scale, Spec};

/// The variant measured and its baselines, as the benches name them.
const OURS: &str = "pg_automerge";
const NAIVE: &str = "naive (always loads)";
const AUTOMERGE: &str = "automerge";
const JSONB: &str = "jsonb";
const SYSTEM_ALLOCATOR: &str = "system allocator";

impl BenchFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        SetupFlags { pg: self.pg.into() }.run(sh)?;
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
    let results = measure(sh, major, scale, jobs, filter)?;
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
    write_report(&dir, &results)?;
    note(format!("{} benchmarks; report in {}", results.rows.len(), dir.display()));
    Ok(results.rows.len())
}

/// Runs every bench and returns what they measured; `quick` uses the small fixtures, the
/// shortest measurement and debug builds, as a check that each bench still runs.
fn measure(
    sh: &Shell,
    major: PgMajor,
    scale: BenchScale,
    jobs: usize,
    filter: Option<&str>,
) -> Result<Results> {
    let quick = scale == BenchScale::Small;
    let fixtures_dir = fixtures::dir();
    let fixture_table = step(&format!("fixtures ({} scale)", scale.name()), || {
        fixtures::generate(sh, Some(scale))
    })?;
    // The extension as users run it; a quick run reuses the debug build the tests made.
    step(&format!("install the extension into {major}"), || {
        PgInstall::shared(major).install_extension(sh, !quick)
    })?;
    let cluster = step(&format!("start a {major} cluster for the SQL benches"), || {
        start_with_samples(Cluster::new(sh, major, "bench")?, Fresh::Yes)
    })?;
    // Recorded before measuring: what was built and run, not what the tree became meanwhile.
    let server_version = cluster.psql(DATABASE, "\\pset tuples_only on\nSELECT version();")?;
    let mut command = match quick {
        true => "cargo xtask bench --quick".to_string(),
        false => format!("cargo xtask bench --pg {} --scale {}", major.number(), scale.name()),
    };
    if jobs > 1 {
        command += &format!(" --jobs {jobs}");
    }
    if let Some(filter) = filter {
        command += &format!(" --filter '{filter}'");
    }
    let provenance =
        Provenance::collect(sh, &command, &[("PostgreSQL", server_version.trim().to_string())])?;
    let criterion_dir = project_root().join("target/criterion");
    if criterion_dir.exists() {
        fs::remove_dir_all(&criterion_dir)?;
    }
    let peaks = criterion_dir.join("peaks.csv");
    let storage = criterion_dir.join("storage.csv");
    let benches = step("criterion benches", || {
        let run = |bench: &str| -> Result<std::process::Child> {
            let mut cargo = Command::new("cargo");
            cargo.args(["bench", "--package", "benches", "--bench", bench]);
            if quick {
                // Reuses the tests' debug build of every dependency instead of a release build.
                cargo.args(["--profile", "dev"]);
            }
            if let Some(filter) = filter {
                // Criterion's filter; the variable lets the benches skip their untimed work
                // (peaks, stored sizes, WAL) for what criterion skips.
                cargo.args(["--", filter]).env("PG_AUTOMERGE_BENCH_FILTER", filter);
            }
            cargo
                .env("PG_AUTOMERGE_BENCH_SCALE", scale.name())
                .env("PG_AUTOMERGE_FIXTURES", &fixtures_dir)
                .env("PG_AUTOMERGE_BENCH_PEAKS", &peaks)
                .env("PG_AUTOMERGE_BENCH_STORAGE", &storage)
                .env("PG_AUTOMERGE_CONNECTION", cluster.conninfo(DATABASE))
                .current_dir(project_root());
            cargo.spawn().with_context(|| format!("starting cargo bench --bench {bench}"))
        };
        // `core` and `sql` may run side by side (`--jobs`); the allocator pair runs one after
        // the other, alone, since its ratio compares two binaries.
        let batches: [&[&str]; 3] =
            [&["core", "sql"], &["load_counting_allocator"], &["load_system_allocator"]];
        for batch in batches {
            for chunk in batch.chunks(jobs.max(1)) {
                let children: Vec<_> = chunk
                    .iter()
                    .map(|bench| run(bench).map(|child| (bench, child)))
                    .collect::<Result<_>>()?;
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
    let storage = read_storage(&storage)?;
    note(format!("{} benchmarks measured", rows.len()));
    Ok(Results { rows, storage, fixture_table, provenance, quick, scale: scale.name() })
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
    // A filter can leave a bench binary with nothing to run, and criterion with no directory.
    if !criterion_dir.exists() {
        return Ok(rows);
    }
    for benchmark in find_files(criterion_dir, "benchmark.json")? {
        let dir = benchmark.parent().expect("a file has a directory");
        if dir.file_name().is_some_and(|name| name != "new") {
            continue;
        }
        let id: BenchmarkJson = serde_json::from_str(&fs::read_to_string(&benchmark)?)?;
        let estimates: EstimatesJson =
            serde_json::from_str(&fs::read_to_string(dir.join("estimates.json"))?)?;
        let (level, operation) = id.group_id.split_once('/').unwrap_or(("core", &id.group_id));
        rows.push(Row {
            level: level.to_string(),
            operation: operation.to_string(),
            variant: id.function_id.unwrap_or_default(),
            fixture: id.value_str.unwrap_or_default(),
            median_ns: estimates.median.point_estimate,
            spread_ns: estimates.median_abs_dev.point_estimate,
            peak_bytes: None,
            loads: None,
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

/// Adds the peaks and loads the benches wrote (`group,variant,fixture,bytes,loads`, loads
/// empty where not counted) to their rows.
fn add_peaks(rows: &mut [Row], peaks: &Path) -> Result<()> {
    if !peaks.exists() {
        return Ok(());
    }
    let text = fs::read_to_string(peaks).with_context(|| format!("reading {}", peaks.display()))?;
    for line in text.lines() {
        let fields: Vec<&str> = line.split(',').collect();
        let [group, variant, fixture, bytes, loads] = fields[..] else {
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
            row.loads = optional(loads)?;
        }
    }
    Ok(())
}

/// Reads what the benches measured without timing it (`fixture,variant,measure,value`, the
/// value empty where there is none); no file when a filter left the storage out.
fn read_storage(path: &Path) -> Result<Vec<StorageMeasure>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            let [fixture, variant, measure, value] = fields[..] else {
                bail!("bad storage line: {line}")
            };
            Ok(StorageMeasure {
                fixture: fixture.into(),
                variant: variant.into(),
                measure: measure.into(),
                value: optional(value)?,
            })
        })
        .collect()
}

/// An optional number: none when empty.
fn optional<T: std::str::FromStr>(text: &str) -> Result<Option<T>>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    Ok(if text.is_empty() { None } else { Some(text.parse()?) })
}

/// The SQL operation's counterpart in the core benches, whose `automerge` variant is the
/// raw crate doing the same work.
fn core_counterpart(operation: &str) -> Option<&str> {
    match operation {
        "merge_agg" => Some("upsert full save"),
        "containment"
        | "heads"
        | "change count"
        | "generated column write"
        | "text edit then read" => None,
        same => Some(same),
    }
}

fn write_report(dir: &Path, results: &Results) -> Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join("results.csv"), csv(&results.rows))?;
    fs::write(dir.join("storage.csv"), storage_csv(&results.storage))?;
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

/// The fixture of `kind` with its history (the SQL level's) at `scale`, by name.
fn history_fixture(kind: Kind, scale: &str) -> String {
    let scale = Scale::ALL
        .into_iter()
        .find(|s| s.name() == scale)
        .expect("the run's scale is a fixture scale");
    Spec { kind, scale, compacted: false }.name()
}

fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "level,operation,variant,fixture,median_ns,median_abs_dev_ns,peak_bytes,loads\n",
    );
    let optional = |value: Option<u64>| value.map(|v| v.to_string()).unwrap_or_default();
    for r in rows {
        writeln!(
            out,
            "{},{},{},{},{:.0},{:.0},{},{}",
            r.level,
            r.operation,
            r.variant,
            r.fixture,
            r.median_ns,
            r.spread_ns,
            optional(r.peak_bytes),
            optional(r.loads)
        )
        .unwrap();
    }
    out
}

fn storage_csv(measures: &[StorageMeasure]) -> String {
    let mut out = String::from("fixture,variant,measure,value\n");
    for m in measures {
        let value = m.value.map(|v| v.to_string()).unwrap_or_default();
        writeln!(out, "{},{},{},{value}", m.fixture, m.variant, m.measure).unwrap();
    }
    out
}

/// The columns of the storage table: the measure, its heading, and what it is.
const STORAGE_COLUMNS: [(&str, &str, &str); 8] = [
    (
        "column_bytes",
        "column size",
        "`pg_column_size` of the value as inserted: what the table holds, after TOAST compression",
    ),
    ("format_version", "format", "`automerge_storage(doc).format_version`: the stored format the value was written in"),
    ("stored_bytes", "stored", "`stored_bytes`: the whole stored value before compression"),
    ("payload_bytes", "Automerge bytes", "`payload_bytes`: the Automerge document in it"),
    ("jsonb_bytes", "kept JSON", "`jsonb_bytes`: the document's JSON kept for reads (— when not kept)"),
    (
        "appended_changes",
        "appended",
        "`appended_changes` after the five writes of the next column: changes stored without a load",
    ),
    (
        "wal_incremental_write_bytes",
        "WAL per write",
        "WAL one incremental write (a retitle; `jsonb_set` of the title) inserts: the median of five",
    ),
    (
        "wal_upsert_bytes",
        "WAL per upsert",
        "WAL one upsert of a full save (of the whole JSON) inserts: the median of five",
    ),
];

/// A performance goal, and what this run measured of it.
struct Goal {
    goal: String,
    fixture: String,
    measured: String,
    target: String,
    /// None when the run did not measure it.
    met: Option<bool>,
}

/// The reads the JSON a value keeps answers without a load, as users write them.
const KEPT_JSON_READS: [(&str, &str); 3] = [
    ("read title", "`doc->>'title'`"),
    ("to jsonb", "`doc::jsonb`"),
    ("containment", "GIN containment `@>` (its recheck casts)"),
];
/// Those reads on the rich text: at least this many times faster than the naive path…
const READ_SPEEDUP_GOAL: f64 = 100.0;
/// …within this peak heap.
const READ_PEAK_GOAL: u64 = 8 << 20;
/// Reads of the stored header load nothing; their answer takes a few hundred bytes.
const HEADER_READ_PEAK_GOAL: u64 = 64 << 10;
/// A small incremental write at least this many times faster than the naive path.
const WRITE_SPEEDUP_GOAL: f64 = 10.0;
/// An upsert of a full save loads at most this many documents: the client's save.
const UPSERT_LOADS_GOAL: u64 = 1;

/// The goals of reads that never load and writes that load at most once, each computed
/// from the measurements of a run at `scale`.
fn goals(rows: &[Row], scale: &str) -> Vec<Goal> {
    let sql = |operation: &str, variant: &str, fixture: &str| {
        find(rows, "sql", operation, variant, fixture)
    };
    let not_measured = || ("not measured".to_string(), None);
    let mut goals = Vec::new();
    let rich_text = history_fixture(Kind::RichText, scale);
    for (operation, read) in KEPT_JSON_READS {
        let (fast, naive) = (sql(operation, OURS, &rich_text), sql(operation, NAIVE, &rich_text));
        let (measured, met) = match (fast, naive) {
            (Some(fast), Some(naive)) => {
                let speedup = naive.median_ns / fast.median_ns;
                (speedup_text(fast, naive), Some(speedup >= READ_SPEEDUP_GOAL))
            }
            _ => not_measured(),
        };
        let target = format!("≥ {READ_SPEEDUP_GOAL}× faster");
        let goal = format!("{read} against the naive path");
        goals.push(Goal { goal, fixture: rich_text.clone(), measured, target, met });
        let (measured, met) = match fast.and_then(|f| f.peak_bytes) {
            Some(peak) => (bytes(Some(peak)), Some(peak <= READ_PEAK_GOAL)),
            None => not_measured(),
        };
        let target = format!("≤ {}", bytes(Some(READ_PEAK_GOAL)));
        goals.push(Goal {
            goal: format!("{read}: peak heap"),
            fixture: rich_text.clone(),
            measured,
            target,
            met,
        });
    }
    let fixtures = Kind::ALL.map(|kind| history_fixture(kind, scale));
    for (operation, read) in
        [("heads", "`automerge_heads`"), ("change count", "`automerge_change_count`")]
    {
        for fixture in &fixtures {
            let (measured, met) =
                match sql(operation, OURS, fixture).and_then(|r| Some((r.loads?, r.peak_bytes?))) {
                    Some((loads, peak)) => (
                        format!("{loads} loads, {}", bytes(Some(peak))),
                        Some(loads == 0 && peak <= HEADER_READ_PEAK_GOAL),
                    ),
                    None => not_measured(),
                };
            let target = format!("0 loads, ≤ {}", bytes(Some(HEADER_READ_PEAK_GOAL)));
            goals.push(Goal {
                goal: format!("{read} loads nothing"),
                fixture: fixture.clone(),
                measured,
                target,
                met,
            });
        }
    }
    for fixture in &fixtures {
        let operation = "incremental write";
        let (measured, met) = match (sql(operation, OURS, fixture), sql(operation, NAIVE, fixture))
        {
            (Some(fast), Some(naive)) => {
                let speedup = naive.median_ns / fast.median_ns;
                (speedup_text(fast, naive), Some(speedup >= WRITE_SPEEDUP_GOAL))
            }
            _ => not_measured(),
        };
        let target = format!("≥ {WRITE_SPEEDUP_GOAL}× faster");
        let goal = "a small write (`doc || change`, a retitle) against the naive path".to_string();
        goals.push(Goal { goal, fixture: fixture.clone(), measured, target, met });
    }
    for fixture in &fixtures {
        let (measured, met) = match sql("upsert full save", OURS, fixture).and_then(|r| r.loads) {
            Some(loads) => (format!("{loads} loads"), Some(loads <= UPSERT_LOADS_GOAL)),
            None => not_measured(),
        };
        let goal = "an upsert of a full save loads at most once".to_string();
        let target = format!("≤ {UPSERT_LOADS_GOAL} load");
        goals.push(Goal { goal, fixture: fixture.clone(), measured, target, met });
    }
    goals
}

/// How many times faster `fast` is than `slow`, with both medians.
fn speedup_text(fast: &Row, slow: &Row) -> String {
    let speedup = slow.median_ns / fast.median_ns;
    let speedup =
        if speedup >= 10.0 { format!("{speedup:.0}×") } else { format!("{speedup:.1}×") };
    format!("{speedup} ({} against {})", duration(fast.median_ns), duration(slow.median_ns))
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
    out.push_str("## Goals\n\n");
    out.push_str(
        "Reads that never load the document and writes that load it at most once, as measured \
         in this run: pg_automerge as it ships against the naive path (values stored without \
         their JSON, so every read loads; writes that load, apply and save). A speed-up is the \
         naive median divided by pg_automerge's; loads and peak heap are of one run of the \
         operation, from `automerge_memory_usage()`.\n\n",
    );
    out.push_str("| goal | fixture | measured | target | met |\n|---|---|---|---|---|\n");
    for goal in goals(&results.rows, results.scale) {
        let met = match goal.met {
            Some(true) => "met",
            Some(false) => "**not met**",
            None => "—",
        };
        writeln!(
            out,
            "| {} | {} | {} | {} | {met} |",
            goal.goal, goal.fixture, goal.measured, goal.target
        )
        .unwrap();
    }

    writeln!(out, "\n## Fixtures\n\n```\n{}```\n", results.fixture_table).unwrap();

    out.push_str("## SQL level\n\n");
    out.push_str(
        "pg_automerge as it ships (values keep their document's JSON, small writes append their \
         changes) against three baselines: the naive path (`pg_automerge.keep_jsonb = off` and \
         `pg_automerge.append_limit = 0`: the same rows stored without their JSON, so every \
         read loads the document, and writes that load, apply and save it); a plain `jsonb` \
         column holding the same JSON (`->>`, the value itself, GIN containment, `jsonb_set`, an \
         upsert of the whole JSON); and the automerge crate doing the same work from the same \
         bytes (the core benches' `automerge` variant). The generated column write retitles a \
         table with `body jsonb GENERATED ALWAYS AS (doc::jsonb) STORED`; a text edit then read \
         types a few words into the middle of the content (a change the stored header cannot \
         check, so the write loads, applies and saves) and reads the content back. Loads count \
         the documents (and the change sets applied to them) one run of the operation loaded.\n\n",
    );
    let mut operations: Vec<(&str, &str)> = results
        .rows
        .iter()
        .filter(|r| r.level == "sql")
        .map(|r| (r.operation.as_str(), r.fixture.as_str()))
        .collect();
    operations.dedup();
    let lines = operations.into_iter().map(|(operation, fixture)| {
        let ours = results.find("sql", operation, OURS, fixture);
        let naive = results.find("sql", operation, NAIVE, fixture);
        let jsonb = results.find("sql", operation, JSONB, fixture);
        let automerge = core_counterpart(operation).and_then(|op| results.find("core", op, AUTOMERGE, fixture));
        let median = |row: Option<&Row>| row.map_or("—".into(), |r| duration(r.median_ns));
        let loads = ours.and_then(|r| r.loads).map_or("—".into(), |l| l.to_string());
        format!(
            "| {operation} | {fixture} | {} | {} | {} | {loads} | {} | {} | {} | {} | {} | {} | {} |",
            median(ours),
            ours.map_or("—".into(), spread),
            bytes(ours.and_then(|r| r.peak_bytes)),
            median(naive),
            bytes(naive.and_then(|r| r.peak_bytes)),
            ratio(ours, naive),
            median(jsonb),
            ratio(ours, jsonb),
            median(automerge),
            ratio(ours, automerge),
        )
    });
    table(
        &mut out,
        "| operation | fixture | pg_automerge | spread | peak heap | loads | naive | naive peak heap | fast vs naive \
         | jsonb | fast vs jsonb | automerge crate | fast vs crate |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        lines,
    );

    out.push_str("\n## Storage and WAL\n\n");
    out.push_str(
        "Measured once per fixture, not timed, on the SQL level's rows before the timed writes: \
         pg_automerge's value (keeping its JSON), the naive path's (without it), and the \
         `jsonb` column. Sizes and WAL are in bytes; `storage.csv` has every figure.\n\n",
    );
    let headings: Vec<&str> = STORAGE_COLUMNS.iter().map(|(_, heading, _)| *heading).collect();
    let header = format!(
        "| fixture | variant | {} |\n|---|---|{}\n",
        headings.join(" | "),
        "---:|".repeat(headings.len())
    );
    let mut stored: Vec<(&str, &str)> =
        results.storage.iter().map(|m| (m.fixture.as_str(), m.variant.as_str())).collect();
    stored.dedup();
    let lines = stored.into_iter().map(|(fixture, variant)| {
        let cells: Vec<String> = STORAGE_COLUMNS
            .iter()
            .map(|(measure, _, _)| {
                let value = results.storage_value(fixture, variant, measure);
                match *measure {
                    "format_version" | "appended_changes" => {
                        value.map_or("—".into(), |v| v.to_string())
                    }
                    _ => value.map_or("—".into(), byte_count),
                }
            })
            .collect();
        format!("| {fixture} | {variant} | {} |", cells.join(" | "))
    });
    table(&mut out, &header, lines);
    out.push('\n');
    for (_, heading, explanation) in STORAGE_COLUMNS {
        writeln!(out, "- **{heading}**: {explanation}.").unwrap();
    }
    out.push_str("\n## Core level (no Postgres)\n\n");
    out.push_str(
        "`pg_automerge_core` (what each SQL function does, from the stored value) against the \
         automerge crate doing the same work from the same bytes.\n\n",
    );
    let core_rows = results
        .rows
        .iter()
        .filter(|r| r.level == "core" && r.variant == OURS && r.operation != "load, by allocator");
    let lines = core_rows.map(|ours| {
        let automerge = results.find("core", &ours.operation, AUTOMERGE, &ours.fixture);
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ours.operation,
            ours.fixture,
            duration(ours.median_ns),
            spread(ours),
            bytes(ours.peak_bytes),
            automerge.map_or("—".into(), |b| duration(b.median_ns)),
            automerge.map_or("—".into(), spread),
            bytes(automerge.and_then(|b| b.peak_bytes)),
            ratio(Some(ours), automerge),
        )
    });
    table(
        &mut out,
        "| operation | fixture | pg_automerge | spread | peak heap | automerge crate | spread | peak heap | ratio |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
        lines,
    );

    out.push_str("\n## The counting allocator's cost\n\n");
    out.push_str("Loads with the extension's counting `#[global_allocator]` against the system allocator.\n\n");
    let allocator_rows =
        results.rows.iter().filter(|r| r.operation == "load, by allocator" && r.variant == OURS);
    let lines = allocator_rows.map(|ours| {
        let system = results.find(&ours.level, &ours.operation, SYSTEM_ALLOCATOR, &ours.fixture);
        format!(
            "| {} | {} | {} | {} | {} | {} |",
            ours.fixture,
            duration(ours.median_ns),
            spread(ours),
            system.map_or("—".into(), |b| duration(b.median_ns)),
            system.map_or("—".into(), spread),
            ratio(Some(ours), system),
        )
    });
    table(
        &mut out,
        "| fixture | counting | spread | system | spread | ratio |\n|---|---:|---:|---:|---:|---:|\n",
        lines,
    );
    let by_variant: BTreeMap<&str, usize> =
        results.rows.iter().fold(BTreeMap::new(), |mut counts, r| {
            *counts.entry(r.variant.as_str()).or_default() += 1;
            counts
        });
    writeln!(out, "\nBenchmarks per variant: {by_variant:?}.").unwrap();
    out
}

/// A markdown table: `header` (its separator line included), then `lines`; or, when there
/// are none, a note that the run measured nothing of it.
fn table(out: &mut String, header: &str, lines: impl Iterator<Item = String>) {
    let lines: Vec<String> = lines.collect();
    if lines.is_empty() {
        out.push_str("Not measured in this run (`--filter` left it out).\n");
        return;
    }
    out.push_str(header);
    for line in lines {
        writeln!(out, "{line}").unwrap();
    }
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
        Some(b) if b < 1024 => format!("{b} B"),
        Some(b) if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        Some(b) => format!("{:.0} kB", b as f64 / 1024.0),
    }
}

/// Two decimals, or two significant digits below 0.1: a read a thousand times faster than
/// the naive path is `0.0010×`, not `0.00×`.
fn ratio(ours: Option<&Row>, baseline: Option<&Row>) -> String {
    match (ours, baseline) {
        (Some(ours), Some(b)) if b.median_ns > 0.0 && ours.median_ns > 0.0 => {
            let ratio = ours.median_ns / b.median_ns;
            let decimals = (1 - ratio.log10().floor() as i32).max(2) as usize;
            format!("{ratio:.decimals$}×")
        }
        _ => "—".into(),
    }
}

/// A byte count in full, grouped by thousands: stored sizes and WAL differ by a few bytes.
fn byte_count(bytes: i64) -> String {
    let digits = bytes.unsigned_abs().to_string();
    let mut grouped = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if bytes < 0 {
        format!("-{grouped}")
    } else {
        grouped
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
            loads: None,
        }
    }

    #[test]
    fn ratios_divide_ours_by_the_baseline() {
        let ours = row("sql", "read title", OURS, 3e6);
        assert_eq!(ratio(Some(&ours), Some(&row("sql", "read title", JSONB, 1e6))), "3.00×");
        assert_eq!(ratio(Some(&ours), None), "—");
        assert_eq!(ratio(Some(&row("sql", "read title", OURS, 1e3)), Some(&ours)), "0.00033×");
        assert_eq!(ratio(Some(&row("sql", "read title", OURS, 3e5)), Some(&ours)), "0.10×");
        assert_eq!(ratio(None, Some(&ours)), "—");
    }

    #[test]
    fn byte_counts_group_thousands() {
        assert_eq!(byte_count(0), "0");
        assert_eq!(byte_count(999), "999");
        assert_eq!(byte_count(1_263_104), "1,263,104");
        assert_eq!(byte_count(-4096), "-4,096");
    }

    #[test]
    fn sql_rows_find_the_raw_crate_doing_the_same_work() {
        assert_eq!(core_counterpart("merge_agg"), Some("upsert full save"));
        assert_eq!(core_counterpart("read title"), Some("read title"));
        assert_eq!(core_counterpart("containment"), None);
    }

    /// A file of `text` in a directory of its own, removed with it.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, text: &str) -> TempFile {
            let dir = std::env::temp_dir().join(format!("xtask-{name}-{}", std::process::id()));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join(name), text).unwrap();
            TempFile(dir.join(name))
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(self.0.parent().unwrap());
        }
    }

    #[test]
    fn peaks_and_loads_attach_to_their_rows() {
        let peaks = TempFile::new(
            "peaks.csv",
            "sql/read title,pg_automerge,rich-text-small,4096,0\n\
             sql/read title,naive (always loads),rich-text-small,9000,1\n\
             core/read title,pg_automerge,rich-text-small,512,\n",
        );
        let mut rows = vec![
            row("sql", "read title", OURS, 1.0),
            row("sql", "read title", NAIVE, 1.0),
            row("sql", "read title", JSONB, 1.0),
            row("core", "read title", OURS, 1.0),
        ];
        add_peaks(&mut rows, &peaks.0).unwrap();
        let measured: Vec<_> = rows.iter().map(|r| (r.peak_bytes, r.loads)).collect();
        assert_eq!(
            measured,
            [(Some(4096), Some(0)), (Some(9000), Some(1)), (None, None), (Some(512), None)]
        );
        assert!(add_peaks(
            &mut rows,
            &TempFile::new("old-peaks.csv", "sql/heads,pg_automerge,x,1\n").0
        )
        .is_err());
        // A run whose filter left out every bench that records peaks has no file at all.
        add_peaks(&mut rows, Path::new("/nonexistent/peaks.csv")).unwrap();
    }

    #[test]
    fn storage_measures_read_back_with_their_missing_values() {
        let storage = TempFile::new(
            "storage.csv",
            "map-list-small,pg_automerge,jsonb_bytes,2048\nmap-list-small,naive (always loads),jsonb_bytes,\n",
        );
        let measures = read_storage(&storage.0).unwrap();
        assert_eq!(measures.iter().map(|m| m.value).collect::<Vec<_>>(), [Some(2048), None]);
        assert_eq!(
            storage_csv(&measures),
            "fixture,variant,measure,value\n\
             map-list-small,pg_automerge,jsonb_bytes,2048\n\
             map-list-small,naive (always loads),jsonb_bytes,\n"
        );
        assert!(read_storage(Path::new("/nonexistent/storage.csv")).unwrap().is_empty());
    }

    #[test]
    fn goals_are_met_or_missed_by_the_measurements_and_unmeasured_without_them() {
        let measured =
            |operation: &str, variant: &str, median_ns: f64, peak: u64, loads: u64| Row {
                peak_bytes: Some(peak),
                loads: Some(loads),
                ..row("sql", operation, variant, median_ns)
            };
        let rows = vec![
            // 200× faster within 8 MB: met.
            measured("read title", OURS, 1e6, 4096, 0),
            measured("read title", NAIVE, 2e8, 30 << 20, 1),
            // 50× faster: missed.
            measured("to jsonb", OURS, 4e6, 4096, 0),
            measured("to jsonb", NAIVE, 2e8, 30 << 20, 1),
            measured("heads", OURS, 1e5, 184, 0),
            measured("change count", OURS, 1e5, 184, 1),
            measured("upsert full save", OURS, 1e8, 30 << 20, 2),
        ];
        let goals = goals(&rows, "small");
        let find = |name: &str, fixture: &str| {
            let goal = goals.iter().find(|g| g.goal.starts_with(name) && g.fixture == fixture);
            goal.unwrap_or_else(|| panic!("no goal {name:?} on {fixture}")).met
        };
        assert_eq!(find("`doc->>'title'` against", "rich-text-small"), Some(true));
        assert_eq!(find("`doc->>'title'`: peak", "rich-text-small"), Some(true));
        assert_eq!(find("`doc::jsonb` against", "rich-text-small"), Some(false));
        assert_eq!(find("GIN containment", "rich-text-small"), None);
        assert_eq!(find("`automerge_heads`", "rich-text-small"), Some(true));
        assert_eq!(find("`automerge_heads`", "map-list-small"), None);
        assert_eq!(find("`automerge_change_count`", "rich-text-small"), Some(false));
        assert_eq!(find("a small write", "rich-text-small"), None);
        assert_eq!(find("an upsert", "rich-text-small"), Some(false));
        let speedup = goals.iter().find(|g| g.goal.starts_with("`doc->>'title'` against")).unwrap();
        assert_eq!(speedup.measured, "200× (1.00 ms against 200.00 ms)");
    }
}
