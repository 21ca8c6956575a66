// SPDX-License-Identifier: Apache-2.0
//! The HTML report: one self-contained page, one section per experiment
//! whose result is saved in the output directory, each with its tables (as
//! HTML tables, from the same [`Doc`](crate::table::Doc) the terminal
//! prints) and bar charts ([`chart`]). The header names the machine the
//! results were recorded on; missing experiments are named as not run.

pub mod chart;
mod page;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::experiments::contend::{self, ContendResult};
use crate::experiments::idle::{self, IdleResult};
use crate::experiments::observer::{self, ObserverResult};
use crate::experiments::selftest::{self, SelftestResult};
use crate::hist::DECADE_LABELS;
use crate::table::escape;
use crate::{Error, ErrorKind, Result};
use chart::Bars;

/// The experiments, in report order, with the file each saves.
pub const EXPERIMENTS: [&str; 4] = ["observer", "contend", "selftest", "idle"];

/// The question each experiment answers, in report order.
const QUESTIONS: [&str; 4] = [
    "How much slower does a victim operation get while a command observes the host?",
    "Do observers slow each other down?",
    "Does reading topdeck slow its writers?",
    "What does instrumentation cost a process that does nothing?",
];

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

/// One experiment's drawn section, and where and when it was recorded.
struct Drawn {
    body: String,
    machine: String,
    unix_time: u64,
}

/// What one experiment's section holds.
enum Section {
    Drawn(Drawn),
    NotRun,
    Unreadable(Error),
}

fn section<T: DeserializeOwned>(
    dir: &Path,
    name: &str,
    draw: impl Fn(&T) -> Result<Drawn>,
) -> Result<Section> {
    Ok(match load::<T>(dir, name) {
        Ok(Some(r)) => Section::Drawn(draw(&r)?),
        Ok(None) => Section::NotRun,
        Err(e) => Section::Unreadable(e),
    })
}

/// Renders `<dir>/report.html` from the results saved in `dir`.
pub fn write(dir: &Path) -> Result<Written> {
    let mut sections = Vec::new();
    for name in EXPERIMENTS {
        sections.push(match name {
            "observer" => section(dir, name, |r: &ObserverResult| {
                drawn(observer_section(r)?, &r.machine, r.unix_time)
            })?,
            "contend" => section(dir, name, |r: &ContendResult| {
                drawn(contend_section(r)?, &r.machine, r.unix_time)
            })?,
            "selftest" => section(dir, name, |r: &SelftestResult| {
                drawn(selftest_section(r)?, &r.machine, r.unix_time)
            })?,
            _ => section(dir, name, |r: &IdleResult| {
                drawn(idle_section(r)?, &r.machine, r.unix_time)
            })?,
        });
    }
    let (html, unreadable) = render(dir, sections);
    let path = dir.join("report.html");
    std::fs::write(&path, html).map_err(|e| Error::io(format!("write {}", path.display()), e))?;
    Ok(Written { path, unreadable })
}

fn drawn(body: String, machine: &str, unix_time: u64) -> Result<Drawn> {
    Ok(Drawn {
        body,
        machine: machine.to_owned(),
        unix_time,
    })
}

/// The page, and the errors of the sections left out.
fn render(dir: &Path, sections: Vec<Section>) -> (String, Vec<Error>) {
    // The machine named at the top: the one every result was recorded on,
    // or this host when nothing is saved yet; sections recorded elsewhere
    // name their own.
    let mut machines: Vec<String> = Vec::new();
    for s in &sections {
        if let Section::Drawn(d) = s {
            if !machines.contains(&d.machine) {
                machines.push(d.machine.clone());
            }
        }
    }
    let host = crate::experiments::machine();
    let top = match machines.as_slice() {
        [] => format!("this host: {}", page::machine(&host)),
        [one] => page::machine(one),
        several => format!("{} machines, named in each section", several.len()),
    };
    let mut html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>topdeck interference lab</title>\n<style>{}</style></head><body>\n\
         <header><div class=\"wrap\">\n<h1>topdeck interference lab</h1>\n\
         <p>Machine: <strong>{}</strong></p>\n<p>Report written {}</p>\n<nav>",
        page::STYLE,
        escape(&top),
        page::utc(crate::experiments::unix_now()),
    );
    for (name, s) in EXPERIMENTS.iter().zip(&sections) {
        let (class, note) = match s {
            Section::Drawn(d) => ("", page::utc(d.unix_time)),
            Section::NotRun => (" class=\"missing\"", "not run".into()),
            Section::Unreadable(_) => (" class=\"missing\"", "left out".into()),
        };
        let _ = write!(html, "<a href=\"#{name}\"{class}>{name} · {note}</a>");
    }
    html.push_str("</nav>\n</div></header>\n<main class=\"wrap\">\n");
    let mut unreadable = Vec::new();
    for ((name, question), s) in EXPERIMENTS.iter().zip(QUESTIONS).zip(sections) {
        let _ = writeln!(
            html,
            "<section>\n<h2 id=\"{name}\">{name}</h2>\n<p class=\"question\">{question}</p>"
        );
        match s {
            Section::Drawn(d) => {
                let elsewhere = if machines.len() > 1 {
                    format!(" on {}", escape(&page::machine(&d.machine)))
                } else {
                    String::new()
                };
                let _ = writeln!(
                    html,
                    "<p class=\"meta\">Recorded {}{elsewhere}</p>",
                    page::utc(d.unix_time)
                );
                html.push_str(&d.body);
            }
            Section::NotRun => {
                let _ = writeln!(
                    html,
                    "<p class=\"missing-note\">Not run yet: <code>topdeck-lab {name} --out {}</code></p>",
                    escape(&dir.display().to_string())
                );
            }
            Section::Unreadable(e) => {
                let _ = writeln!(
                    html,
                    "<p class=\"missing-note\">Left out: {}</p>",
                    escape(&e.to_string())
                );
                unreadable.push(e);
            }
        }
        html.push_str("</section>\n");
    }
    html.push_str("</main>\n</body></html>\n");
    (html, unreadable)
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

