// SPDX-License-Identifier: Apache-2.0
//! The state of `topdeck top`: the latest harvest and what the person did
//! with it (focused pane, the container opened, selections, filter, sort
//! key, scroll). Pure: keys and harvests go in, and drawing reads it
//! through `&App`; no terminal, no threads, so every behaviour is a unit
//! test.
//!
//! Three lists, top to bottom: containers, processes (every process of
//! the container opened with Enter, else every process with a source),
//! and the selected process's metrics.
//! Selections are kept by identity (cgroup, process key, source path and
//! series), not by row number, and a list keeps the order the person saw
//! while they move through it ([`HOLD_HARVESTS`]), so that `j` lands on
//! the row that was below.

use std::collections::HashMap;
use std::time::Duration;

use super::harvest::{ContainerRow, Harvest, ProcessRow, RegistryHarvest, Series};
use super::key::Key;
use topdeck_sched::verdict::VerdictKind;

/// Whether the view goes on after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep running.
    Continue,
    /// Leave: restore the terminal and exit.
    Quit,
    /// Move through the recording shown (`top --at`).
    Step(Step),
}

/// A move through a recording, as a key asks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The recorded frame before (`[`, ←).
    Back,
    /// The recorded frame after (`]`, →).
    Forward,
    /// A minute back (`{`).
    BackMinute,
    /// A minute on (`}`).
    ForwardMinute,
}

/// The panes that take the arrow keys, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    /// The containers, the system as one of them.
    Containers,
    /// The processes of the opened container, or all.
    Processes,
    /// The selected process's metrics.
    Metrics,
}

impl Pane {
    const ALL: [Pane; 3] = [Pane::Containers, Pane::Processes, Pane::Metrics];

    fn index(self) -> usize {
        self as usize
    }
}

/// What the lists are ordered by; `s` cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Busiest first: containers with a verdict, then by CPU; processes by
    /// CPU, then their busiest counter; metrics by rate.
    Busy,
    /// Alphabetical: containers, processes' commands, series.
    Name,
    /// Processes by pid; containers and metrics by name.
    Pid,
}

impl SortKey {
    /// The next key in the `s` cycle.
    pub fn next(self) -> Self {
        match self {
            Self::Busy => Self::Name,
            Self::Name => Self::Pid,
            Self::Pid => Self::Busy,
        }
    }

    /// How the footer names it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Busy => "busy",
            Self::Name => "name",
            Self::Pid => "pid",
        }
    }
}

/// What keys do right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Keys navigate.
    Browse,
    /// Keys edit the filter (Enter keeps it, Esc clears it).
    Filter,
    /// The help is shown; any key closes it.
    Help,
}

/// A metric's identity: its source's path, name and labels.
type SeriesId = (String, String, Vec<(String, String)>);

/// The whole state of the view. The main loop owns the only one.
#[derive(Debug, Clone)]
pub struct App {
    harvest: Harvest,
    harvests: u64,
    interval: Duration,
    pane: Pane,
    sort: SortKey,
    filter: String,
    mode: Mode,
    container_sel: Option<String>,
    /// The container whose processes are listed (Enter), by cgroup.
    opened: Option<String>,
    process_sel: Option<String>,
    metric_sel: Option<SeriesId>,
    scroll: [usize; 3],
    rows: [usize; 3],
    view: View,
    /// The containers' and processes' order as last shown.
    held: [Held; 2],
    /// Whose processes are selected first, before the person chooses:
    /// the reader's own (root reads every user's).
    uid: u32,
    /// A word on the last key's effect (e.g. the recording's end
    /// reached), until the next key.
    note: Option<String>,
}

/// Refreshes during which a list keeps the order the person saw after
/// they moved its selection: rows that change places under the cursor
/// every second make `j` land on another row than the one below. New rows
/// go below, in sort order; the list is sorted again once the person stops
/// moving for this long, or asks for a sort (`s`) or filter.
pub const HOLD_HARVESTS: u64 = 3;

/// A list's order as last shown, by row identity, and the harvest up to
/// which it holds.
#[derive(Debug, Clone, Default)]
struct Held {
    shown: Vec<String>,
    until: u64,
}

impl Held {
    /// Puts `rows` (sorted) in the order last shown while the hold lasts,
    /// new rows after in sort order; then remembers the order shown.
    fn apply<'a>(&mut self, harvests: u64, rows: &mut [usize], key: impl Fn(usize) -> &'a str) {
        if harvests < self.until {
            let seen: HashMap<&str, usize> = self
                .shown
                .iter()
                .enumerate()
                .map(|(i, k)| (k.as_str(), i))
                .collect();
            rows.sort_by_key(|&i| seen.get(key(i)).copied().unwrap_or(usize::MAX));
        }
        self.shown = rows.iter().map(|&i| key(i).to_owned()).collect();
    }
}

