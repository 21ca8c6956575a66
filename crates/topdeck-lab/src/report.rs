// SPDX-License-Identifier: Apache-2.0
//! The HTML report: one page, one section per experiment whose result is
//! saved in the output directory, each with its text tables and SVG charts
//! drawn by plotters (SVG backend only: text stays `<text>` elements, so no
//! font library is involved). Missing experiments are named as not run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::de::DeserializeOwned;

use crate::experiments::contend::{self, ContendResult};
use crate::experiments::idle::{self, IdleResult};
use crate::experiments::observer::{self, ObserverResult};
use crate::experiments::selftest::{self, SelftestResult};
use crate::hist::DECADE_LABELS;
use crate::{Error, ErrorKind, Result};

/// The experiments, in report order, with the file each saves.
pub const EXPERIMENTS: [&str; 4] = ["observer", "contend", "selftest", "idle"];

/// The page written, and the saved results it could not read (each
/// named on the page and here, so a run that succeeded is not failed by an
/// old or damaged file beside it).
#[derive(Debug)]
pub struct Written {
    /// `<dir>/report.html`.
    pub path: PathBuf,
    /// Why each unreadable result was left out, with what to do.
    pub unreadable: Vec<Error>,
}

/// What one experiment's section holds.
enum Section {
    Drawn(String),
    NotRun,
    Unreadable(Error),
}

fn section<T: DeserializeOwned>(
    dir: &Path,
    name: &str,
    draw: impl Fn(&T) -> Result<String>,
) -> Result<Section> {
    Ok(match load::<T>(dir, name) {
        Ok(Some(r)) => Section::Drawn(draw(&r)?),
        Ok(None) => Section::NotRun,
        Err(e) => Section::Unreadable(e),
    })
}

/// Renders `<dir>/report.html` from the results saved in `dir`.
pub fn write(dir: &Path) -> Result<Written> {
    let mut html = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>topdeck interference lab</title>\n\
         <style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}pre{background:#f6f6f6;padding:1em;overflow-x:auto}\
         svg{margin:0.5em}</style></head><body>\n<h1>topdeck interference lab</h1>\n",
    );
    let mut unreadable = Vec::new();
    for name in EXPERIMENTS {
        let _ = writeln!(html, "<h2 id=\"{name}\">{name}</h2>");
        let section = match name {
            "observer" => section(dir, name, observer_section)?,
            "contend" => section(dir, name, contend_section)?,
            "selftest" => section(dir, name, selftest_section)?,
            _ => section(dir, name, idle_section)?,
        };
        match section {
            Section::Drawn(s) => html.push_str(&s),
            Section::NotRun => {
                let _ = writeln!(
                    html,
                    "<p>Not run yet: <code>topdeck-lab {name} --out {}</code></p>",
                    escape(&dir.display().to_string())
                );
            }
            Section::Unreadable(e) => {
                let _ = writeln!(html, "<p>Left out: {}</p>", escape(&e.to_string()));
                unreadable.push(e);
            }
        }
    }
    html.push_str("</body></html>\n");
    let path = dir.join("report.html");
    std::fs::write(&path, html).map_err(|e| Error::io(format!("write {}", path.display()), e))?;
    Ok(Written { path, unreadable })
}

