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
const HELP: [(&str, &str); 13] = [
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
    ("[ ]  ← →", "top --at: a recorded frame back, on"),
    ("{ }", "top --at: a minute back, on"),
    ("?", "this help (any key closes it)"),
    ("q  Ctrl-C", "quit"),
    ("", "rates, p50 and p99 cover the last interval"),
];

/// Draws the title line and the host line (of a recording: which
/// moment, and what it does not hold).
pub fn header(app: &App, area: Rect, buf: &mut Buffer) {
    let h = app.harvest();
    let count = |s: State| h.registries.iter().filter(|r| r.state == s).count();
    let registries = format!(
        "{} {} ({} alive, {} dead, {} broken)",
        h.registries.len(),
        match h.registries.len() {
            1 => "registry",
            _ => "registries",
        },
        count(State::Alive),
        count(State::Dead),
        count(State::Broken),
    );
    let mut text = match &h.recorded {
        // First, where it cannot be cut off: this is not the host now.
        Some(r) => format!(
            "topdeck top · recorded {} · {registries} · frames {} apart",
            recorded_clock(r.unix_ns, app.interval()),
            humantime::format_duration(rounded(app.interval())),
        ),
        None => {
            let mut t = format!(
                "topdeck top · {registries} · every {}",
                humantime::format_duration(app.interval())
            );
            // The time of the last refresh, to line the screen up with logs.
            if let Some(taken) = h.taken {
                let at = humantime::format_rfc3339_seconds(taken).to_string();
                t += &format!(" · {}", at.split_once('T').map_or(at.as_str(), |(_, t)| t));
            }
            t
        }
    };
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
    if let Some(r) = &h.recorded {
        // What stopped a move, or damage, before what is never there.
        let mut said: Vec<String> = app.note().map(str::to_owned).into_iter().collect();
        said.extend(r.damage.as_ref().map(|d| format!("damaged: {d}")));
        said.push(format!("not recorded: {}", r.not_recorded));
        let style = match said.len() {
            1 => Style::new(),
            _ => Style::new().add_modifier(Modifier::BOLD),
        };
        lines.push(Line::styled(said.join(" · "), style));
    }
    Paragraph::new(lines).render(area, buf);
}

/// The time between recorded frames as a person reads it: to the
/// millisecond below a second, else to the second (a recorder's frames
/// are a few hundred microseconds off its interval).
fn rounded(d: std::time::Duration) -> std::time::Duration {
    use std::time::Duration;
    match d < Duration::from_secs(1) {
        true => Duration::from_millis(d.as_millis() as u64),
        false => Duration::from_secs(d.as_secs_f64().round() as u64),
    }
}

/// A recorded frame's local time of day (`03:12:05`), to the millisecond
/// when frames are less than a second apart, and with its date when that
/// is not today.
fn recorded_clock(unix_ns: u64, spacing: std::time::Duration) -> String {
    let full = topdeck_history::format_time(unix_ns);
    let today = topdeck_history::format_time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64,
    );
    let (date, rest) = full.split_once('T').unwrap_or(("", &full));
    // The offset follows the seconds: `03:12:05+01:00` or `03:12:05Z`.
    let clock = rest.get(..8).unwrap_or(rest);
    let mut out = match today.split_once('T') {
        Some((d, _)) if d == date => clock.to_owned(),
        _ => format!("{date} {clock}"),
    };
    if spacing < std::time::Duration::from_secs(1) {
        out += &format!(".{:03}", unix_ns % 1_000_000_000 / 1_000_000);
    }
    out
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
            let mut hints: Vec<(&str, &str)> = vec![("q", "quit")];
            if app.harvest().recorded.is_some() {
                hints.extend([("[ ]", "frame"), ("{ }", "minute")]);
            }
            hints.extend([
                ("?", "help"),
                ("/", "filter"),
                ("s", &sort),
                ("Enter", "open"),
                ("Esc", "back"),
                ("Tab", "pane"),
            ]);
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
    fn a_recorded_moment_says_when_what_is_not_recorded_and_the_time_keys() {
        let now = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let at = now - now % 1_000_000_000 + 250_000_000;
        let mut app = App::new(Duration::from_millis(200));
        app.update(Harvest {
            recorded: Some(crate::top::harvest::Recorded::new(at, None, None)),
            taken: Some(UNIX_EPOCH),
            ..Harvest::default()
        });
        app.set_note("the recording's last frame");
        let mut buf = Buffer::empty(Rect::new(0, 0, 120, 3));
        header(&app, Rect::new(0, 0, 120, 2), &mut buf);
        footer(&app, Rect::new(0, 2, 120, 1), &mut buf);
        let l = lines(&buf);
        let clock = &topdeck_history::format_time(at)[11..19];
        // (With the date, should the test run at midnight.)
        assert!(
            l[0].starts_with("topdeck top · recorded ")
                && l[0].contains(&format!("{clock}.250 · 0 registries")),
            "{l:?}"
        );
        assert!(!l[0].contains("every"), "nothing refreshes: {l:?}");
        assert_eq!(
            l[1].trim_end(),
            "the recording's last frame · not recorded: process CPU and threads, cgroup limits and CPUs, host load"
        );
        assert!(l[2].starts_with("q quit  [ ] frame  { } minute"), "{l:?}");
        assert_eq!(
            rounded(Duration::from_nanos(197_249_958)),
            Duration::from_millis(197)
        );
        assert_eq!(
            rounded(Duration::from_nanos(1_002_249_958)),
            Duration::from_secs(1)
        );
        // Another day's moment says its date.
        assert!(recorded_clock(at - 86_400_000_000_000, Duration::from_secs(1)).contains('-'));
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
