//! Charts as inline SVG, drawn with plotters' SVG backend (no fonts loaded, no bitmap): line
//! charts on linear or log axes ([`xy_chart`]), box rows ([`box_chart`]) and grouped bars
//! ([`bar_chart`]). Legends are left to the HTML around the chart, so many series never hide
//! the data. Data marks use [`PALETTE`] colours (axes and grid are grey/black), which is how a
//! test tells data from decoration.

use std::ops::Range;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Series colours (Tableau 10), as `(r, g, b)`; series `i` gets `PALETTE[i % 10]`.
pub const PALETTE: [(u8, u8, u8); 10] = [
    (0x4e, 0x79, 0xa7),
    (0xf2, 0x8e, 0x2b),
    (0xe1, 0x57, 0x59),
    (0x76, 0xb7, 0xb2),
    (0x59, 0xa1, 0x4f),
    (0xed, 0xc9, 0x48),
    (0xb0, 0x7a, 0xa1),
    (0xff, 0x9d, 0xa7),
    (0x9c, 0x75, 0x5f),
    (0xba, 0xb0, 0xac),
];

/// `PALETTE[i % 10]` as CSS/SVG hex, in the spelling the SVG backend writes (`#4E79A7`).
pub fn colour_hex(i: usize) -> String {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    format!("#{r:02X}{g:02X}{b:02X}")
}

fn colour(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// Default chart size, px (the SVG scales to its container).
pub const SIZE: (u32, u32) = (760, 380);

/// One line of an [`XyChart`].
#[derive(Clone, Debug)]
pub struct Line {
    /// Legend name.
    pub name: String,
    /// Palette index.
    pub colour: usize,
    /// Dashed (a second quantity of the same series, e.g. P99 beside P50).
    pub dashed: bool,
    /// (x, y), in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// A highlighted point (e.g. a sweep's knee).
#[derive(Clone, Debug)]
pub struct Marker {
    /// Palette index.
    pub colour: usize,
    /// Where.
    pub at: (f64, f64),
    /// Text beside it.
    pub label: String,
}

/// A line chart.
#[derive(Clone, Debug)]
pub struct XyChart {
    /// Size, px.
    pub size: (u32, u32),
    /// Caption.
    pub title: String,
    /// X axis description.
    pub x_desc: String,
    /// Y axis description.
    pub y_desc: String,
    /// Log-scaled x axis (values must be > 0).
    pub x_log: bool,
    /// Log-scaled y axis (values must be > 0).
    pub y_log: bool,
    /// Fixed y range (e.g. 0..1 for a CDF); `None`: from the data.
    pub y_range: Option<Range<f64>>,
    /// Lines.
    pub lines: Vec<Line>,
    /// Highlighted points.
    pub markers: Vec<Marker>,
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// A number for an axis tick: three significant digits at most, no trailing zeros.
pub fn tick(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let a = v.abs();
    let text = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// The range of `values`, padded: by a factor on a log axis, by 5% of the span otherwise
/// (`0..1` without values).
fn span(values: impl Iterator<Item = f64>, log: bool) -> Range<f64> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return if log { 1.0..10.0 } else { 0.0..1.0 };
    }
    if log {
        (lo / 1.25)..(hi * 1.25)
    } else {
        let pad = ((hi - lo) * 0.05).max(hi.abs() * 0.05).max(1e-9);
        // Quantities that cannot be negative start at 0, so heights compare.
        let lo = if lo >= 0.0 { 0.0 } else { lo - pad };
        lo..(hi + pad)
    }
}

/// Axis tick labels, px.
const LABEL_PX: u32 = 13;
/// Axis descriptions, px.
const DESC_PX: u32 = 14;

/// Whether `x` lies in the right half of `range` (geometric on a log axis): a label there
/// goes to the left of its point, so it stays inside the chart.
fn right_half(x: f64, range: &Range<f64>, log: bool) -> bool {
    if log {
        x * x > range.start.max(1e-12) * range.end
    } else {
        2.0 * x > range.start + range.end
    }
}

/// Renders `svg` from a drawing closure on a white canvas of `size`, and strips the SVG
/// namespace URL (inline SVG in HTML needs none, and the page then names no URL at all).
fn render(size: (u32, u32), draw: impl FnOnce(&Area) -> Result<(), String>) -> String {
    let mut svg = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)
            .map_err(err)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(err))
    };
    if let Err(e) = result {
        return maud::html! { p class="chart-error" { "chart not drawn: " (e) } }.into_string();
    }
    svg.replacen(r#" xmlns="http://www.w3.org/2000/svg""#, "", 1)
}