/// What the lists show, computed once per harvest or key (filtering and
/// sorting 100,000 series is not something to do per accessor call).
#[derive(Debug, Clone, Default)]
struct View {
    /// Indices into `harvest.containers`, filtered and sorted.
    containers: Vec<usize>,
    container_at: Option<usize>,
    /// Indices into `harvest.processes`, filtered and sorted.
    processes: Vec<usize>,
    process_at: Option<usize>,
    /// The selected process's series as (registry, series) indices.
    metrics: Vec<(usize, usize)>,
    metric_at: Option<usize>,
}

impl App {
    /// A view that has seen nothing yet, refreshed every `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            harvest: Harvest::default(),
            harvests: 0,
            interval,
            pane: Pane::Containers,
            sort: SortKey::Busy,
            filter: String::new(),
            mode: Mode::Browse,
            container_sel: None,
            opened: None,
            process_sel: None,
            metric_sel: None,
            scroll: [0; 3],
            rows: [1; 3],
            view: View::default(),
            held: Default::default(),
            // SAFETY: geteuid has no preconditions and cannot fail.
            uid: unsafe { libc::geteuid() },
            note: None,
        }
    }

    /// The same view for user `uid`: whose process it selects first.
    #[cfg(test)]
    pub fn for_user(mut self, uid: u32) -> Self {
        self.uid = uid;
        self
    }

    /// Takes a new harvest; selections carry over by identity.
    pub fn update(&mut self, harvest: Harvest) {
        self.harvest = harvest;
        self.harvests = self.harvests.saturating_add(1);
        self.refresh();
    }

    /// The latest harvest.
    pub fn harvest(&self) -> &Harvest {
        &self.harvest
    }

    /// Whether any harvest arrived yet.
    pub fn has_harvest(&self) -> bool {
        self.harvests > 0
    }

    /// The refresh interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// A word on what the last key did, shown until the next key.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// Says `note` until the next key.
    pub fn set_note(&mut self, note: impl Into<String>) {
        self.note = Some(note.into());
    }

    /// The focused pane.
    pub fn pane(&self) -> Pane {
        self.pane
    }

    /// The sort key.
    pub fn sort(&self) -> SortKey {
        self.sort
    }

    /// The filter text (may be empty).
    pub fn filter(&self) -> &str {
        &self.filter
    }

    /// What keys do now.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// First row shown of `pane`'s list.
    pub fn scroll(&self, pane: Pane) -> usize {
        self.scroll[pane.index()]
    }

    /// Rows `pane`'s list has in all (what scroll marks count).
    pub fn len(&self, pane: Pane) -> usize {
        match pane {
            Pane::Containers => self.view.containers.len(),
            Pane::Processes => self.view.processes.len(),
            Pane::Metrics => self.view.metrics.len(),
        }
    }

    /// The containers that pass the filter, in sort order.
    pub fn containers(&self) -> Vec<&ContainerRow> {
        let all = &self.harvest.containers;
        self.view.containers.iter().map(|&i| &all[i]).collect()
    }

    /// Row of the selected container in [`App::containers`].
    pub fn container_index(&self) -> Option<usize> {
        self.view.container_at
    }

    /// The container whose processes are listed, when one is opened.
    pub fn opened(&self) -> Option<&ContainerRow> {
        let cg = self.opened.as_deref()?;
        self.harvest.containers.iter().find(|c| c.cgroup == cg)
    }

    /// The processes that pass the filter (of the opened container, if
    /// any), in sort order.
    pub fn processes(&self) -> Vec<&ProcessRow> {
        let all = &self.harvest.processes;
        self.view.processes.iter().map(|&i| &all[i]).collect()
    }

    /// Row of the selected process in [`App::processes`].
    pub fn process_index(&self) -> Option<usize> {
        self.view.process_at
    }

    /// The selected process, if any passes the filter.
    pub fn selected_process(&self) -> Option<&ProcessRow> {
        let i = *self.view.processes.get(self.view.process_at?)?;
        self.harvest.processes.get(i)
    }

    /// The selected process's sources.
    pub fn selected_sources(&self) -> Vec<&RegistryHarvest> {
        self.selected_process().map_or_else(Vec::new, |p| {
            p.sources
                .iter()
                .filter_map(|&i| self.harvest.registries.get(i))
                .collect()
        })
    }

    /// The selected process's metrics that pass the filter, in sort order,
    /// each with its source. When the filter names the process itself, all
    /// of them pass.
    pub fn metrics(&self) -> Vec<(&RegistryHarvest, &Series)> {
        let r = &self.harvest.registries;
        self.view
            .metrics
            .iter()
            .map(|&(s, m)| (&r[s], &r[s].series[m]))
            .collect()
    }

    /// Row of the selected metric in [`App::metrics`].
    pub fn metric_index(&self) -> Option<usize> {
        self.view.metric_at
    }

    /// The selected metric.
    pub fn selected_metric(&self) -> Option<&Series> {
        let (s, m) = *self.view.metrics.get(self.view.metric_at?)?;
        self.harvest.registries.get(s)?.series.get(m)
    }

    /// Handles one key press.
    pub fn key(&mut self, k: Key) -> Flow {
        let flow = self.apply(k);
        self.refresh();
        flow
    }

    fn apply(&mut self, k: Key) -> Flow {
        self.note = None;
        if k == Key::CtrlC {
            return Flow::Quit;
        }
        match self.mode {
            Mode::Help => {
                self.mode = Mode::Browse;
                if k == Key::Char('q') {
                    return Flow::Quit;
                }
            }
            Mode::Filter => match k {
                Key::Char(c) => {
                    self.filter.push(c);
                    self.release();
                }
                Key::Backspace => {
                    self.filter.pop();
                    self.release();
                }
                Key::Enter => self.mode = Mode::Browse,
                Key::Esc => {
                    self.filter.clear();
                    self.mode = Mode::Browse;
                    self.release();
                }
                other => self.navigate(other),
            },
            Mode::Browse => match k {
                Key::Char('q') => return Flow::Quit,
                Key::Char('?') => self.mode = Mode::Help,
                Key::Char('/') => self.mode = Mode::Filter,
                Key::Char('s') => {
                    self.sort = self.sort.next();
                    self.release();
                }
                Key::Enter => self.enter(),
                Key::Esc | Key::Backspace | Key::Char('h') => self.back(),
                Key::Tab => self.pane = self.next_pane(true),
                Key::BackTab => self.pane = self.next_pane(false),
                Key::Char('j') => self.navigate(Key::Down),
                Key::Char('k') => self.navigate(Key::Up),
                Key::Char('g') => self.navigate(Key::Home),
                Key::Char('G') => self.navigate(Key::End),
                // Only a recording moves in time; the live view ignores them.
                Key::Char('[') | Key::Left if self.harvest.recorded.is_some() => {
                    return Flow::Step(Step::Back)
                }
                Key::Char(']') | Key::Right if self.harvest.recorded.is_some() => {
                    return Flow::Step(Step::Forward)
                }
                Key::Char('{') if self.harvest.recorded.is_some() => {
                    return Flow::Step(Step::BackMinute)
                }
                Key::Char('}') if self.harvest.recorded.is_some() => {
                    return Flow::Step(Step::ForwardMinute)
                }
                other => self.navigate(other),
            },
        }
        Flow::Continue
    }

    /// Lets every list be sorted again at once.
    fn release(&mut self) {
        for h in &mut self.held {
            h.until = 0;
        }
    }

    /// Enter: a container opens on its processes; a process on its metrics.
    fn enter(&mut self) {
        match self.pane {
            Pane::Containers => {
                if let Some(&i) = self
                    .view
                    .container_at
                    .and_then(|r| self.view.containers.get(r))
                {
                    self.opened = Some(self.harvest.containers[i].cgroup.clone());
                    self.pane = Pane::Processes;
                    self.process_sel = None;
                    self.release();
                }
            }
            Pane::Processes => self.pane = Pane::Metrics,
            Pane::Metrics => {}
        }
    }

    /// Esc: clears the filter first; then goes back up one level (metrics
    /// to processes, an opened container to all of them).
    fn back(&mut self) {
        if !self.filter.is_empty() {
            self.filter.clear();
            self.release();
            return;
        }
        match self.pane {
            Pane::Metrics => self.pane = Pane::Processes,
            Pane::Processes | Pane::Containers if self.opened.is_some() => {
                self.opened = None;
                self.pane = Pane::Containers;
                self.release();
            }
            _ => {}
        }
    }

    /// Sets how many rows each pane shows (from the layout of the frame
    /// about to be drawn) and scrolls each list so its selection is visible.
    pub fn fit(&mut self, containers: usize, processes: usize, metrics: usize) {
        let v = &self.view;
        let lens = [v.containers.len(), v.processes.len(), v.metrics.len()];
        let selected = [v.container_at, v.process_at, v.metric_at];
        self.rows = [containers.max(1), processes.max(1), metrics.max(1)];
        for p in 0..3 {
            let (rows, scroll) = (self.rows[p], &mut self.scroll[p]);
            if let Some(i) = selected[p] {
                if i < *scroll {
                    *scroll = i;
                } else if i >= *scroll + rows {
                    *scroll = i + 1 - rows;
                }
            }
            *scroll = (*scroll).min(lens[p].saturating_sub(rows));
        }
    }

    /// Recomputes what the lists show: filter, sort, selected rows.
    fn refresh(&mut self) {
        let f = self.filter.to_lowercase();
        let h = &self.harvest;
        let procs = &h.processes;
        let passes: Vec<bool> = procs
            .iter()
            .map(|p| {
                f.is_empty() || process_names_match(h, p, &f) || process_series_match(h, p, &f)
            })
            .collect();
        // Containers: those that match, or hold a process that does.
        let by_key: HashMap<&str, usize> = procs
            .iter()
            .enumerate()
            .map(|(i, p)| (p.key.as_str(), i))
            .collect();
        let all = &h.containers;
        let mut containers: Vec<usize> = (0..all.len())
            .filter(|&i| {
                let c = &all[i];
                f.is_empty()
                    || c.container.to_lowercase().contains(&f)
                    || c.cgroup.to_lowercase().contains(&f)
                    || c.processes
                        .iter()
                        .any(|k| by_key.get(k.as_str()).is_some_and(|&p| passes[p]))
            })
            .collect();
        match self.sort {
            SortKey::Busy => containers.sort_by(|&a, &b| {
                let (a, b) = (&all[a], &all[b]);
                verdict_rank(a)
                    .cmp(&verdict_rank(b))
                    .then_with(|| b.cpu.unwrap_or(-1.0).total_cmp(&a.cpu.unwrap_or(-1.0)))
                    .then_with(|| a.container.cmp(&b.container))
            }),
            SortKey::Name | SortKey::Pid => containers.sort_by(|&a, &b| {
                (&all[a].container, &all[a].cgroup).cmp(&(&all[b].container, &all[b].cgroup))
            }),
        }
        self.held[0].apply(self.harvests, &mut containers, |i| all[i].cgroup.as_str());
        let container_at = match self.container_sel.as_deref() {
            Some(sel) => row_of(containers.len(), |r| all[containers[r]].cgroup == sel),
            None => row_of(containers.len(), |_| false),
        };
        // Processes: of the opened container, if any.
        // Of the opened container, every process; else the services (those
        // with a source), not every process of every container.
        let opened = self.opened.as_deref();
        let mut processes: Vec<usize> = (0..procs.len())
            .filter(|&i| {
                passes[i]
                    && match opened {
                        Some(cg) => procs[i].cgroup.as_deref() == Some(cg),
                        None => !procs[i].sources.is_empty(),
                    }
            })
            .collect();
        match self.sort {
            SortKey::Busy => {
                let busy: Vec<(f64, f64)> = procs
                    .iter()
                    .map(|p| {
                        let rate = p
                            .sources
                            .iter()
                            .filter_map(|&s| h.registries.get(s)?.busiest().map(|(_, r)| r))
                            .fold(-1.0, f64::max);
                        (p.cpu.unwrap_or(-1.0), rate)
                    })
                    .collect();
                processes.sort_by(|&a, &b| {
                    busy[b]
                        .0
                        .total_cmp(&busy[a].0)
                        .then_with(|| busy[b].1.total_cmp(&busy[a].1))
                        .then_with(|| by_pid(&procs[a], &procs[b]))
                });
            }
            SortKey::Name => processes.sort_by(|&a, &b| {
                procs[a]
                    .command
                    .cmp(&procs[b].command)
                    .then_with(|| by_pid(&procs[a], &procs[b]))
            }),
            SortKey::Pid => processes.sort_by(|&a, &b| by_pid(&procs[a], &procs[b])),
        }
        self.held[1].apply(self.harvests, &mut processes, |i| procs[i].key.as_str());
        let process_at = match self.process_sel.as_deref() {
            Some(sel) => row_of(processes.len(), |r| procs[processes[r]].key == sel),
            // Nothing chosen yet: the reader's own service first, not
            // whichever user's happens to be busiest.
            None => row_of(processes.len(), |r| {
                let p = &procs[processes[r]];
                p.uid == Some(self.uid) && !p.sources.is_empty()
            }),
        };
        // The first choice is kept as if the person made it: the metrics
        // below do not switch to another process when the order changes.
        if self.process_sel.is_none() {
            self.process_sel = process_at.map(|row| procs[processes[row]].key.clone());
        }
        let mut metrics = Vec::new();
        if let Some(p) = process_at.map(|row| &procs[processes[row]]) {
            let every = f.is_empty() || process_names_match(h, p, &f);
            for &s in &p.sources {
                let Some(r) = h.registries.get(s) else {
                    continue;
                };
                metrics.extend(
                    (0..r.series.len())
                        .filter(|&m| every || series_match(&r.series[m], &f))
                        .map(|m| (s, m)),
                );
            }
            let series = |(s, m): (usize, usize)| &h.registries[s].series[m];
            match self.sort {
                SortKey::Busy => metrics.sort_by(|&a, &b| {
                    let (sa, sb) = (series(a), series(b));
                    let (ra, rb) = (sa.rate().unwrap_or(-1.0), sb.rate().unwrap_or(-1.0));
                    rb.total_cmp(&ra).then_with(|| by_name(sa, sb))
                }),
                SortKey::Name | SortKey::Pid => {
                    metrics.sort_by(|&a, &b| by_name(series(a), series(b)))
                }
            }
        }
        let metric_at = row_of(metrics.len(), |m| {
            let (s, i) = metrics[m];
            let (path, series) = (&h.registries[s].path, &h.registries[s].series[i]);
            self.metric_sel.as_ref().is_some_and(|(p, n, l)| {
                p == path && series.meta.name == *n && series.meta.labels == *l
            })
        });
        self.view = View {
            containers,
            container_at,
            processes,
            process_at,
            metrics,
            metric_at,
        };
    }

    fn next_pane(&self, forward: bool) -> Pane {
        let at = self.pane.index();
        let n = Pane::ALL.len();
        Pane::ALL[if forward {
            (at + 1) % n
        } else {
            (at + n - 1) % n
        }]
    }

    /// Moves the focused pane's selection.
    fn navigate(&mut self, k: Key) {
        let pane = self.pane;
        let (len, at) = match pane {
            Pane::Containers => (self.view.containers.len(), self.view.container_at),
            Pane::Processes => (self.view.processes.len(), self.view.process_at),
            Pane::Metrics => (self.view.metrics.len(), self.view.metric_at),
        };
        if len == 0 {
            return;
        }
        if let Some(held) = self.held.get_mut(pane.index()) {
            held.until = self.harvests.saturating_add(HOLD_HARVESTS);
        }
        let at = at.unwrap_or(0);
        let last = len - 1;
        let page = self.rows[pane.index()];
        let to = match k {
            Key::Up => at.saturating_sub(1),
            Key::Down => (at + 1).min(last),
            Key::PageUp => at.saturating_sub(page),
            Key::PageDown => (at + page).min(last),
            Key::Home => 0,
            Key::End => last,
            _ => return,
        };
        let h = &self.harvest;
        match pane {
            Pane::Containers => {
                self.container_sel = Some(h.containers[self.view.containers[to]].cgroup.clone());
            }
            Pane::Processes => {
                self.process_sel = Some(h.processes[self.view.processes[to]].key.clone());
            }
            Pane::Metrics => {
                let (s, m) = self.view.metrics[to];
                let (r, series) = (&h.registries[s], &h.registries[s].series[m]);
                self.metric_sel = Some((
                    r.path.clone(),
                    series.meta.name.clone(),
                    series.meta.labels.clone(),
                ));
            }
        }
    }
}

