//! Charts: bars per workload and engine for ops/s, I/O amplification and CPU per op, and
//! throughput over time, as SVG or PNG.
//!
//! Text is laid out with ab_glyph, which needs a TrueType font at run time: plotters has no
//! built-in font, and bundling one would add ~700 KB to the repository. A system sans font
//! is looked up (Debian: fonts-dejavu-core).

#![expect(clippy::indexing_slicing, reason = "series and colours are indexed within the lists the plot built")]

use crate::runner::{EngineRun, PhaseResult};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

const FONT_PATHS: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
];

/// Registers a system font as "sans-serif" once per process.
fn font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let fc = std::process::Command::new("fc-match")
            .args(["-f", "%{file}", "sans-serif:style=Regular"])
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .filter(|p| p.ends_with(".ttf"));
        let path = FONT_PATHS
            .iter()
            .map(|p| p.to_string())
            .chain(fc)
            .find(|p| Path::new(p).exists())
            .ok_or("no TrueType font found for the chart's text (install fonts-dejavu-core)".to_string())?;
        let bytes = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
        // Registered fonts live as long as the process: leaking the one file is intended.
        plotters::style::register_font("sans-serif", FontStyle::Normal, Vec::leak(bytes))
            .map_err(|_| format!("{path} is not a usable font"))
    })
    .clone()
}

/// Draws the charts into `path` (.svg or .png).
pub(crate) fn draw(path: &Path, runs: &[EngineRun]) -> Result<(), String> {
    font()?;
    let size = (1400, 1000);
    let png = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if png {
        let root = BitMapBackend::new(path, size).into_drawing_area();
        charts(&root, runs).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())
    } else {
        let root = SVGBackend::new(path, size).into_drawing_area();
        charts(&root, runs).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())
    }
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn charts<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, runs: &[EngineRun]) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let areas = root.split_evenly((2, 2));
    bars(&areas[0], runs, "Throughput (ops/s)", |r| r.ops_per_sec)?;
    bars(&areas[1], runs, "I/O amplification", |r| r.io_amplification)?;
    bars(&areas[2], runs, "CPU time per op (us)", |r| r.cpu_us_per_op)?;
    over_time(&areas[3], runs)
}

/// Engines in order of first appearance.
fn engine_names(runs: &[EngineRun]) -> Vec<&str> {
    let mut v = Vec::new();
    for r in runs {
        if !v.contains(&r.engine.name()) {
            v.push(r.engine.name());
        }
    }
    v
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[EngineRun],
    title: &str,
    metric: fn(&PhaseResult) -> f64,
) -> DrawResult<DB> {
    // One group of bars per mix and workload, one bar per engine.
    let mut groups: Vec<(String, String)> = Vec::new();
    for r in runs.iter().flat_map(|r| &r.results) {
        let g = (r.mix.clone(), r.workload.clone());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    let multi_mix = groups.iter().any(|g| g.0 != groups[0].0);
    let labels: Vec<String> =
        groups.iter().map(|(m, w)| if multi_mix { format!("{m} {w}") } else { w.clone() }).collect();
    let engines = engine_names(runs);
    let ymax = runs.iter().flat_map(|r| &r.results).map(metric).fold(0.0, f64::max).max(1e-9) * 1.1;
    let n = groups.len().max(1);
    // Bars are centred on whole numbers so that the axis' integer ticks name the groups.
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(if multi_mix { 60 } else { 30 })
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0.0..ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 12))
        .draw()?;
    let width = 0.8 / engines.len() as f64;
    for (e, name) in engines.iter().enumerate() {
        let color = Palette99::pick(e).to_rgba();
        let rects = groups.iter().enumerate().filter_map(|(g, (mix, w))| {
            let r = runs
                .iter()
                .filter(|r| r.engine.name() == *name && &r.mix == mix)
                .flat_map(|r| &r.results)
                .find(|r| &r.workload == w)?;
            let x0 = g as f64 - 0.4 + e as f64 * width;
            // Unknown figures (NaN: a server that cannot be measured) get no bar.
            let v = metric(r);
            v.is_finite().then(|| Rectangle::new([(x0, 0.0), (x0 + width * 0.95, v)], color.filled()))
        });
        chart
            .draw_series(rects)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()
}

fn over_time<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, runs: &[EngineRun]) -> DrawResult<DB> {
    // Each engine/mix run as one line: its phases back to back.
    let lines: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|run| {
            let mut t0 = 0.0;
            let mut pts = Vec::new();
            for r in &run.results {
                for (i, v) in r.throughput_series.iter().enumerate() {
                    pts.push((t0 + (i + 1) as f64 * r.series_interval_s, *v));
                }
                t0 += r.seconds;
            }
            (format!("{} {}", run.engine.name(), run.mix), pts)
        })
        .collect();
    let xmax = lines.iter().flat_map(|l| &l.1).map(|p| p.0).fold(0.0, f64::max).max(1.0);
    let ymax = lines.iter().flat_map(|l| &l.1).map(|p| p.1).fold(0.0, f64::max).max(1.0) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption("Throughput over time (ops/s; phases back to back)", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
    chart.configure_mesh().x_desc("seconds").draw()?;
    for (i, (name, pts)) in lines.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color.stroke_width(2)));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()
}
