//! The PNG: one horizontal group of bars per path, each bar a figure as a
//! ratio to plain routing, oriented so that longer is better everywhere.

use anyhow::{Context as _, anyhow};
use plotters::prelude::*;

use super::{report::Run, workloads::Metric};

/// Fonts tried, in order; Debian's fonts-dejavu-core ships the first.
const FONTS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// What is drawn, and whether the ratio is inverted so that longer is better.
const BARS: [(Metric, &str, bool); 4] = [
    (Metric::Gbps1, "throughput, 1 stream", false),
    (Metric::Gbps8, "throughput, 8 streams", false),
    (Metric::SetupPerSec, "connection setups/s", false),
    (Metric::P50Us, "p50 latency (routing ÷ path)", true),
];

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

fn register_font() -> anyhow::Result<()> {
    let bytes = FONTS
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .context("no DejaVuSans.ttf (install fonts-dejavu-core)")?;
    // plotters keeps fonts for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("DejaVuSans.ttf is not a usable font"))
}

pub fn draw(run: &Run, file: &std::path::Path) -> anyhow::Result<()> {
    register_font()?;
    let labels: Vec<String> = run.paths.iter().map(|p| p.label()).collect();
    let ratio = |label: &str, (metric, _, invert): (Metric, &str, bool)| {
        run.ratio(label, metric)
            .map(|r| if invert && r > 0.0 { 1.0 / r } else { r })
    };
    let max = labels
        .iter()
        .flat_map(|l| BARS.iter().filter_map(|b| ratio(l, *b)))
        .fold(1.0f64, f64::max);
    let n = labels.len();
    let height = 120 + 60 * n as u32;
    let root = BitMapBackend::new(file, (1100, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "ssh-fwd datapath: ratio to plain routing (median of {} rounds)",
                run.rounds
            ),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(220)
        .build_cartesian_2d(0.0..max * 1.1, -0.5..n as f64 - 0.5)
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n + 1)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            // Path 0 is drawn at the top.
            labels
                .get(n.wrapping_sub(1 + i as usize))
                .cloned()
                .unwrap_or_default()
        })
        .x_desc("ratio to plain routing (longer is better)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    let bar = 0.8 / BARS.len() as f64;
    for (j, spec) in BARS.iter().enumerate() {
        let color = COLORS[j];
        let rects: Vec<_> = labels
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let r = ratio(l, *spec)?;
                let center = (n - 1 - i) as f64;
                let top = center + 0.4 - j as f64 * bar;
                Some(Rectangle::new(
                    [(0.0, top - bar * 0.9), (r, top)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(|e| anyhow!("{e}"))?
            .label(spec.1)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            [(1.0, -0.5), (1.0, n as f64 - 0.5)],
            BLACK.stroke_width(1),
        )))
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
