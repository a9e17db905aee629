//! The bench's plots, drawn by the bench itself (PNG, log-log line charts).

use std::path::Path;
use std::sync::Once;

use anyhow::anyhow;
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;

use super::report::{BenchReport, ImplementationReport, Kind};
use super::Phase;

/// One line of a chart: a label and its (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The plots of one run: throughput and latency against batch size, 1 against 2 workers.
pub fn run_plots(report: &BenchReport, dir: &Path) -> anyhow::Result<()> {
    let throughput: Vec<Series> = report
        .implementations
        .iter()
        .map(|i| (i.name.clone(), update_points(i, |p| p.events_per_second)))
        .collect();
    line_chart(
        &dir.join("throughput_vs_batch_size.png"),
        &format!("Product updates/s by batch size, {} products", report.products),
        "updates per batch",
        "updates/s",
        &throughput,
    )?;
    let latency: Vec<Series> = report
        .implementations
        .iter()
        .filter(|i| !matches!(i.kind, Kind::PerPair))
        .flat_map(|i| {
            [
                (format!("{} p50", i.name), update_points(i, |p| p.p50_ms)),
                (format!("{} p99", i.name), update_points(i, |p| p.p99_ms)),
            ]
        })
        .filter(|(name, _)| !name.contains("JSON"))
        .collect();
    line_chart(
        &dir.join("latency_vs_batch_size.png"),
        &format!("Per-batch latency of product updates, {} products", report.products),
        "updates per batch",
        "latency (ms)",
        &latency,
    )?;
    let workers: Vec<Series> = report
        .implementations
        .iter()
        .filter(|i| matches!(i.kind, Kind::Engine { .. } | Kind::Incremental))
        .map(|i| (i.name.clone(), update_points(i, |p| p.events_per_second)))
        .collect();
    line_chart(
        &dir.join("workers.png"),
        "Engine on 1 and 2 workers against the hand-written incremental",
        "updates per batch",
        "updates/s",
        &workers,
    )
}

/// The plots of a sweep: latency and memory against products.
pub fn sweep_plots(reports: &[BenchReport], dir: &Path) -> anyhow::Result<()> {
    let names: Vec<String> = reports
        .first()
        .map(|r| r.implementations.iter().map(|i| i.name.clone()).collect())
        .unwrap_or_default();
    let across = |name: &str, phase: &Phase, figure: fn(&super::measure::PhaseResult) -> f64| -> Vec<(f64, f64)> {
        reports
            .iter()
            .filter_map(|report| {
                let implementation = report.implementations.iter().find(|i| i.name == name)?;
                let result = implementation.phases.iter().find(|p| &p.phase == phase)?;
                Some((report.products as f64, figure(result)))
            })
            .collect()
    };
    let new_campaign: Vec<Series> = names
        .iter()
        .filter(|name| !name.contains("JSON"))
        .map(|name| (name.clone(), across(name, &Phase::NewCampaign, |p| p.max_ms)))
        .collect();
    line_chart(
        &dir.join("new_campaign_latency_vs_products.png"),
        "Time until a new campaign's pairs are all out",
        "products",
        "latency (ms)",
        &new_campaign,
    )?;
    let batch = reports
        .first()
        .and_then(|r| r.implementations.first())
        .and_then(|i| {
            i.phases.iter().rev().find_map(|p| match p.phase {
                Phase::Updates { batch_size } => Some(batch_size),
                _ => None,
            })
        })
        .unwrap_or(1000);
    let updates: Vec<Series> = names
        .iter()
        .filter(|name| !name.contains("JSON"))
        .map(|name| {
            (
                name.clone(),
                across(name, &Phase::Updates { batch_size: batch }, |p| p.p50_ms),
            )
        })
        .collect();
    line_chart(
        &dir.join("update_latency_vs_products.png"),
        &format!("p50 latency of a batch of {batch} product updates"),
        "products",
        "latency (ms)",
        &updates,
    )?;
    let memory: Vec<Series> = vec![
        (
            "engine state (MiB)".into(),
            reports
                .iter()
                .map(|r| (r.products as f64, r.memory.engine_state_bytes as f64 / 1048576.0))
                .collect(),
        ),
        (
            "peak RSS with the engine (MiB)".into(),
            reports
                .iter()
                .map(|r| {
                    (
                        r.products as f64,
                        r.memory.peak_resident_bytes_after_engine as f64 / 1048576.0,
                    )
                })
                .collect(),
        ),
        (
            "engine state per product (B)".into(),
            reports
                .iter()
                .map(|r| (r.products as f64, r.memory.engine_state_bytes_per_product))
                .collect(),
        ),
    ];
    line_chart(
        &dir.join("memory_vs_products.png"),
        "Memory against products",
        "products",
        "MiB, or bytes per product",
        &memory,
    )
}

