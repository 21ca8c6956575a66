// SPDX-License-Identifier: Apache-2.0
//! Drawing `topdeck top`: one frame from `&App`, nothing else. This file
//! lays the screen out (a pure function of the frame size and the state,
//! which the main loop also uses to tell the App how many rows each list
//! shows) and holds what the widgets share; each panel has its own file.
//!
//! The layout is made for 80×24 over SSH: every panel stacks vertically at
//! full width, so no column is cut by a neighbour, and each table drops its
//! least needed columns to fit ([`Column`]); a wider screen gets them back
//! and shares the spare width among the name columns.

mod containers;
mod footer;
mod history;
mod metrics;
mod processes;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, BorderType, Cell, Row, Table, Widget};
use ratatui::Frame;

use super::app::{App, Pane};

/// Rows above a list's first item inside its panel: the two borders are
/// outside, the column header is inside.
const LIST_CHROME: u16 = 3;
/// Height of the sparkline panel: borders and two rows of bars.
const HISTORY_HEIGHT: u16 = 4;
/// Screens shorter than this leave the sparkline out: the lists need the
/// rows more, and each row has its trend inline.
const HISTORY_FROM: u16 = 30;
/// Fewest rows the metric table keeps when the lists above are long.
const METRICS_MIN: u16 = 5;
/// Width of the inline trend column: the last few readings as bars.
pub const TREND_WIDTH: usize = 12;

/// Where each panel goes in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    /// Title line and host line.
    pub header: Rect,
    /// Containers, with the verdicts above them.
    pub containers: Rect,
    /// Processes.
    pub processes: Rect,
    /// Metric table of the selected process.
    pub metrics: Rect,
    /// Sparkline of the selected metric, on tall screens.
    pub history: Option<Rect>,
    /// Key hints, or the filter being typed.
    pub footer: Rect,
}

/// Lays out a frame of size `area` for `app`.
pub fn layout(area: Rect, app: &App) -> Areas {
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    let history_h = if area.height >= HISTORY_FROM {
        HISTORY_HEIGHT
    } else {
        0
    };
    let lists = body.height.saturating_sub(history_h);
    // The containers take what they need, up to a third of the lists (at
    // least one row); the processes then take what they need, up to what
    // leaves the metric table its minimum and at most half the rest.
    let verdicts = containers::verdict_lines(app.harvest().scheduler.as_ref()) as u16;
    let chrome = LIST_CHROME + verdicts;
    let cont_h = (app.len(Pane::Containers).max(1) as u16)
        .saturating_add(chrome)
        .min((lists / 3).max(chrome + 1));
    let rest = lists.saturating_sub(cont_h);
    let proc_h = (app.len(Pane::Processes).max(1) as u16)
        .saturating_add(LIST_CHROME)
        .min(rest.saturating_sub(METRICS_MIN).max(LIST_CHROME + 1))
        .min((rest / 2).max(LIST_CHROME + 2));
    let [containers, processes, metrics, history] = Layout::vertical([
        Constraint::Length(cont_h),
        Constraint::Length(proc_h),
        Constraint::Min(0),
        Constraint::Length(history_h),
    ])
    .areas(body);
    Areas {
        header,
        containers,
        processes,
        metrics,
        history: (history_h > 0).then_some(history),
        footer,
    }
}

/// Rows of items each list shows in a frame of size `area`: containers,
/// processes, metrics (what [`App::fit`] takes).
pub fn viewports(area: Rect, app: &App) -> (usize, usize, usize) {
    let a = layout(area, app);
    let rows = |r: Rect| r.height.saturating_sub(LIST_CHROME) as usize;
    (
        containers::rows(a.containers, app),
        rows(a.processes),
        rows(a.metrics),
    )
}

/// Draws the whole frame.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let a = layout(area, app);
    let buf = frame.buffer_mut();
    footer::header(app, a.header, buf);
    containers::render(app, a.containers, buf);
    processes::render(app, a.processes, buf);
    metrics::render(app, a.metrics, buf);
    if let Some(h) = a.history {
        history::render(app, h, buf);
    }
    footer::footer(app, a.footer, buf);
    if app.mode() == super::app::Mode::Help {
        footer::help(area, buf);
    }
}