/// The charts of a section, side by side.
fn charts(charts: &[Bars]) -> Result<String> {
    let mut s = String::from("<div class=\"charts\">\n");
    for c in charts {
        s.push_str(&c.html()?);
    }
    s.push_str("</div>\n");
    Ok(s)
}

fn observer_section(r: &ObserverResult) -> Result<String> {
    let mut s = observer::doc(r).html();
    let labels: Vec<String> = DECADE_LABELS.iter().map(|l| l.to_string()).collect();
    let mut all = Vec::new();
    for (i, name) in r.phases[0]
        .series
        .iter()
        .map(|x| x.name.clone())
        .enumerate()
    {
        let per_phase = |f: &dyn Fn(&crate::hist::Summary) -> Vec<f64>| {
            r.phases
                .iter()
                .map(|p| (p.label.clone(), f(&p.series[i])))
                .collect::<Vec<_>>()
        };
        all.push(Bars {
            title: format!("{name}: samples per latency decade (log scale)"),
            y_desc: "samples".into(),
            labels: labels.clone(),
            series: per_phase(&|x| x.decades.iter().map(|&c| c as f64).collect()),
            log_y: true,
        });
        all.push(Bars {
            title: format!("{name}: latency percentiles (log scale)"),
            y_desc: "ns".into(),
            labels: r.phases[0].series[i]
                .percentiles
                .iter()
                .map(|(q, _)| format!("p{}", q * 100.0))
                .chain(["max".to_string()])
                .collect(),
            series: per_phase(&|x| {
                x.percentiles
                    .iter()
                    .map(|&(_, v)| v as f64)
                    .chain([x.max_ns as f64])
                    .collect()
            }),
            log_y: true,
        });
    }
    s.push_str(&charts(&all)?);
    Ok(s)
}

fn contend_section(r: &ContendResult) -> Result<String> {
    let mut s = contend::doc(r).html();
    let col = |f: fn(&contend::Row) -> f64| r.rows.iter().map(f).collect::<Vec<f64>>();
    s.push_str(&charts(&[Bars {
        title: "seconds per instance, by instances at once".into(),
        y_desc: "seconds".into(),
        labels: r
            .rows
            .iter()
            .map(|x| format!("{} at once", x.concurrency))
            .collect(),
        series: vec![
            ("wall".into(), col(|x| x.wall_s)),
            ("user".into(), col(|x| x.user_s)),
            ("sys".into(), col(|x| x.sys_s)),
        ],
        log_y: false,
    }])?);
    Ok(s)
}

fn selftest_section(r: &SelftestResult) -> Result<String> {
    let mut s = selftest::doc(r).html();
    let mut setups = Vec::new();
    for row in &r.rows {
        if !setups.contains(&(row.exporter, row.pin)) {
            setups.push((row.exporter, row.pin));
        }
    }
    let mut all = Vec::new();
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
            let series: Vec<(String, Vec<f64>)> = rates
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
            all.push(Bars {
                title: format!("{}, {}: writer {what}", e.name(), pin.name()),
                y_desc: "% of no readers".into(),
                labels: labels.clone(),
                series,
                log_y: false,
            });
        }
    }
    s.push_str(&charts(&all)?);
    Ok(s)
}

/// One number of a selftest row, for a chart.
type RowMetric = fn(&selftest::Row) -> f64;

fn idle_section(r: &IdleResult) -> Result<String> {
    let mut s = idle::doc(r).html();
    let per_s = |f: fn(&idle::Variant) -> f64| {
        r.variants
            .iter()
            .map(|v| f(v) / r.duration_s)
            .collect::<Vec<f64>>()
    };
    s.push_str(&charts(&[Bars {
        title: "idle cost per second (log scale; no bar: none measured)".into(),
        y_desc: "per second".into(),
        labels: r.variants.iter().map(|v| v.name.clone()).collect(),
        series: vec![
            ("wake-ups/s".into(), per_s(|v| v.switches.voluntary as f64)),
            ("CPU µs/s".into(), per_s(|v| v.cpu.total() * 1e6)),
        ],
        log_y: true,
    }])?);
    Ok(s)
}
