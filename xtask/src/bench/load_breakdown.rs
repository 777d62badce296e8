//! `cargo xtask bench --load-breakdown`: where the automerge crate's load of each fixture
//! spends its time and peak heap, beside passes over the save's columns alone (the
//! `load_breakdown` bench, no PostgreSQL), each as a share of the whole load measured in
//! the same run; the report goes to `results/load-breakdown-<date>-<scale>-<commit>/`
//! (`target/bench-quick-load-breakdown/` for --quick).

use std::fmt::Write as _;
use std::fs;

use anyhow::{bail, Result};
use report_table::{Align, Table};
use xshell::Shell;

use benches::figures::{byte_count, bytes, duration, spread, times};
use benches::load_phases::{self, CHANGES, PHASES, UNCOMPRESSED, WHOLE};
use benches::measurements::{find, Row, StorageMeasure};
use benches::AUTOMERGE;

use super::criterion::{csv, storage_csv};
use super::load_profile;
use super::measure::BenchFiles;
use crate::fixtures;
use crate::flags::BenchScale;
use crate::project_root;
use crate::provenance::Provenance;
use crate::util::{note, npm_dependencies, step};

/// Measures the fixtures of `scale` (the small ones: a quick check in debug builds) and
/// writes the report; returns how many benchmarks ran.
pub fn run(sh: &Shell, scale: BenchScale) -> Result<usize> {
    let quick = scale == BenchScale::Small;
    // The fixtures made by @automerge/automerge are made with examples/node-client.
    npm_dependencies(sh, "examples/node-client")?;
    let fixture_table = step(&format!("fixtures ({} scale)", scale.name()), || {
        fixtures::generate(sh, Some(scale))
    })?;
    let command = match quick {
        true => "cargo xtask bench --load-breakdown --quick".to_string(),
        false => format!("cargo xtask bench --load-breakdown --scale {}", scale.name()),
    };
    let provenance = Provenance::collect(sh, &command, &[])?;
    let files = BenchFiles::fresh()?;
    step("criterion: the load breakdown", || {
        let status = files.cargo_bench("load_breakdown", scale, None).status()?;
        if !status.success() {
            bail!("cargo bench --bench load_breakdown failed ({status})");
        }
        Ok(())
    })?;
    let (rows, storage) = files.read()?;
    let report = Report { rows: &rows, storage: &storage, quick, scale: scale.name() };
    let profiles = step("perf: inside the load", || {
        load_profile::profile(sh, &files, scale, &report.fixtures())
    })?;
    let dir = match quick {
        true => project_root().join("target/bench-quick-load-breakdown"),
        false => project_root().join(format!(
            "results/load-breakdown-{}-{}-{}",
            provenance.date,
            scale.name(),
            provenance.commit
        )),
    };
    fs::create_dir_all(&dir)?;
    fs::write(dir.join("results.csv"), csv(&rows))?;
    fs::write(dir.join("storage.csv"), storage_csv(&storage))?;
    let inside = load_profile::markdown(profiles.as_deref());
    fs::write(dir.join("README.md"), report.markdown(&provenance, &fixture_table, &inside))?;
    note(format!("{} benchmarks; report in {}", rows.len(), dir.display()));
    Ok(rows.len())
}

struct Report<'a> {
    rows: &'a [Row],
    storage: &'a [StorageMeasure],
    quick: bool,
    scale: &'a str,
}

/// The phases derived from two measured ones, `minuend − subtrahend`, with what they stand
/// for: no public API runs them alone.
const DERIVED: [(&str, &str, &str, &str); 2] = [
    (
        "inflating (derived)",
        WHOLE,
        UNCOMPRESSED,
        "the load less the load of `save_nocompress()`: inflating the deflated columns",
    ),
    (
        "op set, its index, the change graph (derived)",
        UNCOMPRESSED,
        CHANGES,
        "the load of `save_nocompress()` less `get_changes`: what is left once the columns \
         are inflated and the changes rebuilt and hashed, building the op set, its index and \
         the change graph",
    ),
];

