//! PNG plots of a run, drawn with plotters' bitmap backend: the headline figure per placement or
//! target (bars), and latency percentile curves (one line per measurement).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;

use crate::error::{BenchError, BenchResult};
use crate::record::{Measurement, RunMode, RunRecord};
use crate::workloads::headline_metrics;

const PLOT_WIDTH_PIXELS: u32 = 1000;
const PLOT_HEIGHT_PIXELS: u32 = 600;
const FONT_FAMILY: &str = "sans-serif";
/// Debian's fonts-dejavu-core (present wherever fontconfig is) and its usual alternatives.
const FONT_CANDIDATES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
/// The latency curve's x axis runs to 99.99 % ("four nines"); the maximum is in the table.
const LATENCY_NINES_MAX: f64 = 4.0;

/// Draws the run's plots next to its JSON file (`<stem>-throughput.png`, `<stem>-latency.png`)
/// and returns their file names.
pub fn draw(record: &RunRecord, json_path: &Path) -> BenchResult<Vec<String>> {
    register_font(json_path)?;
    let stem = json_path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
    let directory = json_path.parent().unwrap_or(Path::new("."));
    let mut names = Vec::new();
    let bars = directory.join(format!("{stem}-throughput.png"));
    if draw_bars(record, &bars)? {
        names.push(file_name(&bars));
    }
    let curves = directory.join(format!("{stem}-latency.png"));
    if draw_latency(record, &curves)? {
        names.push(file_name(&curves));
    }
    Ok(names)
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
}

fn register_font(path: &Path) -> BenchResult<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    let result = REGISTERED.get_or_init(|| {
        let bytes = FONT_CANDIDATES.iter().find_map(|candidate| std::fs::read(candidate).ok()).ok_or_else(|| {
            format!("no TrueType font found (looked for {FONT_CANDIDATES:?}); install one with `apt-get install -y fonts-dejavu-core`")
        })?;
        // plotters keeps fonts for the whole process, so it asks for 'static bytes; this runs once.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, bytes).map_err(|_| "the font file is not a usable TrueType font".to_string())
    });
    result.clone().map_err(|detail| BenchError::Plot { path: path.to_path_buf(), detail })
}

fn plot_error<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> BenchError + '_ {
    move |error| BenchError::Plot { path: path.to_path_buf(), detail: error.to_string() }
}

fn measurement_label(measurement: &Measurement) -> String {
    match (&measurement.placement, measurement.round) {
        (Some(placement), Some(round)) => format!("hybridkv {placement} r{round}"),
        (Some(placement), None) => placement.clone(),
        (None, Some(round)) => format!("{} r{round}", measurement.target),
        (None, None) => measurement.server.clone(),
    }
}

/// Bars of the first headline metric; false when no measurement has it.
fn draw_bars(record: &RunRecord, path: &PathBuf) -> BenchResult<bool> {
    let Some(&(metric, _)) = headline_metrics(record.workload).first() else { return Ok(false) };
    let bars: Vec<(String, f64, PaletteColor<Palette99>)> = record
        .measurements
        .iter()
        .enumerate()
        .filter_map(|(index, measurement)| Some((measurement_label(measurement), *measurement.metrics.get(metric)?, bar_color(record, measurement, index))))
        .collect();
    if bars.is_empty() {
        return Ok(false);
    }
    let top = bars.iter().map(|(_, value, _)| *value).fold(0.0, f64::max).max(f64::MIN_POSITIVE) * 1.1;
    let root = BitMapBackend::new(path, (PLOT_WIDTH_PIXELS, PLOT_HEIGHT_PIXELS)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error(path))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{} — {metric}", record.workload), (FONT_FAMILY, 22))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(90)
        // A segmented 0..n range has n + 1 segments; the bars need n.
        .build_cartesian_2d((0..bars.len().saturating_sub(1)).into_segmented(), 0.0..top)
        .map_err(plot_error(path))?;
    let label_of = |value: &SegmentValue<usize>| match value {
        SegmentValue::CenterOf(index) => bars.get(*index).map(|(label, _, _)| label.clone()).unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .x_labels(bars.len())
        .x_label_formatter(&label_of)
        .y_label_formatter(&|value| format!("{value:.0}"))
        .y_desc(metric)
        .label_style((FONT_FAMILY, 13))
        .draw()
        .map_err(plot_error(path))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(index, (_, value, color))| {
            let mut bar = Rectangle::new([(SegmentValue::Exact(index), 0.0), (SegmentValue::Exact(index + 1), *value)], color.filled());
            bar.set_margin(0, 0, 8, 8);
            bar
        }))
        .map_err(plot_error(path))?;
    root.present().map_err(plot_error(path))?;
    Ok(true)
}

/// In a comparison one color per target, so the alternation is visible; otherwise one per bar.
fn bar_color(record: &RunRecord, measurement: &Measurement, index: usize) -> PaletteColor<Palette99> {
    match record.mode {
        RunMode::Compare | RunMode::ComparePlacements => Palette99::pick(usize::from(record.is_baseline(measurement))),
        RunMode::Single | RunMode::Matrix => Palette99::pick(index),
    }
}

/// x = number of nines of the percentile (1 = 90 %, 2 = 99 % …), y = latency in µs (log scale).
fn draw_latency(record: &RunRecord, path: &PathBuf) -> BenchResult<bool> {
    let curves: Vec<(String, Vec<(f64, f64)>)> = record
        .measurements
        .iter()
        .filter_map(|measurement| {
            let points = measurement.latency.as_ref()?.curve.iter().filter(|(percentile, _)| *percentile < 100.0).map(|&(percentile, micros)| (nines(percentile), micros.max(1.0))).collect();
            Some((measurement_label(measurement), points))
        })
        .collect();
    if curves.is_empty() {
        return Ok(false);
    }
    let highest = curves.iter().flat_map(|(_, points)| points.iter().map(|(_, micros)| *micros)).fold(1.0, f64::max) * 2.0;
    let root = BitMapBackend::new(path, (PLOT_WIDTH_PIXELS, PLOT_HEIGHT_PIXELS)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error(path))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{} — latency by percentile", record.workload), (FONT_FAMILY, 22))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..LATENCY_NINES_MAX, (1.0..highest).log_scale())
        .map_err(plot_error(path))?;
    chart
        .configure_mesh()
        .x_labels(LATENCY_NINES_MAX as usize + 1)
        .x_label_formatter(&|nines| format!("{}%", 100.0 - 100.0 * 10f64.powf(-nines)))
        .y_label_formatter(&|value| format!("{value:.0}"))
        .x_desc("percentile")
        .y_desc("latency µs")
        .label_style((FONT_FAMILY, 13))
        .draw()
        .map_err(plot_error(path))?;
    for (index, (label, points)) in curves.into_iter().enumerate() {
        let color = Palette99::pick(index);
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(plot_error(path))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], Palette99::pick(index).stroke_width(2)));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).label_font((FONT_FAMILY, 13)).draw().map_err(plot_error(path))?;
    root.present().map_err(plot_error(path))?;
    Ok(true)
}

fn nines(percentile: f64) -> f64 {
    (-(1.0 - percentile / 100.0).log10()).clamp(0.0, LATENCY_NINES_MAX)
}
