// SPDX-License-Identifier: Apache-2.0
//! The metric table of the selected process (of each of its sources): counters as rates, gauges as
//! values, histograms as observation rate and p50/p99 of the interval,
//! summaries as observation rate (their trend plots the mean), each with a
//! trend of its last readings; a timer that measured its requests' CPU
//! wait also shows the share of its latency that was CPU wait.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Widget, Wrap};

use super::{fit, focused, panel, selected_style, trend, TREND_WIDTH};
use crate::render;
use crate::top::app::{App, Pane};
use crate::top::harvest::{Reading, Series, State};

/// Width of the rate-or-value column.
const VALUE_W: u16 = 11;
/// Width of each quantile column.
const QUANTILE_W: u16 = 8;
/// Width of the CPU-wait share column.
const CPU_W: u16 = 4;

/// Draws the metric table into `area`.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let focus = focused(app, Pane::Metrics);
    let Some(process) = app.selected_process() else {
        Paragraph::new("")
            .block(panel(" Metrics ".into(), focus))
            .render(area, buf);
        return;
    };
    let sources = app.selected_sources();
    let pid = process.pid.map_or("-".to_owned(), |p| p.to_string());
    let state = match process.state {
        State::Alive => "",
        State::Dead => ", dead: values frozen",
        State::Broken => ", broken",
    };
    let named: Vec<String> = sources
        .iter()
        .map(|r| match r.source {
            Some("topdeck") | None => format!("registry {}", r.registry),
            Some(kind) => kind.to_owned(),
        })
        .collect();
    let mut title = format!(" Metrics: {} (pid {pid}", process.command);
    if !named.is_empty() {
        title += &format!(", {}", named.join(" + "));
    }
    title += &format!("{state}) ");
    // A JVM's collection at a glance, before its 150 raw counters.
    if let Some(jvm) = sources.iter().find_map(|r| r.jvm.as_ref()) {
        title += &format!("· {jvm} ");
    }
    let block = panel(title, focus);
    if let Some(e) = sources.iter().find_map(|r| r.error.as_ref()) {
        Paragraph::new(format!("cannot read this registry: {e}"))
            .wrap(Wrap { trim: true })
            .block(block)
            .render(area, buf);
        return;
    }
    let list = app.metrics();
    if list.is_empty() {
        let text = if sources.is_empty() {
            "this process publishes no metrics; its CPU and threads are in the list above"
        } else if sources.iter().all(|r| r.series.is_empty()) {
            "no metrics registered yet"
        } else {
            "no metric matches the filter"
        };
        Paragraph::new(text).block(block).render(area, buf);
        return;
    }
    // The CPU-wait column only where a timer measured its requests' wait.
    let cpu = list.iter().any(|(_, s)| {
        matches!(
            s.reading,
            Reading::Histogram {
                cpu_wait: Some(_),
                ..
            }
        )
    });
    let cpu_w = if cpu { CPU_W + 1 } else { 0 };
    let fixed = VALUE_W + 2 * QUANTILE_W + cpu_w + TREND_WIDTH as u16 + 4;
    let name_w = area.width.saturating_sub(2 + fixed) as usize;
    let at = app.metric_index();
    let rows = list
        .iter()
        .enumerate()
        .skip(app.scroll(Pane::Metrics))
        // Rows below the panel are never drawn: not made either.
        .take(area.height as usize)
        .map(|(i, (_, s))| {
            let row = row(s, name_w, cpu);
            if Some(i) == at {
                row.style(selected_style(focus))
            } else {
                row
            }
        });
    let mut header = vec!["METRIC", "RATE/VALUE", "P50", "P99"];
    let mut widths = vec![
        Constraint::Fill(1),
        Constraint::Length(VALUE_W),
        Constraint::Length(QUANTILE_W),
        Constraint::Length(QUANTILE_W),
    ];
    if cpu {
        header.push("CPU");
        widths.push(Constraint::Length(CPU_W));
    }
    header.push("TREND");
    widths.push(Constraint::Length(TREND_WIDTH as u16));
    let header = Row::new(header).style(Style::new().add_modifier(Modifier::BOLD));
    Table::new(rows, widths)
        .header(header)
        .block(block)
        .render(area, buf);
}

