//! The bench report: README.md with the goals, the fixtures, the SQL level, stored sizes
//! and WAL, the core level and the allocator's cost, beside the CSV files and the charts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::Result;
use report_table::{Align, Table};

use super::criterion::{csv, storage_csv};
use benches::figures::{byte_count, bytes, duration, ratio, spread};
use benches::goals::goals;
use benches::measurements::{appended_of, Row, CLIENT_LOAD_COMPACTED};
use benches::{AUTOMERGE, JSONB, NAIVE, OURS, SYSTEM_ALLOCATOR};

use super::Results;
use crate::chart;

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

/// Writes the report of `results` into `dir`: the CSV files, the charts and README.md.
pub(super) fn write(dir: &Path, results: &Results) -> Result<()> {
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

/// The columns of the storage table: the measure, its heading, and what it is.
const STORAGE_COLUMNS: [(&str, &str, &str); 9] = [
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
        "structure_bytes",
        "structure index",
        "`structure_bytes`: the index of the document's objects, keys and sequence elements that lets writes append without a load",
    ),
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

pub(super) fn markdown(results: &Results) -> String {
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
         operation, from `automerge_memory_usage()`. Then reads against the same read of a \
         plain `jsonb` column holding the same JSON (a ratio of medians), header reads in \
         time, and what a value stores and a small write logs against the Automerge bytes \
         (the naive path's value) plus the `jsonb` column's, on every fixture, including \
         those made by `@automerge/automerge` (`js-…`); last, the writes that append (a JS \
         client's changes, and edits from SQL such as `automerge_set`) against the same \
         write on the `jsonb` column, with no load.\n\n",
    );
    let mut table = Table::left(["goal", "fixture", "measured", "target", "met"]);
    for goal in goals(&results.rows, &results.storage, results.scale) {
        let met = match goal.met {
            Some(true) => "met",
            Some(false) => "**not met**",
            None => "—",
        };
        table.row([&goal.goal, &goal.fixture, &goal.measured, &goal.target, met]);
    }
    write!(out, "{table}").unwrap();

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
         the documents (and the change sets applied to them) one run of the operation loaded. \
         The client writes are changes made by an author holding the document, each timed \
         alone; before each, untimed, a row holding `append_limit` appended changes is saved \
         anew (`automerge_compact`), as the background compactor does off the write path, so \
         that every timed client write appends. The write past the limit, which saves anew \
         itself, is timed in the incremental write's stream of retitles. The edits from SQL \
         (`sql edit: automerge_set` and the rest) edit a copy of each fixture's row, the \
         `jsonb` write each mirrors a copy of its `jsonb` row, saved anew before each edit as \
         before a client write; afterwards the document shows the last edit, holds a change \
         for every edit and loads (`automerge_loads`).\n\n",
    );
    let mut operations: Vec<(&str, &str)> = results
        .rows
        .iter()
        .filter(|r| r.level == "sql")
        .map(|r| (r.operation.as_str(), r.fixture.as_str()))
        .collect();
    operations.dedup();
    let (left, right) = (Align::Left, Align::Right);
    let mut table = Table::new([
        ("operation", left),
        ("fixture", left),
        ("pg_automerge", right),
        ("spread", right),
        ("peak heap", right),
        ("loads", right),
        ("naive", right),
        ("naive peak heap", right),
        ("fast vs naive", right),
        ("jsonb", right),
        ("fast vs jsonb", right),
        ("automerge crate", right),
        ("fast vs crate", right),
    ]);
    for (operation, fixture) in operations {
        let ours = results.find("sql", operation, OURS, fixture);
        let naive = results.find("sql", operation, NAIVE, fixture);
        let jsonb = results.find("sql", operation, JSONB, fixture);
        let automerge =
            core_counterpart(operation).and_then(|op| results.find("core", op, AUTOMERGE, fixture));
        let median = |row: Option<&Row>| row.map_or("—".into(), |r| duration(r.median_ns));
        let loads = ours.and_then(|r| r.loads).map_or("—".into(), |l| l.to_string());
        table.row([
            operation.to_string(),
            fixture.to_string(),
            median(ours),
            ours.map_or("—".into(), spread),
            bytes(ours.and_then(|r| r.peak_bytes)),
            loads,
            median(naive),
            bytes(naive.and_then(|r| r.peak_bytes)),
            ratio(ours, naive),
            median(jsonb),
            ratio(ours, jsonb),
            median(automerge),
            ratio(ours, automerge),
        ]);
    }
    measured_table(&mut out, &table);

    out.push_str("\n## Storage and WAL\n\n");
    out.push_str(
        "Measured once per fixture, not timed, on the SQL level's rows before the timed writes: \
         pg_automerge's value (keeping its JSON), the naive path's (without it), and the \
         `jsonb` column. Sizes and WAL are in bytes; `storage.csv` has every figure.\n\n",
    );
    let headings = STORAGE_COLUMNS.iter().map(|(_, heading, _)| (*heading, Align::Right));
    let mut table = Table::new(
        [("fixture", Align::Left), ("variant", Align::Left)].into_iter().chain(headings),
    );
    let mut stored: Vec<(&str, &str)> =
        results.storage.iter().map(|m| (m.fixture.as_str(), m.variant.as_str())).collect();
    stored.dedup();
    for (fixture, variant) in stored {
        let cells = STORAGE_COLUMNS.iter().map(|(measure, _, _)| {
            let value = results.storage_value(fixture, variant, measure);
            match *measure {
                "format_version" | "appended_changes" => {
                    value.map_or("—".into(), |v| v.to_string())
                }
                _ => value.map_or("—".into(), byte_count),
            }
        });
        table.row([fixture.to_string(), variant.to_string()].into_iter().chain(cells));
    }
    measured_table(&mut out, &table);
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
    let mut table = Table::new([
        ("operation", left),
        ("fixture", left),
        ("pg_automerge", right),
        ("spread", right),
        ("peak heap", right),
        ("automerge crate", right),
        ("spread", right),
        ("peak heap", right),
        ("ratio", right),
    ]);
    for ours in core_rows {
        let automerge = results.find("core", &ours.operation, AUTOMERGE, &ours.fixture);
        table.row([
            ours.operation.clone(),
            ours.fixture.clone(),
            duration(ours.median_ns),
            spread(ours),
            bytes(ours.peak_bytes),
            automerge.map_or("—".into(), |b| duration(b.median_ns)),
            automerge.map_or("—".into(), spread),
            bytes(automerge.and_then(|b| b.peak_bytes)),
            ratio(Some(ours), automerge),
        ]);
    }
    measured_table(&mut out, &table);

    out.push_str("\n## The counting allocator's cost\n\n");
    out.push_str("Loads with the extension's counting `#[global_allocator]` against the system allocator.\n\n");
    let allocator_rows =
        results.rows.iter().filter(|r| r.operation == "load, by allocator" && r.variant == OURS);
    let mut table = Table::new([
        ("fixture", left),
        ("counting", right),
        ("spread", right),
        ("system", right),
        ("spread", right),
        ("ratio", right),
    ]);
    for ours in allocator_rows {
        let system = results.find(&ours.level, &ours.operation, SYSTEM_ALLOCATOR, &ours.fixture);
        table.row([
            ours.fixture.clone(),
            duration(ours.median_ns),
            spread(ours),
            system.map_or("—".into(), |b| duration(b.median_ns)),
            system.map_or("—".into(), spread),
            ratio(Some(ours), system),
        ]);
    }
    measured_table(&mut out, &table);
    client_loads(&mut out, results);
    let by_variant: BTreeMap<&str, usize> =
        results.rows.iter().fold(BTreeMap::new(), |mut counts, r| {
            *counts.entry(r.variant.as_str()).or_default() += 1;
            counts
        });
    writeln!(out, "\nBenchmarks per variant: {by_variant:?}.").unwrap();
    out
}

/// The clients' loads of what a read returns, by how many changes were appended to it: one
/// row per fixture and client, one column per count, and the most against none.
fn client_loads(out: &mut String, results: &Results) {
    out.push_str("\n## Clients' loads of what a read returns\n\n");
    out.push_str(
        "`doc::bytea` (what `SELECT doc` hands a client: the last save followed by the changes \
         appended since) after that many appended writes of the kinds a JS client sends to a \
         document of the fixture's kind, loaded by `@automerge/automerge` (medians of five \
         loads in Node, taken in rounds over every value) and by the automerge crate \
         (criterion). A write past `pg_automerge.append_limit` folds the changes into a new \
         save, so the last count is the most a client meets; `compacted` is that value once \
         the background compactor has saved it anew, as clients find it after the compactor's \
         round.\n\n",
    );
    let appended = |r: &Row| appended_of(&r.operation);
    let rows: Vec<&Row> = results.rows.iter().filter(|r| r.level == "client").collect();
    let mut counts: Vec<u32> = rows.iter().filter_map(|r| appended(r)).collect();
    counts.sort();
    counts.dedup();
    let mut clients: Vec<(&str, &str)> =
        rows.iter().map(|r| (r.fixture.as_str(), r.variant.as_str())).collect();
    clients.sort();
    clients.dedup();
    let headings: Vec<String> = counts.iter().map(|n| format!("{n} appended")).collect();
    let mut table = Table::new(
        [("fixture", Align::Left), ("client", Align::Left)]
            .into_iter()
            .chain(headings.iter().map(|h| (h.as_str(), Align::Right)))
            .chain([
                ("compacted", Align::Right),
                ("most vs none", Align::Right),
                ("compacted vs none", Align::Right),
            ]),
    );
    for (fixture, client) in clients {
        let at = |n: u32| {
            rows.iter()
                .copied()
                .find(|r| r.fixture == fixture && r.variant == client && appended(r) == Some(n))
        };
        let cells = counts.iter().map(|&n| at(n).map_or("—".into(), |r| duration(r.median_ns)));
        let most = counts.last().and_then(|&n| at(n));
        let compacted = rows.iter().copied().find(|r| {
            r.fixture == fixture && r.variant == client && r.operation == CLIENT_LOAD_COMPACTED
        });
        table.row([fixture.to_string(), client.to_string()].into_iter().chain(cells).chain([
            compacted.map_or("—".into(), |r| duration(r.median_ns)),
            ratio(most, at(0)),
            ratio(compacted, at(0)),
        ]));
    }
    measured_table(out, &table);
}

/// A table of measurements; or, when it has no row, a note that the run measured nothing
/// of it.
fn measured_table(out: &mut String, table: &Table) {
    if table.is_empty() {
        out.push_str("Not measured in this run (`--filter` left it out).\n");
    } else {
        write!(out, "{table}").unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_rows_find_the_raw_crate_doing_the_same_work() {
        assert_eq!(core_counterpart("merge_agg"), Some("upsert full save"));
        assert_eq!(core_counterpart("read title"), Some("read title"));
        assert_eq!(core_counterpart("containment"), None);
    }
}
