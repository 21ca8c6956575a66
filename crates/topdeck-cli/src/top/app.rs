// SPDX-License-Identifier: Apache-2.0
//! The state of `topdeck top`: the latest harvest and what the person did
//! with it (focused pane, selection, filter, sort key, scroll). Pure: keys
//! and harvests go in, and drawing reads it through `&App`; no terminal, no
//! threads, so every behaviour is a unit test.
//!
//! Selections are kept by identity (registry path, series id), not by row
//! number, so that a row stays selected while rates re-sort the list under
//! it every interval.

use std::collections::HashMap;
use std::time::Duration;

use super::harvest::{ContainerRunq, Harvest, RegistryHarvest, Series};
use super::key::Key;

/// Whether the view goes on after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep running.
    Continue,
    /// Leave: restore the terminal and exit.
    Quit,
}

/// The panes that take the arrow keys, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    /// The registry list.
    Registries,
    /// The selected registry's metrics.
    Metrics,
    /// The scheduler agent's containers (only while the agent is there).
    Scheduler,
}

impl Pane {
    fn index(self) -> usize {
        self as usize
    }
}

/// What the lists are ordered by; `s` cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Busiest first: registries by their busiest counter's rate, metrics by rate.
    Rate,
    /// Alphabetical: registries by process then registry name, metrics by series.
    Name,
    /// Registries by pid; metrics, which share one pid, by series.
    Pid,
}

impl SortKey {
    /// The next key in the `s` cycle.
    pub fn next(self) -> Self {
        match self {
            Self::Rate => Self::Name,
            Self::Name => Self::Pid,
            Self::Pid => Self::Rate,
        }
    }

    /// How the footer names it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Rate => "rate",
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

/// A metric's identity: name and labels.
type SeriesId = (String, Vec<(String, String)>);

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
    registry_sel: Option<String>,
    metric_sel: Option<SeriesId>,
    container_sel: Option<String>,
    scroll: [usize; 3],
    rows: [usize; 3],
    view: View,
    /// The registries' order as last shown, by path: held while the person
    /// moves through the list, so that the next row is the one they saw.
    shown: Vec<String>,
    /// The harvest up to which that order holds (see [`HOLD_HARVESTS`]).
    hold_until: u64,
    /// Whose registries are selected first, before the person chooses:
    /// the reader's own (root reads every user's).
    uid: u32,
}

/// Refreshes during which the registries keep the order the person saw
/// after they moved the selection: rows that change places under the
/// cursor every second make `j` land on another row than the one below.
/// New rows go below, in sort order; the order is sorted again once the
/// person stops moving for this long, or asks for a sort (`s`) or filter.
pub const HOLD_HARVESTS: u64 = 3;

/// What the lists show, computed once per harvest or key (filtering and
/// sorting 100,000 series is not something to do per accessor call).
#[derive(Debug, Clone, Default)]
struct View {
    /// Indices into `harvest.registries`, filtered and sorted.
    registries: Vec<usize>,
    /// Row of the selected registry.
    registry_at: Option<usize>,
    /// Indices into the selected registry's series, filtered and sorted.
    metrics: Vec<usize>,
    /// Row of the selected metric.
    metric_at: Option<usize>,
    /// Row of the selected container.
    container_at: Option<usize>,
}