impl Report<'_> {
    fn row(&self, phase: &str, fixture: &str) -> Option<&Row> {
        find(self.rows, "core", load_phases::OPERATION, phase, fixture)
    }

    fn count(&self, fixture: &str, measure: &str) -> Option<i64> {
        self.storage
            .iter()
            .find(|m| m.fixture == fixture && m.variant == AUTOMERGE && m.measure == measure)
            .and_then(|m| m.value)
    }

    /// The fixtures in the order they were measured.
    fn fixtures(&self) -> Vec<&str> {
        let mut fixtures: Vec<&str> = Vec::new();
        for m in self.storage {
            if !fixtures.contains(&m.fixture.as_str()) {
                fixtures.push(&m.fixture);
            }
        }
        fixtures
    }

    /// The report, with the profile's section `inside` after the shares.
    fn markdown(&self, provenance: &Provenance, fixture_table: &str, inside: &str) -> String {
        let mut out = String::new();
        let kind = match self.quick {
            true => "quick check (small fixtures, debug builds: not a measurement)".to_string(),
            false => format!("{} scale", self.scale),
        };
        writeln!(out, "# Where a load goes, {}: {kind}\n", provenance.date).unwrap();
        writeln!(out, "{}", provenance.markdown()).unwrap();
        out.push_str(
            "For each fixture (the scale's three kinds, each also compacted to one change, and \
             the three made by `@automerge/automerge`, `js-…`), the automerge crate's whole \
             load beside what public APIs separate of it, the passes over the save's columns \
             alone that the core makes without an op set, and what reads do after a load or \
             instead of one. Each time is criterion's median over 10 samples of equal size; \
             each peak is the most Rust heap one run held above what was allocated before it \
             (the counting allocator). Both are given as a multiple of the whole load's \
             (`automerge load`) on the same fixture in the same run: the machine is shared, so \
             compare ratios, not times, across runs. Two phases are derived by subtracting \
             medians, as no public API runs them alone; a derived peak is not given, since \
             what a load holds at its peak is held at once. Files: `results.csv` (every \
             benchmark), `storage.csv` (each fixture's sizes and counts).\n\n",
        );
        let fixtures = self.fixtures();
        self.fixture_table(&mut out, &fixtures);
        out.push_str("\n## Time, as a multiple of the load's\n\n");
        let time = |row: Option<&Row>, load: Option<&Row>| match (row, load) {
            // A derived phase that the noise of its two medians outweighs.
            (Some(row), Some(load)) if row.median_ns <= 0.0 => {
                format!("{:.2}×", row.median_ns / load.median_ns)
            }
            (Some(row), Some(load)) => times(row.median_ns, load.median_ns),
            _ => "—".into(),
        };
        self.phase_table(&mut out, &fixtures, time, true);
        out.push_str("\n## Peak heap, as a multiple of the load's\n\n");
        let peak = |row: Option<&Row>, load: Option<&Row>| match (
            row.and_then(|r| r.peak_bytes),
            load.and_then(|r| r.peak_bytes),
        ) {
            (Some(peak), Some(load)) => times(peak as f64, load as f64),
            _ => "—".into(),
        };
        self.phase_table(&mut out, &fixtures, peak, false);
        out.push_str(inside);
        out.push_str("\n## The phases\n\n");
        for (phase, what) in PHASES {
            writeln!(out, "- **{phase}**: {what}.").unwrap();
        }
        for (phase, _, _, what) in DERIVED {
            writeln!(out, "- **{phase}**: {what}.").unwrap();
        }
        out.push_str("\n## Every measurement\n\n");
        let mut table = Table::new([
            ("phase", Align::Left),
            ("fixture", Align::Left),
            ("median", Align::Right),
            ("spread", Align::Right),
            ("peak heap", Align::Right),
        ]);
        for fixture in &fixtures {
            for (phase, _) in PHASES {
                if let Some(row) = self.row(phase, fixture) {
                    table.row([
                        phase.to_string(),
                        fixture.to_string(),
                        duration(row.median_ns),
                        spread(row),
                        bytes(row.peak_bytes),
                    ]);
                }
            }
        }
        write!(out, "{table}").unwrap();
        writeln!(out, "\n## Fixtures as generated\n\n```\n{fixture_table}```").unwrap();
        out
    }

    /// Each fixture's size and counts, its load, and what the load costs per operation.
    fn fixture_table(&self, out: &mut String, fixtures: &[&str]) {
        let mut table = Table::new(
            [("fixture", Align::Left)].into_iter().chain(
                [
                    "saved",
                    "ops",
                    "changes",
                    "load",
                    "spread",
                    "load peak heap",
                    "kept after load",
                    "load per op",
                    "peak per op",
                ]
                .map(|heading| (heading, Align::Right)),
            ),
        );
        for fixture in fixtures {
            let load = self.row(WHOLE, fixture);
            let count = |measure| self.count(fixture, measure);
            let ops = count("ops").filter(|ops| *ops > 0).map(|ops| ops as f64);
            let per_op = |value: Option<f64>| value.zip(ops).map(|(value, ops)| value / ops);
            table.row([
                fixture.to_string(),
                count("saved_bytes").map_or("—".into(), byte_count),
                count("ops").map_or("—".into(), byte_count),
                count("changes").map_or("—".into(), byte_count),
                load.map_or("—".into(), |r| duration(r.median_ns)),
                load.map_or("—".into(), spread),
                bytes(load.and_then(|r| r.peak_bytes)),
                bytes(count("kept_after_load_bytes").map(|b| b as u64)),
                per_op(load.map(|r| r.median_ns)).map_or("—".into(), |ns| format!("{ns:.0} ns")),
                per_op(load.and_then(|r| r.peak_bytes).map(|b| b as f64))
                    .map_or("—".into(), |b| format!("{b:.0} B")),
            ]);
        }
        write!(out, "{table}").unwrap();
    }

    /// A row per phase (the derived ones too when `derived`), a column per fixture, each
    /// cell `cell(phase's row, the whole load's row)`.
    fn phase_table(
        &self,
        out: &mut String,
        fixtures: &[&str],
        cell: impl Fn(Option<&Row>, Option<&Row>) -> String,
        derived: bool,
    ) {
        let mut table = Table::new(
            [("phase", Align::Left)]
                .into_iter()
                .chain(fixtures.iter().map(|fixture| (*fixture, Align::Right))),
        );
        for (phase, _) in PHASES.into_iter().filter(|(phase, _)| *phase != WHOLE) {
            let cells = fixtures.iter().map(|f| cell(self.row(phase, f), self.row(WHOLE, f)));
            table.row([phase.to_string()].into_iter().chain(cells));
        }
        for (phase, minuend, subtrahend, _) in DERIVED.into_iter().filter(|_| derived) {
            let cells = fixtures.iter().map(|f| {
                let (minuend, subtrahend) = (self.row(minuend, f), self.row(subtrahend, f));
                let difference = minuend
                    .zip(subtrahend)
                    .map(|(m, s)| Row { median_ns: m.median_ns - s.median_ns, ..m.clone() });
                cell(difference.as_ref(), self.row(WHOLE, f))
            });
            table.row([phase.to_string()].into_iter().chain(cells));
        }
        write!(out, "{table}").unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_read_as_multiples_of_the_load_with_the_derived_ones() {
        let fixture = "rich-text-small";
        let rows: Vec<Row> = [(WHOLE, 1000.0), (UNCOMPRESSED, 900.0), (CHANGES, 400.0)]
            .into_iter()
            .map(|(phase, ns)| Row {
                peak_bytes: Some(ns as u64 * 2),
                ..Row::example("core", load_phases::OPERATION, phase, ns)
            })
            .collect();
        let storage: Vec<StorageMeasure> = [("ops", 100), ("saved_bytes", 5000)]
            .into_iter()
            .map(|(measure, value)| StorageMeasure {
                fixture: fixture.into(),
                variant: AUTOMERGE.into(),
                measure: measure.into(),
                value: Some(value),
            })
            .collect();
        let report = Report { rows: &rows, storage: &storage, quick: true, scale: "small" };
        let mut out = String::new();
        report.fixture_table(&mut out, &report.fixtures());
        // 1 µs over 100 ops, a peak of 2000 B over 100 ops.
        assert!(out.contains("| 10 ns |"), "{out}");
        assert!(out.contains("20 B"), "{out}");
        let mut out = String::new();
        let time = |row: Option<&Row>, load: Option<&Row>| {
            row.zip(load).map_or("—".into(), |(r, l)| times(r.median_ns, l.median_ns))
        };
        report.phase_table(&mut out, &report.fixtures(), time, true);
        let line = |phase: &str| out.lines().find(|l| l.contains(phase)).unwrap().to_string();
        assert!(line(UNCOMPRESSED).contains("0.90×"), "{out}");
        assert!(line("inflating (derived)").contains("0.10×"), "{out}");
        assert!(line("op set, its index").contains("0.50×"), "{out}");
        assert!(line(load_phases::KEPT_JSON).contains('—'), "{out}");
        assert!(!out.contains(&format!("| {WHOLE}")), "the load is what the rest divide by");
    }
}
