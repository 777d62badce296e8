//! The glue to criterion and the benches: reads the estimates criterion wrote, the peaks
//! and loads and the stored sizes the benches wrote beside them, and writes the report's
//! CSV files.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use benches::measurements::{Row, StorageMeasure};

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
pub(super) fn read_estimates(criterion_dir: &Path) -> Result<Vec<Row>> {
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
        let (level, operation) = split_group(&id.group_id);
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
pub(super) fn add_peaks(rows: &mut [Row], peaks: &Path) -> Result<()> {
    let peaks = read_csv(peaks, |fields| {
        let &[group, variant, fixture, bytes, loads] = fields else { return Ok(None) };
        let (level, operation) = split_group(group);
        let id = [level, operation, variant, fixture].map(str::to_string);
        Ok(Some((id, bytes.parse()?, optional(loads)?)))
    })?;
    for ([level, operation, variant, fixture], peak_bytes, loads) in peaks {
        let row = rows.iter_mut().find(|r| {
            r.level == level
                && r.operation == operation
                && r.variant == variant
                && r.fixture == fixture
        });
        if let Some(row) = row {
            row.peak_bytes = Some(peak_bytes);
            row.loads = loads;
        }
    }
    Ok(())
}

/// Reads the times the benches measured outside criterion
/// (`group,variant,fixture,median_ns,spread_ns`).
pub(super) fn read_times(path: &Path) -> Result<Vec<Row>> {
    read_csv(path, |fields| {
        let &[group, variant, fixture, median, spread] = fields else { return Ok(None) };
        let (level, operation) = split_group(group);
        Ok(Some(Row {
            level: level.into(),
            operation: operation.into(),
            variant: variant.into(),
            fixture: fixture.into(),
            median_ns: median.parse()?,
            spread_ns: spread.parse()?,
            peak_bytes: None,
            loads: None,
        }))
    })
}

/// Reads what the benches measured without timing it (`fixture,variant,measure,value`, the
/// value empty where there is none).
pub(super) fn read_storage(path: &Path) -> Result<Vec<StorageMeasure>> {
    read_csv(path, |fields| {
        let &[fixture, variant, measure, value] = fields else { return Ok(None) };
        Ok(Some(StorageMeasure {
            fixture: fixture.into(),
            variant: variant.into(),
            measure: measure.into(),
            value: optional(value)?,
        }))
    })
}

/// The lines of a file the benches wrote, each split at its commas and read by `parse`
/// (None for a line of the wrong shape); none when there is no file, as when a filter left
/// out every bench that writes it.
fn read_csv<T>(path: &Path, parse: impl Fn(&[&str]) -> Result<Option<T>>) -> Result<Vec<T>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            parse(&fields)?.with_context(|| format!("bad line in {}: {line}", path.display()))
        })
        .collect()
}

/// A criterion group's level and operation: `sql/read title`, or `core` when unprefixed.
fn split_group(group: &str) -> (&str, &str) {
    group.split_once('/').unwrap_or(("core", group))
}

/// An optional number: none when empty.
fn optional<T: std::str::FromStr>(text: &str) -> Result<Option<T>>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    Ok(if text.is_empty() { None } else { Some(text.parse()?) })
}

pub(super) fn csv(rows: &[Row]) -> String {
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

pub(super) fn storage_csv(measures: &[StorageMeasure]) -> String {
    let mut out = String::from("fixture,variant,measure,value\n");
    for m in measures {
        let value = m.value.map(|v| v.to_string()).unwrap_or_default();
        writeln!(out, "{},{},{},{value}", m.fixture, m.variant, m.measure).unwrap();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use benches::{JSONB, NAIVE, OURS};

    fn row(level: &str, operation: &str, variant: &str, median_ns: f64) -> Row {
        Row::example(level, operation, variant, median_ns)
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
    fn times_measured_outside_criterion_read_back_as_rows() {
        let times = TempFile::new(
            "times.csv",
            "client/load after 4 appended,@automerge/automerge,js-rich-text-medium,2500000,125000.5\n",
        );
        let rows = read_times(&times.0).unwrap();
        let expected = Row {
            spread_ns: 125000.5,
            fixture: "js-rich-text-medium".into(),
            ..row("client", "load after 4 appended", "@automerge/automerge", 2.5e6)
        };
        assert_eq!(rows, [expected]);
        assert!(read_times(&TempFile::new("bad-times.csv", "client/x,y,z,1\n").0).is_err());
        assert!(read_times(Path::new("/nonexistent/times.csv")).unwrap().is_empty());
    }
}