/// A column of a table that drops columns to fit its width.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    header: &'static str,
    /// Its width; for a column that fills, its least width.
    width: u16,
    /// Columns are dropped highest rank first until the rest fit.
    rank: u8,
    /// Whether it takes a share of the width left over.
    fill: bool,
    /// Whether a long value is cut in the middle, keeping both ends:
    /// names that share a prefix (`docker:`, a deployment's pods) differ
    /// at their end.
    middle: bool,
}

impl Column {
    /// A column `width` wide.
    pub const fn new(header: &'static str, width: u16, rank: u8) -> Self {
        Self {
            header,
            width,
            rank,
            fill: false,
            middle: false,
        }
    }

    /// A column at least `width` wide that shares what is left over.
    pub const fn fill(header: &'static str, width: u16, rank: u8) -> Self {
        Self {
            header,
            width,
            rank,
            fill: true,
            middle: false,
        }
    }

    /// The same column, its long values cut in the middle.
    pub const fn middle(self) -> Self {
        Self {
            middle: true,
            ..self
        }
    }
}

/// Space between two columns.
const GAP: u16 = 1;

/// The columns of `cols` that fit in `width` (and their widths): the
/// highest ranks are dropped first; what is left over goes to the
/// columns that fill, in equal shares.
fn fitting(cols: &[Column], width: u16) -> Vec<(usize, u16)> {
    let mut kept: Vec<usize> = (0..cols.len())
        .filter(|&i| cols[i].rank < u8::MAX)
        .collect();
    let need = |kept: &[usize]| -> u16 {
        kept.iter().map(|&i| cols[i].width).sum::<u16>()
            + GAP * (kept.len().saturating_sub(1) as u16)
    };
    while kept.len() > 1 && need(&kept) > width {
        let drop = (0..kept.len())
            .max_by_key(|&k| (cols[kept[k]].rank, k))
            .unwrap_or(0);
        kept.remove(drop);
    }
    let spare = width.saturating_sub(need(&kept));
    let fills: Vec<usize> = kept.iter().copied().filter(|&i| cols[i].fill).collect();
    kept.iter()
        .map(|&i| {
            let c = &cols[i];
            let share = match fills.iter().position(|&f| f == i) {
                // The last to fill takes what an even split leaves over.
                Some(k) if k + 1 == fills.len() => spare - spare / fills.len() as u16 * k as u16,
                Some(_) => spare / fills.len() as u16,
                None => 0,
            };
            (i, c.width + share)
        })
        .collect()
}

/// Draws a table of `rows` (cells in `cols` order, and a style) into
/// `area`, with the columns that fit, each cell cut to its column.
fn table(
    cols: &[Column],
    rows: impl Iterator<Item = (Vec<String>, Style)>,
    area: Rect,
    buf: &mut Buffer,
) {
    let kept = fitting(cols, area.width);
    let rows = rows.map(|(cells, style)| {
        Row::new(kept.iter().map(|&(i, w)| {
            let text = cells.get(i).map_or("", String::as_str);
            Cell::new(match cols[i].middle {
                true => fit_middle(text, w.into()),
                false => fit(text, w.into()),
            })
        }))
        .style(style)
    });
    let header = Row::new(kept.iter().map(|&(i, _)| cols[i].header))
        .style(Style::new().add_modifier(Modifier::BOLD));
    let widths: Vec<Constraint> = kept.iter().map(|&(_, w)| Constraint::Length(w)).collect();
    Table::new(rows, widths)
        .column_spacing(GAP)
        .header(header)
        .render(area, buf);
}

