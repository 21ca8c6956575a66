// SPDX-License-Identifier: Apache-2.0
//! The processes panel: the opened container's processes, else every
//! process with a source or in a container; one row each (pid, command,
//! CPU, threads, container, its sources and their state, its busiest
//! counter's rate), or a dead or broken source on its own row with why it
//! could not be read. Columns are dropped, least needed first, to fit.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::widgets::{Paragraph, Widget};

use super::{focused, panel, percent, selected_style, table, Column};
use crate::render;
use crate::top::app::{App, Pane};
use crate::top::harvest::{Harvest, ProcessRow, State};

/// The columns, in screen order; a lower rank is dropped later.
const COLUMNS: [Column; 8] = [
    Column::new("PID", 7, 0),
    Column::fill("COMMAND", 15, 0),
    Column::new("CPU", 5, 0),
    Column::new("THR", 3, 1),
    Column::fill("CONTAINER", 14, 2).middle(),
    Column::fill("SOURCES", 10, 1),
    Column::new("STATE", 6, 1),
    Column::fill("BUSIEST COUNTER", 16, 1),
];

/// Draws the process list into `area`.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let list = app.processes();
    let focus = focused(app, Pane::Processes);
    let opened = app.opened();
    let mut title = match opened {
        Some(c) => format!(" Processes of {} ({}", c.container, list.len()),
        None => format!(" Processes ({}", list.len()),
    };
    if !app.filter().is_empty() {
        title += ", filtered";
    }
    title += ")";
    title += &super::more(app, Pane::Processes, area.height.saturating_sub(3).into());
    if opened.is_some() {
        title += " · Esc: all";
    }
    let block = panel(title + " ", focus);
    if list.is_empty() {
        let h = app.harvest();
        let text = if !app.has_harvest() {
            "reading the host…".to_owned()
        } else if !app.filter().is_empty() {
            format!(
                "no process matches {:?} (Esc clears the filter)",
                app.filter()
            )
        } else if h.registries.is_empty() && h.dirs.is_empty() {
            "no registries: no /dev/shm/topdeck-<uid> directory exists yet".to_owned()
        } else if h.registries.is_empty() {
            let dirs = h.dirs.join(", ");
            format!("no registries in {dirs}; programs that use topdeck appear here")
        } else {
            "no process here".to_owned()
        };
        Paragraph::new(text).block(block).render(area, buf);
        return;
    }
    let inner = block.inner(area);
    block.render(area, buf);
    let at = app.process_index();
    let rows = list
        .iter()
        .enumerate()
        .skip(app.scroll(Pane::Processes))
        .take(inner.height as usize)
        .map(|(i, p)| {
            let style = if Some(i) == at {
                selected_style(focus)
            } else {
                match p.state {
                    State::Alive => Style::new(),
                    State::Dead => Style::new().fg(Color::DarkGray),
                    State::Broken => Style::new().fg(Color::Red),
                }
            };
            (cells(app.harvest(), p), style)
        });
    // The container is the same on every row of an opened one.
    let mut cols = COLUMNS;
    if opened.is_some() {
        cols[4].rank = u8::MAX;
    }
    table(&cols, rows, inner, buf);
}

/// One process's cells, in [`COLUMNS`] order.
fn cells(h: &Harvest, p: &ProcessRow) -> Vec<String> {
    let sources: Vec<_> = p
        .sources
        .iter()
        .filter_map(|&i| h.registries.get(i))
        .collect();
    // A registry's name, or another runtime's kind (`registry_or_kind`).
    let names: Vec<&str> = sources.iter().map(|r| r.registry.as_str()).collect();
    let last = match sources
        .iter()
        .find_map(|r| r.error.as_ref().map(|e| (r, e)))
    {
        // The path names the row already; the reason is what is left.
        Some((r, e)) => e
            .strip_prefix(&format!("{}: ", r.path))
            .unwrap_or(e)
            .to_owned(),
        None => sources
            .iter()
            .filter_map(|r| r.busiest())
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or("-".to_owned(), |(s, rate)| {
                format!("{} {}", render::rate(rate, &s.meta.unit), s.id())
            }),
    };
    // A file whose header could not be read is known by its file name.
    let command = match (p.state, p.pid, p.source_paths.first()) {
        (State::Broken, None, Some(path)) => path.rsplit('/').next().unwrap_or(path).to_owned(),
        _ => p.command.clone(),
    };
    vec![
        p.pid.map_or("-".to_owned(), |pid| pid.to_string()),
        command,
        p.cpu.map_or("-".to_owned(), percent),
        p.threads.map_or("-".to_owned(), |t| t.to_string()),
        p.container.clone().unwrap_or_else(|| "-".to_owned()),
        if names.is_empty() {
            "-".to_owned()
        } else {
            names.join(", ")
        },
        match p.state {
            State::Alive => "alive",
            State::Dead => "dead",
            State::Broken => "broken",
        }
        .to_owned(),
        last,
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::top::draw::lines;
    use crate::top::harvest::tests::{census, counter, registry, sample};
    use crate::top::harvest::RegistryHarvest;

    #[test]
    fn rows_show_pid_command_cpu_sources_state_and_busiest_counter() {
        let mut h = sample();
        h.registries[0].state = State::Dead;
        h.registries.push(RegistryHarvest {
            path: "/ns/1-1-0.topdeck".into(),
            error: Some("/ns/1-1-0.topdeck: bad magic".into()),
            state: State::Broken,
            pid: None,
            ..registry(0, "?", vec![])
        });
        let mut h = census(h);
        h.processes[1].cpu = Some(0.973);
        let mut app = App::new(Duration::from_secs(1));
        app.update(h);
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 8));
        render(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert!(l[0].contains("Processes (4)"), "{l:#?}");
        assert!(
            l[1].contains("PID") && l[1].contains("BUSIEST COUNTER"),
            "{l:#?}"
        );
        // Busiest first: bravo at 97% of a CPU, and its busiest counter named.
        assert!(
            l[2].contains("20") && l[2].contains("bravo") && l[2].contains("97%"),
            "{l:#?}"
        );
        assert!(l[2].contains("500.0/s requests"), "{l:#?}");
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
        app.update(census(Harvest {
            registries: vec![registry(
                1,
                "a-process-with-a-long-name",
                vec![counter(long, 3.0)],
            )],
            ..Default::default()
        }));
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 4));
        render(&app, buf.area, &mut buf);
        let l = lines(&buf);
        assert!(
            l[2].contains("a-process-with") && !l[2].contains("a-process-with-a-long-name"),
            "{l:#?}"
        );
        assert!(l[2].contains("3.00/s a_counter"), "{l:#?}");
        assert!(l[2].ends_with("…│"), "cut at the border: {l:#?}");
    }
}
