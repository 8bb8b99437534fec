//! `bench --plot FILE.svg`: malloc+free pairs per second against threads,
//! one line per request size, cold (dashed) and warm (solid), on log-log
//! axes — the alloc/free rows of a bench report, drawn with `plotters`'s
//! SVG backend.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::bench::{BenchReport, Row};

/// The alloc/free rows of `report` by request size: `(threads, cold, warm)`
/// points, sorted by threads.
pub fn series(report: &BenchReport) -> BTreeMap<u64, Vec<(u64, f64, f64)>> {
    let mut by_size: BTreeMap<u64, Vec<(u64, f64, f64)>> = BTreeMap::new();
    let alloc_free =
        |r: &&Row| r.case == "alloc_free" && r.min_bytes == r.max_bytes && r.error.is_none();
    for r in report.rows.iter().filter(alloc_free) {
        by_size.entry(r.min_bytes).or_default().push((
            r.threads,
            r.cold_pairs_per_second,
            r.warm_pairs_per_second,
        ));
    }
    for points in by_size.values_mut() {
        points.sort_by_key(|p| p.0);
    }
    by_size
}

/// Draws `report`'s alloc/free rows into an SVG at `path`. An error names
/// what went wrong (no rows to draw, or the file).
pub fn plot(report: &BenchReport, path: &Path) -> Result<(), String> {
    let by_size = series(report);
    let points = || by_size.values().flatten();
    let rates = points()
        .flat_map(|&(_, cold, warm)| [cold, warm])
        .filter(|&r| r > 0.0);
    let (lo, hi) = rates.fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(r), hi.max(r)));
    let threads = points().map(|p| p.0);
    let (t_lo, t_hi) = threads.fold((u64::MAX, 0u64), |(lo, hi), t| (lo.min(t), hi.max(t)));
    if by_size.is_empty() || hi <= 0.0 {
        return Err("no alloc/free rows to draw (run the alloc-free case)".into());
    }
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    let draw = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("warpalloc alloc/free — {}", report.target),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            ((t_lo as f64) / 1.5..(t_hi as f64) * 1.5).log_scale(),
            (lo / 2.0..hi * 2.0).log_scale(),
        )
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc("threads")
        .y_desc("malloc+free pairs per second")
        .y_label_formatter(&|v| rate_label(*v))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| draw(&e))?;
    for (i, (size, points)) in by_size.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let warm: Vec<(f64, f64)> = points.iter().map(|&(t, _, w)| (t as f64, w)).collect();
        let cold: Vec<(f64, f64)> = points.iter().map(|&(t, c, _)| (t as f64, c)).collect();
        chart
            .draw_series(LineSeries::new(warm.clone(), color.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(format!("{size} B warm"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(warm.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| draw(&e))?;
        chart
            .draw_series(DashedLineSeries::new(cold, 6, 4, color.stroke_width(1)))
            .map_err(|e| draw(&e))?
            .label(format!("{size} B cold"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(1))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}

/// `2.5 G/s`, `310 M/s`, `12 k/s`.
fn rate_label(v: f64) -> String {
    for (unit, scale) in [("G", 1e9), ("M", 1e6), ("k", 1e3)] {
        if v >= scale {
            let number = format!("{:.2}", v / scale);
            let number = number.trim_end_matches('0').trim_end_matches('.');
            return format!("{number} {unit}/s");
        }
    }
    format!("{v:.0} /s")
}
