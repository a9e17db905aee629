//! Draws a row of the Grafana dashboard as a PNG from a Prometheus server's range queries: one
//! chart per panel, side by side, with the outage of the run shaded.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;

/// One line of a panel: its legend and (seconds since the run began, value) points.
pub type Line = (String, Vec<(f64, f64)>);

/// A panel's lines and unit, ready to draw.
pub struct PanelPlot {
    pub title: String,
    pub unit: String,
    pub lines: Vec<Line>,
}

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

fn register_font() {
    static FONT: Once = Once::new();
    FONT.call_once(|| {
        // Bundled, so plots need no system fonts.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Writes `panels` as one PNG, `title` above; `outage` (seconds) is shaded in every chart.
pub fn draw_row(path: &Path, title: &str, panels: &[PanelPlot], outage: (f64, f64)) -> Result<(), String> {
    register_font();
    let error = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let root = BitMapBackend::new(path, (560 * panels.len() as u32, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| error(&e))?;
    let root = root.titled(title, ("sans-serif", 24)).map_err(|e| error(&e))?;
    for (area, panel) in root.split_evenly((1, panels.len())).iter().zip(panels) {
        let points = panel
            .lines
            .iter()
            .flat_map(|(_, points)| points)
            .filter(|(_, y)| y.is_finite());
        let (mut x_max, mut y_max) = (outage.1, 0.0f64);
        for (x, y) in points {
            x_max = x_max.max(*x);
            y_max = y_max.max(*y);
        }
        let y_max = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 17))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| error(&e))?;
        chart
            .configure_mesh()
            .x_desc("seconds into the run")
            .y_desc(&panel.unit)
            .y_label_formatter(&|y| format_value(*y, &panel.unit))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| error(&e))?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(outage.0, 0.0), (outage.1, y_max)],
                RGBColor(214, 39, 40).mix(0.08).filled(),
            )))
            .map_err(|e| error(&e))?;
        for (index, (name, points)) in panel.lines.iter().enumerate() {
            let colour = COLOURS[index % COLOURS.len()];
            // A gap (no sample, or NaN: a rate of nothing) breaks the line.
            let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
            for pair in points.windows(2) {
                if pair[1].0 - pair[0].0 > 2.5 || !pair[0].1.is_finite() {
                    segments.push(Vec::new());
                }
                if pair[0].1.is_finite() {
                    segments.last_mut().unwrap().push(pair[0]);
                }
            }
            if let Some(last) = points.last().filter(|(_, y)| y.is_finite()) {
                segments.last_mut().unwrap().push(*last);
            }
            for (i, segment) in segments.into_iter().filter(|s| !s.is_empty()).enumerate() {
                let drawn = chart
                    .draw_series(LineSeries::new(segment, colour.stroke_width(2)))
                    .map_err(|e| error(&e))?;
                if i == 0 {
                    drawn
                        .label(name)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
                }
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| error(&e))?;
    }
    root.present().map_err(|e| error(&e))
}

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;

fn format_value(value: f64, unit: &str) -> String {
    let (scaled, suffix) = match (unit, value.abs()) {
        ("bytes", v) if v >= GIB => (value / GIB, " GiB"),
        ("bytes", v) if v >= MIB => (value / MIB, " MiB"),
        ("bytes", _) => (value / 1024.0, " KiB"),
        (_, v) if v >= 1e6 => (value / 1e6, "M"),
        (_, v) if v >= 1e3 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    let digits = if scaled.abs() >= 10.0 || scaled == 0.0 { 0 } else { 2 };
    format!("{scaled:.digits$}{suffix}")
}