/// The line chart `c` as SVG.
pub fn xy_chart(c: &XyChart) -> String {
    let xs = || c.lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let ys = || c.lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let x = span(xs().chain(c.markers.iter().map(|m| m.at.0)), c.x_log);
    let y = c
        .y_range
        .clone()
        .unwrap_or_else(|| span(ys().chain(c.markers.iter().map(|m| m.at.1)), c.y_log));
    let left: Vec<bool> = c
        .markers
        .iter()
        .map(|m| right_half(m.at.0, &x, c.x_log))
        .collect();
    render(c.size, |root| match (c.x_log, c.y_log) {
        (false, false) => draw_xy(root, c, &left, x, y),
        (true, false) => draw_xy(root, c, &left, x.log_scale(), y),
        (false, true) => draw_xy(root, c, &left, x, y.log_scale()),
        (true, true) => draw_xy(root, c, &left, x.log_scale(), y.log_scale()),
    })
}

fn draw_xy<X, Y>(root: &Area, c: &XyChart, label_left: &[bool], x: X, y: Y) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(58)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(c.x_desc.as_str())
        .y_desc(c.y_desc.as_str())
        .x_labels(if c.x_log { 6 } else { 10 })
        .y_labels(if c.y_log { 6 } else { 10 })
        .label_style(("sans-serif", LABEL_PX))
        .axis_desc_style(("sans-serif", DESC_PX))
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .light_line_style(RGBColor(0xf2, 0xf2, 0xf2))
        .bold_line_style(RGBColor(0xd8, 0xd8, 0xd8))
        .draw()
        .map_err(err)?;
    for l in &c.lines {
        let style = colour(l.colour).stroke_width(2);
        let pts = l.points.iter().copied();
        if l.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 6, 4, style))
                .map_err(err)?;
        } else {
            chart
                .draw_series(LineSeries::new(pts, style))
                .map_err(err)?;
        }
        if l.points.len() == 1 {
            chart
                .draw_series(
                    l.points
                        .iter()
                        .map(|p| Circle::new(*p, 3, colour(l.colour).filled())),
                )
                .map_err(err)?;
        }
    }
    for (m, left) in c.markers.iter().zip(label_left) {
        chart
            .draw_series([
                Circle::new(m.at, 7, colour(m.colour).stroke_width(3)),
                Circle::new(m.at, 3, colour(m.colour).filled()),
            ])
            .map_err(err)?;
        let (h, dx) = if *left {
            (HPos::Right, -10)
        } else {
            (HPos::Left, 10)
        };
        let font = ("sans-serif", 12)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(h, VPos::Bottom));
        chart
            .draw_series([EmptyElement::at(m.at) + Text::new(m.label.clone(), (dx, -6), font)])
            .map_err(err)?;
    }
    Ok(())
}

/// One row of a [`BoxChart`]: a distribution by its quantiles.
#[derive(Clone, Debug)]
pub struct BoxRow {
    /// Row label.
    pub name: String,
    /// Palette index.
    pub colour: usize,
    /// P5, P25, P50, P75, P95, P99 (ms; whiskers P5–P95, box P25–P75, bar at P50, dot at
    /// P99).
    pub q: [f64; 6],
}

/// Horizontal box rows on a log x axis.
#[derive(Clone, Debug)]
pub struct BoxChart {
    /// Caption.
    pub title: String,
    /// X axis description.
    pub x_desc: String,
    /// Rows, top to bottom.
    pub rows: Vec<BoxRow>,
}

fn category_label(names: &[String], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() > 1e-6 || i < 0.0 {
        return String::new();
    }
    names.get(i as usize).cloned().unwrap_or_default()
}