/// A share or a number of CPUs as a percentage: `97%`, `185%`.
fn percent(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

/// A small number with at most two decimals, no trailing zeros: `8`, `1.5`, `0.04`.
fn short(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A title's scroll marks for `pane` showing `rows` rows: rows above and
/// below what is shown (`↑2 ↓5`), or nothing when all are shown.
fn more(app: &App, pane: Pane, rows: usize) -> String {
    let (len, top) = (app.len(pane), app.scroll(pane));
    let below = len.saturating_sub(top + rows.max(1));
    match (top, below) {
        (0, 0) => String::new(),
        (0, b) => format!(" ↓{b} more"),
        (t, 0) => format!(" ↑{t} more"),
        (t, b) => format!(" ↑{t} ↓{b} more"),
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

/// `s` cut to `width` characters in the middle, with `…` where cut: a
/// third of the room for its start, the rest for its end.
fn fit_middle(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_owned();
    }
    let room = width.saturating_sub(1);
    let head = room / 3;
    let tail = room - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(n - tail));
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
    use crate::top::harvest::tests::{census, registry, sample};
    use crate::top::harvest::Harvest;
    use crate::top::key::Key;

    fn app_with(h: Harvest) -> App {
        let mut a = App::new(Duration::from_secs(1));
        a.update(h);
        a
    }

    fn with_agent() -> App {
        let mut h = containers::tests::scene();
        let mut more = sample();
        h.registries.append(&mut more.registries);
        let mut h2 = census(Harvest {
            registries: h.registries.clone(),
            ..Harvest::default()
        });
        // The scene's figures on its two containers, the sample's processes in the system.
        for c in &mut h2.containers {
            if let Some(s) = h.containers.iter().find(|x| x.cgroup == c.cgroup) {
                let processes = std::mem::take(&mut c.processes);
                *c = s.clone();
                c.processes = processes;
            }
        }
        h2.scheduler = h.scheduler.take();
        app_with(h2)
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
    fn the_layout_fills_80x24_and_200x50_without_overlap() {
        for app in [app_with(sample()), with_agent()] {
            for (w, h) in [(80, 24), (200, 50)] {
                let area = Rect::new(0, 0, w, h);
                let a = layout(area, &app);
                let mut panels = vec![a.header, a.containers, a.processes, a.metrics];
                panels.extend(a.history);
                panels.push(a.footer);
                let total: u16 = panels.iter().map(|r| r.height).sum();
                assert_eq!(total, h, "{a:?}");
                for w in panels.windows(2) {
                    assert_eq!(w[0].bottom(), w[1].y, "{a:?}");
                }
                assert_eq!(a.history.is_some(), h >= HISTORY_FROM);
                let (c, p, m) = viewports(area, &app);
                assert!(c >= 1 && p >= 1 && m >= 2, "{c} {p} {m} {a:?}");
            }
        }
    }

    #[test]
    fn an_80x24_screen_shows_every_panel() {
        let s = screen(&with_agent());
        for want in [
            "topdeck top",
            "Containers (3) · agent pid 99",
            "! /web: noisy neighbour /batch (80%",
            "batch 80%",
            "noisy",
            "Processes (5)",
            "web",
            "Metrics",
            "q quit",
        ] {
            assert!(s.contains(want), "{want:?} missing from\n{s}");
        }
        assert_eq!(s.lines().count(), 24);
        assert!(s.lines().all(|l| l.chars().count() == 80));
    }

    #[test]
    fn a_long_list_says_how_many_rows_are_out_of_sight() {
        let many = (1..=30)
            .map(|p| registry(p, &format!("p{p:02}"), vec![]))
            .collect();
        let app = app_with(census(Harvest {
            registries: many,
            ..Harvest::default()
        }));
        let s = screen(&app);
        assert!(s.contains("Processes (30) ↓"), "{s}");
    }

    #[test]
    fn a_name_cut_in_the_middle_keeps_both_ends() {
        assert_eq!(fit_middle("topdeck-demo-9099-web", 12), "top…9099-web");
        assert_eq!(fit_middle("short", 12), "short");
        assert_eq!(fit_middle("abcdef", 1), "…");
    }

    #[test]
    fn columns_are_dropped_by_rank_and_spare_width_goes_to_the_fills() {
        let cols = [
            Column::fill("NAME", 4, 0),
            Column::new("A", 3, 2),
            Column::new("B", 3, 1),
        ];
        assert_eq!(fitting(&cols, 12), [(0, 4), (1, 3), (2, 3)]);
        assert_eq!(fitting(&cols, 20), [(0, 12), (1, 3), (2, 3)]);
        assert_eq!(fitting(&cols, 9), [(0, 5), (2, 3)], "A goes first");
        let two = [Column::fill("X", 1, 0), Column::fill("Y", 1, 0)];
        assert_eq!(
            fitting(&two, 8),
            [(0, 3), (1, 4)],
            "the last fill takes the odd column"
        );
        assert_eq!(fitting(&cols, 2), [(0, 4)], "the last column stays");
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