impl App {
    /// A view that has seen nothing yet, refreshed every `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            harvest: Harvest::default(),
            harvests: 0,
            interval,
            pane: Pane::Registries,
            sort: SortKey::Rate,
            filter: String::new(),
            mode: Mode::Browse,
            registry_sel: None,
            metric_sel: None,
            container_sel: None,
            scroll: [0; 3],
            rows: [1; 3],
            view: View::default(),
            shown: Vec::new(),
            hold_until: 0,
            // SAFETY: geteuid has no preconditions and cannot fail.
            uid: unsafe { libc::geteuid() },
        }
    }

    /// The same view for user `uid`: whose registry it selects first.
    #[cfg(test)]
    pub fn for_user(mut self, uid: u32) -> Self {
        self.uid = uid;
        self
    }

    /// Takes a new harvest; selections carry over by identity.
    pub fn update(&mut self, harvest: Harvest) {
        self.harvest = harvest;
        self.harvests = self.harvests.saturating_add(1);
        if self.pane == Pane::Scheduler && self.harvest.scheduler.is_none() {
            self.pane = Pane::Registries;
        }
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

    /// The registries that pass the filter, in sort order.
    pub fn registries(&self) -> Vec<&RegistryHarvest> {
        let all = &self.harvest.registries;
        self.view.registries.iter().map(|&i| &all[i]).collect()
    }

    /// Row of the selected registry in [`App::registries`].
    pub fn registry_index(&self) -> Option<usize> {
        self.view.registry_at
    }

    /// The selected registry, if any passes the filter.
    pub fn selected_registry(&self) -> Option<&RegistryHarvest> {
        let i = *self.view.registries.get(self.view.registry_at?)?;
        self.harvest.registries.get(i)
    }

    /// The selected registry's metrics that pass the filter, in sort order.
    /// When the filter names the registry itself, all of them pass.
    pub fn metrics(&self) -> Vec<&Series> {
        let Some(r) = self.selected_registry() else {
            return Vec::new();
        };
        self.view.metrics.iter().map(|&i| &r.series[i]).collect()
    }

    /// Row of the selected metric in [`App::metrics`].
    pub fn metric_index(&self) -> Option<usize> {
        self.view.metric_at
    }

    /// The selected metric.
    pub fn selected_metric(&self) -> Option<&Series> {
        let r = self.selected_registry()?;
        r.series.get(*self.view.metrics.get(self.view.metric_at?)?)
    }

    /// The scheduler agent's containers, worst p99 first.
    pub fn containers(&self) -> &[ContainerRunq] {
        self.harvest
            .scheduler
            .as_ref()
            .map_or(&[], |s| s.containers.as_slice())
    }

    /// Row of the selected container.
    pub fn container_index(&self) -> Option<usize> {
        self.view.container_at
    }

    /// Handles one key press.
    pub fn key(&mut self, k: Key) -> Flow {
        let flow = self.apply(k);
        self.refresh();
        flow
    }

    fn apply(&mut self, k: Key) -> Flow {
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
                    self.hold_until = 0;
                }
                Key::Backspace => {
                    self.filter.pop();
                    self.hold_until = 0;
                }
                Key::Enter => self.mode = Mode::Browse,
                Key::Esc => {
                    self.filter.clear();
                    self.mode = Mode::Browse;
                    self.hold_until = 0;
                }
                other => self.navigate(other),
            },
            Mode::Browse => match k {
                Key::Char('q') => return Flow::Quit,
                Key::Char('?') => self.mode = Mode::Help,
                Key::Char('/') => self.mode = Mode::Filter,
                Key::Char('s') => {
                    self.sort = self.sort.next();
                    self.hold_until = 0;
                }
                Key::Esc => {
                    self.filter.clear();
                    self.hold_until = 0;
                }
                Key::Tab => self.pane = self.next_pane(true),
                Key::BackTab => self.pane = self.next_pane(false),
                Key::Char('j') => self.navigate(Key::Down),
                Key::Char('k') => self.navigate(Key::Up),
                Key::Char('g') => self.navigate(Key::Home),
                Key::Char('G') => self.navigate(Key::End),
                other => self.navigate(other),
            },
        }
        Flow::Continue
    }

    /// Sets how many rows each pane shows (from the layout of the frame
    /// about to be drawn) and scrolls each list so its selection is visible.
    pub fn fit(&mut self, registries: usize, metrics: usize, containers: usize) {
        let lens = [
            self.view.registries.len(),
            self.view.metrics.len(),
            self.containers().len(),
        ];
        let selected = [
            self.view.registry_at,
            self.view.metric_at,
            self.view.container_at,
        ];
        self.rows = [registries.max(1), metrics.max(1), containers.max(1)];
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
        let all = &self.harvest.registries;
        let mut regs: Vec<usize> = (0..all.len())
            .filter(|&i| {
                let r = &all[i];
                f.is_empty() || names_match(r, &f) || r.series.iter().any(|s| series_match(s, &f))
            })
            .collect();
        match self.sort {
            SortKey::Rate => {
                let rates: Vec<f64> = all.iter().map(busiest_rate).collect();
                regs.sort_by(|&a, &b| {
                    rates[b]
                        .total_cmp(&rates[a])
                        .then_with(|| by_pid(&all[a], &all[b]))
                });
            }
            SortKey::Name => regs.sort_by(|&a, &b| {
                let (a, b) = (&all[a], &all[b]);
                (&a.process, &a.registry)
                    .cmp(&(&b.process, &b.registry))
                    .then_with(|| by_pid(a, b))
            }),
            SortKey::Pid => regs.sort_by(|&a, &b| by_pid(&all[a], &all[b])),
        }
        if self.harvests < self.hold_until {
            // The order the person saw; new rows after, in sort order (the
            // sort is stable).
            let seen: HashMap<&str, usize> = self
                .shown
                .iter()
                .enumerate()
                .map(|(i, p)| (p.as_str(), i))
                .collect();
            regs.sort_by_key(|&i| {
                seen.get(all[i].path.as_str())
                    .copied()
                    .unwrap_or(usize::MAX)
            });
        }
        self.shown = regs.iter().map(|&i| all[i].path.clone()).collect();
        let registry_at = match self.registry_sel.as_deref() {
            Some(sel) => row_of(regs.len(), |row| all[regs[row]].path == sel),
            // Nothing chosen yet: the reader's own service first, not
            // whichever user's happens to be busiest.
            None => row_of(regs.len(), |row| all[regs[row]].uid == Some(self.uid)),
        };
        let mut metrics = Vec::new();
        if let Some(r) = registry_at.map(|row| &all[regs[row]]) {
            let every = f.is_empty() || names_match(r, &f);
            metrics = (0..r.series.len())
                .filter(|&i| every || series_match(&r.series[i], &f))
                .collect();
            let s = &r.series;
            match self.sort {
                SortKey::Rate => metrics.sort_by(|&a, &b| {
                    let (ra, rb) = (s[a].rate().unwrap_or(-1.0), s[b].rate().unwrap_or(-1.0));
                    rb.total_cmp(&ra).then_with(|| by_name(&s[a], &s[b]))
                }),
                SortKey::Name | SortKey::Pid => metrics.sort_by(|&a, &b| by_name(&s[a], &s[b])),
            }
        }
        let metric_at = match (registry_at, &self.metric_sel) {
            (None, _) => None,
            (Some(row), sel) => {
                let s = &all[regs[row]].series;
                row_of(metrics.len(), |m| {
                    sel.as_ref().is_some_and(|(n, l)| {
                        s[metrics[m]].meta.name == *n && s[metrics[m]].meta.labels == *l
                    })
                })
            }
        };
        let containers = self.containers();
        let container_at = row_of(containers.len(), |c| {
            self.container_sel.as_deref() == Some(containers[c].cgroup.as_str())
        });
        self.view = View {
            registries: regs,
            registry_at,
            metrics,
            metric_at,
            container_at,
        };
    }

    fn next_pane(&self, forward: bool) -> Pane {
        let mut panes = vec![Pane::Registries, Pane::Metrics];
        if self.harvest.scheduler.is_some() {
            panes.push(Pane::Scheduler);
        }
        let at = panes.iter().position(|p| *p == self.pane).unwrap_or(0);
        let n = panes.len();
        panes[if forward {
            (at + 1) % n
        } else {
            (at + n - 1) % n
        }]
    }

    /// Moves the focused pane's selection.
    fn navigate(&mut self, k: Key) {
        let pane = self.pane;
        let (len, at) = match pane {
            Pane::Registries => {
                self.hold_until = self.harvests.saturating_add(HOLD_HARVESTS);
                (self.view.registries.len(), self.view.registry_at)
            }
            Pane::Metrics => (self.view.metrics.len(), self.view.metric_at),
            Pane::Scheduler => (self.containers().len(), self.view.container_at),
        };
        if len == 0 {
            return;
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
        match pane {
            Pane::Registries => {
                let i = self.view.registries[to];
                self.registry_sel = Some(self.harvest.registries[i].path.clone());
            }
            Pane::Metrics => {
                if let Some(r) = self.selected_registry() {
                    let s = &r.series[self.view.metrics[to]];
                    self.metric_sel = Some((s.meta.name.clone(), s.meta.labels.clone()));
                }
            }
            Pane::Scheduler => {
                self.container_sel = Some(self.containers()[to].cgroup.clone());
            }
        }
    }
}

