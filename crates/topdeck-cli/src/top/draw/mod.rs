// SPDX-License-Identifier: Apache-2.0
//! Drawing `topdeck top`: one frame from `&App`, nothing else. This file
//! lays the screen out (a pure function of the frame size and the state,
//! which the main loop also uses to tell the App how many rows each list
//! shows) and holds what the widgets share; each panel has its own file.
//!
//! The layout is made for 80×24 over SSH: every panel stacks vertically at
//! full width, so no column is cut by a neighbour.

mod footer;
mod history;
mod metrics;
mod registries;
mod scheduler;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, BorderType};
use ratatui::Frame;

use super::app::{App, Pane};

/// Rows above a list's first item inside its panel: the two borders are
/// outside, the column header is inside.
const LIST_CHROME: u16 = 3;
/// Height of the sparkline panel: borders and two rows of bars.
const HISTORY_HEIGHT: u16 = 4;
/// Most container rows the scheduler panel takes before it scrolls.
const SCHEDULER_ROWS: usize = 4;
/// Fewest rows the metric table keeps when the registry list is long.
const METRICS_MIN: u16 = 5;
/// Width of the inline trend column: the last few readings as bars.
pub const TREND_WIDTH: usize = 12;

/// Where each panel goes in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    /// Title line.
    pub header: Rect,
    /// Registry list.
    pub registries: Rect,
    /// Metric table of the selected registry.
    pub metrics: Rect,
    /// Sparkline of the selected metric.
    pub history: Rect,
    /// Scheduler panel, when the agent is there.
    pub scheduler: Option<Rect>,
    /// Key hints, or the filter being typed.
    pub footer: Rect,
}

/// Lays out a frame of size `area` for `app`.
pub fn layout(area: Rect, app: &App) -> Areas {
    let sched = app.harvest().scheduler.is_some();
    // The title line, and the host's line under it.
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    let sched_h = app.harvest().scheduler.as_ref().map_or(0, |s| {
        // Borders, verdict lines, a header, and the containers up to a few.
        let rows = s.containers.len().clamp(1, SCHEDULER_ROWS);
        (2 + scheduler::verdict_lines(Some(s)) + 1 + rows) as u16
    });
    let lists = body.height.saturating_sub(HISTORY_HEIGHT + sched_h);
    // The registry list takes what it needs, up to what leaves the metric
    // table its minimum; with plenty of room, at most half.
    let wanted = (app.registries().len().max(1) as u16).saturating_add(LIST_CHROME);
    let reg_h = wanted
        .min(lists.saturating_sub(METRICS_MIN).max(LIST_CHROME + 1))
        .min((lists / 2).max(LIST_CHROME + 2));
    let [registries, metrics, history, scheduler] = Layout::vertical([
        Constraint::Length(reg_h),
        Constraint::Min(0),
        Constraint::Length(HISTORY_HEIGHT),
        Constraint::Length(sched_h),
    ])
    .areas(body);
    Areas {
        header,
        registries,
        metrics,
        history,
        scheduler: sched.then_some(scheduler),
        footer,
    }
}

/// Rows of items each list shows in a frame of size `area`: registries,
/// metrics, containers (what [`App::fit`] takes).
pub fn viewports(area: Rect, app: &App) -> (usize, usize, usize) {
    let a = layout(area, app);
    let rows = |r: Rect| r.height.saturating_sub(LIST_CHROME) as usize;
    (
        rows(a.registries),
        rows(a.metrics),
        a.scheduler.map_or(0, |s| scheduler::rows(s, app)),
    )
}

/// Draws the whole frame.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let a = layout(area, app);
    let buf = frame.buffer_mut();
    footer::header(app, a.header, buf);
    registries::render(app, a.registries, buf);
    metrics::render(app, a.metrics, buf);
    history::render(app, a.history, buf);
    if let Some(s) = a.scheduler {
        scheduler::render(app, s, buf);
    }
    footer::footer(app, a.footer, buf);
    if app.mode() == super::app::Mode::Help {
        footer::help(area, buf);
    }
}

/// A panel's frame: its title, highlighted while it has the focus.
fn panel(title: String, focused: bool) -> Block<'static> {
    let style = if focused {
        Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
    } else {
        Style::new()
    };
    Block::bordered()
        .border_type(BorderType::Plain)
        .border_style(style)
        .title(Line::styled(title, style))
}

/// Whether `pane` has the focus.
fn focused(app: &App, pane: Pane) -> bool {
    app.pane() == pane
}

/// Style of a selected row: reversed in the focused pane, bold elsewhere.
fn selected_style(focused: bool) -> Style {
    if focused {
        Style::new().add_modifier(Modifier::REVERSED)
    } else {
        Style::new().add_modifier(Modifier::BOLD)
    }
}

/// The last `width` readings as bars `▁`..`█`, scaled to the largest of
/// them, so a flat series reads flat and a burst stands out.
pub fn trend(history: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let tail = &history[history.len().saturating_sub(width)..];
    let max = tail
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    tail.iter()
        .map(|&v| {
            if max <= 0.0 || !v.is_finite() || v <= 0.0 {
                BARS[0]
            } else {
                let level = (v / max * 7.0).round() as usize;
                BARS[level.min(7)]
            }
        })
        .collect()
}

/// `s` cut to `width` characters, with `…` when cut.
fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A buffer's rows as text (test and `--once` output).
pub fn lines(buf: &Buffer) -> Vec<String> {
    let width = buf.area.width as usize;
    buf.content
        .chunks(width.max(1))
        .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
        .collect()
}