/// `(batch size, figure)` of each update phase.
fn update_points(
    implementation: &ImplementationReport,
    figure: fn(&super::measure::PhaseResult) -> f64,
) -> Vec<(f64, f64)> {
    implementation
        .phases
        .iter()
        .filter_map(|p| match p.phase {
            Phase::Updates { batch_size } => Some((batch_size as f64, figure(p))),
            _ => None,
        })
        .collect()
}

fn register_font() {
    static FONT: Once = Once::new();
    FONT.call_once(|| {
        // Bundled, so plots need no system fonts.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

/// A log-log line chart of `series`, written to `path`.
pub fn line_chart(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> anyhow::Result<()> {
    register_font();
    let points = series
        .iter()
        .flat_map(|(_, points)| points)
        .filter(|(x, y)| *x > 0.0 && *y > 0.0);
    let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in points {
        x_min = x_min.min(*x);
        x_max = x_max.max(*x);
        y_min = y_min.min(*y);
        y_max = y_max.max(*y);
    }
    if x_min > x_max {
        return Err(anyhow!("nothing to plot in {}", path.display()));
    }
    let plot_error = |e: &dyn std::fmt::Display| anyhow!("cannot draw {}: {e}", path.display());
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(
            (x_min / 1.5..x_max * 1.5).log_scale(),
            (y_min / 2.0..y_max * 2.0).log_scale(),
        )
        .map_err(|e| plot_error(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|x| format_axis(*x))
        .y_label_formatter(&|y| format_axis(*y))
        .draw()
        .map_err(|e| plot_error(&e))?;
    for (index, (name, points)) in series.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let points: Vec<(f64, f64)> = points.iter().copied().filter(|(x, y)| *x > 0.0 && *y > 0.0).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
            .map_err(|e| plot_error(&e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart
            .draw_series(points.into_iter().map(|point| Circle::new(point, 3, colour.filled())))
            .map_err(|e| plot_error(&e))?;
    }
    legend_and_save(chart, &root, path)
}

fn format_axis(value: f64) -> String {
    match value {
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v if v >= 1.0 => format!("{v}"),
        v => format!("{v:.2}"),
    }
}

/// One group of bars: a label and its values, one per measure.
pub type BarGroup = (String, Vec<f64>);

/// Bars side by side per group (one colour per measure, `measures` naming them), each value
/// drawn relative to the first group's (a ratio, 1.0 = the first group), written to `path`.
pub fn ratio_bars(path: &Path, title: &str, measures: &[&str], groups: &[BarGroup]) -> anyhow::Result<()> {
    register_font();
    let Some((_, base)) = groups.first() else {
        return Err(anyhow!("nothing to plot in {}", path.display()));
    };
    let ratios: Vec<Vec<f64>> = groups
        .iter()
        .map(|(_, values)| {
            values
                .iter()
                .zip(base)
                .map(|(value, base)| value / base.max(f64::MIN_POSITIVE))
                .collect()
        })
        .collect();
    let top = ratios.iter().flatten().copied().fold(1.0, f64::max) * 1.15;
    let plot_error = |e: &dyn std::fmt::Display| anyhow!("cannot draw {}: {e}", path.display());
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(&e))?;
    let slots = groups.len() * (measures.len() + 1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(0..slots, 0.0..top)
        .map_err(|e| plot_error(&e))?;
    let width = measures.len() + 1;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(format!("relative to {}", groups[0].0))
        .x_labels(slots)
        .x_label_formatter(&|slot| match slot % width {
            0 => groups
                .get(slot / width)
                .map_or(String::new(), |(label, _)| label.clone()),
            _ => String::new(),
        })
        .draw()
        .map_err(|e| plot_error(&e))?;
    for (measure, name) in measures.iter().enumerate() {
        let colour = COLOURS[measure % COLOURS.len()];
        let bars = ratios.iter().enumerate().map(move |(group, values)| {
            let x = group * width + measure;
            Rectangle::new([(x, 0.0), (x + 1, values[measure])], colour.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|e| plot_error(&e))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
    }
    legend_and_save(chart, &root, path)
}

/// Draws the legend in the upper left and writes the picture out.
fn legend_and_save<'a, 'b: 'a, CT: CoordTranslate>(
    mut chart: ChartContext<'a, BitMapBackend<'b>, CT>,
    root: &DrawingArea<BitMapBackend<'b>, Shift>,
    path: &Path,
) -> anyhow::Result<()> {
    let plot_error = |e: &dyn std::fmt::Display| anyhow!("cannot draw {}: {e}", path.display());
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| plot_error(&e))?;
    root.present().map_err(|e| plot_error(&e))?;
    Ok(())
}
