// SPDX-License-Identifier: Apache-2.0
//! The containers panel, the top deck: the agent's verdicts (or the rule
//! that found none), then one row per container (the system as one):
//! the CPU it used and was given, its run-queue p99 and trend, whom it
//! waited behind, its verdict, and its apps' latency with the share of it
//! that was CPU wait. Columns are dropped, least needed first, to fit.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Widget};
use topdeck_sched::verdict::VerdictKind;

use super::{fit, focused, panel, percent, short, table, trend, Column, TREND_WIDTH};
use crate::render;
use crate::top::app::{App, Pane};
use crate::top::harvest::{ContainerRow, SchedulerHarvest, State};

/// Most verdict lines shown; more are summarised on the last one.
const MAX_VERDICT_LINES: usize = 2;

/// The columns, in screen order; a lower rank is dropped later.
const COLUMNS: [Column; 12] = [
    Column::fill("CONTAINER", 12, 0).middle(),
    Column::new("CPU", 5, 0),
    Column::new("WEIGHT", 6, 2),
    Column::new("QUOTA", 5, 3),
    Column::new("CPUS", 7, 4),
    Column::new("RUNQ P99", 8, 0),
    Column::new("TREND", TREND_WIDTH as u16, 5),
    Column::fill("WAITED BEHIND", 15, 1),
    Column::new("VERDICT", 7, 0),
    Column::new("APP P99", 8, 1),
    Column::new("WAIT%", 5, 2),
    Column::fill("CGROUP", 24, 6),
];

/// Rows of containers the panel at `area` shows.
pub fn rows(area: Rect, app: &App) -> usize {
    (area.height as usize).saturating_sub(2 + verdict_lines(app.harvest().scheduler.as_ref()) + 1)
}

/// Lines above the table: the verdicts (one when there are none, saying
/// what the rule found), up to a few.
pub fn verdict_lines(s: Option<&SchedulerHarvest>) -> usize {
    s.map_or(1, |s| s.verdicts.len().clamp(1, MAX_VERDICT_LINES))
}

/// Draws the containers panel into `area`.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let h = app.harvest();
    let focus = focused(app, Pane::Containers);
    let list = app.containers();
    let mut title = format!(" Containers ({}", list.len());
    if list.len() < h.containers.len() {
        title += &format!(" of {}, filtered", h.containers.len());
    }
    title += ")";
    if let Some(s) = &h.scheduler {
        let pid = s.pid.map_or("-".to_owned(), |p| p.to_string());
        let dead = if s.state == Some(State::Dead) {
            ", dead: last values"
        } else {
            ""
        };
        title += &format!(" · agent pid {pid}{dead}");
    }
    title += &super::more(app, Pane::Containers, rows(area, app));
    let block: Block = panel(title + " ", focus);
    let inner = block.inner(area);
    block.render(area, buf);
    let [top, body] = Layout::vertical([
        Constraint::Length(verdict_lines(h.scheduler.as_ref()) as u16),
        Constraint::Min(0),
    ])
    .areas(inner);
    Paragraph::new(verdicts(h.scheduler.as_ref(), inner.width as usize)).render(top, buf);
    if list.is_empty() {
        let text = if !app.has_harvest() {
            "reading the host…"
        } else if !app.filter().is_empty() {
            "no container matches the filter (Esc clears it)"
        } else {
            "no containers: no source runs and no agent publishes"
        };
        Paragraph::new(text).render(body, buf);
        return;
    }
    let at = app.container_index();
    let rows = list
        .iter()
        .enumerate()
        .skip(app.scroll(Pane::Containers))
        .take(body.height as usize)
        .map(|(i, c)| (cells(c), style(c, Some(i) == at, focus)));
    table(&COLUMNS, rows, body, buf);
}

/// The verdict lines: each verdict with its evidence, or the rule that
/// found none (never "nobody waits").
fn verdicts(s: Option<&SchedulerHarvest>, width: usize) -> Vec<Line<'static>> {
    let Some(s) = s else {
        return vec![Line::raw(fit(
            "no scheduler agent: run-queue waits and verdicts need `topdeck agent` (root)",
            width,
        ))];
    };
    if s.verdicts.is_empty() {
        let why = match &s.rule {
            Some(rule) => format!("no verdicts by the agent's rule: {rule}"),
            None => "no verdicts from the agent".into(),
        };
        return vec![Line::raw(fit(&why, width))];
    }
    let shown = if s.verdicts.len() > MAX_VERDICT_LINES {
        MAX_VERDICT_LINES - 1
    } else {
        MAX_VERDICT_LINES
    };
    let mut l: Vec<Line> = s
        .verdicts
        .iter()
        .take(shown)
        .map(|v| {
            // A suspect is worth a look, not an alarm.
            let mark = if v.kind == VerdictKind::Suspect {
                "?"
            } else {
                "!"
            };
            Line::styled(fit(&format!("{mark} {v}"), width), verdict_style(v.kind))
        })
        .collect();
    if s.verdicts.len() > shown {
        l.push(Line::styled(
            format!("… and {} more verdicts", s.verdicts.len() - shown),
            verdict_style(VerdictKind::NoisyNeighbour),
        ));
    }
    l
}

fn verdict_style(kind: VerdictKind) -> Style {
    match kind {
        VerdictKind::Suspect => Style::new().fg(Color::Yellow),
        _ => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
    }
}

fn style(c: &ContainerRow, selected: bool, focus: bool) -> Style {
    match (selected, &c.verdict) {
        (true, _) => super::selected_style(focus),
        (false, Some(v)) => verdict_style(v.kind),
        (false, None) => Style::new(),
    }
}