/// Whether a registry's own names (pid, process, registry) contain `f` (lowercase).
fn names_match(r: &RegistryHarvest, f: &str) -> bool {
    r.process.to_lowercase().contains(f)
        || r.registry.to_lowercase().contains(f)
        || r.pid.is_some_and(|p| p.to_string().contains(f))
        || r.container
            .as_ref()
            .is_some_and(|c| c.to_lowercase().contains(f))
        || r.source.is_some_and(|s| s.contains(f))
}

fn series_match(s: &Series, f: &str) -> bool {
    s.id().to_lowercase().contains(f)
}

fn busiest_rate(r: &RegistryHarvest) -> f64 {
    r.busiest().map_or(-1.0, |(_, rate)| rate)
}

/// Pid order, broken files (no pid) last, then by path.
fn by_pid(a: &RegistryHarvest, b: &RegistryHarvest) -> std::cmp::Ordering {
    (a.pid.is_none(), a.pid, &a.path).cmp(&(b.pid.is_none(), b.pid, &b.path))
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

    use crate::top::harvest::tests::{counter, registry, sample};
    use crate::top::harvest::SchedulerHarvest;

    fn app() -> App {
        let mut a = App::new(Duration::from_secs(1));
        a.update(sample());
        a
    }

    fn processes(a: &App) -> Vec<&str> {
        a.registries().iter().map(|r| r.process.as_str()).collect()
    }

    fn type_keys(a: &mut App, s: &str) {
        for c in s.chars() {
            a.key(Key::Char(c));
        }
    }

    #[test]
    fn registries_sort_by_rate_then_name_then_pid() {
        let mut a = app();
        assert_eq!(a.sort(), SortKey::Rate);
        assert_eq!(processes(&a), ["bravo", "charlie", "alpha"]);
        a.key(Key::Char('s'));
        assert_eq!(a.sort(), SortKey::Name);
        assert_eq!(processes(&a), ["alpha", "bravo", "charlie"]);
        a.key(Key::Char('s'));
        assert_eq!(a.sort(), SortKey::Pid);
        assert_eq!(processes(&a), ["alpha", "bravo", "charlie"]);
        a.key(Key::Char('s'));
        assert_eq!(a.sort(), SortKey::Rate);
    }

    #[test]
    fn the_filter_narrows_while_typing_enter_keeps_it_esc_clears_it() {
        let mut a = app();
        a.key(Key::Char('/'));
        assert_eq!(a.mode(), Mode::Filter);
        type_keys(&mut a, "alp");
        assert_eq!(processes(&a), ["alpha"]);
        // `q` is text while filtering, not quit.
        assert_eq!(a.key(Key::Char('q')), Flow::Continue);
        assert_eq!(a.filter(), "alpq");
        assert!(a.registries().is_empty());
        a.key(Key::Backspace);
        a.key(Key::Enter);
        assert_eq!(a.mode(), Mode::Browse);
        assert_eq!(processes(&a), ["alpha"]);
        a.key(Key::Char('/'));
        a.key(Key::Esc);
        assert_eq!(a.filter(), "");
        assert_eq!(a.registries().len(), 3);
    }

    #[test]
    fn the_filter_matches_a_container_and_a_source_kind() {
        let mut h = sample();
        h.registries[2].container = Some("ux3-shop".into());
        h.registries[0].source = Some("python");
        let mut a = App::new(Duration::from_secs(1));
        a.update(h);
        let pick = |a: &mut App, f: &str| {
            a.key(Key::Char('/'));
            a.key(Key::Esc);
            a.key(Key::Char('/'));
            type_keys(a, f);
            a.key(Key::Enter);
            processes(a)
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let third = a.harvest().registries[2].process.clone();
        let first = a.harvest().registries[0].process.clone();
        assert_eq!(pick(&mut a, "UX3-shop"), [third]);
        assert_eq!(pick(&mut a, "python"), [first]);
    }

    #[test]
    fn the_filter_matches_metric_names_and_shows_only_those() {
        let mut a = app();
        a.key(Key::Char('/'));
        type_keys(&mut a, "ERRORS");
        a.key(Key::Enter);
        assert_eq!(processes(&a), ["bravo"]);
        let ids: Vec<String> = a.metrics().iter().map(|s| s.id()).collect();
        assert_eq!(ids, ["errors_total"]);
    }

    #[test]
    fn the_first_selection_is_the_readers_own_registry_not_the_busiest() {
        let mut h = sample();
        for (r, uid) in h.registries.iter_mut().zip([42, 1000, 1000]) {
            r.uid = Some(uid);
        }
        let mut a = App::new(Duration::from_secs(1)).for_user(42);
        a.update(h.clone());
        let busiest = processes(&a)[0].to_owned();
        let own = h.registries[0].process.clone();
        assert_ne!(busiest, own, "the test needs another user's service on top");
        assert_eq!(a.selected_registry().unwrap().process, own);
        // Someone else's, when the reader has none.
        let mut b = App::new(Duration::from_secs(1)).for_user(7);
        b.update(h);
        assert_eq!(b.selected_registry().unwrap().process, busiest);
    }

    #[test]
    fn selection_follows_the_registry_not_the_row() {
        let mut a = app();
        a.key(Key::Down);
        assert_eq!(a.selected_registry().unwrap().process, "charlie");
        // charlie becomes the busiest: once the order the person saw is let
        // go, it moves to the top, still selected.
        let mut h = sample();
        h.registries[2].series[0] = counter("jobs_total", 9000.0);
        a.update(h.clone());
        assert_eq!(a.registry_index(), Some(1), "held while moving");
        for _ in 0..HOLD_HARVESTS {
            a.update(h.clone());
        }
        assert_eq!(a.registry_index(), Some(0));
        assert_eq!(a.selected_registry().unwrap().process, "charlie");
    }

    #[test]
    fn j_lands_on_the_row_below_in_the_order_the_person_saw_while_rows_resort() {
        let mut a = app();
        assert_eq!(processes(&a), ["bravo", "charlie", "alpha"]);
        a.key(Key::Char('j'));
        assert_eq!(a.selected_registry().unwrap().process, "charlie");
        // alpha becomes the busiest: sorted, it would jump to the top and
        // `j` from charlie (then last) would go nowhere.
        let mut h = sample();
        h.registries[0].series[0] = counter("a_total", 9000.0);
        a.update(h.clone());
        assert_eq!(processes(&a), ["bravo", "charlie", "alpha"], "held");
        a.key(Key::Char('j'));
        assert_eq!(a.selected_registry().unwrap().process, "alpha");
        // Left alone for HOLD_HARVESTS refreshes, the list is sorted again,
        // the selection still on its registry.
        for _ in 0..HOLD_HARVESTS {
            a.update(h.clone());
        }
        assert_eq!(processes(&a), ["alpha", "bravo", "charlie"]);
        assert_eq!(a.selected_registry().unwrap().process, "alpha");
        // A registry that appears while the order is held goes below.
        a.key(Key::Char('j'));
        let mut more = h.clone();
        more.registries
            .push(registry(40, "delta", vec![counter("d_total", 1e6)]));
        a.update(more);
        assert_eq!(processes(&a), ["alpha", "bravo", "charlie", "delta"]);
    }

    #[test]
    fn navigation_stays_in_bounds_and_tab_moves_focus() {
        let mut a = app();
        a.key(Key::Up);
        assert_eq!(a.registry_index(), Some(0));
        a.key(Key::End);
        assert_eq!(a.registry_index(), Some(2));
        a.key(Key::Char('j'));
        assert_eq!(a.registry_index(), Some(2));
        a.key(Key::Char('g'));
        assert_eq!(a.selected_registry().unwrap().process, "bravo");
        a.key(Key::Tab);
        assert_eq!(a.pane(), Pane::Metrics);
        assert_eq!(a.selected_metric().unwrap().meta.name, "requests_total");
        a.key(Key::Down);
        assert_eq!(a.selected_metric().unwrap().meta.name, "errors_total");
        // Without an agent there is no scheduler pane to tab to.
        a.key(Key::Tab);
        assert_eq!(a.pane(), Pane::Registries);
        a.key(Key::BackTab);
        assert_eq!(a.pane(), Pane::Metrics);
    }

    #[test]
    fn the_scheduler_pane_exists_only_with_the_agent() {
        let mut a = app();
        let mut h = sample();
        h.scheduler = Some(SchedulerHarvest::default());
        a.update(h);
        a.key(Key::Tab);
        a.key(Key::Tab);
        assert_eq!(a.pane(), Pane::Scheduler);
        a.update(sample());
        assert_eq!(a.pane(), Pane::Registries, "the agent went away");
    }

    #[test]
    fn scrolling_keeps_the_selection_visible() {
        let mut a = App::new(Duration::from_secs(1));
        let many = (1..=20)
            .map(|p| registry(p, &format!("p{p:02}"), vec![]))
            .collect();
        a.update(Harvest {
            registries: many,
            ..Harvest::default()
        });
        a.key(Key::Char('s')); // by name: p01..p20
        a.fit(5, 5, 5);
        a.key(Key::PageDown);
        a.key(Key::PageDown);
        a.fit(5, 5, 5);
        assert_eq!(a.registry_index(), Some(10));
        assert_eq!(a.scroll(Pane::Registries), 6);
        a.key(Key::Home);
        a.fit(5, 5, 5);
        assert_eq!(a.scroll(Pane::Registries), 0);
        // A shrinking list never leaves the view scrolled past its end.
        a.key(Key::End);
        a.fit(5, 5, 5);
        assert_eq!(a.scroll(Pane::Registries), 15);
        a.key(Key::Char('/'));
        type_keys(&mut a, "p0");
        a.fit(5, 5, 5);
        assert_eq!(a.registries().len(), 9);
        assert!(a.scroll(Pane::Registries) <= 4);
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
}
