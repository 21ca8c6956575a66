// SPDX-License-Identifier: Apache-2.0
//! The title line, the footer (key hints, or the filter being typed) and
//! the help overlay.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Widget};

use super::panel;
use crate::top::app::{App, Mode};
use crate::top::harvest::State;

/// The keys, as the help shows them.
const HELP: [(&str, &str); 11] = [
    ("↑ ↓  j k", "move (rows keep their order while you do)"),
    ("PgUp PgDn", "move a page"),
    ("Home End  g G", "first, last"),
    (
        "Enter",
        "open: a container's processes, a process's metrics",
    ),
    ("Esc", "clear the filter, else back up (all processes)"),
    ("Tab  Shift-Tab", "next, previous pane"),
    ("/", "filter: type, Enter keeps, Esc clears"),
    ("s", "sort by busy (CPU, rate), name, pid"),
    ("?", "this help (any key closes it)"),
    ("q  Ctrl-C", "quit"),
    ("", "rates, p50 and p99 cover the last interval"),
];

/// Draws the title line.
pub fn header(app: &App, area: Rect, buf: &mut Buffer) {
    let h = app.harvest();
    let count = |s: State| h.registries.iter().filter(|r| r.state == s).count();
    let mut text = format!(
        "topdeck top · {} {} ({} alive, {} dead, {} broken) · every {}",
        h.registries.len(),
        match h.registries.len() {
            1 => "registry",
            _ => "registries",
        },
        count(State::Alive),
        count(State::Dead),
        count(State::Broken),
        humantime::format_duration(app.interval()),
    );
    // The time of the last refresh, to line the screen up with logs.
    if let Some(taken) = h.taken {
        let at = humantime::format_rfc3339_seconds(taken).to_string();
        text += &format!(" · {}", at.split_once('T').map_or(at.as_str(), |(_, t)| t));
    }
    if !app.filter().is_empty() && app.mode() != Mode::Filter {
        text += &format!(" · filter: {}", app.filter());
    }
    let mut lines = vec![Line::styled(
        text,
        Style::new().add_modifier(Modifier::BOLD),
    )];
    if let Some(host) = &h.host {
        lines.push(Line::raw(host.to_string()));
    }
    Paragraph::new(lines).render(area, buf);
}

/// Draws the footer.
pub fn footer(app: &App, area: Rect, buf: &mut Buffer) {
    let key = Style::new().add_modifier(Modifier::REVERSED);
    let line = match app.mode() {
        Mode::Filter => Line::from(vec![
            Span::styled("filter:", key),
            Span::raw(" "),
            Span::raw(format!("{}▏", app.filter())),
            Span::raw("   Enter keep · Esc clear"),
        ]),
        Mode::Browse | Mode::Help => {
            let sort = format!("sort:{}", app.sort().label());
            let hints: [(&str, &str); 7] = [
                ("q", "quit"),
                ("?", "help"),
                ("/", "filter"),
                ("s", &sort),
                ("Enter", "open"),
                ("Esc", "back"),
                ("Tab", "pane"),
            ];
            let mut spans = Vec::new();
            // First, where it cannot be cut off: someone posing as the
            // scheduler agent is worth more than the key hints.
            let spoofed = app.harvest().spoofed_agents;
            if spoofed > 0 {
                spans.push(Span::styled(
                    format!("{spoofed} fake topdeck-agent ignored (see --once --json)",),
                    Style::new().add_modifier(Modifier::BOLD),
                ));
                spans.push(Span::raw("  "));
            }
            for (k, what) in hints {
                spans.push(Span::styled(k.to_owned(), key));
                spans.push(Span::raw(format!(" {what}  ")));
            }
            Line::from(spans)
        }
    };
    Paragraph::new(line).render(area, buf);
}

/// Draws the help over the middle of `area`.
pub fn help(area: Rect, buf: &mut Buffer) {
    let width = 60.min(area.width);
    let height = (HELP.len() as u16 + 2).min(area.height);
    let [row] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(area);
    let [rect] = Layout::horizontal([Constraint::Length(width)])
        .flex(Flex::Center)
        .areas(row);
    Clear.render(rect, buf);
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(
                    format!("{k:>15}"),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(format!("  {what}")),
            ])
        })
        .collect();
    Paragraph::new(lines)
        .block(panel(" Keys ".into(), true))
        .render(rect, buf);
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::top::draw::lines;
    use crate::top::harvest::Harvest;

    #[test]
    fn the_title_line_says_when_the_screen_was_read() {
        let mut app = App::new(Duration::from_secs(1));
        app.update(Harvest {
            taken: Some(UNIX_EPOCH + Duration::from_secs(86_400 + 3_723)),
            ..Harvest::default()
        });
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 1));
        header(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert!(l[0].trim_end().ends_with("every 1s · 01:02:03Z"), "{l:?}");
    }

    #[test]
    fn the_host_line_says_cpu_load_memory_and_pressure() {
        let mut app = App::new(Duration::from_secs(1));
        app.update(Harvest {
            host: Some(crate::top::harvest::HostLine {
                cpu_busy: Some(0.374),
                cpus: 2,
                load1: Some(1.24),
                mem_used: Some(3 << 29),
                mem_total: Some(24 << 30),
                cpu_pressure: Some(1.3),
            }),
            ..Harvest::default()
        });
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 2));
        header(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert_eq!(
            l[1].trim_end(),
            "host: CPU 37% of 2 · load 1.24 · memory 1.5 of 24.0GiB · CPU pressure 1.3%"
        );
    }
}