fn load<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<Option<T>> {
    let path = dir.join(format!("{name}.json"));
    match std::fs::read_to_string(&path) {
        Ok(s) => serde_json::from_str(&s).map(Some).map_err(|e| {
            Error::new(
                ErrorKind::Report,
                format!(
                    "{}: not a saved {name} result ({e}); rerun `topdeck-lab {name}`",
                    path.display()
                ),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("read {}", path.display()), e)),
    }
}

fn pre(text: &str, machine: &str, unix_time: u64) -> String {
    format!(
        "<p>{} — recorded at Unix time {unix_time}</p>\n<pre>{}</pre>\n",
        escape(machine),
        escape(text)
    )
}

fn observer_section(r: &ObserverResult) -> Result<String> {
    let mut s = pre(&observer::table(r), &r.machine, r.unix_time);
    let labels: Vec<String> = DECADE_LABELS.iter().map(|l| l.to_string()).collect();
    for (i, name) in r.phases[0]
        .series
        .iter()
        .map(|x| x.name.clone())
        .enumerate()
    {
        let lines: Vec<(String, Vec<f64>)> = r
            .phases
            .iter()
            .map(|p| {
                let counts = p.series[i]
                    .decades
                    .iter()
                    .map(|&c| c.max(1) as f64)
                    .collect();
                (p.label.clone(), counts)
            })
            .collect();
        s.push_str(&chart(
            &format!("{name}: samples per latency decade (log)"),
            &labels,
            &lines,
            true,
        )?);
        let qs: Vec<String> = r.phases[0].series[i]
            .percentiles
            .iter()
            .map(|(q, _)| format!("p{}", q * 100.0))
            .chain(["max".to_string()])
            .collect();
        let lines: Vec<(String, Vec<f64>)> = r
            .phases
            .iter()
            .map(|p| {
                let x = &p.series[i];
                let v = x
                    .percentiles
                    .iter()
                    .map(|&(_, v)| v.max(1) as f64)
                    .chain([x.max_ns.max(1) as f64])
                    .collect();
                (p.label.clone(), v)
            })
            .collect();
        s.push_str(&chart(
            &format!("{name}: latency ns (log)"),
            &qs,
            &lines,
            true,
        )?);
    }
    Ok(s)
}

fn contend_section(r: &ContendResult) -> Result<String> {
    let mut s = pre(&contend::table(r), &r.machine, r.unix_time);
    let labels: Vec<String> = r.rows.iter().map(|x| x.concurrency.to_string()).collect();
    let col = |f: fn(&contend::Row) -> f64| r.rows.iter().map(f).collect::<Vec<f64>>();
    s.push_str(&chart(
        "seconds per instance by concurrency",
        &labels,
        &[
            ("wall".into(), col(|x| x.wall_s)),
            ("user".into(), col(|x| x.user_s)),
            ("sys".into(), col(|x| x.sys_s)),
        ],
        false,
    )?);
    Ok(s)
}

fn selftest_section(r: &SelftestResult) -> Result<String> {
    let mut s = pre(&selftest::table(r), &r.machine, r.unix_time);
    let mut setups = Vec::new();
    for row in &r.rows {
        if !setups.contains(&(row.exporter, row.pin)) {
            setups.push((row.exporter, row.pin));
        }
    }
    for (e, pin) in setups {
        let rows: Vec<_> = r
            .rows
            .iter()
            .filter(|x| x.exporter == e && x.pin == pin)
            .collect();
        let mut counts: Vec<usize> = rows.iter().map(|x| x.readers).collect();
        counts.dedup();
        let mut rates: Vec<Option<u32>> = Vec::new();
        for x in rows.iter().filter(|x| x.readers > 0) {
            if !rates.contains(&x.rate_hz) {
                rates.push(x.rate_hz);
            }
        }
        let labels: Vec<String> = counts.iter().map(|c| format!("{c} readers")).collect();
        let metrics: [(&str, RowMetric); 2] = [
            ("wall throughput", |x| x.relative),
            ("running speed", |x| x.relative_running),
        ];
        for (what, metric) in metrics {
            let lines: Vec<(String, Vec<f64>)> = rates
                .iter()
                .map(|&rate| {
                    let v = counts
                        .iter()
                        .map(|&c| {
                            rows.iter()
                                .find(|x| x.readers == c && (c == 0 || x.rate_hz == rate))
                                .map_or(0.0, |x| metric(x) * 100.0)
                        })
                        .collect();
                    (rate.map_or("flat out".into(), |hz| format!("{hz} Hz")), v)
                })
                .collect();
            s.push_str(&chart(
                &format!(
                    "{}, {}: writer {what}, % of no readers",
                    e.name(),
                    pin.name()
                ),
                &labels,
                &lines,
                false,
            )?);
        }
    }
    Ok(s)
}

/// One number of a selftest row, for a chart.
type RowMetric = fn(&selftest::Row) -> f64;

fn idle_section(r: &IdleResult) -> Result<String> {
    let mut s = pre(&idle::table(r), &r.machine, r.unix_time);
    let labels: Vec<String> = r.variants.iter().map(|v| v.name.clone()).collect();
    let per_s = |f: fn(&idle::Variant) -> f64| {
        r.variants
            .iter()
            .map(|v| (f(v) / r.duration_s).max(0.1))
            .collect::<Vec<f64>>()
    };
    s.push_str(&chart(
        "idle cost per second (log; 0 drawn as 0.1)",
        &labels,
        &[
            ("wake-ups/s".into(), per_s(|v| v.switches.voluntary as f64)),
            ("CPU µs/s".into(), per_s(|v| v.cpu.total() * 1e6)),
        ],
        true,
    )?);
    Ok(s)
}

const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];

/// A line chart over categories: one line (with points) per series.
fn chart(
    title: &str,
    labels: &[String],
    lines: &[(String, Vec<f64>)],
    log_y: bool,
) -> Result<String> {
    let mut svg = String::new();
    let values = lines.iter().flat_map(|l| l.1.iter().copied());
    let hi = values.clone().fold(f64::MIN_POSITIVE, f64::max) * 1.3;
    let lo = values.fold(f64::INFINITY, f64::min).min(hi / 10.0);
    let n = labels.len().max(1);
    let err =
        |e: &dyn std::fmt::Display| Error::new(ErrorKind::Report, format!("chart {title:?}: {e}"));
    {
        let root = SVGBackend::with_string(&mut svg, (640, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let x_range = -0.5f64..(n as f64 - 0.5);
        let fmt_x = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70);
        macro_rules! draw {
            ($chart:expr) => {{
                let mut c = $chart;
                c.configure_mesh()
                    .x_labels(n * 2 + 1)
                    .x_label_formatter(&fmt_x)
                    .disable_x_mesh()
                    .draw()
                    .map_err(|e| err(&e))?;
                for (k, (name, ys)) in lines.iter().enumerate() {
                    let color = COLORS[k % COLORS.len()];
                    let pts: Vec<(f64, f64)> =
                        ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect();
                    c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                        .map_err(|e| err(&e))?
                        .label(name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                        });
                    c.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                        .map_err(|e| err(&e))?;
                }
                c.configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| err(&e))?;
            }};
        }
        if log_y {
            draw!(builder
                .build_cartesian_2d(x_range, (lo.max(1e-3) / 2.0..hi).log_scale())
                .map_err(|e| err(&e))?);
        } else {
            draw!(builder
                .build_cartesian_2d(x_range, 0f64.min(lo)..hi)
                .map_err(|e| err(&e))?);
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg + "\n")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
