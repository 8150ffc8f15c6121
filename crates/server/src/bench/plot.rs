//! `--plot`: the HTTP measurements drawn, throughput against concurrency on the left, latency percentiles
//! (p50 solid, p99 dashed) on the right, one colour per model and dtype.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::{BenchReport, HttpRow};

/// DejaVu Sans cut to ASCII and a few symbols (10 KB; licence beside it): the labels of a PNG are drawn
/// with it, so a plot looks the same on every machine, fonts installed or not.
const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans-subset.ttf");
const SIZE: (u32, u32) = (1280, 520);
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

pub enum Format {
    Svg,
    Png,
}

impl Format {
    pub fn of(path: &Path) -> anyhow::Result<Format> {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => bail!("--plot {}: name an .svg or a .png file", path.display()),
        }
    }
}

pub fn draw(report: &BenchReport, path: &Path) -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    if !*REGISTERED.get_or_init(|| plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()) {
        bail!("the plot's font did not load");
    }
    let series = Series::of(report);
    if series.is_empty() {
        bail!("no HTTP measurement succeeded: nothing to plot");
    }
    match Format::of(path)? {
        Format::Svg => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            panels(&root, &series).map_err(|e| anyhow!("{e}"))?;
            root.present().map_err(|e| anyhow!("{e}"))?;
        }
        Format::Png => {
            let mut pixels = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
            {
                let root = BitMapBackend::with_buffer(&mut pixels, SIZE).into_drawing_area();
                panels(&root, &series).map_err(|e| anyhow!("{e}"))?;
                root.present().map_err(|e| anyhow!("{e}"))?;
            }
            image::save_buffer_with_format(
                path,
                &pixels,
                SIZE.0,
                SIZE.1,
                image::ExtendedColorType::Rgb8,
                image::ImageFormat::Png,
            )?;
        }
    }
    Ok(())
}

/// One line per model and dtype: (concurrency, inputs/s, p50 ms, p99 ms), levels with errors left out.
struct Series {
    label: String,
    points: Vec<(f64, f64, f64, f64)>,
}

impl Series {
    fn of(report: &BenchReport) -> Vec<Series> {
        let mut out: Vec<Series> = Vec::new();
        let ok = |r: &&HttpRow| r.errors == 0 && r.requests > 0;
        for r in report.http.iter().filter(ok) {
            let label = format!("{} {}", r.model, r.dtype);
            let point = (r.concurrency as f64, r.items_per_s, r.p50_ms, r.p99_ms);
            match out.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push(point),
                None => out.push(Series { label, points: vec![point] }),
            }
        }
        out
    }
}

type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn panels<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, series: &[Series]) -> Drawn<DB> {
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    let all = || series.iter().flat_map(|s| s.points.iter());
    // Concurrency on a log2 axis, labelled at the powers of two.
    let span = all().map(|p| p.0.log2()).fold(0.0, f64::max);
    let x_range = || -0.3..span + 0.3;
    let x_label =
        |x: &f64| if (x - x.round()).abs() < 1e-6 { format!("{}", 2f64.powf(x.round())) } else { String::new() };
    let ticks = span.ceil() as usize + 1;

    let top = all().map(|p| p.1).fold(0.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&left)
        .caption("Throughput", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range(), 0.0..top.max(1.0))?;
    chart
        .configure_mesh()
        .x_desc("requests in flight")
        .y_desc("inputs / s")
        .x_labels(ticks)
        .x_label_formatter(&x_label)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .light_line_style(RGBColor(242, 242, 242))
        .label_style(("sans-serif", 14))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(s.points.iter().map(|p| (p.0.log2(), p.1)), colour.stroke_width(2)))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], colour.stroke_width(2)));
        chart.draw_series(s.points.iter().map(|p| Circle::new((p.0.log2(), p.1), 4, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;

    let low = all().map(|p| p.2).fold(f64::INFINITY, f64::min).max(1e-3) / 1.5;
    let high = all().map(|p| p.3).fold(0.0, f64::max).max(low * 2.0) * 1.5;
    let mut chart = ChartBuilder::on(&right)
        .caption("Latency: p50 (solid), p99 (dashed)", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range(), (low..high).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("requests in flight")
        .y_desc("ms per request")
        .x_labels(ticks)
        .x_label_formatter(&x_label)
        .y_label_formatter(&|y| super::report::significant(*y))
        .light_line_style(RGBColor(242, 242, 242))
        .label_style(("sans-serif", 14))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(s.points.iter().map(|p| (p.0.log2(), p.2)), colour.stroke_width(2)))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], colour.stroke_width(2)));
        chart.draw_series(DashedLineSeries::new(
            s.points.iter().map(|p| (p.0.log2(), p.3)),
            8,
            5,
            colour.stroke_width(2),
        ))?;
        chart.draw_series(s.points.iter().map(|p| Circle::new((p.0.log2(), p.2), 4, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}
