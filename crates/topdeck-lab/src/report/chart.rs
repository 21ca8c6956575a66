// SPDX-License-Identifier: Apache-2.0
//! Bar charts over categories, as inline SVG drawn by plotters (SVG backend
//! only: text stays `<text>` elements, so no font library is involved).
//! Every chart in the report has categories on its x axis (latency decades,
//! percentiles, concurrency levels, reader counts, idle children), so bars,
//! grouped by series, not lines through them. The title and the legend are
//! HTML around the SVG, so they stay sharp and never cover a bar.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::escape;
use crate::{Error, ErrorKind, Result};

/// Series colours, in order (the first is what the report test looks for).
pub const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];

/// Pixel size of every chart's SVG (it scales with the page).
const SIZE: (u32, u32) = (560, 300);

/// One chart: a bar per category and series.
#[derive(Debug, Clone)]
pub struct Bars {
    /// What the chart shows, above it.
    pub title: String,
    /// The y axis's unit.
    pub y_desc: String,
    /// Categories, left to right.
    pub labels: Vec<String>,
    /// (name, one value per category); a value of 0 or less has no bar.
    pub series: Vec<(String, Vec<f64>)>,
    /// Logarithmic y axis, for values spanning decades.
    pub log_y: bool,
}

impl Bars {
    /// The chart as an HTML `<figure>`: title, SVG, legend.
    pub fn html(&self) -> Result<String> {
        let svg = self.svg()?;
        let mut out = format!(
            "<figure>\n<figcaption>{}</figcaption>\n{svg}\n<div class=\"legend\">",
            escape(&self.title)
        );
        for (k, (name, _)) in self.series.iter().enumerate() {
            let RGBColor(r, g, b) = COLORS[k % COLORS.len()];
            let _ = write!(
                out,
                "<span><i style=\"background:rgb({r},{g},{b})\"></i>{}</span>",
                escape(name)
            );
        }
        out.push_str("</div>\n</figure>\n");
        Ok(out)
    }

    fn svg(&self) -> Result<String> {
        let err = |e: &dyn std::fmt::Display| {
            Error::new(ErrorKind::Report, format!("chart {:?}: {e}", self.title))
        };
        let drawn = || {
            self.series
                .iter()
                .flat_map(|s| s.1.iter().copied())
                .filter(|v| *v > 0.0 && v.is_finite())
        };
        let hi = drawn().fold(0.0, f64::max);
        let lo = drawn().fold(f64::INFINITY, f64::min);
        let n = self.labels.len().max(1);
        // Bars of one category share 80% of its width.
        let width = 0.8 / self.series.len().max(1) as f64;
        let x_range = -0.5f64..(n as f64 - 0.5);
        let fmt_x = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                self.labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let fmt_y = |y: &f64| compact(*y);
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            root.fill(&WHITE).map_err(|e| err(&e))?;
            let mut builder = ChartBuilder::on(&root);
            builder
                .margin(10)
                .margin_right(16)
                .x_label_area_size(30)
                .y_label_area_size(70);
            macro_rules! draw {
                ($chart:expr, $base:expr) => {{
                    let mut c = $chart;
                    let base: f64 = $base;
                    c.configure_mesh()
                        .x_labels(n * 2 + 1)
                        .x_label_formatter(&fmt_x)
                        .y_label_formatter(&fmt_y)
                        .y_desc(self.y_desc.as_str())
                        .disable_x_mesh()
                        .light_line_style(TRANSPARENT)
                        .bold_line_style(RGBColor(214, 214, 214))
                        // plotters writes font-size at 1/1.24 of these.
                        .axis_desc_style(("sans-serif", 16))
                        .label_style(("sans-serif", 16))
                        .draw()
                        .map_err(|e| err(&e))?;
                    for (k, (_, ys)) in self.series.iter().enumerate() {
                        let color = COLORS[k % COLORS.len()];
                        let bars = ys
                            .iter()
                            .enumerate()
                            .filter(|(_, &y)| y > 0.0 && y.is_finite())
                            .map(|(i, &y)| {
                                let x0 = i as f64 - 0.4 + k as f64 * width;
                                Rectangle::new(
                                    [(x0 + width * 0.06, base), (x0 + width * 0.94, y)],
                                    color.filled(),
                                )
                            });
                        c.draw_series(bars).map_err(|e| err(&e))?;
                    }
                }};
            }
            if hi <= 0.0 {
                // Nothing to draw: the axes alone say so.
                draw!(
                    builder
                        .build_cartesian_2d(x_range, 0f64..1.0)
                        .map_err(|e| err(&e))?,
                    0.0
                );
            } else if self.log_y {
                // A decade below the smallest value, so its bar has height.
                let floor = 10f64.powf(lo.log10().ceil() - 1.0);
                let top = 10f64.powf((hi * 1.5).log10().ceil());
                draw!(
                    builder
                        .build_cartesian_2d(x_range, (floor..top).log_scale())
                        .map_err(|e| err(&e))?,
                    floor
                );
            } else {
                draw!(
                    builder
                        .build_cartesian_2d(x_range, 0f64..hi * 1.1)
                        .map_err(|e| err(&e))?,
                    0.0
                );
            }
            root.present().map_err(|e| err(&e))?;
        }
        Ok(svg)
    }
}

