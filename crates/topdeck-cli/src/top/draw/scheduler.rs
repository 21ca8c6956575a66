// SPDX-License-Identifier: Apache-2.0
//! The scheduler panel, drawn while a `topdeck-agent` registry exists: the
//! verdicts that hold now, then each container's run-queue latency over the
//! interval (worst p99 first).

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, Widget};
use topdeck_sched::verdict::VerdictKind;

use super::{fit, focused, panel, selected_style, trend, TREND_WIDTH};
use crate::render;
use crate::top::app::{App, Pane};
use crate::top::harvest::{SchedulerHarvest, State};

/// Most verdict lines shown; more are summarised on the last one.
const MAX_VERDICT_LINES: usize = 2;

/// Container rows the panel at `area` shows.
pub fn rows(area: Rect, app: &App) -> usize {
    let verdicts = verdict_lines(app.harvest().scheduler.as_ref());
    (area.height as usize).saturating_sub(2 + verdicts + 1)
}

/// Lines the verdicts take: one when there are none (saying so), up to a few.
pub fn verdict_lines(s: Option<&SchedulerHarvest>) -> usize {
    s.map_or(1, |s| s.verdicts.len().clamp(1, MAX_VERDICT_LINES))
}

/// Draws the scheduler panel into `area`.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let Some(s) = app.harvest().scheduler.as_ref() else {
        return;
    };
    let focus = focused(app, Pane::Scheduler);
    let pid = s.pid.map_or("-".to_owned(), |p| p.to_string());
    let dead = if s.state == Some(State::Dead) {
        ", dead: last values"
    } else {
        ""
    };
    let block: Block = panel(
        format!(" Scheduler: topdeck-agent (pid {pid}{dead}) "),
        focus,
    );
    let inner = block.inner(area);
    block.render(area, buf);
    let [top, table] = Layout::vertical([
        Constraint::Length(verdict_lines(Some(s)) as u16),
        Constraint::Min(0),
    ])
    .areas(inner);
    let width = inner.width as usize;
    let lines: Vec<Line> = if s.verdicts.is_empty() {
        // Not "nobody waits behind another": what the rule did not find.
        let why = match &s.rule {
            Some(rule) => format!("no verdicts by the agent's rule: {rule}"),
            None => "no verdicts from the agent".into(),
        };
        vec![Line::raw(fit(&why, width))]
    } else {
        let shown = if s.verdicts.len() > MAX_VERDICT_LINES {
            MAX_VERDICT_LINES - 1
        } else {
            MAX_VERDICT_LINES
        };
        let alarm = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
        let mut l: Vec<Line> = s
            .verdicts
            .iter()
            .take(shown)
            .map(|v| {
                // A suspect is worth a look, not an alarm.
                let (mark, style) = match v.kind {
                    VerdictKind::Suspect => ("?", Style::new().fg(Color::Yellow)),
                    _ => ("!", alarm),
                };
                Line::styled(fit(&format!("{mark} {v}"), width), style)
            })
            .collect();
        if s.verdicts.len() > shown {
            l.push(Line::styled(
                format!("… and {} more verdicts", s.verdicts.len() - shown),
                alarm,
            ));
        }
        l
    };
    Paragraph::new(lines).render(top, buf);
    let at = app.container_index();
    let cgroup_w = width.saturating_sub(14 + 9 + 8 + 8 + TREND_WIDTH + 5);
    let rows = s
        .containers
        .iter()
        .enumerate()
        .skip(app.scroll(Pane::Scheduler))
        // Rows below the panel are never drawn: not made either.
        .take(area.height as usize)
        .map(|(i, c)| {
            let q = |v: Option<f64>| v.map_or("-".to_owned(), |v| render::value(v, "seconds"));
            let row = Row::new([
                Cell::new(fit(&c.container, 14)),
                Cell::new(fit(&c.cgroup, cgroup_w)),
                Cell::new(c.rate.map_or("-".to_owned(), |r| render::rate(r, ""))),
                Cell::new(q(c.p50)),
                Cell::new(q(c.p99)),
                Cell::new(trend(&c.history.last(TREND_WIDTH), TREND_WIDTH)),
            ]);
            if Some(i) == at {
                row.style(selected_style(focus))
            } else {
                row
            }
        });
    let header = Row::new([
        "CONTAINER",
        "CGROUP",
        "WAITS",
        "RUNQ P50",
        "RUNQ P99",
        "TREND",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let widths = [
        Constraint::Length(14),
        Constraint::Fill(1),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(TREND_WIDTH as u16),
    ];
    Table::new(rows, widths).header(header).render(table, buf);
}