/// One container's cells, in [`COLUMNS`] order.
fn cells(c: &ContainerRow) -> Vec<String> {
    let seconds = |v: Option<f64>| v.map_or("-".to_owned(), |v| render::value(v, "seconds"));
    let runq = c.runq.as_ref();
    let behind = c
        .behind
        .iter()
        .map(|b| format!("{} {}", b.name, percent(b.share)))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        c.container.clone(),
        c.cpu.map_or("-".to_owned(), percent),
        c.weight
            .map_or("-".to_owned(), |w| format!("{}x", short(w))),
        c.quota.map_or("-".to_owned(), short),
        c.cpus.clone().unwrap_or_else(|| "-".to_owned()),
        seconds(runq.and_then(|r| r.p99)),
        runq.map_or(String::new(), |r| {
            trend(&r.history.last(TREND_WIDTH), TREND_WIDTH)
        }),
        if behind.is_empty() {
            "-".to_owned()
        } else {
            behind
        },
        c.verdict
            .as_ref()
            .map_or("-", |v| match v.kind {
                VerdictKind::NoisyNeighbour => "noisy",
                VerdictKind::Suspect => "suspect",
                VerdictKind::OwnQuota => "quota",
            })
            .to_owned(),
        seconds(c.latency.as_ref().map(|l| l.p99)),
        c.latency
            .as_ref()
            .and_then(|l| l.cpu_wait)
            .map_or("-".to_owned(), percent),
        c.cgroup.clone(),
    ]
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::top::draw::lines;
    use crate::top::harvest::tests::{census, registry};
    use crate::top::harvest::{AppLatency, Culprit, Harvest, History, Runq, Verdict};

    /// A web container waiting behind a batch one at 8 times its weight.
    pub(crate) fn scene() -> Harvest {
        let mut web = registry(110, "web", vec![]);
        web.container = Some("web".into());
        let mut batch = registry(120, "batch", vec![]);
        batch.container = Some("batch".into());
        let mut h = census(Harvest {
            registries: vec![web, batch],
            ..Harvest::default()
        });
        let verdict = Verdict {
            kind: VerdictKind::NoisyNeighbour,
            victim: "/web".into(),
            p99_before: Some(0.0004),
            p99_after: Some(0.012),
            culprits: vec![("/batch".into(), 0.8)],
            other_share: None,
            throttled: None,
        };
        let w = &mut h.containers[0];
        (w.cpu, w.weight, w.cpus) = (Some(0.05), Some(1.0), Some("0-1".into()));
        w.runq = Some(Runq {
            rate: Some(100.0),
            p50: Some(0.001),
            p99: Some(0.012),
            history: History::of(&[0.001, 0.012]),
        });
        w.behind = vec![
            Culprit {
                name: "batch".into(),
                share: 0.8,
            },
            Culprit {
                name: "system".into(),
                share: 0.2,
            },
        ];
        w.verdict = Some(verdict.clone());
        w.latency = Some(AppLatency {
            process: "web".into(),
            metric: "request_seconds".into(),
            p99: 0.021,
            cpu_wait: Some(0.24),
        });
        let b = &mut h.containers[1];
        (b.cpu, b.weight, b.quota) = (Some(0.98), Some(8.0), Some(1.5));
        h.scheduler = Some(SchedulerHarvest {
            pid: Some(99),
            state: Some(State::Alive),
            verdicts: vec![verdict],
            ..SchedulerHarvest::default()
        });
        h
    }

    fn screen(width: u16) -> Vec<String> {
        let mut app = App::new(Duration::from_secs(1));
        app.update(scene());
        let mut buf = Buffer::empty(Rect::new(0, 0, width, 7));
        render(&app, buf.area, &mut buf);
        lines(&buf)
    }

    #[test]
    fn a_container_row_joins_cpu_weight_runq_culprit_verdict_and_latency() {
        let l = screen(80);
        assert!(l[0].contains("Containers (2) · agent pid 99"), "{l:#?}");
        assert!(l[1].contains("! /web: noisy neighbour /batch"), "{l:#?}");
        let header = &l[2];
        for col in [
            "CONTAINER",
            "CPU",
            "WEIGHT",
            "RUNQ P99",
            "WAITED BEHIND",
            "VERDICT",
            "APP P99",
        ] {
            assert!(header.contains(col), "{col} at 80 columns: {l:#?}");
        }
        let web = l.iter().find(|x| x.contains("web ")).unwrap();
        for want in ["5%", "1x", "12.0ms", "batch 80%", "noisy", "21.0ms", "24%"] {
            assert!(web.contains(want), "{want:?} in {web}");
        }
        let batch = l
            .iter()
            .find(|x| x.contains("batch ") && !x.contains("noisy"))
            .unwrap();
        assert!(batch.contains("98%") && batch.contains("8x"), "{batch}");
        assert!(l.iter().all(|x| x.chars().count() == 80));
    }

    #[test]
    fn a_wide_screen_adds_quota_cpus_trend_and_cgroup() {
        let l = screen(200);
        for col in ["QUOTA", "CPUS", "TREND", "CGROUP"] {
            assert!(l[2].contains(col), "{col} at 200 columns: {l:#?}");
        }
        let web = l.iter().find(|x| x.starts_with("│web ")).unwrap();
        assert!(
            web.contains("/web") && web.contains("0-1") && web.contains("batch 80%, system 20%"),
            "{web}"
        );
        // The name columns grow with the screen, not only the last one.
        assert!(!l[2].contains("CONTAINER CPU"), "{}", l[2]);
    }

    #[test]
    fn without_the_agent_the_panel_says_what_is_missing() {
        let mut h = scene();
        h.scheduler = None;
        let mut app = App::new(Duration::from_secs(1));
        app.update(h);
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 6));
        render(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert!(l[1].contains("no scheduler agent"), "{l:#?}");
    }
}
