//! The report's SVG charts: memory, latency per kind of statement, WAL rate, table growth.

use std::path::Path;

use anyhow::Result;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::figures::{mb, quantile};
use crate::load::{Query, Timing};
use crate::sampler::Sample;
use crate::Config;

type Series = (String, Vec<(f64, f64)>);

pub fn charts(dir: &Path, config: &Config, samples: &[Sample], timings: &[Timing]) -> Result<()> {
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
    if log_y {
        let y_min = points.map(|p| p.1).fold(f64::MAX, f64::min).max(0.1);
        let chart = builder
            .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
            .map_err(plot_error)?;
        draw_lines(chart, y_label, series)?;
    } else {
        let chart = builder.build_cartesian_2d(0.0..x_max, 0.0..y_max).map_err(plot_error)?;
        draw_lines(chart, y_label, series)?;
    }
    root.present().map_err(plot_error)?;
    Ok(())
}

/// The mesh, one line per series and the legend, on either kind of y axis.
fn draw_lines<'a, Y>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    y_label: &str,
    series: &[Series],
) -> Result<()>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart.configure_mesh().x_desc("minutes").y_desc(y_label).draw().map_err(plot_error)?;
    for (i, (name, data)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
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
    Ok(())
}

fn plot_error<E: std::fmt::Display>(error: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_of_axis_draw_every_series_with_its_legend() {
        let dir = tempfile::tempdir().unwrap();
        let series: Vec<Series> = vec![
            ("first".into(), vec![(0.0, 1.0), (1.0, 100.0)]),
            ("second".into(), vec![(0.0, 10.0), (2.0, 1000.0)]),
        ];
        for log_y in [false, true] {
            let path = dir.path().join(format!("log_{log_y}.svg"));
            line_chart(&path, "A chart", "ms", &series, log_y).unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            for text in ["A chart", "first", "second", "minutes"] {
                assert!(svg.contains(text), "log_y = {log_y}: {text} is not drawn");
            }
            assert!(svg.matches("<polyline").count() >= 2, "log_y = {log_y}: no lines drawn");
        }
    }
}
