//! Horizontal bar charts of benchmark medians as SVG, one bar per variant and row, on a
//! logarithmic axis (the variants differ by orders of magnitude).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// One bar: a row label (operation and fixture), the variant it belongs to, its value.
pub struct Bar {
    pub label: String,
    pub series: String,
    pub value_ms: f64,
}

const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

pub fn write_svg(path: &Path, title: &str, bars: &[Bar]) -> Result<()> {
    let mut labels: Vec<&str> = Vec::new();
    let mut series: Vec<&str> = Vec::new();
    for bar in bars {
        if !labels.contains(&bar.label.as_str()) {
            labels.push(&bar.label);
        }
        if !series.contains(&bar.series.as_str()) {
            series.push(&bar.series);
        }
    }
    let height = 120 + 22 * labels.len().max(1) as u32;
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let (min, max) = bars
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), b| (lo.min(b.value_ms), hi.max(b.value_ms)));
    let (min, max) = if bars.is_empty() { (0.001, 1.0) } else { (min / 2.0, max * 2.0) };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(330)
        .build_cartesian_2d((min..max).log_scale(), 0.0..labels.len() as f64)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("milliseconds")
        .y_labels(labels.len())
        .y_label_formatter(&|y| {
            let index = (*y - 0.5).round() as usize;
            labels.get(index).map(|l| l.to_string()).unwrap_or_default()
        })
        .disable_y_mesh()
        .draw()
        .map_err(plot_error)?;
    let slot = 0.8 / series.len().max(1) as f64;
    for (s, name) in series.iter().enumerate() {
        let colour = COLOURS[s % COLOURS.len()];
        let rects = bars.iter().filter(|b| b.series == *name).map(|b| {
            let row = labels.iter().position(|l| *l == b.label).expect("every label was collected")
                as f64;
            let top = row + 0.9 - slot * s as f64;
            Rectangle::new([(min, top - slot), (b.value_ms, top)], colour.filled())
        });
        chart
            .draw_series(rects)
            .map_err(plot_error)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)?;
    Ok(())
}

fn plot_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing a chart: {error}")
}
