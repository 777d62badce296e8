//! The figures the report computes from the run's records: latency quantiles per kind of
//! statement, and the incremental writes that loaded.

use fixtures::js_edits::EditKind;
use report_table::Table;

use crate::load::{IncrementalLoads, Query, Timing};

/// Incremental writes by what they edited: how many, how many were concurrent, how many
/// loaded (in all, and of the concurrent ones), and their latency on small and on large
/// documents.
pub fn loads_table(writes: &[IncrementalLoads]) -> Table {
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

pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The value at quantile `q` of sorted values (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `min | median | p95 | max`, with one decimal.
pub fn summary(values: &[f64]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    [0.0, 0.5, 0.95, 1.0]
        .iter()
        .map(|q| format!("{:.1}", quantile(&sorted, *q)))
        .collect::<Vec<_>>()
        .join(" | ")
}

pub struct LatencyRow {
    pub query: Query,
    pub size: &'static str,
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// Per query kind, and for statements on one row, per small or large document.
pub fn latency_table(timings: &[Timing]) -> Vec<LatencyRow> {
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