/// Verdicts first, the strongest first.
fn verdict_rank(c: &ContainerRow) -> u8 {
    match c.verdict.as_ref().map(|v| v.kind) {
        Some(VerdictKind::Suspect) => 1,
        Some(_) => 0,
        None => 2,
    }
}

/// Whether a process's own names (pid, command, container, its sources'
/// registry names and kinds) contain `f` (lowercase).
fn process_names_match(h: &Harvest, p: &ProcessRow, f: &str) -> bool {
    p.command.to_lowercase().contains(f)
        || p.pid.is_some_and(|pid| pid.to_string().contains(f))
        || p.container
            .as_ref()
            .is_some_and(|c| c.to_lowercase().contains(f))
        || p.sources
            .iter()
            .filter_map(|&s| h.registries.get(s))
            .any(|r| {
                r.process.to_lowercase().contains(f)
                    || r.registry.to_lowercase().contains(f)
                    || r.source.is_some_and(|s| s.contains(f))
            })
}

fn process_series_match(h: &Harvest, p: &ProcessRow, f: &str) -> bool {
    p.sources
        .iter()
        .filter_map(|&s| h.registries.get(s))
        .any(|r| r.series.iter().any(|s| series_match(s, f)))
}

fn series_match(s: &Series, f: &str) -> bool {
    s.id().to_lowercase().contains(f)
}