/// The frame of `app` at `width`×`height`, as text.
pub fn to_text(app: &App, width: u16, height: u16) -> Vec<String> {
    let mut app = app.clone();
    let area = Rect::new(0, 0, width, height);
    let (r, m, c) = viewports(area, &app);
    app.fit(r, m, c);
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height))
        .expect("a test backend cannot fail");
    term.draw(|f| draw(f, &app))
        .expect("a test backend cannot fail");
    lines(term.backend().buffer())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::top::harvest::tests::sample;
    use crate::top::harvest::{ContainerRunq, History, SchedulerHarvest, State, Verdict};
    use crate::top::key::Key;
    use topdeck_sched::verdict::VerdictKind;

    fn app_with(h: crate::top::harvest::Harvest) -> App {
        let mut a = App::new(Duration::from_secs(1));
        a.update(h);
        a
    }

    fn with_agent() -> App {
        let mut h = sample();
        h.scheduler = Some(SchedulerHarvest {
            pid: Some(99),
            state: Some(State::Alive),
            rule: None,
            containers: vec![ContainerRunq {
                container: "web".into(),
                cgroup: "/sys/fs/cgroup/web".into(),
                rate: Some(120.0),
                p50: Some(0.0002),
                p99: Some(0.012),
                history: History::of(&[0.001, 0.012]),
            }],
            verdicts: vec![Verdict {
                kind: VerdictKind::NoisyNeighbour,
                victim: "/sys/fs/cgroup/web".into(),
                p99_before: Some(0.0004),
                p99_after: Some(0.012),
                culprits: vec![("/sys/fs/cgroup/batch".into(), 0.8)],
                other_share: None,
                throttled: None,
            }],
        });
        app_with(h)
    }

    fn screen(app: &App) -> String {
        to_text(app, 80, 24).join("\n")
    }

    #[test]
    fn trends_scale_to_their_largest_reading() {
        assert_eq!(trend(&[0.0, 1.0, 2.0], 12), "▁▅█");
        assert_eq!(trend(&[5.0; 3], 2), "██");
        assert_eq!(trend(&[0.0, 0.0], 12), "▁▁");
        assert_eq!(trend(&[], 12), "");
    }

    #[test]
    fn the_layout_fills_80x24_without_overlap() {
        for app in [app_with(sample()), with_agent()] {
            let area = Rect::new(0, 0, 80, 24);
            let a = layout(area, &app);
            let mut panels = vec![a.header, a.registries, a.metrics, a.history];
            panels.extend(a.scheduler);
            panels.push(a.footer);
            let total: u16 = panels.iter().map(|r| r.height).sum();
            assert_eq!(total, 24, "{a:?}");
            for w in panels.windows(2) {
                assert_eq!(w[0].bottom(), w[1].y, "{a:?}");
            }
            let (r, m, _) = viewports(area, &app);
            assert!(r >= 1 && m >= 2, "{r} {m} {a:?}");
        }
    }

    #[test]
    fn an_80x24_screen_shows_every_panel() {
        let s = screen(&with_agent());
        for want in [
            "topdeck top",
            "Registries",
            "bravo",
            "requests_total",
            "500.0/s",
            "Scheduler",
            "! /sys/fs/cgroup/web: noisy neighbour /sys/fs/cgroup/batch (80%",
            "web",
            "12.0ms",
            "q quit",
        ] {
            assert!(s.contains(want), "{want:?} missing from\n{s}");
        }
        assert_eq!(s.lines().count(), 24);
        assert!(s.lines().all(|l| l.chars().count() == 80));
    }

    #[test]
    fn a_spoofed_agent_is_said_in_the_footer() {
        let mut h = sample();
        h.spoofed_agents = 1;
        let s = screen(&app_with(h));
        let footer = s.lines().last().unwrap();
        assert!(footer.starts_with("1 fake topdeck-agent ignored"), "{s}");
        assert!(!screen(&app_with(sample())).contains("fake"));
    }

    #[test]
    fn the_filter_is_shown_while_typed() {
        let mut app = app_with(sample());
        app.key(Key::Char('/'));
        for c in "alp".chars() {
            app.key(Key::Char(c));
        }
        let s = screen(&app);
        assert!(s.contains("filter: alp"), "{s}");
        assert!(s.contains("alpha") && !s.contains("bravo"), "{s}");
    }

    #[test]
    fn help_lists_the_keys() {
        let mut app = app_with(sample());
        app.key(Key::Char('?'));
        let s = screen(&app);
        for want in ["Tab", "filter", "sort", "quit"] {
            assert!(s.contains(want), "{want:?} missing from\n{s}");
        }
    }

    #[test]
    fn any_terminal_size_draws_without_panicking() {
        let mut help = with_agent();
        help.key(Key::Char('?'));
        for app in [app_with(sample()), with_agent(), help] {
            for w in [1, 2, 10, 39, 80, 200] {
                for h in [1, 2, 3, 5, 8, 12, 24, 60] {
                    let lines = to_text(&app, w, h);
                    assert_eq!(lines.len(), h as usize);
                }
            }
        }
    }

    #[test]
    fn an_empty_namespace_says_so() {
        let s = screen(&app_with(crate::top::harvest::Harvest::default()));
        assert!(s.contains("no registries"), "{s}");
        let s = screen(&App::new(Duration::from_secs(1)));
        assert!(s.contains("reading"), "{s}");
    }
}