/// The box chart `c` as SVG.
pub fn box_chart(c: &BoxChart) -> String {
    let n = c.rows.len().max(1);
    let x = span(c.rows.iter().flat_map(|r| r.q), true);
    // Row i is drawn at y = n − 1 − i, so the first row is on top.
    let names: Vec<String> = c.rows.iter().rev().map(|r| r.name.clone()).collect();
    let height = (80 + 34 * n as u32).max(200);
    render((SIZE.0, height), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(&c.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(110)
            .build_cartesian_2d(x.log_scale(), -0.6..(n as f64 - 0.4))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(c.x_desc.as_str())
            .x_labels(6)
            .y_labels(n)
            .label_style(("sans-serif", LABEL_PX))
            .axis_desc_style(("sans-serif", DESC_PX))
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| category_label(&names, *v))
            .disable_y_mesh()
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .bold_line_style(RGBColor(0xd0, 0xd0, 0xd0))
            .draw()
            .map_err(err)?;
        for (i, r) in c.rows.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            let col = colour(r.colour);
            let [p5, p25, p50, p75, p95, p99] = r.q;
            chart
                .draw_series([
                    PathElement::new(vec![(p5, y), (p95, y)], col.stroke_width(2)),
                    PathElement::new(vec![(p5, y - 0.15), (p5, y + 0.15)], col.stroke_width(2)),
                    PathElement::new(vec![(p95, y - 0.15), (p95, y + 0.15)], col.stroke_width(2)),
                ])
                .map_err(err)?;
            chart
                .draw_series([Rectangle::new(
                    [(p25, y - 0.3), (p75.max(p25 * 1.02), y + 0.3)],
                    col.mix(0.55).filled(),
                )])
                .map_err(err)?;
            chart
                .draw_series([PathElement::new(
                    vec![(p50, y - 0.34), (p50, y + 0.34)],
                    BLACK.stroke_width(2),
                )])
                .map_err(err)?;
            chart
                .draw_series([Circle::new((p99, y), 3, col.filled())])
                .map_err(err)?;
        }
        Ok(())
    })
}

/// Grouped bars: one group per category, one bar per series in it.
#[derive(Clone, Debug)]
pub struct BarChart {
    /// Caption.
    pub title: String,
    /// Y axis description.
    pub y_desc: String,
    /// Category labels (x axis).
    pub categories: Vec<String>,
    /// Series: (legend name, palette index, one value per category; `None` leaves a gap).
    pub series: Vec<(String, usize, Vec<Option<f64>>)>,
}

/// The bar chart `c` as SVG.
pub fn bar_chart(c: &BarChart) -> String {
    let n = c.categories.len().max(1);
    let k = c.series.len().max(1);
    let top = c
        .series
        .iter()
        .flat_map(|s| s.2.iter().flatten().copied())
        .fold(0.0_f64, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    render(SIZE, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(&c.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(58)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .y_desc(c.y_desc.as_str())
            .x_labels(n)
            .label_style(("sans-serif", LABEL_PX))
            .axis_desc_style(("sans-serif", DESC_PX))
            .x_label_formatter(&|v| category_label(&c.categories, *v))
            .y_label_formatter(&|v| tick(*v))
            .disable_x_mesh()
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .bold_line_style(RGBColor(0xd0, 0xd0, 0xd0))
            .draw()
            .map_err(err)?;
        let width = 0.8 / k as f64;
        for (j, (_, col, values)) in c.series.iter().enumerate() {
            let bars = values.iter().enumerate().filter_map(|(i, v)| {
                let v = (*v)?;
                let x0 = i as f64 - 0.4 + j as f64 * width;
                Some(Rectangle::new(
                    [(x0 + width * 0.08, 0.0), (x0 + width * 0.92, v)],
                    colour(*col).filled(),
                ))
            });
            chart.draw_series(bars).map_err(err)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_inline_svg_with_data_marks_and_no_url() {
        let line = xy_chart(&XyChart {
            size: SIZE,
            title: "CDF <b>".into(),
            x_desc: "ms".into(),
            y_desc: "fraction".into(),
            x_log: true,
            y_log: false,
            y_range: Some(0.0..1.0),
            lines: vec![Line {
                name: "a".into(),
                colour: 0,
                dashed: false,
                points: vec![(1.0, 0.1), (10.0, 0.5), (250.0, 1.0)],
            }],
            markers: vec![Marker {
                colour: 1,
                at: (10.0, 0.5),
                label: "knee".into(),
            }],
        });
        assert!(line.starts_with("<svg"), "{line}");
        assert!(!line.contains("http"), "{line}");
        assert!(line.contains("CDF &lt;b&gt;"));
        assert!(line.contains(&format!("stroke=\"{}\"", colour_hex(0))));
        let boxes = box_chart(&BoxChart {
            title: "ITL".into(),
            x_desc: "ms".into(),
            rows: vec![BoxRow {
                name: "p".into(),
                colour: 2,
                q: [1.0, 2.0, 3.0, 4.0, 5.0, 9.0],
            }],
        });
        assert!(
            boxes.contains(&format!("fill=\"{}\"", colour_hex(2))),
            "{boxes}"
        );
        let bars = bar_chart(&BarChart {
            title: "bars".into(),
            y_desc: "ms".into(),
            categories: vec!["x".into(), "y".into()],
            series: vec![("s".into(), 3, vec![Some(2.0), None])],
        });
        assert_eq!(
            bars.matches(&format!("fill=\"{}\"", colour_hex(3))).count(),
            1
        );
        assert_eq!(tick(1500.0), "1500");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.05), "0.05");
    }
}
