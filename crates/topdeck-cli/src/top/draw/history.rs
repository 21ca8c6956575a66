// SPDX-License-Identifier: Apache-2.0
//! The sparkline panel: the history of the selected metric (a counter's
//! rate, a histogram's p99, a gauge's value), or of the selected container's
//! run-queue p99 while the containers pane has the focus.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::widgets::{Paragraph, Sparkline, Widget};

use super::{fit, panel};
use crate::render;
use crate::top::app::{App, Pane};
use crate::top::harvest::{History, Reading};

/// Resolution of the bars: readings are scaled to 0..=SCALE of the window's largest.
const SCALE: f64 = 1000.0;

/// Draws the sparkline panel into `area`.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let Some((what, history, unit)) = subject(app) else {
        Paragraph::new("select a metric to see its history")
            .block(panel(" History ".into(), false))
            .render(area, buf);
        return;
    };
    let width = area.width.saturating_sub(2) as usize;
    let tail = history.last(width);
    let max = tail
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let last = tail.last().copied().unwrap_or(0.0);
    let show = |v: f64| match unit {
        Plot::Rate(u) => render::rate(v, u),
        Plot::Value(u) => render::value(v, u),
    };
    let stats = format!(" now {}, max {} ", show(last), show(max));
    let title_w = width.saturating_sub(stats.chars().count() + 3);
    let title = format!(" {}{stats}", fit(&what, title_w));
    let data: Vec<u64> = tail
        .iter()
        .map(|&v| {
            if max > 0.0 && v.is_finite() && v > 0.0 {
                (v / max * SCALE).round() as u64
            } else {
                0
            }
        })
        .collect();
    Sparkline::default()
        .block(panel(title, false))
        .data(&data)
        .max(SCALE as u64)
        .style(Style::new().fg(Color::Green))
        .render(area, buf);
}

/// How a plotted number reads: per second, or as a value, in a unit.
enum Plot<'a> {
    Rate(&'a str),
    Value(&'a str),
}

/// What the panel plots: a name, the readings and how they read.
fn subject(app: &App) -> Option<(String, &History, Plot<'_>)> {
    if app.pane() == Pane::Containers {
        let c = app.containers().into_iter().nth(app.container_index()?)?;
        return Some((
            format!("run-queue p99 of {}", c.container),
            &c.runq.as_ref()?.history,
            Plot::Value("seconds"),
        ));
    }
    let s = app.selected_metric()?;
    let (what, plot) = match s.reading {
        Reading::Counter { .. } | Reading::CounterF64 { .. } => {
            ("rate", Plot::Rate(s.meta.unit.as_str()))
        }
        Reading::Gauge { .. } => ("value", Plot::Value(s.meta.unit.as_str())),
        Reading::Histogram { .. } | Reading::Buckets { .. } => {
            ("p99", Plot::Value(s.meta.unit.as_str()))
        }
        Reading::Summary { .. } => ("mean", Plot::Value(s.meta.unit.as_str())),
    };
    Some((format!("{what} of {}", s.id()), &s.history, plot))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::top::draw::lines;
    use crate::top::harvest::tests::{census, counter, registry};
    use crate::top::harvest::{Harvest, History};
    use crate::top::key::Key;

    #[test]
    fn the_selected_counter_is_plotted_as_a_rate() {
        let mut c = counter("jobs_total", 100.0);
        c.history = History::of(&[0.0, 50.0, 100.0]);
        let mut app = App::new(Duration::from_secs(1));
        app.update(census(Harvest {
            registries: vec![registry(1, "svc", vec![c])],
            ..Harvest::default()
        }));
        app.key(Key::Tab);
        let mut buf = Buffer::empty(Rect::new(0, 0, 60, 4));
        render(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert!(l[0].contains("rate of jobs_total"), "{l:#?}");
        assert!(l[0].contains("now 100.0/s, max 100.0/s"), "{l:#?}");
        // Three bars: empty, half, full (two rows of bars: the bottom row shows all but the first).
        assert!(l[2].starts_with("│ █") || l[2].starts_with("│ ▄"), "{l:#?}");
        assert!(l[2].contains("██"), "{l:#?}");
    }
}
