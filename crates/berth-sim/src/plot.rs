//! The plot of a trace, as the FGD paper's figures show it: GPU allocation ratio against
//! arrived workload, one line per policy (means over seeds), the whole run on the left and the
//! region where policies part (arrived 70% and up) on the right. A grey line marks
//! "everything that arrived is allocated".
//!
//! Written as SVG (text left to the viewer's fonts) and PNG (drawn with DejaVu Sans, embedded
//! from the `dejavu` crate, so no system font is needed).

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::run::Curve;

/// Width and height in pixels.
pub const SIZE: (u32, u32) = (1280, 560);

/// Line colours, in policy order (Okabe–Ito, readable for colour-blind readers).
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(213, 94, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

const FONT: &str = "sans-serif";

fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // DejaVu Sans is a valid font: registering it cannot fail.
        let _ = register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// Writes the plot of `curves` (one trace's) as SVG to `svg` and as PNG to `png`.
pub fn write(trace: &str, curves: &[&Curve], svg: &Path, png: &Path) -> Result<(), String> {
    register_fonts();
    draw(SVGBackend::new(svg, SIZE).into_drawing_area(), trace, curves)
        .map_err(|err| format!("{}: {err}", svg.display()))?;
    draw(BitMapBackend::new(png, SIZE).into_drawing_area(), trace, curves)
        .map_err(|err| format!("{}: {err}", png.display()))?;
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    trace: &str,
    curves: &[&Curve],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let fail = |err: DrawingAreaErrorKind<DB::ErrorType>| err.to_string();
    root.fill(&WHITE).map_err(fail)?;
    let seeds = curves.first().map_or(0, |c| c.seeds.len());
    let title = format!(
        "GPU allocation vs arrived workload, openb trace {trace} ({seeds} seed{})",
        if seeds == 1 { "" } else { "s" }
    );
    let root = root.titled(&title, (FONT, 22)).map_err(fail)?;
    let (left, right) = root.split_horizontally(SIZE.0 / 2);
    let x_max = curves.iter().flat_map(|c| c.points.last()).map(|p| p.k).max().unwrap_or(130);
    let x_max = x_max.max(100) as f64;
    let zoom_min = curves
        .iter()
        .flat_map(|c| c.points.iter().filter(|p| p.k >= 70))
        .map(|p| p.alloc.mean)
        .fold(100.0f64, f64::min);
    let zoom_floor = ((zoom_min - 2.0) / 5.0).floor() * 5.0;
    let panels = [
        (left, "whole run", (0.0, x_max), (0.0, 100.0), false),
        (right, "from 70% arrived", (70.0, x_max), (zoom_floor.clamp(0.0, 95.0), 100.0), true),
    ];
    for (area, caption, (x0, x1), (y0, y1), legend) in panels {
        let mut chart = ChartBuilder::on(&area)
            .caption(caption, (FONT, 16))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(52)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(fail)?;
        chart
            .configure_mesh()
            .x_desc("arrived GPU workload (% of cluster GPUs)")
            .y_desc("GPU allocation (% of cluster GPUs)")
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .light_line_style(RGBColor(235, 235, 235))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(fail)?;
        let reference = RGBColor(170, 170, 170);
        chart
            .draw_series(LineSeries::new(
                [(x0, x0.min(100.0)), (100.0f64.max(x0), 100.0), (x1, 100.0)],
                reference.stroke_width(1),
            ))
            .map_err(fail)?
            .label("all arrived work allocated")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], reference));
        for (i, curve) in curves.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let points = curve
                .points
                .iter()
                .filter(|p| p.k as f64 >= x0)
                .map(|p| (p.k as f64, p.alloc.mean.clamp(y0, y1)));
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(fail)?
                .label(curve.policy.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], colour.stroke_width(2))
                });
        }
        if legend {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .label_font((FONT, 14))
                .background_style(WHITE.mix(0.9))
                .border_style(RGBColor(200, 200, 200))
                .draw()
                .map_err(fail)?;
        }
    }
    root.present().map_err(fail)?;
    Ok(())
}