/// An axis value, short: `0.002`, `0.5`, `20`, `1.5k`, `10M`.
fn compact(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    // Two significant digits below 1, so small steps do not all read `0`.
    let decimals = if a > 0.0 && a < 1.0 {
        ((-a.log10()).ceil() as usize + 1).min(9)
    } else {
        2
    };
    let s = format!("{x:.decimals$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(log_y: bool, series: Vec<(String, Vec<f64>)>) -> Bars {
        Bars {
            title: "t <1us".into(),
            y_desc: "samples".into(),
            labels: vec!["a".into(), "b".into()],
            series,
            log_y,
        }
    }

    /// Filled rectangles in one colour, as plotters writes them.
    fn bars_of(svg: &str, c: RGBColor) -> usize {
        let RGBColor(r, g, b) = c;
        svg.matches(&format!("fill=\"#{r:02X}{g:02X}{b:02X}\""))
            .count()
    }

    #[test]
    fn each_positive_value_is_one_bar_in_its_series_colour() {
        let c = chart(
            true,
            vec![
                ("alone".into(), vec![3.0, 0.0]),
                ("observed".into(), vec![5.0, 4000.0]),
            ],
        );
        let html = c.html().unwrap();
        assert_eq!(bars_of(&html, COLORS[0]), 1, "a zero has no bar");
        assert_eq!(bars_of(&html, COLORS[1]), 2);
        assert!(
            html.contains("<figcaption>t &lt;1us</figcaption>"),
            "{html}"
        );
        assert!(html.contains("<i style=\"background:rgb(214,39,40)\"></i>observed"));
    }

    #[test]
    fn nothing_to_draw_is_still_a_chart() {
        let html = chart(false, vec![("x".into(), vec![0.0, 0.0])])
            .html()
            .unwrap();
        assert!(html.contains("<svg"), "{html}");
        assert_eq!(bars_of(&html, COLORS[0]), 0);
    }

    #[test]
    fn small_values_get_axis_labels_that_differ() {
        let svg = chart(false, vec![("wall".into(), vec![0.002, 0.005])])
            .svg()
            .unwrap();
        let mut labels: Vec<&str> = svg
            .split("</text>")
            .filter_map(|t| t.rsplit('>').next().map(str::trim))
            .filter(|t| t.starts_with(|c: char| c.is_ascii_digit()))
            .collect();
        let n = labels.len();
        labels.sort_unstable();
        labels.dedup();
        assert!(n >= 3 && labels.len() == n, "{labels:?} of {n}");
    }

    #[test]
    fn axis_values_are_short() {
        assert_eq!(compact(0.0), "0");
        assert_eq!(compact(0.001), "0.001");
        assert_eq!(compact(0.0005), "0.0005");
        assert_eq!(compact(0.012), "0.012");
        assert_eq!(compact(0.5), "0.5");
        assert_eq!(compact(20.0), "20");
        assert_eq!(compact(1500.0), "1.5k");
        assert_eq!(compact(10_000_000.0), "10M");
    }
}
