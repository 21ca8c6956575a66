// SPDX-License-Identifier: Apache-2.0
//! The registry list: one row per registry file (pid, process, registry,
//! metric count, alive/dead/broken, and its busiest counter's rate, or why
//! a broken file could not be read).

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Cell, Paragraph, Row, Table, Widget};

use super::{fit, focused, panel, selected_style};
use crate::render;
use crate::top::app::{App, Pane};
use crate::top::harvest::{RegistryHarvest, State};

/// Width of the process and registry columns.
const NAME_W: u16 = 15;
/// Space between two columns.
const GAP: u16 = 1;
/// The columns: fixed ones, then the last, which takes what is left.
const WIDTHS: [Constraint; 6] = [
    Constraint::Length(7),
    Constraint::Length(NAME_W),
    Constraint::Length(NAME_W),
    Constraint::Length(4),
    Constraint::Length(6),
    Constraint::Fill(1),
];
/// What the fixed columns of [`WIDTHS`] and the gaps between all columns
/// take: the last column gets the inner width less this.
const FIXED_W: u16 = {
    let mut sum = GAP * (WIDTHS.len() as u16 - 1);
    let mut i = 0;
    while i < WIDTHS.len() {
        if let Constraint::Length(w) = WIDTHS[i] {
            sum += w;
        }
        i += 1;
    }
    sum
};

/// Draws the registry list into `area`.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let list = app.registries();
    let total = app.harvest().registries.len();
    let title = if list.len() == total {
        format!(" Registries ({total}) ")
    } else {
        format!(" Registries ({} of {total}, filtered) ", list.len())
    };
    let focus = focused(app, Pane::Registries);
    let block = panel(title, focus);
    if list.is_empty() {
        let text = if !app.has_harvest() {
            "reading the namespace…".to_owned()
        } else if total == 0 && app.harvest().dirs.is_empty() {
            "no registries: no /dev/shm/topdeck-<uid> directory exists yet".to_owned()
        } else if total == 0 {
            let dirs = app.harvest().dirs.join(", ");
            format!("no registries in {dirs}; programs that use topdeck appear here")
        } else {
            format!(
                "no registry matches {:?} (Esc clears the filter)",
                app.filter()
            )
        };
        Paragraph::new(text).block(block).render(area, buf);
        return;
    }
    let inner_w = area.width.saturating_sub(2) as usize;
    let last_w = inner_w.saturating_sub(FIXED_W.into());
    let at = app.registry_index();
    let rows = list
        .iter()
        .enumerate()
        .skip(app.scroll(Pane::Registries))
        // Rows below the panel are never drawn: not made either.
        .take(area.height as usize)
        .map(|(i, r)| {
            let row = row(r, last_w);
            if Some(i) == at {
                row.style(selected_style(focus))
            } else {
                row
            }
        });
    let header = Row::new([
        "PID",
        "PROCESS",
        "REGISTRY",
        "N",
        "STATE",
        "BUSIEST COUNTER",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    Table::new(rows, WIDTHS)
        .column_spacing(GAP)
        .header(header)
        .block(block)
        .render(area, buf);
}

/// One registry's row.
fn row(r: &RegistryHarvest, last_w: usize) -> Row<'static> {
    let (state, style) = match r.state {
        State::Alive => ("alive", Style::new()),
        State::Dead => ("dead", Style::new().fg(Color::DarkGray)),
        State::Broken => ("broken", Style::new().fg(Color::Red)),
    };
    let last = match (&r.error, r.busiest()) {
        // The path is in the process column already; the reason is what is left.
        (Some(e), _) => e
            .strip_prefix(&format!("{}: ", r.path))
            .unwrap_or(e)
            .to_owned(),
        (None, Some((s, rate))) => {
            let rate = render::rate(rate, &s.meta.unit);
            let name_w = last_w.saturating_sub(rate.chars().count() + 1);
            format!("{} {rate}", fit(&s.id(), name_w))
        }
        (None, None) => "-".to_owned(),
    };
    // A file whose header could not be read is known by its file name.
    let file = r.path.rsplit('/').next().unwrap_or(&r.path);
    let process = if r.state == State::Broken && r.pid.is_none() {
        file
    } else {
        &r.process
    };
    Row::new([
        Cell::new(r.pid.map_or("-".to_owned(), |p| p.to_string())),
        Cell::new(fit(process, NAME_W.into())),
        Cell::new(fit(&r.registry, NAME_W.into())),
        Cell::new(r.metrics.to_string()),
        Cell::new(state),
        Cell::new(fit(&last, last_w)),
    ])
    .style(style)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::top::draw::lines;
    use crate::top::harvest::tests::{counter, registry, sample};

    #[test]
    fn rows_show_pid_process_state_and_busiest_counter() {
        let mut h = sample();
        h.registries[0].state = State::Dead;
        h.registries.push(RegistryHarvest {
            path: "/ns/1-1-0.topdeck".into(),
            error: Some("/ns/1-1-0.topdeck: bad magic".into()),
            state: State::Broken,
            pid: None,
            ..registry(0, "?", vec![])
        });
        let mut app = App::new(Duration::from_secs(1));
        app.update(h);
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 8));
        render(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert!(l[0].contains("Registries (4)"), "{l:#?}");
        assert!(
            l[1].contains("PID") && l[1].contains("BUSIEST COUNTER"),
            "{l:#?}"
        );
        // Busiest first: bravo at 500/s, and its busiest counter named.
        assert!(l[2].contains("20") && l[2].contains("bravo"), "{l:#?}");
        assert!(l[2].contains("requests_total 500.0/s"), "{l:#?}");
        let alpha = l.iter().find(|x| x.contains("alpha")).unwrap();
        assert!(alpha.contains("dead"), "{alpha}");
        let broken = l.iter().find(|x| x.contains("broken")).unwrap();
        assert!(
            broken.contains("1-1-0.topdeck") && broken.contains("bad magic"),
            "{broken}"
        );
    }

    #[test]
    fn long_names_are_cut_with_an_ellipsis() {
        let mut app = App::new(Duration::from_secs(1));
        let long = "a_counter_with_a_very_long_name_that_cannot_fit_in_the_column_total";
        app.update(crate::top::harvest::Harvest {
            registries: vec![registry(
                1,
                "a-process-with-a-long-name",
                vec![counter(long, 3.0)],
            )],
            ..Default::default()
        });
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 4));
        render(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert!(l[2].contains("a-process-with…"), "{l:#?}");
        assert!(l[2].contains("… 3.00/s"), "{l:#?}");
        // The cut is made to the last column's width, which runs to the border.
        assert!(l[2].ends_with("… 3.00/s│"), "{l:#?}");
    }
}