/// One metric's row: name, rate or value, p50, p99, the share of its
/// latency that was CPU wait (with `cpu`), trend.
fn row(s: &Series, name_w: usize, cpu: bool) -> Row<'static> {
    let q = |v: Option<f64>| v.map_or("-".to_owned(), |v| render::value(v, &s.meta.unit));
    let (value, p50, p99) = match &s.reading {
        Reading::Counter { rate: Some(r), .. } => (render::rate(*r, &s.meta.unit), None, None),
        // First read, or a reset: the total is what there is to show.
        Reading::Counter { total, rate: None } => (total.to_string(), None, None),
        Reading::Gauge { value } => (render::value(*value, &s.meta.unit), None, None),
        Reading::CounterF64 { rate: Some(r), .. } => (render::rate(*r, &s.meta.unit), None, None),
        Reading::CounterF64 { total, rate: None } => {
            (render::value(*total, &s.meta.unit), None, None)
        }
        // A summary has no quantiles: its mean is what the trend plots.
        Reading::Summary { rate, .. } => (
            rate.map_or("-".to_owned(), |r| render::rate(r, "")),
            None,
            None,
        ),
        Reading::Histogram { rate, p50, p99, .. } | Reading::Buckets { rate, p50, p99, .. } => (
            rate.map_or("-".to_owned(), |r| render::rate(r, "")),
            Some(q(*p50)),
            Some(q(*p99)),
        ),
    };
    let mut cells = vec![
        Cell::new(fit(&s.id(), name_w)),
        Cell::new(value),
        Cell::new(p50.unwrap_or_default()),
        Cell::new(p99.unwrap_or_default()),
    ];
    if cpu {
        cells.push(Cell::new(match s.reading {
            Reading::Histogram {
                cpu_wait: Some(w), ..
            } => format!("{:.0}%", w * 100.0),
            _ => String::new(),
        }));
    }
    cells.push(Cell::new(trend(&s.history.last(TREND_WIDTH), TREND_WIDTH)));
    Row::new(cells)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::top::harvest::tests::{census, counter, registry};
    use std::sync::Arc;

    use crate::top::draw::lines;
    use crate::top::harvest::{Harvest, History, Meta};

    #[test]
    fn each_kind_reads_in_its_own_terms() {
        let hist = Series {
            meta: Arc::new(Meta {
                name: "wait_seconds".into(),
                labels: vec![("queue".into(), "a".into())],
                unit: "seconds".into(),
            }),
            reading: Reading::Histogram {
                count: 30,
                rate: Some(30.0),
                p50: Some(0.0032),
                p99: Some(0.25),
                sum: 1.5,
                cpu_wait: Some(0.78),
            },
            history: History::of(&[0.1, 0.25]),
        };
        let gauge = Series {
            meta: Arc::new(Meta {
                name: "depth".into(),
                labels: vec![],
                unit: String::new(),
            }),
            reading: Reading::Gauge { value: -3.0 },
            history: History::of(&[-3.0]),
        };
        let mut app = App::new(Duration::from_secs(1));
        app.update(census(Harvest {
            registries: vec![registry(
                7,
                "svc",
                vec![counter("jobs_total", 2000.0), hist, gauge],
            )],
            ..Harvest::default()
        }));
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 7));
        render(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert!(
            l[0].contains("Metrics: svc (pid 7, registry default)"),
            "{l:#?}"
        );
        let find = |s: &str| l.iter().find(|x| x.contains(s)).unwrap().clone();
        assert!(find("jobs_total").contains("2.0k/s"), "{l:#?}");
        assert!(find("jobs_total").contains("▅█"), "{l:#?}");
        let h = find("wait_seconds{queue=\"a\"}");
        assert!(
            h.contains("30.0/s") && h.contains("3.2ms") && h.contains("250ms") && h.contains("78%"),
            "{h}"
        );
        assert!(
            l.iter().any(|x| x.contains("CPU")),
            "a timer that measured its wait has the column: {l:#?}"
        );
        assert!(find("depth").contains("-3"), "{l:#?}");
    }

    #[test]
    fn a_jvms_collection_is_summed_up_in_the_title() {
        use topdeck_sources::{Collector, JvmSummary, Space};
        let mut jvm = registry(7, "java", vec![counter("jvm_sun_rt_sync_inflations", 1.0)]);
        jvm.jvm = Some(JvmSummary {
            spaces: vec![Space {
                name: "E",
                used: 25.0,
                capacity: 100.0,
            }],
            collectors: vec![Collector {
                name: "YGC",
                count: 4.0,
                seconds: 0.5,
            }],
            gc_seconds: 0.5,
            uptime_seconds: Some(100.0),
        });
        let mut app = App::new(Duration::from_secs(1));
        app.update(census(Harvest {
            registries: vec![jvm],
            ..Harvest::default()
        }));
        let mut buf = Buffer::empty(Rect::new(0, 0, 100, 5));
        render(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert!(
            l[0].contains("· E 25% · YGC 4 · GC 0.50% of its life"),
            "{l:#?}"
        );
    }

    #[test]
    fn other_runtimes_values_read_as_their_nearest_kinds() {
        let series = |name: &str, reading| Series {
            meta: Arc::new(Meta {
                name: name.into(),
                labels: vec![],
                unit: "seconds".into(),
            }),
            reading,
            history: History::of(&[1.0]),
        };
        let mut app = App::new(Duration::from_secs(1));
        app.update(census(Harvest {
            registries: vec![registry(
                7,
                "python3",
                vec![
                    series(
                        "gc_seconds_total",
                        Reading::CounterF64 {
                            total: 3.5,
                            rate: Some(0.25),
                        },
                    ),
                    series(
                        "first_seconds_total",
                        Reading::CounterF64 {
                            total: 3.5,
                            rate: None,
                        },
                    ),
                    series(
                        "latency_seconds",
                        Reading::Buckets {
                            count: 2.5,
                            rate: Some(2.5),
                            p50: Some(0.046),
                            p99: Some(0.1),
                        },
                    ),
                    series(
                        "wait_seconds",
                        Reading::Summary {
                            count: 4.0,
                            rate: Some(4.0),
                            mean: Some(0.25),
                        },
                    ),
                ],
            )],
            ..Harvest::default()
        }));
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 8));
        render(&app, buf.area, &mut buf);
        let l = lines(&buf);
        let find = |s: &str| l.iter().find(|x| x.contains(s)).unwrap().clone();
        assert!(find("gc_seconds_total").contains("250ms/s"), "{l:#?}");
        assert!(find("first_seconds_total").contains("3.50s"), "{l:#?}");
        let h = find("latency_seconds");
        assert!(
            h.contains("2.50/s") && h.contains("46.0ms") && h.contains("100ms"),
            "{h}"
        );
        let w = find("wait_seconds");
        assert!(w.contains("4.00/s") && !w.contains("250ms"), "{w}");
    }
}