/// Pid order, rows without a pid (broken files) last, then by key.
fn by_pid(a: &ProcessRow, b: &ProcessRow) -> std::cmp::Ordering {
    (a.pid.is_none(), a.pid, &a.key).cmp(&(b.pid.is_none(), b.pid, &b.key))
}

/// Series order by name, then labels.
fn by_name(a: &Series, b: &Series) -> std::cmp::Ordering {
    let (a, b) = (&a.meta, &b.meta);
    (&a.name, &a.labels).cmp(&(&b.name, &b.labels))
}

/// The row for which `selected` holds; the first row when none does
/// (nothing selected yet, or the selection is filtered out); `None` for an
/// empty list.
fn row_of(len: usize, selected: impl Fn(usize) -> bool) -> Option<usize> {
    (len > 0).then(|| (0..len).find(|&i| selected(i)).unwrap_or(0))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use crate::top::harvest::tests::{census, counter, registry, sample};
    use crate::top::harvest::Verdict;

    fn app() -> App {
        let mut a = App::new(Duration::from_secs(1));
        a.update(sample());
        a.key(Key::Tab);
        assert_eq!(a.pane(), Pane::Processes);
        a
    }

    fn commands(a: &App) -> Vec<&str> {
        a.processes().iter().map(|p| p.command.as_str()).collect()
    }

    fn names(a: &App) -> Vec<&str> {
        a.containers()
            .iter()
            .map(|c| c.container.as_str())
            .collect()
    }

    fn type_keys(a: &mut App, s: &str) {
        for c in s.chars() {
            a.key(Key::Char(c));
        }
    }

    /// `sample()` with alpha, bravo and charlie in containers a, b and c.
    fn contained() -> Harvest {
        let mut h = sample();
        for (r, c) in h.registries.iter_mut().zip(["a", "b", "c"]) {
            r.container = Some(c.into());
        }
        census(h)
    }

    fn verdict(kind: VerdictKind, victim: &str) -> Verdict {
        Verdict {
            kind,
            victim: victim.into(),
            p99_before: None,
            p99_after: None,
            culprits: vec![],
            other_share: None,
            throttled: None,
        }
    }

    #[test]
    fn processes_sort_by_cpu_and_busiest_counter_then_name_then_pid() {
        let mut a = app();
        assert_eq!(a.sort(), SortKey::Busy);
        assert_eq!(commands(&a), ["bravo", "charlie", "alpha"]);
        let mut h = sample();
        h.processes[0].cpu = Some(0.9);
        a.update(h);
        assert_eq!(commands(&a), ["alpha", "bravo", "charlie"], "CPU first");
        a.key(Key::Char('s'));
        assert_eq!(a.sort(), SortKey::Name);
        assert_eq!(commands(&a), ["alpha", "bravo", "charlie"]);
        a.key(Key::Char('s'));
        assert_eq!(a.sort(), SortKey::Pid);
        assert_eq!(commands(&a), ["alpha", "bravo", "charlie"]);
        a.key(Key::Char('s'));
        assert_eq!(a.sort(), SortKey::Busy);
    }

    #[test]
    fn containers_with_a_verdict_come_first_then_the_busiest() {
        let mut h = contained();
        h.containers[0].cpu = Some(0.1);
        h.containers[1].cpu = Some(1.0);
        h.containers[2].cpu = Some(0.5);
        let mut a = App::new(Duration::from_secs(1));
        a.update(h.clone());
        assert_eq!(names(&a), ["b", "c", "a"]);
        h.containers[0].verdict = Some(verdict(VerdictKind::Suspect, "/a"));
        h.containers[2].verdict = Some(verdict(VerdictKind::NoisyNeighbour, "/c"));
        a.update(h);
        assert_eq!(names(&a), ["c", "a", "b"], "noisy, suspect, then by CPU");
    }

    #[test]
    fn the_filter_narrows_while_typing_enter_keeps_it_esc_clears_it() {
        let mut a = app();
        a.key(Key::Char('/'));
        assert_eq!(a.mode(), Mode::Filter);
        type_keys(&mut a, "alp");
        assert_eq!(commands(&a), ["alpha"]);
        // `q` is text while filtering, not quit.
        assert_eq!(a.key(Key::Char('q')), Flow::Continue);
        assert_eq!(a.filter(), "alpq");
        assert!(a.processes().is_empty());
        a.key(Key::Backspace);
        a.key(Key::Enter);
        assert_eq!(a.mode(), Mode::Browse);
        assert_eq!(commands(&a), ["alpha"]);
        a.key(Key::Char('/'));
        a.key(Key::Esc);
        assert_eq!(a.filter(), "");
        assert_eq!(a.processes().len(), 3);
    }

    #[test]
    fn the_filter_matches_a_container_a_registry_and_a_source_kind() {
        let mut h = sample();
        h.registries[2].container = Some("ux3-shop".into());
        h.registries[0].source = Some("python");
        h.registries[1].registry = "billing".into();
        let mut a = App::new(Duration::from_secs(1));
        a.update(census(h));
        let pick = |a: &mut App, f: &str| {
            a.key(Key::Char('/'));
            a.key(Key::Esc);
            a.key(Key::Char('/'));
            type_keys(a, f);
            a.key(Key::Enter);
            commands(a)
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(&mut a, "UX3-shop"), ["charlie"]);
        assert_eq!(names(&a), ["ux3-shop"], "the container row too");
        assert_eq!(pick(&mut a, "python"), ["alpha"]);
        assert_eq!(pick(&mut a, "billing"), ["bravo"]);
    }

    #[test]
    fn the_filter_matches_metric_names_and_shows_only_those() {
        let mut a = app();
        a.key(Key::Char('/'));
        type_keys(&mut a, "ERRORS");
        a.key(Key::Enter);
        assert_eq!(commands(&a), ["bravo"]);
        let ids: Vec<String> = a.metrics().iter().map(|(_, s)| s.id()).collect();
        assert_eq!(ids, ["errors_total"]);
    }

    #[test]
    fn enter_opens_a_container_on_its_processes_and_esc_goes_back() {
        let mut h = contained();
        // A hog in b that publishes nothing: listed in its container only.
        let mut hog = h.processes[1].clone();
        (hog.key, hog.pid, hog.command, hog.cpu) =
            ("99".into(), Some(99), "spin".into(), Some(1.0));
        (hog.sources, hog.source_paths) = (vec![], vec![]);
        h.processes.push(hog);
        h.containers[1].processes.push("99".into());
        let mut a = App::new(Duration::from_secs(1));
        a.update(h);
        assert_eq!(a.pane(), Pane::Containers);
        assert_eq!(
            commands(&a),
            ["bravo", "charlie", "alpha"],
            "every service before one is opened"
        );
        a.key(Key::Char('s')); // by name: a, b, c
        a.key(Key::Down);
        a.key(Key::Enter);
        assert_eq!(a.opened().map(|c| c.container.as_str()), Some("b"));
        assert_eq!(a.pane(), Pane::Processes);
        assert_eq!(commands(&a), ["bravo", "spin"]);
        a.key(Key::Char('s')); // by busy: the hog first
        a.key(Key::Char('s'));
        assert_eq!(commands(&a), ["spin", "bravo"]);
        a.key(Key::Down);
        a.key(Key::Enter);
        assert_eq!(a.pane(), Pane::Metrics);
        assert_eq!(a.metrics().len(), 2);
        a.key(Key::Esc);
        assert_eq!(a.pane(), Pane::Processes);
        a.key(Key::Esc);
        assert_eq!((a.pane(), a.opened()), (Pane::Containers, None));
        assert_eq!(commands(&a).len(), 3);
    }

    #[test]
    fn a_process_with_several_sources_shows_the_metrics_of_each() {
        let mut h = sample();
        let mut jvm = registry(20, "bravo", vec![counter("jvm_gc_total", 3.0)]);
        jvm.path = "/proc/20/root/tmp/hsperfdata_app/20".into();
        jvm.source = Some("jvm");
        h.registries.push(jvm);
        let mut a = App::new(Duration::from_secs(1));
        a.update(census(h));
        a.key(Key::Tab);
        assert_eq!(
            commands(&a),
            ["bravo", "charlie", "alpha"],
            "one row per process"
        );
        let ids: Vec<String> = a.metrics().iter().map(|(_, s)| s.id()).collect();
        assert_eq!(ids, ["requests_total", "jvm_gc_total", "errors_total"]);
    }

    #[test]
    fn the_first_selection_is_the_readers_own_process_not_the_busiest() {
        let mut h = sample();
        for (r, uid) in h.registries.iter_mut().zip([42, 1000, 1000]) {
            r.uid = Some(uid);
        }
        let h = census(h);
        let mut a = App::new(Duration::from_secs(1)).for_user(42);
        a.update(h.clone());
        let busiest = commands(&a)[0].to_owned();
        assert_ne!(
            busiest, "alpha",
            "the test needs another user's service on top"
        );
        assert_eq!(a.selected_process().unwrap().command, "alpha");
        // Someone else's, when the reader has none.
        let mut b = App::new(Duration::from_secs(1)).for_user(7);
        b.update(h.clone());
        assert_eq!(b.selected_process().unwrap().command, busiest);
        // Kept when the order changes under it, though nobody chose it.
        let mut h2 = h.clone();
        h2.processes[2].cpu = Some(2.0);
        b.update(h2);
        assert_ne!(commands(&b)[0], busiest);
        assert_eq!(b.selected_process().unwrap().command, busiest);
    }

    #[test]
    fn selection_follows_the_process_not_the_row() {
        let mut a = app();
        a.key(Key::Down);
        assert_eq!(a.selected_process().unwrap().command, "charlie");
        // charlie becomes the busiest: once the order the person saw is let
        // go, it moves to the top, still selected.
        let mut h = sample();
        h.registries[2].series[0] = counter("jobs_total", 9000.0);
        a.update(h.clone());
        assert_eq!(a.process_index(), Some(1), "held while moving");
        for _ in 0..HOLD_HARVESTS {
            a.update(h.clone());
        }
        assert_eq!(a.process_index(), Some(0));
        assert_eq!(a.selected_process().unwrap().command, "charlie");
    }

    #[test]
    fn j_lands_on_the_row_below_in_the_order_the_person_saw_while_rows_resort() {
        let mut a = app();
        assert_eq!(commands(&a), ["bravo", "charlie", "alpha"]);
        a.key(Key::Char('j'));
        assert_eq!(a.selected_process().unwrap().command, "charlie");
        // alpha becomes the busiest: sorted, it would jump to the top and
        // `j` from charlie (then last) would go nowhere.
        let mut h = sample();
        h.processes[0].cpu = Some(1.0);
        a.update(h.clone());
        assert_eq!(commands(&a), ["bravo", "charlie", "alpha"], "held");
        a.key(Key::Char('j'));
        assert_eq!(a.selected_process().unwrap().command, "alpha");
        // Left alone for HOLD_HARVESTS refreshes, the list is sorted again,
        // the selection still on its process.
        for _ in 0..HOLD_HARVESTS {
            a.update(h.clone());
        }
        assert_eq!(commands(&a), ["alpha", "bravo", "charlie"]);
        assert_eq!(a.selected_process().unwrap().command, "alpha");
        // A process that appears while the order is held goes below.
        a.key(Key::Char('j'));
        let mut more = h.clone();
        more.registries
            .push(registry(40, "delta", vec![counter("d_total", 1e6)]));
        let mut more = census(more);
        more.processes[0].cpu = Some(1.0);
        more.processes[3].cpu = Some(5.0);
        a.update(more);
        assert_eq!(commands(&a), ["alpha", "bravo", "charlie", "delta"]);
    }

    #[test]
    fn j_in_the_containers_keeps_their_order_too() {
        let mut h = contained();
        h.containers[0].cpu = Some(0.3);
        h.containers[1].cpu = Some(0.2);
        h.containers[2].cpu = Some(0.1);
        let mut a = App::new(Duration::from_secs(1));
        a.update(h.clone());
        assert_eq!(names(&a), ["a", "b", "c"]);
        a.key(Key::Char('j'));
        h.containers[2].cpu = Some(0.9);
        a.update(h.clone());
        a.key(Key::Char('j'));
        assert_eq!(a.containers()[a.container_index().unwrap()].container, "c");
        for _ in 0..HOLD_HARVESTS {
            a.update(h.clone());
        }
        assert_eq!(names(&a), ["c", "a", "b"]);
        assert_eq!(a.containers()[a.container_index().unwrap()].container, "c");
    }

    #[test]
    fn navigation_stays_in_bounds_and_tab_moves_focus() {
        let mut a = app();
        a.key(Key::Up);
        assert_eq!(a.process_index(), Some(0));
        a.key(Key::End);
        assert_eq!(a.process_index(), Some(2));
        a.key(Key::Char('j'));
        assert_eq!(a.process_index(), Some(2));
        a.key(Key::Char('g'));
        assert_eq!(a.selected_process().unwrap().command, "bravo");
        a.key(Key::Tab);
        assert_eq!(a.pane(), Pane::Metrics);
        assert_eq!(a.selected_metric().unwrap().meta.name, "requests_total");
        a.key(Key::Down);
        assert_eq!(a.selected_metric().unwrap().meta.name, "errors_total");
        a.key(Key::Tab);
        assert_eq!(a.pane(), Pane::Containers);
        a.key(Key::BackTab);
        assert_eq!(a.pane(), Pane::Metrics);
    }

    #[test]
    fn scrolling_keeps_the_selection_visible() {
        let mut a = App::new(Duration::from_secs(1));
        let many = (1..=20)
            .map(|p| registry(p, &format!("p{p:02}"), vec![]))
            .collect();
        a.update(census(Harvest {
            registries: many,
            ..Harvest::default()
        }));
        a.key(Key::Tab);
        a.key(Key::Char('s')); // by name: p01..p20
        a.fit(5, 5, 5);
        a.key(Key::PageDown);
        a.key(Key::PageDown);
        a.fit(5, 5, 5);
        assert_eq!(a.process_index(), Some(10));
        assert_eq!(a.scroll(Pane::Processes), 6);
        a.key(Key::Home);
        a.fit(5, 5, 5);
        assert_eq!(a.scroll(Pane::Processes), 0);
        // A shrinking list never leaves the view scrolled past its end.
        a.key(Key::End);
        a.fit(5, 5, 5);
        assert_eq!(a.scroll(Pane::Processes), 15);
        a.key(Key::Char('/'));
        type_keys(&mut a, "p0");
        a.fit(5, 5, 5);
        assert_eq!(a.processes().len(), 9);
        assert!(a.scroll(Pane::Processes) <= 4);
    }

    #[test]
    fn help_closes_on_any_key_and_q_or_ctrl_c_quit() {
        let mut a = app();
        a.key(Key::Char('?'));
        assert_eq!(a.mode(), Mode::Help);
        assert_eq!(a.key(Key::Down), Flow::Continue);
        assert_eq!(a.mode(), Mode::Browse);
        assert_eq!(a.key(Key::Char('q')), Flow::Quit);
        a.key(Key::Char('/'));
        assert_eq!(a.key(Key::CtrlC), Flow::Quit);
    }

    #[test]
    fn time_keys_step_a_recording_only_and_a_note_lasts_until_the_next_key() {
        let mut live = app();
        for k in [Key::Char('['), Key::Right, Key::Char('}')] {
            assert_eq!(live.key(k), Flow::Continue, "the live view ignores {k:?}");
        }
        let mut a = App::new(Duration::from_secs(1));
        a.update(Harvest {
            recorded: Some(crate::top::harvest::Recorded::new(1, None, None)),
            ..sample()
        });
        let steps = [
            (Key::Char('['), Step::Back),
            (Key::Left, Step::Back),
            (Key::Char(']'), Step::Forward),
            (Key::Right, Step::Forward),
            (Key::Char('{'), Step::BackMinute),
            (Key::Char('}'), Step::ForwardMinute),
        ];
        for (k, step) in steps {
            assert_eq!(a.key(k), Flow::Step(step), "{k:?}");
        }
        a.set_note("the recording's first frame");
        assert_eq!(a.note(), Some("the recording's first frame"));
        // While a filter is typed, they are characters.
        a.key(Key::Char('/'));
        assert_eq!(a.note(), None);
        assert_eq!(a.key(Key::Char('[')), Flow::Continue);
        assert_eq!(a.filter(), "[");
    }
}
