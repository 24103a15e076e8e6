//! Output: CSV files, SVG plots (plotters' SVG backend: no font files
//! needed), criteria in the JSON summary, small statistics.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde_json::{json, Value};

/// A two-sided criterion: `lo <= value <= hi`.
pub fn criterion_within(what: &str, value: f64, lo: f64, hi: f64) -> Value {
    let pass = value >= lo && value <= hi;
    json!({ "what": what, "value": round(value), "op": "within", "threshold": [lo, hi], "pass": pass })
}

/// One "Done when" criterion: `value op threshold`.
pub fn criterion(what: &str, value: f64, op: &str, threshold: f64) -> Value {
    let pass = match op {
        ">=" => value >= threshold,
        "<=" => value <= threshold,
        "<" => value < threshold,
        "==" => value == threshold,
        _ => false,
    } && value.is_finite();
    json!({ "what": what, "value": round(value), "op": op, "threshold": threshold, "pass": pass })
}

/// Whether every criterion of a `{name: criterion}` object passes.
pub fn all_pass(criteria: &Value) -> bool {
    criteria
        .as_object()
        .is_some_and(|m| m.values().all(|c| c["pass"] == true))
}

/// Rounds to 4 significant decimals for the summary.
pub fn round(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    (x * 10_000.0).round() / 10_000.0
}

/// Jain's fairness index of `xs` (1 = perfectly fair).
pub fn jain(xs: &[f64]) -> f64 {
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    if s2 == 0.0 {
        return 0.0;
    }
    s * s / (xs.len() as f64 * s2)
}

pub fn write_csv(path: &Path, header: &str, rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut s = String::with_capacity(rows.len() * 32);
    s.push_str(header);
    s.push('\n');
    for r in rows {
        let _ = writeln!(s, "{}", r.join(","));
    }
    std::fs::write(path, s)
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Index into the palette; series of one transport share a hue.
    pub color: usize,
    pub legend: bool,
}

pub struct Plot<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: Vec<Series>,
    /// Horizontal reference lines (y, label).
    pub hlines: Vec<(f64, String)>,
    /// Vertical reference lines (x, label).
    pub vlines: Vec<(f64, String)>,
    pub points: bool,
}

pub fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(0xd6, 0x27, 0x28), // red: the baseline
        RGBColor(0x1f, 0x77, 0xb4), // blue: MetaRoCE
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x8c, 0x56, 0x4b),
        RGBColor(0x17, 0xbe, 0xcf),
        RGBColor(0x7f, 0x7f, 0x7f),
    ];
    C[i % C.len()]
}

pub fn plot(path: &Path, p: &Plot) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| format!("plot {}: {x}", path.display());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for s in &p.series {
        for &(x, y) in &s.points {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
    }
    for (y, _) in &p.hlines {
        y1 = y1.max(*y);
    }
    if x0 >= x1 {
        x0 = 0.0;
        x1 = x1.max(1.0);
    }
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.08 };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(p.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(p.x_label)
        .y_desc(p.y_label)
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(|x| e(&x))?;
    for s in &p.series {
        let c = color(s.color);
        let style = ShapeStyle::from(&c).stroke_width(if s.legend { 2 } else { 1 });
        let a = chart
            .draw_series(LineSeries::new(s.points.iter().copied(), style))
            .map_err(|x| e(&x))?;
        if s.legend {
            a.label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c));
        }
        if p.points {
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|&(x, y)| Circle::new((x, y), 4, c.filled())),
                )
                .map_err(|x| e(&x))?;
        }
    }
    for (y, label) in &p.hlines {
        let st = ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(1);
        chart
            .draw_series(LineSeries::new(vec![(x0, *y), (x1, *y)], st))
            .map_err(|x| e(&x))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.6)));
    }
    for (x, label) in &p.vlines {
        let st = ShapeStyle::from(&RGBColor(0x55, 0x55, 0x55)).stroke_width(1);
        chart
            .draw_series(LineSeries::new(vec![(*x, 0.0), (*x, y1)], st))
            .map_err(|x| e(&x))?
            .label(label.clone())
            .legend(|(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], RGBColor(0x55, 0x55, 0x55))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index() {
        assert!((jain(&[1.0, 1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        assert!((jain(&[2.0, 1.0]) - 0.9).abs() < 1e-12);
    }

    #[test]
    fn criterion_pass_and_fail() {
        assert_eq!(criterion("x", 0.95, ">=", 0.9)["pass"], true);
        assert_eq!(criterion("x", 0.85, ">=", 0.9)["pass"], false);
        assert_eq!(criterion("x", f64::NAN, "<=", 0.9)["pass"], false);
        assert_eq!(criterion_within("x", 1.05, 0.9, 1.1)["pass"], true);
        assert_eq!(criterion_within("x", 1.15, 0.9, 1.1)["pass"], false);
    }

    #[test]
    fn svg_plot_renders_without_fonts() {
        let dir = std::env::temp_dir().join(format!("metaroce-sim-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        let p = Plot {
            title: "t",
            x_label: "x",
            y_label: "y",
            series: vec![Series {
                name: "a".into(),
                points: vec![(0.0, 1.0), (1.0, 2.0)],
                color: 0,
                legend: true,
            }],
            hlines: vec![(1.5, "h".into())],
            vlines: vec![(0.5, "v".into())],
            points: true,
        };
        plot(&path, &p).unwrap();
        let s = std::fs::read_to_string(&path).unwrap();
        assert!(s.starts_with("<svg") && s.contains("<polyline"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
